package bridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group's load waits until our registration exists in the Store's current session (awaitOwn),
// and its store writes the epoch only in that session (acquire): a registration known in an
// earlier session (one that expired since) lets nothing through, and an epoch the store would
// write in a session other than the load's is not written.
func TestIntegration_EpochOnlyInTheSessionOfOurRegistration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	store := zktest.OpenStore(t, zktest.Connect(t))
	sid := store.SessionID()
	const root = "/zkbridge"
	p := newPeerSet(1, root, zerolog.Nop())

	wait := func(d time.Duration) (int64, error) {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return p.awaitOwn(wctx, store)
	}
	if got, err := wait(50 * time.Millisecond); err == nil {
		t.Errorf("awaitOwn before any registration = 0x%x, want it to wait", got)
	}
	p.own.set(sid - 1) // an earlier session's
	if got, err := wait(50 * time.Millisecond); err == nil {
		t.Errorf("awaitOwn with the registration known in another session = 0x%x, want it to wait", got)
	}
	done := make(chan int64, 1)
	go func() {
		got, _ := wait(10 * time.Second)
		done <- got
	}()
	time.Sleep(20 * time.Millisecond)
	p.own.set(sid)
	if got := <-done; got != sid {
		t.Errorf("awaitOwn once registered in the current session = 0x%x, want 0x%x", got, sid)
	}

	gs := newGroupStore(store, root, "own-session", 1, zerolog.Nop())
	gs.own = sid - 1 // the load started in a session that has ended
	if err := gs.acquire(ctx); !errors.Is(err, ErrFenced) {
		t.Errorf("acquire in a session other than the load's: %v, want ErrFenced", err)
	}
	if ok, _, err := store.Exists(ctx, zkstate.EpochPath(root, "own-session")); err != nil || ok {
		t.Errorf("the epoch after that acquire: exists %v (%v), want none", ok, err)
	}
	gs.own = sid
	if err := gs.acquire(ctx); err != nil {
		t.Fatalf("acquire in the load's session: %v", err)
	}
	if gs.epoch != 0 {
		t.Errorf("epoch version after the acquire = %d, want 0 (created)", gs.epoch)
	}
}

// Only the deletion of the registration made in the session we still have is another client's
// (ownRegistration.lose): not an older session's registration (the previous incarnation's, or
// ours before an expiry, told late), not one while ours is not known in the current session.
func TestOwnRegistrationLostOnlyInItsSession(t *testing.T) {
	const cur, old = int64(0x20), int64(0x10)
	for _, c := range []struct {
		name           string
		in, owner, sid int64
		lost           bool
	}{
		{"ours, in the current session", cur, cur, cur, true},
		{"an older session's, told late", cur, old, cur, false},
		{"ours before an expiry, told in the new session", old, old, cur, false},
		{"not made in the current session yet", 0, cur, cur, false},
		{"a deletion without a read registration", cur, 0, cur, false},
	} {
		var o ownRegistration
		o.init()
		o.set(c.in)
		_, changed := o.now()
		if got := o.lose(c.owner, c.sid); got != c.lost {
			t.Errorf("%s: lose = %v, want %v", c.name, got, c.lost)
		}
		in, _ := o.now()
		select {
		case <-changed:
			if !c.lost || in != 0 {
				t.Errorf("%s: now in 0x%x, want 0 and the waiters woken only when lost", c.name, in)
			}
		default:
			if c.lost || in != c.in {
				t.Errorf("%s: now in 0x%x (waiters not woken), want 0x%x", c.name, in, c.in)
			}
		}
	}
}
