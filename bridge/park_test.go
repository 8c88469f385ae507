package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// parkedCommit is the answer to a commit sent to 9002 while its group's owner looked dead.
type parkedCommit struct {
	group string
	reply group.OffsetCommitReply
	err   error
	at    time.Time
}

// commitOn9002 sends member a's commit of offset off for partition 0 of every group of names to
// b, each on its own goroutine, and returns where the answers come.
func commitOn9002(b *running, names []string, off int64) <-chan parkedCommit {
	return commitPartitionOn9002(b, names, 0, off)
}

// commitPartitionOn9002 is commitOn9002 for partition part.
func commitPartitionOn9002(b *running, names []string, part int32, off int64) <-chan parkedCommit {
	out := make(chan parkedCommit, len(names))
	for _, name := range names {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := b.Do(ctx, name, func(tok group.Token) group.Event {
				return group.OffsetCommit{Token: tok, MemberID: "a", InstanceID: "i1", Generation: 1,
					Offsets: []group.OffsetCommitPartition{{Topic: "orders", Partition: part, Offset: off, LeaderEpoch: -1}}}
			})
			rep, _ := r.(group.OffsetCommitReply)
			out <- parkedCommit{group: name, reply: rep, err: err, at: time.Now()}
		}()
	}
	return out
}

