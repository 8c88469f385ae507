package bridge

// Integration tests of a group that holds legacy members and zk members at once (issue 5 items
// 3-5, "federated 0.8": legacy_plan.go): a real ZooKeeper, the legacy coordinator with real
// legacy.Clients, and zkconsumer.Consumers — the in-project double of Kafka 0.8.2's
// ZookeeperConsumerConnector, which computes its own share with the 0.8.2 assignor over every
// registration in /consumers/<g>/ids.
//
// A tracker plays the application of every member, of both kinds: it knows which partitions each
// one consumes (legacy: from OnStart to OnStop; zk: from OnAssign to OnRevoke) and flags a
// partition handed to one member while another still consumes it. The waits poll the same
// views, and check at every poll that they are disjoint.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
)

// legacyMixedTracker records what every member of the group consumes.
type legacyMixedTracker struct {
	mu         sync.Mutex
	consuming  map[string]map[legacy.TopicPartition]bool // member → partitions it consumes now
	revokes    map[string][]time.Time                    // zk member → times of its OnRevoke
	violations []string
}

func newLegacyMixedTracker() *legacyMixedTracker {
	return &legacyMixedTracker{consuming: map[string]map[legacy.TopicPartition]bool{}, revokes: map[string][]time.Time{}}
}

// take records that member starts consuming tps (its whole part), flagging every partition
// another member consumes at this instant.
func (tr *legacyMixedTracker) take(member string, tps []legacy.TopicPartition) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	set := map[legacy.TopicPartition]bool{}
	for _, tp := range tps {
		set[tp] = true
		for other, parts := range tr.consuming {
			if other != member && parts[tp] {
				tr.violations = append(tr.violations, fmt.Sprintf("%s handed to %s while %s consumes it", tp, member, other))
			}
		}
	}
	tr.consuming[member] = set
}

func (tr *legacyMixedTracker) release(member string, zk bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.consuming, member)
	if zk {
		tr.revokes[member] = append(tr.revokes[member], time.Now())
	}
}

// disjoint is the invariant checked at every poll: no partition in two members' views.
func (tr *legacyMixedTracker) disjoint() (bool, string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	seen := map[legacy.TopicPartition]string{}
	for m, parts := range tr.consuming {
		for tp := range parts {
			if other, dup := seen[tp]; dup {
				return false, fmt.Sprintf("%s consumed by %s and %s", tp, other, m)
			}
			seen[tp] = m
		}
	}
	return true, ""
}

func (tr *legacyMixedTracker) view(member string) map[legacy.TopicPartition]bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.consuming[member])
}

// firstRevokeAfter is the first OnRevoke of a zk member after t.
func (tr *legacyMixedTracker) firstRevokeAfter(member string, t time.Time) (time.Time, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, r := range tr.revokes[member] {
		if r.After(t) {
			return r, true
		}
	}
	return time.Time{}, false
}

func (tr *legacyMixedTracker) checkNoViolations(t testing.TB) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, v := range tr.violations {
		t.Errorf("double consumption: %s", v)
	}
}

func (tr *legacyMixedTracker) legacyOpts(o legacyConsumerOpts) legacyConsumerOpts {
	o.onStart = func(id string, parts []legacy.PartitionOffset) {
		tps := make([]legacy.TopicPartition, len(parts))
		for i, p := range parts {
			tps[i] = legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		}
		tr.take(id, tps)
	}
	o.onStop = func(id string) { tr.release(id, false) }
	return o
}

// legacyMixedZK is a running zk member.
type legacyMixedZK struct {
	id   string
	sub  map[string]int
	c    *zkconsumer.Consumer
	stop func() // closes the consumer and waits for Run; idempotent

	mu      sync.Mutex
	assigns []map[legacy.TopicPartition]int64
}

func (z *legacyMixedZK) lastAssign() map[legacy.TopicPartition]int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	if len(z.assigns) == 0 {
		return nil
	}
	return z.assigns[len(z.assigns)-1]
}

