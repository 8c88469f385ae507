package bridge

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A claim's Multi that failed without an answer (the connection lost after it was sent, or
// before) may or may not have been applied. Before, its final offsets counted as written
// whatever ZooKeeper held: when it had not been applied, the commit of the attempt's final
// offsets (seed 001 step 5: the attempt fails, LegacyEffects.Commit) skipped them, and the
// member's last position was lost — its records consumed again. Now the claimer reads the owner
// znodes after such a Multi: a partition whose owner znode our members still hold, at the
// version the claim read, was not let go of (the Multi, all or nothing, was not applied, or did
// not release it), nobody else committed it, and its final offset is written. One whose owner
// znode is gone or someone else's was let go of: its next owner may have committed since, and
// its final offset is not written again.
//
// Here the Multi carried t-1=500 and t-2=510 and released both. t-1's owner znode is still ours
// at the version read: not applied. t-2's is gone, and a zk member took it and committed 600:
// applied.
func TestIntegration_ClaimerFinalOffsetsAfterAMultiWithoutAnswer(t *testing.T) {
	legacyClaimerFinalsAfter(t, &zkstate.MultiError{Index: -1, Err: zkstate.ErrConnLoss})
}

// A Multi split into requests (zkstate: more than 250 ops) whose later request failed was
// applied in part: the final offsets of partitions still ours are written, as after one without
// an answer (before, they all counted as written).
func TestIntegration_ClaimerFinalOffsetsAfterASplitMultiFailedInPart(t *testing.T) {
	legacyClaimerFinalsAfter(t, &zkstate.MultiError{Index: 300, Applied: 250, Err: zkstate.ErrNodeExists})
}