// committedBefore writes offset 1 of partition 0 of every group of names as 9001 had committed
// it (both znodes: the 0.8 layout's and the bridge's own record), so that a later commit sets
// znodes that exist, as a running group's does.
func committedBefore(t *testing.T, zk *zkstate.Store, names []string) {
	t.Helper()
	own := zkstate.OwnOffset{Offset: 1, LeaderEpoch: -1, CommittedMs: time.Now().UnixMilli()}.Encode()
	for _, name := range names {
		for p, data := range map[string][]byte{zkstate.OffsetPath(name, "orders", 0): zkstate.FormatOffset(1), zkstate.OwnOffsetPath(bridge.DefaultRoot, name, "orders", 0): own} {
			if err := zk.Create(t.Context(), p, data, zkstate.CreateOptions{Parents: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// survivorPrepared is the setting of the parked-commit tests: four groups of a peer (9001) that
// committed once, the peer killed, and 9002 (its ZooKeeper link through proxy) prepared to take
// them over.
func survivorPrepared(t *testing.T) (*zkstate.Store, *zktest.Proxy, *running, []string) {
	t.Helper()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	peer := startFakePeer(t)
	names := preloadSetup(t, connect, zk, 4, peer)
	committedBefore(t, zk, names)
	proxy, b := preloadSurvivor(t, connect, peer)
	killAndAwaitPrepared(t, peer, b, len(names))
	return zk, proxy, b, names
}

// parkedCode is a one-partition commit's outcome.
// expireAndAnswer ends 9001's registration as its session's expiry would and waits for n parked
// commits, each of which must be served (ErrNone): it returns how long after the deletion the
// last was answered. what says which commits, in the errors.
func expireAndAnswer(t *testing.T, zk *zkstate.Store, answers <-chan parkedCommit, n int, what string) time.Duration {
	t.Helper()
	if err := zk.DeleteEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001)); err != nil {
		t.Fatal(err)
	}
	expired := time.Now()
	var last time.Duration
	for range n {
		a := <-answers
		if code := parkedCode(a); code != group.ErrNone {
			t.Errorf("commit of %s %s: code %d (%v), want it served once 9002 took the group", a.group, what, code, a.err)
		}
		last = max(last, a.at.Sub(expired))
	}
	return last
}

func parkedCode(c parkedCommit) group.ErrorCode {
	if c.err != nil || len(c.reply.Partitions) != 1 {
		return -1
	}
	return c.reply.Partitions[0].Err
}

// A crash's clients ask the survivor a group moves to before the dead bridge's session ends
// (docs/several-bridges.md): while 9001 looks dead and is still registered, FindCoordinator on
// 9002 names 9002 for its groups at once (it held the answer until the expiry), and a member's
// commit sent to 9002 waits there (it was answered NOT_COORDINATOR) until 9001's registration
// goes; then it is the group's first write after the prepared takeover. 9002's ZooKeeper answers
// come takeoverRTT late. From the deletion: the notice (1), the takeover's Multi (applied at
// once, answered at 2), the commit's write (answered at 3): every commit answered within 3.9
// round trips, durable, and not before 9002 held the group.
func TestIntegration_SeveralBridgesCommitWaitsForTheTakeover(t *testing.T) {
	zk, proxy, b, names := survivorPrepared(t)

	asked := time.Now()
	for i, c := range coordinatorsOf(t, b.Addr().String(), names) {
		if !strings.HasPrefix(c, "9002@") {
			t.Errorf("FindCoordinator(%s) on 9002 while 9001 looks dead: %s, want 9002, the bridge it moves to", names[i], c)
		}
	}
	if took := time.Since(asked); took > 3*time.Second {
		t.Errorf("FindCoordinator answered after %v; want at once, not held", took.Round(time.Millisecond))
	}

	quiet(t, b)
	rtt := takeoverRTT
	proxy.SetDelay(rtt)
	answers := commitOn9002(b, names, 42)
	select {
	case a := <-answers:
		t.Fatalf("commit of %s answered (code %d, %v) while 9001 is registered; want it kept until 9002 holds the group", a.group, parkedCode(a), a.err)
	case <-time.After(3 * rtt):
	}
	last := expireAndAnswer(t, zk, answers, len(names), "kept on 9002")
	proxy.SetDelay(0)
	t.Logf("expiry → every parked commit answered %v (%.1f round trips of %v)", last.Round(time.Millisecond), float64(last)/float64(rtt), rtt)
	if last > rtt*39/10 {
		t.Errorf("parked commits answered %.1f round trips after the expiry, want at most 3.9 (notice, takeover, write)", float64(last)/float64(rtt))
	}
	holders, _ := epochsOf(t, zk, names)
	for i, name := range names {
		if holders[i] != 9002 {
			t.Errorf("%s held by %d after its commit was answered, want 9002", name, holders[i])
		}
		data, _, err := zk.Get(t.Context(), zkstate.OffsetPath(name, "orders", 0))
		if off, perr := zkstate.ParseOffset(data); err != nil || perr != nil || off != 42 {
			t.Errorf("%s's offset in ZooKeeper after the answer: %d (%v, %v), want 42", name, off, err, perr)
		}
	}
}

// A commit kept for a group whose owner looked dead is answered NOT_COORDINATOR, and nothing is
// written, when that owner comes back (its listener takes connections again: named again) before
// its session ends: the group never had two bridges serving it.
func TestIntegration_SeveralBridgesParkedCommitRefusedWhenTheOwnerIsBack(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	peer := startFakePeer(t)
	names := preloadSetup(t, connect, zk, 2, peer)
	_, b := preloadSurvivor(t, connect, peer)
	killAndAwaitPrepared(t, peer, b, len(names))
	_, before := epochsOf(t, zk, names)

	answers := commitOn9002(b, names, 77)
	select {
	case a := <-answers:
		t.Fatalf("commit of %s answered (code %d, %v) while 9001 looks dead and is registered; want it kept", a.group, parkedCode(a), a.err)
	case <-time.After(500 * time.Millisecond):
	}
	peer.revive()
	for range names {
		select {
		case a := <-answers:
			if code := parkedCode(a); code != group.ErrNotCoordinator {
				t.Errorf("commit of %s once 9001 is back: code %d (%v), want NOT_COORDINATOR (%d)", a.group, code, a.err, group.ErrNotCoordinator)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a kept commit still unanswered 20 s after 9001 came back")
		}
	}
	holders, after := epochsOf(t, zk, names)
	for i, name := range names {
		if holders[i] != 9001 || after[i] != before[i] {
			t.Errorf("%s's epoch: holder %d version %d, want 9001's untouched (version %d)", name, holders[i], after[i], before[i])
		}
		data, _, err := zk.Get(t.Context(), zkstate.OffsetPath(name, "orders", 0))
		if off, perr := zkstate.ParseOffset(data); err == nil && perr == nil && off == 77 {
			t.Errorf("%s: the kept commit's offset 77 was written", name)
		}
	}
}

// A parked commit of a partition its group never committed (a member's first records of it came
// while the owner died): the takeover's load takes the group's offset znodes for existing (the
// group committed before), so the write's Multi fails on the missing one. That write was retried
// as any failed write is (a pause, the epoch and the record read back, every offset znode looked
// up, their parents looked up, the Multi again): ~8 round trips from the expiry where a partition
// committed before takes 3, the slowest groups of the crash at 300 groups. Now the znodes the
// Multi found missing are created in the next Multi at once: the notice (1), the takeover (2),
// the failed Multi (3), the Multi that creates them (4). Both offset znodes hold the commit, and
// partition 0's stay as they were.
func TestIntegration_SeveralBridgesParkedCommitOfANewPartition(t *testing.T) {
	zk, proxy, b, names := survivorPrepared(t)

	quiet(t, b)
	rtt := takeoverRTT
	proxy.SetDelay(rtt)
	answers := commitPartitionOn9002(b, names, 1, 42)
	time.Sleep(2 * rtt) // parked
	last := expireAndAnswer(t, zk, answers, len(names), "of a new partition")
	proxy.SetDelay(0)
	t.Logf("expiry → every commit of a new partition answered %v (%.1f round trips of %v)", last.Round(time.Millisecond), float64(last)/float64(rtt), rtt)
	if last > rtt*49/10 {
		t.Errorf("commits of a new partition answered %.1f round trips after the expiry, want at most 4.9 (notice, takeover, the Multi that finds the znodes missing, the one that creates them)", float64(last)/float64(rtt))
	}
	for _, name := range names {
		for p, want := range map[int32]int64{0: 1, 1: 42} {
			data, _, err := zk.Get(t.Context(), zkstate.OffsetPath(name, "orders", p))
			if off, perr := zkstate.ParseOffset(data); err != nil || perr != nil || off != want {
				t.Errorf("%s: 0.8 offset of orders/%d: %d (%v, %v), want %d", name, p, off, err, perr, want)
			}
			data, _, err = zk.Get(t.Context(), zkstate.OwnOffsetPath(bridge.DefaultRoot, name, "orders", p))
			if own, perr := zkstate.ParseOwnOffset(data); err != nil || perr != nil || own.Offset != want {
				t.Errorf("%s: the bridge's offset of orders/%d: %+v (%v, %v), want %d", name, p, own, err, perr, want)
			}
		}
	}
}