// legacyStartZK runs a zk member of group with consumer id <group>_<name> (0.8.2 prefixes the
// configured consumer.id with the group, ZCC:111-123).
func legacyStartZK(t testing.TB, connect, group, name string, sub map[string]int, tr *legacyMixedTracker) *legacyMixedZK {
	t.Helper()
	z := &legacyMixedZK{id: group + "_" + name, sub: sub}
	cfg := zkconsumer.Config{
		Connect:      connect,
		GroupID:      group,
		ConsumerID:   name,
		Subscription: sub,
		// 0.8.2's defaults are 4 attempts 2 s apart; fewer seconds keep the test short, and
		// more attempts let a member wait for a legacy member's Stop without giving up.
		RebalanceBackoff:    50 * time.Millisecond,
		RebalanceMaxRetries: 100,
		AutoOffsetReset:     zkconsumer.OffsetResetSmallest,
		Logger:              legacyTestLogger(t).Level(zerolog.WarnLevel).With().Str("zk_member", name).Logger(),
		Handler: zkconsumer.Handler{
			OnAssign: func(offsets map[zkstate.TopicPartition]int64) {
				got := map[legacy.TopicPartition]int64{}
				var tps []legacy.TopicPartition
				for tp, off := range offsets {
					got[legacy.TopicPartition(tp)] = off
					tps = append(tps, legacy.TopicPartition(tp))
				}
				if tr != nil {
					tr.take(z.id, tps)
				}
				z.mu.Lock()
				z.assigns = append(z.assigns, got)
				z.mu.Unlock()
			},
			OnRevoke: func() {
				if tr != nil {
					tr.release(z.id, true)
				}
			},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := zkconsumer.New(ctx, cfg)
	if err != nil {
		t.Fatalf("zk member %s: %v", name, err)
	}
	z.c = c
	runCtx, stopRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	var once sync.Once
	// stop is the consumer's shutdown (ZCC:184-216): it stops fetching, commits, and closes its
	// session, which deletes its registration and owners.
	z.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c.Close(ctx); err != nil {
				t.Errorf("zk member %s: Close: %v", name, err)
			}
			stopRun()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, zkconsumer.ErrClosed) {
				t.Errorf("zk member %s: Run: %v", name, err)
			}
		})
	}
	t.Cleanup(func() {
		stopRun() // cuts a rebalance in progress short; Close alone waits for its attempts
		z.stop()
	})
	return z
}

// legacyMixedLayout writes a broker (zk members rebalance only with one registered, ZCC:640-647)
// and the topics, topic → partition count; it returns topic → partition ids.
func legacyMixedLayout(t testing.TB, s *zkstate.Store, topics map[string]int) map[string][]int32 {
	t.Helper()
	l := zkstate.Layout{
		Brokers: []zkstate.BrokerRegistration{{ID: 1, Version: 1, Host: "broker1", Port: 9092, JMXPort: -1, Timestamp: "1700000000000"}},
		Topics:  map[string]zkstate.TopicAssignment{},
	}
	parts := map[string][]int32{}
	for topic, n := range topics {
		a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
		for p := range n {
			a.Partitions[int32(p)] = []int32{1}
			parts[topic] = append(parts[topic], int32(p))
		}
		l.Topics[topic] = a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, s, l); err != nil {
		t.Fatal(err)
	}
	return parts
}

// legacyMixedMember is one member of the group as the expected assignment counts it.
type legacyMixedMember struct {
	id  string
	sub map[string]int
	// its own view: what it consumes now (tracker), and what it believes it owns
	lg *legacyTestConsumer
	zk *legacyMixedZK
}

func (m legacyMixedMember) kind() string {
	if m.zk != nil {
		return zkstate.KindZK
	}
	return zkstate.KindLegacy
}

// legacyMixedExpected is the 0.8.2 range assignment over every member's threads: the answer each
// zk member computes on its own.
func legacyMixedExpected(members []legacyMixedMember, partitions map[string][]int32) legacy.Assignment {
	in := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: partitions}
	for _, m := range members {
		sub := legacy.Subscription{}
		for topic, n := range m.sub {
			sub[topic] = legacy.ThreadIDs(m.id, n)
		}
		in.Consumers[m.id] = sub
	}
	return legacy.Range(in)
}

