package bridge_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// failoverGroups is how many groups the dead bridge held in the failover chain test: enough that
// loads taken one after the other would show as many times the round trips of one.
const failoverGroups = 12

// The chain of a crash's takeover, counted in ZooKeeper round trips: bridge 9001 holds
// failoverGroups Stable groups (two static members each) and its session ends (the test deletes
// its registration, as ZooKeeper does when it expires the session: its epochs stay, not
// released); the survivor 9002, whose ZooKeeper answers all come takeoverRTT late, takes every
// group over and answers a heartbeat of each. Bridge 9003 stays live, so that the survivor is not
// alone. The time from the registration's deletion to the last group's epoch held by 9002, and
// to the last heartbeat answered, divided by the round trip, counts the survivor's round trips in
// a row: the loads of the groups run side by side, so the count does not grow with the groups.
func TestIntegration_SeveralBridgesFailoverRoundTrips(t *testing.T) {
	if os.Getenv("ZKBRIDGE_TEST_LOG_MS") != "" {
		zerolog.TimeFieldFormat = "15:04:05.000" // diagnosis: the chain's lines in milliseconds
	}
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	names := movingTo9002("failover", failoverGroups)
	insts := [2]group.InstanceID{"i1", "i2"}
	// The groups' records as a bridge leaves them: made Stable on a bridge 9001 of this process,
	// stopped; then their epochs are written held (not released) by 9001, whose registration the
	// test keeps and deletes, standing for the child that is killed.
	a := startBridge(t, connect, 9001, nil)
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() { stableGroup(t, a, name, insts) })
	}
	wg.Wait()
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	heldBy9001(t, zk, names, 9001, 9003)
	t.Run("rescan", func(t *testing.T) {
		bestOfThree(t, "expiry → taken / → answered", func(attempt int) (bool, string) {
			taken, answered := failoverTakeover(t, connect, zk, names, insts[0], attempt, false)
			return taken <= maxFailoverTakenRoundTrips && answered <= maxFailoverAnsweredRoundTrips, fmt.Sprintf("%.1f/%.1f", taken, answered)
		}, fmt.Sprintf("at most %.1f / %.1f", maxFailoverTakenRoundTrips, maxFailoverAnsweredRoundTrips))
	})
	// The members' heartbeats retried from the expiry on, as clients whose FindCoordinator
	// names the survivor once its view changes: a heartbeat that comes before the rescan
	// decides loads its group itself.
	t.Run("requests", func(t *testing.T) {
		bestOfThree(t, "expiry → answered", func(attempt int) (bool, string) {
			_, answered := failoverTakeover(t, connect, zk, names, insts[0], attempt, true)
			return answered <= maxFailoverRequestRoundTrips, fmt.Sprintf("%.1f", answered)
		}, fmt.Sprintf("at most %.1f", maxFailoverRequestRoundTrips))
	})
}

// The bounds of the failover chain, 0.9 of margin each (a loaded machine adds up to 0.9 with
// -race beside a benchmark):
//   - maxFailoverTakenRoundTrips, expiry → every epoch taken: the deletion's notice (the
//     registration's watch tells it and the view drops the bridge at once: no read of the
//     children), the rescan's list with the epochs (the epoch's write is applied before its
//     answer comes): 2; 3 when the view waited for the children's read, 4 when the
//     registrations of the bridges left were read again too.
//   - maxFailoverAnsweredRoundTrips, expiry → every heartbeat answered: those, the write's answer,
//     the holder's check with the record read beside it: 4; 5 with the children's read, 7 with
//     the check and the record one after the other and the registrations read again.
//   - maxFailoverRequestRoundTrips, the same when the heartbeats come before the rescan decides:
//     the notice, the record's existence with the epoch, the write, the check with the record: 4;
//     5 with the children's read, 6 with the holder's registration read before the write too.
const (
	maxFailoverTakenRoundTrips    = 2.9
	maxFailoverAnsweredRoundTrips = 4.9
	maxFailoverRequestRoundTrips  = 4.9
)

