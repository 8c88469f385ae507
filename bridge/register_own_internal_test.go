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