// legacyMixedWait waits until the group settled on the 0.8.2 range assignment of members: the
// owners in ZooKeeper are exactly it (complete, since every partition of every topic is
// subscribed, and disjoint), every legacy member fetches its share from its last Start, every zk
// member owns and consumes its share. At every poll the members' views must be disjoint. It
// returns how long it took.
func legacyMixedWait(t testing.TB, s *zkstate.Store, group string, members []legacyMixedMember,
	partitions map[string][]int32, tr *legacyMixedTracker) time.Duration {
	t.Helper()
	start := time.Now()
	want := legacyMixedExpected(members, partitions)
	total := 0
	for _, ps := range partitions {
		total += len(ps)
	}
	if len(want) != total {
		t.Fatalf("the expected assignment covers %d partitions of %d: not complete", len(want), total)
	}
	legacyEventually(t, "the mixed group settles on the 0.8.2 range assignment", func() (bool, string) {
		if ok, detail := tr.disjoint(); !ok {
			t.Fatalf("invariant broken at a poll: %s", detail)
		}
		if got := legacyOwnersInZK(t, s, group); !maps.Equal(got, want) {
			return false, fmt.Sprintf("owners in ZooKeeper %v, want %v", got, want)
		}
		shares := want.ByConsumer()
		for _, m := range members {
			share := shares[m.id]
			view := tr.view(m.id)
			if len(view) != len(share) {
				return false, fmt.Sprintf("%s member %s consumes %v, its share is %v", m.kind(), m.id, view, share)
			}
			for _, tp := range share {
				if !view[tp] {
					return false, fmt.Sprintf("%s member %s consumes %v, its share is %v", m.kind(), m.id, view, share)
				}
			}
			switch {
			case m.lg != nil:
				parts, fetching, _ := m.lg.lastStart()
				if !fetching || len(parts) != len(share) {
					return false, fmt.Sprintf("legacy member %s started on %v (fetching %v), its share is %v", m.id, parts, fetching, share)
				}
				for i, p := range parts {
					if (legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}) != share[i] {
						return false, fmt.Sprintf("legacy member %s started on %v, its share is %v", m.id, parts, share)
					}
				}
			case m.zk != nil:
				owned := m.zk.c.Assignment()
				if len(owned) != len(share) {
					return false, fmt.Sprintf("zk member %s owns %v, its share is %v", m.id, owned, share)
				}
				for _, tp := range share {
					if owned[zkstate.TopicPartition(tp)] != want[tp] {
						return false, fmt.Sprintf("zk member %s owns %v, its share is %v", m.id, owned, share)
					}
				}
			}
		}
		return true, ""
	})
	return time.Since(start)
}

// legacyIDsRecorder records the times at which the children of /consumers/<g>/ids changed, as
// a watch of its own sees them.
type legacyIDsRecorder struct {
	mu     sync.Mutex
	events []time.Time
}

