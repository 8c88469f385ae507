package bridge

import (
	"context"
	"errors"
	"strings"
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
	// Our registration, which the load waited for, in the session the epoch is written in.
	if err := store.CreateEphemeral(ctx, zkstate.BridgePath(root, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := gs.acquire(ctx); err != nil {
		t.Fatalf("acquire in the load's session: %v", err)
	}
	if gs.epoch != 0 {
		t.Errorf("epoch version after the acquire = %d, want 0 (created)", gs.epoch)
	}
}

// Another client may delete our registration after a group's load waited for it (awaitOwn) and
// before the load writes the group's epoch: the write must then fail, with nothing written, as
// the others count us gone and take the group (several-bridges.md: the takeover keeps a group whose
// holder's registration is missing, or newer than the epoch's write). Each way an epoch is
// written: created (a new group), set at the version read (a holder that is gone), set at a
// rescan's read (takeHinted). The order is forced: the registration is deleted between the
// wait (own set) and acquire. Before the write checked our registration, each wrote the epoch.
func TestIntegration_NoEpochOnceOurRegistrationIsDeleted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	connect := zktest.Connect(t)
	store := zktest.OpenStore(t, connect)
	other := zktest.OpenStore(t, connect) // another client
	sid := store.SessionID()
	const root, node = "/zkbridge", int32(1)
	reg := zkstate.BridgePath(root, node)
	gone := zkstate.Epoch{NodeID: 7, AcquiredMs: 1}.Encode() // a holder with no registration
	for _, c := range []struct {
		name  string
		setup func(g string) *takeoverHint
	}{
		{"created", func(string) *takeoverHint { return nil }},
		{"set at the version read", func(g string) *takeoverHint {
			if err := other.Create(ctx, zkstate.EpochPath(root, g), gone, zkstate.CreateOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
			return nil
		}},
		{"set at a rescan's read", func(g string) *takeoverHint {
			if err := other.Create(ctx, zkstate.EpochPath(root, g), gone, zkstate.CreateOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
			_, st, err := other.Get(ctx, zkstate.EpochPath(root, g))
			if err != nil {
				t.Fatal(err)
			}
			return &takeoverHint{version: st.Version, mzxid: st.Mzxid, holder: 7}
		}},
		{"taken as prepared", func(g string) *takeoverHint {
			if err := other.Create(ctx, zkstate.EpochPath(root, g), gone, zkstate.CreateOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
			if err := other.Create(ctx, zkstate.GroupRecordPath(root, g), []byte(`{}`), zkstate.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			_, st, err := other.Get(ctx, zkstate.EpochPath(root, g))
			if err != nil {
				t.Fatal(err)
			}
			rec, rst, err := other.Get(ctx, zkstate.GroupRecordPath(root, g))
			if err != nil {
				t.Fatal(err)
			}
			return &takeoverHint{version: st.Version, mzxid: st.Mzxid, holder: 7,
				prepared: &preparedTakeover{version: st.Version, mzxid: st.Mzxid, record: rec, rstat: rst, session: sid}}
		}},
	} {
		g := "regdeleted-" + strings.ReplaceAll(c.name, " ", "-")
		hint := c.setup(g)
		_, before, _ := other.Exists(ctx, zkstate.EpochPath(root, g))
		if err := store.CreateEphemeral(ctx, reg, nil); err != nil {
			t.Fatal(err)
		}
		gs := newGroupStore(store, root, g, node, zerolog.Nop())
		gs.hint, gs.own = hint, sid // the load waited for our registration in sid
		if err := other.Delete(ctx, reg, -1); err != nil {
			t.Fatal(err)
		}
		if err := gs.acquire(ctx); !errors.Is(err, ErrFenced) {
			t.Errorf("%s: acquire after our registration was deleted: %v, want ErrFenced", c.name, err)
		}
		if gs.epoch >= 0 {
			t.Errorf("%s: epoch version %d kept, want none", c.name, gs.epoch)
		}
		if _, after, _ := other.Exists(ctx, zkstate.EpochPath(root, g)); after.Mzxid != before.Mzxid {
			t.Errorf("%s: the epoch was written while our registration did not exist (mzxid %d, was %d)", c.name, after.Mzxid, before.Mzxid)
		}
		// Made again (as register does once told): the epoch is ours.
		if err := store.DeleteEphemeral(ctx, reg); err != nil && !errors.Is(err, zkstate.ErrNoNode) {
			t.Fatal(err)
		}
		if err := store.CreateEphemeral(ctx, reg, nil); err != nil {
			t.Fatal(err)
		}
		gs = newGroupStore(store, root, g, node, zerolog.Nop())
		gs.own = sid
		if err := gs.acquire(ctx); err != nil {
			t.Errorf("%s: acquire with our registration made again: %v", c.name, err)
		}
		if err := store.DeleteEphemeral(ctx, reg); err != nil {
			t.Fatal(err)
		}
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