// failoverTakeover starts the survivor 9002 behind a proxy, deletes 9001's registration once
// 9002 lists it, and returns the round trips from the deletion to every group's epoch held by
// 9002 and to a heartbeat of every group answered. It puts 9001's registration and epochs back
// for the next attempt.
func failoverTakeover(t *testing.T, connect string, zk *zkstate.Store, names []string, inst group.InstanceID, attempt int, retry bool) (taken, answered float64) {
	t.Helper()
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	b := startBridge(t, proxy.Addr()+connect[i:], 9002, func(c *bridge.Config) { c.WriteTimeout = 10 * time.Second })
	defer b.stop()
	zktest.Eventually(t, 10*time.Second, "9002 sees 9001 and 9003", func() (bool, string) {
		got := brokersOf(t, b.Addr().String())
		return len(got) == 3, fmt.Sprint(got)
	})
	quiet(t, b)
	rtt := takeoverRTT
	proxy.SetDelay(rtt)
	before := zkRequestsOf(t, b)
	regPath := zkstate.BridgePath(bridge.DefaultRoot, 9001)
	if err := zk.DeleteEphemeral(t.Context(), regPath); err != nil {
		t.Fatal(err)
	}
	expired := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Duration
	heartbeats := func() {
		for _, name := range names {
			wg.Go(func() {
				for {
					ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
					r, err := b.Do(ctx, name, func(tok group.Token) group.Event {
						return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: inst, Generation: 1}
					})
					cancel()
					h, ok := r.(group.HeartbeatReply)
					if err == nil && ok && h.Err == group.ErrNotCoordinator && retry && time.Since(expired) < 20*time.Second {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if err != nil || !ok || h.Err != group.ErrNone {
						t.Errorf("heartbeat of %s on 9002 after the takeover: %+v, %v; want the generation restored", name, r, err)
					}
					break
				}
				mu.Lock()
				last = max(last, time.Since(expired))
				mu.Unlock()
			})
		}
	}
	if retry {
		heartbeats()
	}
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = zkstate.EpochPath(bridge.DefaultRoot, name)
	}
	for deadline := expired.Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		reads, err := zk.GetMany(t.Context(), paths)
		n := 0
		for _, r := range reads {
			if e, perr := zkstate.ParseEpoch(r.Data); err == nil && r.Err == nil && perr == nil && e.NodeID == 9002 && !e.Released {
				n++
			}
		}
		if n == len(names) {
			if !retry {
				heartbeats()
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("9002 holds %d of %d groups 20 s after 9001's registration went", n, len(names))
		}
	}
	took := time.Since(expired)
	wg.Wait()
	by, total := requestsSince(before, zkRequestsOf(t, b))
	taken, answered = float64(took)/float64(rtt), float64(last)/float64(rtt)
	t.Logf("attempt %d, %d groups: expiry → every epoch taken %v (%.1f round trips of %v), → every heartbeat answered %v (%.1f); 9002's ZooKeeper requests %v (%v in all)",
		attempt, len(names), took.Round(time.Millisecond), taken, rtt, last.Round(time.Millisecond), answered, by, total)

	// 9001 back, holding the groups, for the next attempt.
	proxy.SetDelay(0)
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	heldBy9001(t, zk, names, 9001)
	return taken, answered
}

// heldBy9001 writes every named group's epoch as held by 9001 and registers the bridges ids at
// an address nothing listens on: holders a survivor takes the groups from once they go.
func heldBy9001(t *testing.T, zk *zkstate.Store, names []string, ids ...int32) {
	t.Helper()
	held := zkstate.Epoch{NodeID: 9001, AcquiredMs: time.Now().UnixMilli()}.Encode()
	for _, name := range names {
		if _, err := zk.Set(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name), held, -1); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		reg := zkstate.BridgeRegistration{NodeID: id, Kafka: "127.0.0.1:1", Advertised: "127.0.0.1:1"}
		if err := zk.CreateEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, id), reg.Encode()); err != nil {
			t.Fatal(err)
		}
	}
}

// A group restored from its record (a crash's survivor, a restart) mirrors its generation in
// one Multi: its members' registrations, hosted-member znodes and six owner znodes (ten
// ephemerals), where it created them one by one, a round trip and a write of ZooKeeper each, in
// the window where a survivor loads every group of the dead bridge. Here a bridge restarts under
// a Stable group of two static members.
func TestIntegration_RestoredGroupMirroredInOneMulti(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	name := "mirrored"
	insts := [2]group.InstanceID{"i1", "i2"}
	a := startBridge(t, connect, 9001, nil)
	stableGroup(t, a, name, insts)
	mirrorsSixOwners(t, zk, name)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, 9001, nil)
	quiet(t, b)
	before := zkRequestsOf(t, b)
	if h := do[group.HeartbeatReply](t, b, name, func(tok group.Token) group.Event {
		return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: insts[0], Generation: 1}
	}); h.Err != group.ErrNone {
		t.Fatalf("heartbeat after the restart: %+v, want the generation restored", h)
	}
	mirrorsSixOwners(t, zk, name)
	ids, _, err := zk.Children(t.Context(), zkstate.IDsPath(name))
	if err != nil || len(ids) != 2 {
		t.Fatalf("registrations after the restart: %v (%v), want the two members'", ids, err)
	}
	quiet(t, b)
	by, total := requestsSince(before, zkRequestsOf(t, b))
	// Two multis: the epoch's takeover (with the check of our own registration) and the mirror.
	if by[zkstate.ReqCreate] > 0 || by[zkstate.ReqSet] > 0 || by[zkstate.ReqMulti] > 2 {
		t.Errorf("the restored group's load and mirror sent %v (%v in all), want no create, no set and two multis", by, total)
	}
}