func legacyRecordIDs(t testing.TB, s *zkstate.Store, group string) *legacyIDsRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.WatchChildren(ctx, zkstate.IDsPath(group))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &legacyIDsRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range ch {
			if ev.Type != zkstate.Initial {
				r.mu.Lock()
				r.events = append(r.events, time.Now())
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// firstAfter is the first change seen after t.
func (r *legacyIDsRecorder) firstAfter(t time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.After(t) {
			return e, true
		}
	}
	return time.Time{}, false
}

// legacyNoticeWindow is, for each zk member of zks, the time from the first change of
// /consumers/<g>/ids after since to the member's first OnRevoke after it: how long a zk member
// keeps consuming partitions it may have lost before it notices the change. The measure of issue
// 5 ("the window in which a zk member has not yet noticed it lost a partition").
func legacyNoticeWindow(t testing.TB, ids *legacyIDsRecorder, tr *legacyMixedTracker, since time.Time, zks ...*legacyMixedZK) []time.Duration {
	t.Helper()
	change, ok := ids.firstAfter(since)
	if !ok {
		t.Fatalf("no change of /ids seen after %v", since.Format("15:04:05.000"))
	}
	var out []time.Duration
	for _, z := range zks {
		// Looked for from since, not from change: the test's own watch is one more ZooKeeper
		// client, and under load it may hear of the change after the zk member has already
		// stopped its fetchers for it.
		r, ok := tr.firstRevokeAfter(z.id, since)
		if !ok {
			t.Errorf("zk member %s did not stop its fetchers after the change of /ids", z.id)
			continue
		}
		if r.Before(change) {
			t.Logf("zk member %s stopped its fetchers %v before the test's watch heard of the change of /ids; not measured",
				z.id, change.Sub(r).Round(time.Microsecond))
			continue
		}
		out = append(out, r.Sub(change))
	}
	return out
}

func legacyHostedOf(t testing.TB, s *zkstate.Store, group, id string) (zkstate.HostedMember, zkstate.Stat, bool) {
	t.Helper()
	data, st, err := s.Get(context.Background(), zkstate.HostedMemberPath(DefaultRoot, group, id))
	if err != nil {
		return zkstate.HostedMember{}, st, false
	}
	h, err := zkstate.ParseHostedMember(data)
	if err != nil {
		t.Fatalf("hosted znode of %s: %v", id, err)
	}
	return h, st, true
}

// TestIntegration_LegacyMixedGroup: issue 5 items 3-4 for two of the three kinds — a group in
// legacy mode with 2 legacy members and 2 zk members over 3 topics and 20 partitions converges
// to one assignment, the 0.8.2 range result over all four members' threads, which each zk member
// computes on its own and the legacy coordinator for its two members; then again after a zk
// member stops, after it comes back, and after a legacy member stops. No partition is ever
// consumed by two members at once, and the time a zk member takes to notice a change of
// /consumers/<g>/ids is measured and logged.
func TestIntegration_LegacyMixedGroup(t *testing.T) {
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	partitions := legacyMixedLayout(t, store, map[string]int{"alpha": 7, "beta": 5, "gamma": 8})
	env := legacyStart(t, store, "", nil)
	const group = "mix"
	ids := legacyRecordIDs(t, store, group)
	tr := newLegacyMixedTracker()
	o := tr.legacyOpts(legacyConsumerOpts{autoCommit: true, reset: legacy.ResetSmallest, quiet: true})

	// Consumer ids interleave the kinds in string order (mix_a < mix_b < mix_c < mix_d), and
	// the subscriptions differ, so that range gives every kind runs in the middle of topics.
	subA := map[string]int{"alpha": 2, "beta": 1, "gamma": 1}
	subB := map[string]int{"alpha": 1, "beta": 1, "gamma": 1}
	subC := map[string]int{"alpha": 1, "gamma": 2}
	subD := map[string]int{"beta": 2, "gamma": 1}
	a := legacyRunConsumer(t, env.addr, group, "mix_a", subA, o)
	b := legacyStartZK(t, connect, group, "b", subB, tr)
	c := legacyRunConsumer(t, env.addr, group, "mix_c", subC, o)
	d := legacyStartZK(t, connect, group, "d", subD, tr)
	ma := legacyMixedMember{id: a.id, sub: subA, lg: a}
	mb := legacyMixedMember{id: b.id, sub: subB, zk: b}
	mc := legacyMixedMember{id: c.id, sub: subC, lg: c}
	md := legacyMixedMember{id: d.id, sub: subD, zk: d}

	took := legacyMixedWait(t, store, group, []legacyMixedMember{ma, mb, mc, md}, partitions, tr)
	t.Logf("4 members (2 legacy, 2 zk) started together: converged in %v", took.Round(time.Millisecond))

	// The legacy members' registrations are the bridge's: a hosted-member znode beside each,
	// an ephemeral of the same session; the zk members' have none (zkstate/hosted.go).
	for _, m := range []*legacyTestConsumer{a, c} {
		h, st, ok := legacyHostedOf(t, store, group, m.id)
		if !ok || h != (zkstate.HostedMember{Kind: zkstate.KindLegacy, Node: 1, Member: m.id}) || st.EphemeralOwner != store.SessionID() {
			t.Errorf("hosted znode of %s: %+v (exists %v, session 0x%x), want kind legacy, node 1, ephemeral of 0x%x",
				m.id, h, ok, st.EphemeralOwner, store.SessionID())
		}
	}
	for _, z := range []*legacyMixedZK{b, d} {
		if _, _, ok := legacyHostedOf(t, store, group, z.id); ok {
			t.Errorf("zk member %s has a hosted znode", z.id)
		}
	}

	var windows []time.Duration
	// A zk member stops: its session closes, with its registration and owners.
	since := time.Now()
	d.stop()
	took = legacyMixedWait(t, store, group, []legacyMixedMember{ma, mb, mc}, partitions, tr)
	windows = append(windows, legacyNoticeWindow(t, ids, tr, since, b)...)
	t.Logf("zk member %s stopped: converged in %v", d.id, took.Round(time.Millisecond))

	// It comes back (a new process, the same consumer id).
	since = time.Now()
	d = legacyStartZK(t, connect, group, "d", subD, tr)
	md.zk = d
	took = legacyMixedWait(t, store, group, []legacyMixedMember{ma, mb, mc, md}, partitions, tr)
	windows = append(windows, legacyNoticeWindow(t, ids, tr, since, b)...)
	t.Logf("zk member %s back: converged in %v", d.id, took.Round(time.Millisecond))

	// A legacy member stops: the coordinator removes it, deletes its registration and its
	// hosted znode, and the others (of both kinds) take its partitions.
	since = time.Now()
	a.stop()
	took = legacyMixedWait(t, store, group, []legacyMixedMember{mb, mc, md}, partitions, tr)
	windows = append(windows, legacyNoticeWindow(t, ids, tr, since, b, d)...)
	t.Logf("legacy member %s stopped: converged in %v", a.id, took.Round(time.Millisecond))
	if _, _, ok := legacyHostedOf(t, store, group, a.id); ok {
		t.Errorf("the hosted znode of the removed legacy member %s is still there", a.id)
	}

	tr.checkNoViolations(t)
	slices.Sort(windows)
	var sum time.Duration
	for _, w := range windows {
		sum += w
	}
	if len(windows) > 0 {
		t.Logf("window from a change of /ids to a zk member stopping its fetchers (n=%d): min %v, median %v, mean %v, max %v",
			len(windows), windows[0].Round(time.Microsecond), windows[len(windows)/2].Round(time.Microsecond),
			(sum / time.Duration(len(windows))).Round(time.Microsecond), windows[len(windows)-1].Round(time.Microsecond))
	}
	if st := env.coord.Stats(); st.Members != 1 {
		t.Errorf("coordinator has %d members, want 1", st.Members)
	}
}

// TestIntegration_LegacyMixedOffsetsMove: issue 5 item 5 between a zk member and a legacy member —
// a partition moving from one kind to the other resumes at the offset its previous owner
// committed: the zk member's own write to /consumers/<g>/offsets (ZCC:289-306) starts the legacy
// member (StartRequest offset); the legacy member's offsets, reported in PingResponses and written
// by the coordinator, start the zk member (OnAssign, read by ZCC:382-396 after the legacy
// member's owner znode is gone).
func TestIntegration_LegacyMixedOffsetsMove(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	partitions := legacyMixedLayout(t, store, map[string]int{"t": 4})
	env := legacyStart(t, store, "", nil)
	const group = "off"
	tr := newLegacyMixedTracker()
	tp := func(p int32) legacy.TopicPartition { return legacy.TopicPartition{Topic: "t", Partition: p} }

	// The zk member alone owns t-0..3 and commits t-0 and t-1 itself.
	sub := map[string]int{"t": 1}
	z := legacyStartZK(t, connect, group, "z", sub, tr)
	mz := legacyMixedMember{id: z.id, sub: sub, zk: z}
	legacyMixedWait(t, store, group, []legacyMixedMember{mz}, partitions, tr)
	committed := map[legacy.TopicPartition]int64{tp(0): 500, tp(1): 510}
	for p, off := range committed {
		if !z.c.Commit(zkstate.TopicPartition(p), off) {
			t.Fatalf("zk member does not own %v", p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := z.c.CommitOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	// A legacy member joins: range over off_a-0 < off_z-0 gives it t-0 and t-1, which start at
	// the zk member's commits.
	o := tr.legacyOpts(legacyConsumerOpts{autoCommit: true, reset: legacy.ResetSmallest, step: 7, quiet: true})
	a := legacyRunConsumer(t, env.addr, group, "off_a", sub, o)
	ma := legacyMixedMember{id: a.id, sub: sub, lg: a}
	legacyMixedWait(t, store, group, []legacyMixedMember{ma, mz}, partitions, tr)
	parts, _, _ := a.lastStart()
	for _, p := range parts {
		if want := committed[tp(p.Partition)]; p.Offset != want {
			t.Errorf("legacy member starts %s-%d at %d, want the zk member's commit %d", p.Topic, p.Partition, p.Offset, want)
		}
	}

	// The legacy member consumes (commits step by step, reported in its pings), then stops
	// consuming; once its last offsets are in ZooKeeper, it leaves, and the zk member takes
	// its partitions back from them.
	legacyEventually(t, "the legacy member commits", func() (bool, string) {
		got := a.committed()
		return got[tp(0)] > 500+7*3 && got[tp(1)] > 510+7*3, fmt.Sprint(got)
	})
	a.paused.Store(true)
	var last map[legacy.TopicPartition]int64
	legacyEventually(t, "the legacy member's last offsets in ZooKeeper", func() (bool, string) {
		last = a.committed()
		inZK := legacyOffsetsInZK(t, store, group)
		return inZK[tp(0)] == last[tp(0)] && inZK[tp(1)] == last[tp(1)], fmt.Sprintf("committed %v, ZooKeeper %v", last, inZK)
	})
	a.stop()
	legacyMixedWait(t, store, group, []legacyMixedMember{mz}, partitions, tr)
	got := z.lastAssign()
	for _, p := range []legacy.TopicPartition{tp(0), tp(1)} {
		if got[p] != last[p] {
			t.Errorf("zk member resumes %v at %d, want the legacy member's last offset %d (assigned %v)", p, got[p], last[p], got)
		}
	}
	tr.checkNoViolations(t)
}

// TestIntegration_LegacyMixedRegistrationChangesInPlace: the assignment depends on the other
// members' subscriptions, and a registration can be rewritten in place (no change of /ids's
// children): the coordinator watches the others' registrations and rebalances its members when
// one changes. A registration that cannot be read is left out of the assignment and logged.
func TestIntegration_LegacyMixedRegistrationChangesInPlace(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	legacyMixedLayout(t, store, map[string]int{"t": 4, "u": 2})
	env := legacyStart(t, store, "", nil)
	const group = "inplace"
	a := legacyRunConsumer(t, env.addr, group, "inplace_a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})

	// Another member, registered by hand in another session (as a member of another
	// coordinator would be), subscribes to u only: a owns all of t.
	other := legacyOpenStore(t, connect)
	t.Cleanup(func() { other.Close() })
	reg := func(sub map[string]int) []byte {
		return zkstate.ConsumerRegistration{Version: 1, Pattern: zkstate.PatternStatic, Subscription: sub, TimestampMs: 1700000000000}.Encode()
	}
	if err := other.Create(context.Background(), zkstate.IDPath(group, "inplace_x"), reg(map[string]int{"u": 1}),
		zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	waitPart := func(want ...int32) {
		t.Helper()
		legacyEventually(t, fmt.Sprintf("a runs t%v", want), func() (bool, string) {
			parts, fetching, _ := a.lastStart()
			var got []int32
			for _, p := range parts {
				got = append(got, p.Partition)
			}
			sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
			return fetching && slices.Equal(got, want), fmt.Sprintf("started on %v (fetching %v)", parts, fetching)
		})
	}
	waitPart(0, 1, 2, 3)

	// x's subscription is rewritten in place to t as well: range over inplace_a-0 <
	// inplace_x-0 leaves a with t-0 and t-1, and our owners of t-2 and t-3 are released.
	if _, err := other.Set(context.Background(), zkstate.IDPath(group, "inplace_x"), reg(map[string]int{"t": 1}), -1); err != nil {
		t.Fatal(err)
	}
	waitPart(0, 1)
	legacyEventually(t, "our owners of x's partitions released", func() (bool, string) {
		got := legacyOwnersInZK(t, store, group)
		want := legacy.Assignment{{Topic: "t", Partition: 0}: "inplace_a-0", {Topic: "t", Partition: 1}: "inplace_a-0"}
		return maps.Equal(got, want), fmt.Sprint(got)
	})

	// Garbage in place: x cannot be read and is left out, a gets all of t back.
	if _, err := other.Set(context.Background(), zkstate.IDPath(group, "inplace_x"), []byte(`{"version":1,"subscription":`), -1); err != nil {
		t.Fatal(err)
	}
	waitPart(0, 1, 2, 3)
}

// TestIntegration_LegacyTwoCoordinatorsSwap: two legacy coordinators (two bridges, two ZooKeeper
// sessions) host members of one group, each behaving toward ZooKeeper as the 0.8 consumers it
// hosts. A member joining the second one makes them swap: the first must give t-0 and t-1 to
// the newcomer and take t-2 from the second's member. Each lets go of what is no longer its own
// before it waits for what it must claim (legacyPlan.Release, as ZCC:657 releases before
// ZCC:684 claims) — holding on while waiting would leave both waiting for ever.
func TestIntegration_LegacyTwoCoordinatorsSwap(t *testing.T) {
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store1 := legacyOpenStore(t, connect)
	t.Cleanup(func() { store1.Close() })
	store2 := legacyOpenStore(t, connect)
	t.Cleanup(func() { store2.Close() })
	partitions := legacyMixedLayout(t, store1, map[string]int{"t": 4})
	env1 := legacyStart(t, store1, "", nil)
	env2 := legacyStart(t, store2, "", func(c *LegacyConfig) { c.NodeID = 2 })
	const group = "swap"
	tr := newLegacyMixedTracker()
	o := tr.legacyOpts(legacyConsumerOpts{autoCommit: true, quiet: true})
	sub := map[string]int{"t": 1}

	// b on the first bridge, c on the second: b-0 {0,1}, c-0 {2,3}.
	b := legacyRunConsumer(t, env1.addr, group, "swap_b", sub, o)
	c := legacyRunConsumer(t, env2.addr, group, "swap_c", sub, o)
	mb := legacyMixedMember{id: b.id, sub: sub, lg: b}
	mc := legacyMixedMember{id: c.id, sub: sub, lg: c}
	legacyMixedWait(t, store1, group, []legacyMixedMember{mb, mc}, partitions, tr)
	if h, _, ok := legacyHostedOf(t, store1, group, c.id); !ok || h.Node != 2 {
		t.Errorf("hosted znode of %s: %+v (exists %v), want node 2", c.id, h, ok)
	}

	// a on the second bridge: a-0 {0,1}, b-0 {2}, c-0 {3}.
	a := legacyRunConsumer(t, env2.addr, group, "swap_a", sub, o)
	ma := legacyMixedMember{id: a.id, sub: sub, lg: a}
	took := legacyMixedWait(t, store1, group, []legacyMixedMember{ma, mb, mc}, partitions, tr)
	t.Logf("swap between two coordinators settled in %v", took.Round(time.Millisecond))
	tr.checkNoViolations(t)
}