func legacyClaimerFinalsAfter(t *testing.T, multiErr error) {
	store, zkMember, c, ctx := legacyClaimerPair(t)
	const g = "unknown"
	t1, t2 := legacy.TopicPartition{Topic: "t", Partition: 1}, legacy.TopicPartition{Topic: "t", Partition: 2}
	owner := func(p int32) string { return zkstate.OwnerPath(g, "t", p) }
	if err := store.Create(ctx, owner(1), []byte("unknown_a-0"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := zkMember.Create(ctx, owner(2), []byte("zk-1-0"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := zkMember.Create(ctx, zkstate.OffsetPath(g, "t", 2), zkstate.FormatOffset(600), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	sid := store.SessionID()
	in := legacyPlanInput{
		Session: sid,
		Owners: map[legacy.TopicPartition]legacyOwner{
			t1: {Thread: "unknown_a-0", Version: 0, Session: sid},
			t2: {Thread: "unknown_a-0", Version: 0, Session: sid},
		},
		Final: map[legacy.TopicPartition]int64{t1: 500, t2: 510},
	}
	cl := newClaimer(claimerConfig{store: store, group: g, log: legacyTestLogger(t)})
	cl.legacy.c, cl.legacy.log = c, legacyTestLogger(t) // as attached; the claimer serves nothing yet
	var n legacyZKCount
	cl.noteClaimFinals(ctx, in, legacyPlan{}, multiErr, &n)

	events := make(chan any, 16)
	for _, r := range []any{
		legacyAttachReq{c: c, log: legacyTestLogger(t), events: events},
		legacyCommitReq{member: "(final offsets)", offsets: in.Final, exists: map[legacy.TopicPartition]bool{t2: true}, finals: true},
	} {
		cl.legacyReq(r)
	}
	select {
	case ev := <-events:
		if e := ev.(legacyCommitEv); e.err != nil {
			t.Errorf("committing the final offsets: %v", e.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	cl.leave(true, false)
	(*claimers)(nil).drop(cl) // a claimer of its own: stopped
	wantLegacyOffsets(t, ctx, store, g, map[legacy.TopicPartition]int64{t1: 500, t2: 600})
}

// legacyCutClaim is a group whose claim's Multi loses its connection: member a, on the bridge
// through a proxy, owns t-0 and t-1 with no offset committed; zk member zk-1 registers, a is
// stopped and its final Ping reports t-0=400 and t-1=500 (once: later pings report nothing,
// so a later attempt's final Ping cannot write them again), and the claim's Multi — create
// those offsets, let go of t-1 — is cut by the test (cut) while its answer is held back.
type legacyCutClaim struct {
	ctx    context.Context
	store  *zkstate.Store // the bridge's, through proxy
	direct *zkstate.Store // the test's, also zk-1's session
	proxy  *zktest.Proxy
	// reconnect, when set, is what the cut does instead of letting the bridge reconnect
	// through proxy (on an ensemble: open the way to another server).
	reconnect func()
	env       *legacyEnv
	mu        sync.Mutex
	starts    [][]legacy.PartitionOffset // a's StartRequests
	armed     bool                       // zk-1 registered: a's next Stop is the rebalance's
}

func legacyStartCutClaim(t *testing.T) *legacyCutClaim {
	t.Helper()
	legacyCheckLeaks(t)
	store, proxy, connect := legacyProxiedStore(t, 8*time.Second)
	return legacyStartCutClaimOn(t, &legacyCutClaim{store: store, proxy: proxy}, connect)
}

// legacyStartCutClaimOn starts the group of a legacyCutClaim on w's store and proxy; the test's
// own session connects to connect.
func legacyStartCutClaimOn(t *testing.T, w *legacyCutClaim, connect string) *legacyCutClaim {
	t.Helper()
	w.ctx = t.Context()
	w.direct = legacyOpenStore(t, connect)
	t.Cleanup(func() { w.direct.Close() })
	legacySetTopic(t, w.direct, "t", 2)
	w.env = legacyStart(t, w.store, "", nil)
	reg := legacyRawRegister("g", "a", true, "t")
	reg.PingIntervalMs = 2000 // the first request after a's Stop is its final Ping
	a := legacyDialRaw(t, w.env.addr, reg)
	stops, reported := 0, false // since armed
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.serve(t, func(m legacy.Message) legacy.Message {
			w.mu.Lock()
			defer w.mu.Unlock()
			switch m := m.(type) {
			case *legacy.StopRequest:
				if w.armed {
					stops++
				}
				return &legacy.StopResponse{}
			case *legacy.StartRequest:
				w.starts = append(w.starts, m.Assigned)
				return &legacy.StartResponse{}
			case *legacy.PingRequest:
				resp := &legacy.PingResponse{HasOffsets: true}
				if stops == 1 && !reported {
					reported = true
					resp.Offsets = []legacy.PartitionOffset{{Topic: "t", Partition: 0, Offset: 400}, {Topic: "t", Partition: 1, Offset: 500}}
				}
				return resp
			}
			return nil
		})
	}()
	t.Cleanup(func() { a.conn.Close(); <-done })
	legacyEventually(t, "a started on t-0 and t-1", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := len(w.starts)
		return n == 1 && len(w.starts[0]) == 2, fmt.Sprintf("a's Starts %v", w.starts)
	})
	return w
}

// register registers zk-1 in the test's session, which starts the rebalance.
func (w *legacyCutClaim) register(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	w.armed = true
	w.mu.Unlock()
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}.Encode()
	if err := w.direct.Create(w.ctx, zkstate.IDPath("g", "zk-1"), reg, zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
}

// cut drops the bridge's connection at once and lets it reconnect.
func (w *legacyCutClaim) cut() {
	w.proxy.Freeze()
	w.proxy.SetDelay(0)
	if w.reconnect != nil {
		w.reconnect()
		return
	}
	w.proxy.Thaw()
}

// restartedOnT0 waits until a was started again on t-0 alone, from want.
func (w *legacyCutClaim) restartedOnT0(t *testing.T, want int64) {
	t.Helper()
	legacyEventually(t, "a started again on t-0 alone", func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		last := w.starts[len(w.starts)-1]
		ok := len(w.starts) > 1 && len(last) == 1 && last[0].Partition == 0 && last[0].Offset == want
		return ok, fmt.Sprintf("a's Starts %v", w.starts)
	})
}

// The claim's Multi never reached ZooKeeper: the connection was cut while it looked up the
// parents of the offset znodes it creates (its first requests). Nothing was applied, a still
// owns t-0 and t-1, and the final offsets must be committed: before, they counted as written,
// and t-1's 500 was lost (zk-1 would have consumed from the start again).
func TestIntegration_LegacyClaimMultiCutBeforeItIsSent(t *testing.T) {
	w := legacyStartCutClaim(t)
	w.cutBeforeSent(t)
}

// cutBeforeSent cuts the connection while the claim's first requests (the lookups of the
// offset znodes' parents) wait for their answers, and checks that a's final offsets are
// committed and a restarts on t-0 from 400.
func (w *legacyCutClaim) cutBeforeSent(t *testing.T) {
	base := w.store.Requests()
	w.proxy.SetDelay(500 * time.Millisecond) // every answer is late: room to cut
	w.register(t)
	legacyEventually(t, "the claim's Multi looking up its parents", func() (bool, string) {
		n := w.store.Requests()
		return n[zkstate.ReqExists] > base[zkstate.ReqExists], fmt.Sprintf("requests %v, %v before", n, base)
	})
	if n := w.store.Requests(); n[zkstate.ReqMulti] != base[zkstate.ReqMulti] {
		t.Fatalf("%d Multis sent before the cut, want none", n[zkstate.ReqMulti]-base[zkstate.ReqMulti])
	}
	w.cut()
	legacyEventually(t, "a's final offsets committed", func() (bool, string) {
		offs := legacyOffsetsInZK(t, w.direct, "g")
		t0, t1 := legacy.TopicPartition{Topic: "t", Partition: 0}, legacy.TopicPartition{Topic: "t", Partition: 1}
		return offs[t0] == 400 && offs[t1] == 500, fmt.Sprintf("offsets %v", offs)
	})
	w.restartedOnT0(t, 400)
	if st := w.env.coord.Stats(); st.RebalanceFailures == 0 {
		t.Errorf("no attempt failed: the cut did not fail the claim")
	}
}

// The claim's Multi was applied and its answer lost: t-1 was let go of, zk-1 took it and
// committed 600. t-1's final offset (500) must not be written again over it.
func TestIntegration_LegacyClaimMultiCutAfterItIsApplied(t *testing.T) {
	w := legacyStartCutClaim(t)
	w.cutAfterApplied(t)
}

// cutAfterApplied lets the claim's Multi be applied, has zk-1 take t-1 and commit 600 while the
// Multi's answer is on its way, cuts the connection, and checks that 600 stays.
func (w *legacyCutClaim) cutAfterApplied(t *testing.T) {
	owner1 := zkstate.OwnerPath("g", "t", 1)
	w.proxy.SetDelay(time.Second) // every answer is late: room to act before the cut
	w.register(t)
	legacyEventually(t, "the claim's Multi applied", func() (bool, string) {
		ok, _, err := w.direct.Exists(w.ctx, owner1)
		return !ok && err == nil, fmt.Sprintf("t-1's owner znode exists %v (%v)", ok, err)
	})
	// zk-1's rebalance (ZCC), while the Multi's answer is on its way: claim t-1, consume,
	// commit. Then the answer is lost.
	if err := w.direct.Create(w.ctx, owner1, []byte("zk-1-0"), zkstate.CreateOptions{Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.direct.Set(w.ctx, zkstate.OffsetPath("g", "t", 1), zkstate.FormatOffset(600), -1); err != nil {
		t.Fatal(err)
	}
	w.cut()
	w.restartedOnT0(t, 400)
	time.Sleep(3 * legacyTestInterval) // anything queued behind the restart is written by now
	t1 := legacy.TopicPartition{Topic: "t", Partition: 1}
	if off := legacyOffsetsInZK(t, w.direct, "g")[t1]; off != 600 {
		t.Errorf("t-1 at %d, want zk-1's 600: the final offset of the Multi applied was written again", off)
	}
	if st := w.env.coord.Stats(); st.RebalanceFailures == 0 {
		t.Errorf("no attempt failed: the cut did not fail the claim")
	}
}

// A claim tried again at once after its Multi failed (after a wait, legacyRound's reclaim) reads
// the whole group again, and plans with the attempt's final offsets: before, those of partitions
// an earlier Multi of the claim had written and let go of (the Release before its wait) were
// written again, over what the partition's next owner had committed since. Here the Release
// wrote t-0=400 and let go of t-0; zk member 0 took it and committed 600; the round that reads
// the group again writes our t-1 (still ours: its final offset 500 is written) and must leave
// t-0 at 600.
func TestIntegration_ClaimerReclaimKeepsOffsetsCommittedAfterItsRelease(t *testing.T) {
	store, zkMember, c, ctx := legacyClaimerPair(t)
	const g = "reclaim"
	t0, t1 := legacy.TopicPartition{Topic: "t", Partition: 0}, legacy.TopicPartition{Topic: "t", Partition: 1}
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}.Encode()
	for _, w := range []struct {
		s       *zkstate.Store
		path    string
		data    []byte
		durable bool
	}{
		{zkMember, zkstate.IDPath(g, "0"), reg, false},
		{zkMember, zkstate.OwnerPath(g, "t", 0), []byte("0-0"), false},
		{zkMember, zkstate.OffsetPath(g, "t", 0), zkstate.FormatOffset(600), true},
		{store, zkstate.OwnerPath(g, "t", 1), []byte("a-0"), false},
	} {
		if err := w.s.Create(ctx, w.path, w.data, zkstate.CreateOptions{Ephemeral: !w.durable, Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A claimer without its goroutine: the test runs the round.
	events := make(chan any, 16)
	cl := &claimer{store: store, group: g, backoff: claimBackoff, backoffMax: claimBackoffMax, legacy: newLegacyPart()}
	cl.legacy.c, cl.legacy.log, cl.legacy.events = c, legacyTestLogger(t), events
	cl.legacy.finals = map[legacy.TopicPartition]int64{t0: 400} // the Release before the wait
	in := legacyPlanInput{
		Group: g, Strategy: legacy.StrategyRange,
		Members:    map[string]legacyMemberSpec{"a": {Subscription: []legacy.TopicThreads{{Topic: "t", Threads: 1}}, AutoCommit: true, Reset: legacy.ResetSmallest}},
		Partitions: map[string][]int32{"t": {0, 1}},
		Final:      map[legacy.TopicPartition]int64{t0: 400, t1: 500},
	}
	r := &legacyClaimRun{claimWait: claimWait{backoff: cl.backoff}, req: legacyClaimReq{attempt: 1, in: in}, reclaimed: true}
	cl.legacy.run = r
	cl.legacyRound(ctx, r)
	select {
	case ev := <-events:
		if e := ev.(legacyClaimEv); e.state != legacyClaimWritten {
			t.Fatalf("the round: state %v err %v, want written", e.state, e.err)
		}
	default:
		t.Fatal("the round emitted nothing")
	}
	wantLegacyOffsets(t, ctx, store, g, map[legacy.TopicPartition]int64{t0: 600, t1: 500})
}

// legacyClaimerPair opens two sessions on a ZooKeeper of the test's own (the claimer's, and one
// a zk member stands for), a legacy coordinator on the first, and a context of 20 s; all closed
// when the test ends.
func legacyClaimerPair(t *testing.T) (store, zkMember *zkstate.Store, c *LegacyCoordinator, ctx context.Context) {
	t.Helper()
	connect := legacyConnect(t)
	store = legacyOpenStore(t, connect)
	t.Cleanup(func() { _ = store.Close() })
	zkMember = legacyOpenStore(t, connect)
	t.Cleanup(func() { _ = zkMember.Close() })
	c, err := NewLegacyCoordinator(LegacyConfig{Store: store, AdvertisedHost: "127.0.0.1", AdvertisedPort: 1, Logger: legacyTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return store, zkMember, c, ctx
}

// wantLegacyOffsets checks group g's 0.8 offset znodes against want.
func wantLegacyOffsets(t *testing.T, ctx context.Context, store *zkstate.Store, g string, want map[legacy.TopicPartition]int64) {
	t.Helper()
	for tp, want := range want {
		data, _, err := store.Get(ctx, zkstate.OffsetPath(g, tp.Topic, tp.Partition))
		if err != nil {
			t.Errorf("offset of %v: %v, want %d", tp, err, want)
			continue
		}
		if off, err := zkstate.ParseOffset(data); err != nil || off != want {
			t.Errorf("offset of %v: %s (%v), want %d", tp, data, err, want)
		}
	}
}
