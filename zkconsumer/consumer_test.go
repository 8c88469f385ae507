package zkconsumer_test

import (
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

var twoTopics = map[string]int{"orders": 8, "payments": 5}

// startAll starts members concurrently, as a deployment restarting them all would.
func (cl *cluster) startAll(tr *tracker, names []string, mods ...func(*zkconsumer.Config)) []*member {
	out := make([]*member, len(names))
	for i, n := range names {
		out[i] = cl.start(tr, n, mods...)
	}
	return out
}

func TestIntegration_RangeConvergesToThe082Assignment(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	tr := newTracker()
	ms := cl.startAll(tr, []string{"c1", "c2", "c3"})
	want := cl.expected(legacy.StrategyRange, ms...)
	cl.waitConverged(20*time.Second, want, ms...)
	tr.checkNoViolations(t)

	// Complete and disjoint: every partition of both topics exactly once.
	if len(want) != 8+5 {
		t.Fatalf("0.8.2 range assigned %d partitions, want 13", len(want))
	}
	seen := map[tp]string{}
	for _, m := range ms {
		for p := range m.c.Assignment() {
			if prev, dup := seen[p]; dup {
				t.Errorf("%v owned by %s and %s", p, prev, m.name)
			}
			seen[p] = m.name
		}
	}
	if len(seen) != 13 {
		t.Errorf("%d partitions owned, want 13", len(seen))
	}

	// The registration, byte for byte as 0.8.2 writes it, an ephemeral of the member's session.
	ctx := timeout(t, 5*time.Second)
	data, st, err := cl.admin.Get(ctx, zkstate.IDPath(group, "g_c1"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^\{"version":1,"subscription":\{"orders":2,"payments":2\},"pattern":"static","timestamp":"[0-9]{13}"\}$`)
	if !re.Match(data) {
		t.Errorf("registration = %s, not the 0.8.2 format", data)
	}
	if st.EphemeralOwner != ms[0].c.SessionID() {
		t.Errorf("registration owned by session 0x%x, want the member's 0x%x", st.EphemeralOwner, ms[0].c.SessionID())
	}
	if got := ms[0].c.ConsumerID(); got != "g_c1" {
		t.Errorf("ConsumerID() = %q, want the group-prefixed g_c1 (ZCC:122)", got)
	}
}

func TestIntegration_LeaveReconvergesWithoutDoubleConsumption(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	tr := newTracker()
	ms := cl.startAll(tr, []string{"c1", "c2", "c3"})
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, ms...), ms...)

	sampler := cl.sampleOwners(timeout(t, 30*time.Second), tr)
	before := ms[0].c.Stats().Rebalances
	if err := ms[1].c.Close(timeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	rest := []*member{ms[0], ms[2]}
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, rest...), rest...)
	tr.checkNoViolations(t)
	n, problems := sampler.result()
	for _, p := range problems {
		t.Errorf("owner sample: %s", p)
	}
	if n == 0 {
		t.Errorf("the owner watcher took no sample")
	}
	t.Logf("%d owner samples", n)
	if ms[0].c.Stats().Rebalances <= before {
		t.Errorf("c1 did not rebalance after c2 left")
	}
	// Shutdown left nothing of c2: its registration and owners went with its session.
	if ok, _, err := cl.admin.Exists(timeout(t, 5*time.Second), zkstate.IDPath(group, "g_c2")); ok || err != nil {
		t.Errorf("c2's registration after Close: exists=%v err=%v", ok, err)
	}
	if a := ms[1].c.Assignment(); len(a) != 0 {
		t.Errorf("c2 after Close still has %v", a)
	}
}

func TestIntegration_RoundRobin(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	tr := newTracker()
	rr := func(c *zkconsumer.Config) { c.Strategy = zkconsumer.StrategyRoundRobin }
	ms := cl.startAll(tr, []string{"c1", "c2", "c3"}, rr)
	want := cl.expected(legacy.StrategyRoundRobin, ms...)
	if range_ := cl.expected(legacy.StrategyRange, ms...); diff(want, toThreads(range_)) == "" {
		t.Fatalf("fixture does not tell roundrobin from range")
	}
	cl.waitConverged(20*time.Second, want, ms...)
	tr.checkNoViolations(t)
}

func toThreads(a legacy.Assignment) map[tp]string {
	out := map[tp]string{}
	for p, thread := range a {
		out[tp{Topic: p.Topic, Partition: p.Partition}] = thread
	}
	return out
}

func TestIntegration_PartitionCountChangeRebalances(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	tr := newTracker()
	ms := cl.startAll(tr, []string{"c1", "c2"})
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, ms...), ms...)

	cl.setPartitions("orders", 12)
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, ms...), ms...)
	tr.checkNoViolations(t)
}

// A foreign session holds an owner znode the consumer must create: every attempt fails on it,
// deletes what it created and backs off; once the znode goes, the next attempt succeeds.
func TestIntegration_OwnerConflictRetriesWithBackoff(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	foreign := zktest.OpenStore(t, cl.connect, withLogger(testLogger(t)))
	ctx := timeout(t, 30*time.Second)
	blocked := zkstate.OwnerPath(group, "orders", 3)
	if err := foreign.Create(ctx, blocked, []byte("g_gone-0"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	m := cl.start(tr, "c1", func(c *zkconsumer.Config) {
		c.RebalanceMaxRetries = 1000
		c.RebalanceBackoff = 100 * time.Millisecond
	})
	zktest.Eventually(t, 10*time.Second, "three conflicting attempts", func() bool { return m.c.Stats().Conflicts >= 3 })
	start := time.Now()
	if a := m.c.Assignment(); len(a) != 0 {
		t.Errorf("assignment while blocked = %v, want none", a)
	}
	data, st, err := cl.admin.Get(ctx, blocked)
	if err != nil || string(data) != "g_gone-0" || st.EphemeralOwner != foreign.SessionID() {
		t.Errorf("blocked owner = %q, session 0x%x, %v; want the foreign one untouched", data, st.EphemeralOwner, err)
	}
	if err := foreign.Delete(ctx, blocked, -1); err != nil {
		t.Fatal(err)
	}
	cl.waitConverged(10*time.Second, cl.expected(legacy.StrategyRange, m), m)
	t.Logf("converged %v after the foreign owner went", time.Since(start).Round(time.Millisecond))
	s := m.c.Stats()
	if s.Rebalances != 1 || s.Failures != 0 || s.Attempts != s.Conflicts+1 {
		t.Errorf("stats = %+v, want one rebalance whose attempts all conflicted but the last", s)
	}
	tr.mu.Lock()
	assigns, revokes := tr.assigns["g_c1"], tr.revokes["g_c1"]
	tr.mu.Unlock()
	// OnRevoke at the start of every attempt and after every failed one (ZCC:655, 626).
	if assigns != 1 || revokes != int(s.Attempts+s.Conflicts) {
		t.Errorf("OnAssign %d times, OnRevoke %d times; want 1 and %d", assigns, revokes, s.Attempts+s.Conflicts)
	}
}

// With the foreign owner in place for good, the rebalance gives up after rebalance.max.retries
// attempts: reported, nothing owned, still registered — and the owner's deletion is not
// watched, so only the next ids or topic event makes it try again.
func TestIntegration_OwnerConflictFailsAfterMaxRetries(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	foreign := zktest.OpenStore(t, cl.connect, withLogger(testLogger(t)))
	ctx := timeout(t, 30*time.Second)
	blocked := zkstate.OwnerPath(group, "payments", 0)
	if err := foreign.Create(ctx, blocked, []byte("g_gone-1"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	tr := newTracker()
	m := cl.start(tr, "c1", func(c *zkconsumer.Config) {
		c.RebalanceMaxRetries = 3
		c.RebalanceBackoff = 50 * time.Millisecond
	})
	zktest.Eventually(t, 10*time.Second, "the rebalance failure", func() bool { return len(tr.errors("g_c1")) > 0 })
	err := tr.errors("g_c1")[0]
	var rf *zkconsumer.RebalanceFailedError
	if !errors.Is(err, zkconsumer.ErrRebalanceFailed) || !errors.As(err, &rf) || rf.Retries != 3 ||
		!errors.Is(err, zkconsumer.ErrOwnershipConflict) {
		t.Errorf("error = %v; want a RebalanceFailedError after 3 retries wrapping ErrOwnershipConflict", err)
	}
	if s := m.c.Stats(); s.Attempts != 3 || s.Failures != 1 {
		t.Errorf("stats = %+v, want 3 attempts and 1 failure", s)
	}
	if a := m.c.Assignment(); len(a) != 0 {
		t.Errorf("assignment after the failure = %v, want none", a)
	}
	zk, err2 := owners(ctx, cl.admin)
	if err2 != nil || len(zk) != 1 || zk[tp{Topic: "payments", Partition: 0}].thread != "g_gone-1" {
		t.Errorf("owners after the failure = %v, %v; want only the foreign one", zk, err2)
	}
	if ok, _, err := cl.admin.Exists(ctx, zkstate.IDPath(group, "g_c1")); !ok || err != nil {
		t.Errorf("registration after the failure: exists=%v err=%v; 0.8.2 stays registered", ok, err)
	}

	if err := foreign.Delete(ctx, blocked, -1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if a := m.c.Assignment(); len(a) != 0 {
		t.Errorf("assignment without a new event = %v; 0.8.2 does not watch owners", a)
	}
	// Rewriting the topic's data, even unchanged, is an event (ZCC:497-507).
	cl.setPartitions("orders", 8)
	cl.waitConverged(10*time.Second, cl.expected(legacy.StrategyRange, m), m)
}

// ZkUtils.createEphemeralPathExpectConflict takes an existing owner znode holding our own
// thread id as ours, whichever session holds it.
func TestIntegration_QuirkOwnerWithOurThreadIDIsTakenAsOurs(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	foreign := zktest.OpenStore(t, cl.connect, withLogger(testLogger(t)))
	ctx := timeout(t, 30*time.Second)
	p := tp{Topic: "orders", Partition: 0}
	if err := foreign.Create(ctx, zkstate.OwnerPath(group, p.Topic, p.Partition), []byte("g_c1-0"),
		zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	m := cl.start(newTracker(), "c1")
	want := cl.expected(legacy.StrategyRange, m)
	zktest.Eventually(t, 10*time.Second, "the assignment", func() bool { return len(m.c.Assignment()) == len(want) })
	if s := m.c.Stats(); s.Conflicts != 0 {
		t.Errorf("stats = %+v, want no conflict", s)
	}
	zk, err := owners(ctx, cl.admin)
	if err != nil {
		t.Fatal(err)
	}
	if o := zk[p]; o.thread != "g_c1-0" || o.session != foreign.SessionID() {
		t.Errorf("owner of orders-0 = %+v, want g_c1-0 held by the foreign session 0x%x", o, foreign.SessionID())
	}
	// The foreign session ends: the znode goes, and the consumer, which watches no owner,
	// still believes it owns the partition.
	if err := foreign.Close(); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "the foreign owner to vanish", func() bool {
		ok, _, err := cl.admin.Exists(ctx, zkstate.OwnerPath(group, p.Topic, p.Partition))
		return err == nil && !ok
	})
	if got := m.c.Assignment()[p]; got != "g_c1-0" {
		t.Errorf("assignment of orders-0 = %q, want still g_c1-0", got)
	}
}

// Offsets given to Commit reach /offsets when a rebalance stops the fetchers and at Close (auto
// commit on), and the next owner starts from them.
func TestIntegration_OffsetsCommittedAndResumed(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	tr := newTracker()
	c1 := cl.start(tr, "c1")
	cl.waitConverged(10*time.Second, cl.expected(legacy.StrategyRange, c1), c1)
	o0, p4 := tp{Topic: "orders", Partition: 0}, tp{Topic: "payments", Partition: 4}
	// No committed offset, auto.offset.reset=largest.
	tr.waitStartOffset(t, "g_c1", o0, zkconsumer.OffsetLatest)
	for p, off := range tr.lastAssigned("g_c1") {
		if off != zkconsumer.OffsetLatest {
			t.Errorf("first offset of %v = %d, want OffsetLatest", p, off)
		}
	}
	if !c1.c.Commit(o0, 42) || !c1.c.Commit(p4, 7) {
		t.Fatal("Commit on an owned partition reported false")
	}

	// c2 joins: c1's rebalance commits before releasing, and payments-4 moves to c2.
	c2 := cl.start(tr, "c2")
	both := []*member{c1, c2}
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, both...), both...)
	if off, ok := readOffset(t, cl.admin, o0); !ok || off != 42 {
		t.Errorf("offset of orders-0 = %d, %v; want 42", off, ok)
	}
	if _, ok := readOffset(t, cl.admin, tp{Topic: "orders", Partition: 1}); ok {
		t.Errorf("orders-1 has an offset znode; 0.8.2 writes none for a partition never consumed")
	}
	if got := c2.c.Assignment()[p4]; got == "" {
		t.Fatalf("fixture: payments-4 did not move to c2")
	}
	// c2 starts payments-4 at 7 — unless its attempt read the offsets before c1 committed and
	// created the owner after c1 released: 0.8.2 reads offsets before owning (ZCC:667, then
	// 684), so that interleaving restarts from the reset offset. Both are the real program.
	zktest.Eventually(t, 5*time.Second, "c2 to start payments-4", func() bool {
		off, ok := tr.lastAssigned("g_c2")[p4]
		return ok && (off == 7 || off == zkconsumer.OffsetLatest)
	})
	t.Logf("c2 started payments-4 at %d", tr.lastAssigned("g_c2")[p4])
	tr.waitStartOffset(t, "g_c1", o0, 42)
	if c1.c.Commit(p4, 1000) {
		t.Errorf("Commit on a partition c1 no longer owns reported true")
	}

	// c2 consumes on and leaves: Close commits, c1 takes payments-4 over at 9.
	c2.c.Commit(p4, 9)
	if err := c2.c.Close(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if off, ok := readOffset(t, cl.admin, p4); !ok || off != 9 {
		t.Errorf("offset of payments-4 after c2's Close = %d, %v; want 9", off, ok)
	}
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, c1), c1)
	// c2 committed before its session ended, and c1's rebalance starts with that end.
	tr.waitStartOffset(t, "g_c1", p4, 9)

	// A new consumer resumes from everything committed.
	o1 := tp{Topic: "orders", Partition: 1}
	c1.c.Commit(o1, 100)
	if err := c1.c.Close(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	c3 := cl.start(tr, "c3")
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, c3), c3)
	tr.waitStartOffset(t, "g_c3", o0, 42)
	got := tr.lastAssigned("g_c3")
	for p, want := range map[tp]int64{o0: 42, o1: 100, p4: 9, {Topic: "orders", Partition: 2}: zkconsumer.OffsetLatest} {
		if got[p] != want {
			t.Errorf("c3 starts %v at %d, want %d", p, got[p], want)
		}
	}
	tr.checkNoViolations(t)
}

// With auto.commit.enable=false nothing is written by rebalances or Close, only by
// CommitOffsets; auto.offset.reset=smallest gives OffsetEarliest.
func TestIntegration_NoAutoCommit(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	tr := newTracker()
	manual := func(c *zkconsumer.Config) {
		c.DisableAutoCommit = true
		c.AutoOffsetReset = zkconsumer.OffsetResetSmallest
	}
	c1 := cl.start(tr, "c1", manual)
	cl.waitConverged(10*time.Second, cl.expected(legacy.StrategyRange, c1), c1)
	o0, o1 := tp{Topic: "orders", Partition: 0}, tp{Topic: "orders", Partition: 1}
	tr.waitStartOffset(t, "g_c1", o0, zkconsumer.OffsetEarliest)
	c1.c.Commit(o0, 5)
	c2 := cl.start(tr, "c2", manual)
	both := []*member{c1, c2}
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, both...), both...)
	if _, ok := readOffset(t, cl.admin, o0); ok {
		t.Errorf("a rebalance committed with auto-commit off")
	}
	// The rebalance re-read the offsets: the 5 given to Commit before it is lost.
	c1.c.Commit(o0, 6)
	if err := c1.c.CommitOffsets(timeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if off, ok := readOffset(t, cl.admin, o0); !ok || off != 6 {
		t.Errorf("offset after CommitOffsets = %d, %v; want 6", off, ok)
	}
	c1.c.Commit(o1, 8)
	if err := c1.c.Close(timeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, ok := readOffset(t, cl.admin, o1); ok {
		t.Errorf("Close committed with auto-commit off")
	}
	if err := c1.c.CommitOffsets(timeout(t, 5*time.Second)); !errors.Is(err, zkconsumer.ErrClosed) {
		t.Errorf("CommitOffsets after Close = %v, want ErrClosed", err)
	}
}

// Without brokers the rebalance is "done" at once, touching nothing, and the consumer starts
// watching /brokers/ids (ZCC:640-647); a broker registering triggers the real rebalance.
func TestIntegration_NoBrokersWaitsForOne(t *testing.T) {
	cl := newCluster(t, 0, twoTopics)
	tr := newTracker()
	m := cl.start(tr, "c1")
	zktest.Eventually(t, 10*time.Second, "the first rebalance", func() bool { return m.c.Stats().Attempts >= 1 })
	time.Sleep(200 * time.Millisecond)
	tr.mu.Lock()
	assigns, revokes := tr.assigns["g_c1"], tr.revokes["g_c1"]
	tr.mu.Unlock()
	if assigns != 0 || revokes != 0 || len(m.c.Assignment()) != 0 {
		t.Errorf("without brokers: %d OnAssign, %d OnRevoke, assignment %v; want nothing", assigns, revokes, m.c.Assignment())
	}
	b := broker(1)
	if err := cl.admin.Create(timeout(t, 5*time.Second), zkstate.BrokerPath(1), b.Encode(), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	cl.waitConverged(10*time.Second, cl.expected(legacy.StrategyRange, m), m)
}

// Close during a rebalance waits for it (rebalanceLock), then stops and commits.
func TestIntegration_CloseWaitsForRebalance(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	foreign := zktest.OpenStore(t, cl.connect, withLogger(testLogger(t)))
	ctx := timeout(t, 30*time.Second)
	if err := foreign.Create(ctx, zkstate.OwnerPath(group, "orders", 0), []byte("g_gone-0"),
		zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var closing bool
	var afterClose []string
	m := cl.start(nil, "c1", func(c *zkconsumer.Config) {
		c.RebalanceMaxRetries = 4
		c.RebalanceBackoff = 300 * time.Millisecond
		c.Handler.OnRevoke = func() {
			mu.Lock()
			defer mu.Unlock()
			if closing {
				afterClose = append(afterClose, "revoke")
			}
		}
	})
	zktest.Eventually(t, 10*time.Second, "a conflicting attempt", func() bool { return m.c.Stats().Conflicts >= 1 })
	mu.Lock()
	closing = true
	mu.Unlock()
	start := time.Now()
	if err := m.c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	s := m.c.Stats()
	// The remaining attempts run (the flag is checked after reading offsets, which fails them
	// without a conflict), each with its backoff.
	if s.Attempts != 4 || took < 300*time.Millisecond {
		t.Errorf("Close took %v with stats %+v; want it to wait for all 4 attempts", took, s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(afterClose) == 0 {
		t.Errorf("no OnRevoke after Close began")
	}
	t.Logf("Close took %v, %d callbacks after it began", took.Round(time.Millisecond), len(afterClose))
}
