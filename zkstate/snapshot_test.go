package zkstate_test

import (
	"errors"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// TestExampleLayoutIsRangeAssignment re-derives ExampleLayout's owners with 0.8.2's range
// assignor (PartitionAssignor.scala, RangeAssignor): per topic, threads sorted as strings,
// partitions in numeric order, P/C each and the first P%C threads one more.
func TestExampleLayoutIsRangeAssignment(t *testing.T) {
	l := zkstate.ExampleLayout()
	if len(l.Groups) != 1 || len(l.Brokers) != 3 || len(l.Topics["orders"].Partitions) != 6 || len(l.Topics["payments"].Partitions) != 4 {
		t.Fatalf("ExampleLayout shape: %d groups, %d brokers, orders %d and payments %d partitions; want 1, 3, 6, 4",
			len(l.Groups), len(l.Brokers), len(l.Topics["orders"].Partitions), len(l.Topics["payments"].Partitions))
	}
	g := l.Groups[0]
	threads := map[string][]string{}
	for _, c := range g.Consumers {
		for topic, ids := range zkstate.ConsumerThreads(c.ID, c.Registration) {
			threads[topic] = append(threads[topic], ids...)
		}
	}
	want := map[zkstate.TopicPartition]string{}
	for topic, ts := range threads {
		sort.Strings(ts)
		parts := l.Topics[topic].PartitionIDs()
		per, extra := len(parts)/len(ts), len(parts)%len(ts)
		for i, thread := range ts {
			start := per*i + min(i, extra)
			n := per
			if i < extra {
				n++
			}
			for _, p := range parts[start : start+n] {
				want[zkstate.TopicPartition{Topic: topic, Partition: p}] = thread
			}
		}
	}
	if !maps.Equal(g.Owners, want) {
		t.Errorf("ExampleLayout owners = %v, want the range assignment %v", g.Owners, want)
	}
	if len(g.Offsets) != 10 {
		t.Errorf("ExampleLayout has %d offsets, want one per partition (10)", len(g.Offsets))
	}
	for tp := range want {
		if _, ok := l.States[tp]; !ok {
			t.Errorf("ExampleLayout has no partition state for %v", tp)
		}
	}
}

func TestIntegration_SnapshotOfExampleLayout(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 30*time.Second)
	l := zkstate.ExampleLayout()
	for i := 0; i < 2; i++ { // loading twice replaces the first load
		if err := zkstate.LoadLayout(ctx, s, l); err != nil {
			t.Fatalf("LoadLayout #%d = %v", i+1, err)
		}
	}
	snap, err := s.Snapshot(ctx, "billing")
	if err != nil {
		t.Fatalf("Snapshot(billing) = %v", err)
	}
	if len(snap.Consumers) != 2 {
		t.Errorf("Snapshot has %d consumers, want 2", len(snap.Consumers))
	}
	for _, c := range l.Groups[0].Consumers {
		got, ok := snap.Consumers[c.ID]
		if !ok || got.ID != c.ID || got.EphemeralOwner != 0 || got.Registration.Pattern != zkstate.PatternStatic ||
			!maps.Equal(got.Registration.Subscription, c.Registration.Subscription) ||
			got.Registration.TimestampMs != c.Registration.TimestampMs {
			t.Errorf("consumer %s = %+v, want %+v (persistent)", c.ID, got, c.Registration)
		}
	}
	if !maps.Equal(snap.Owners, l.Groups[0].Owners) {
		t.Errorf("Owners = %v, want %v", snap.Owners, l.Groups[0].Owners)
	}
	if !maps.Equal(snap.Offsets, l.Groups[0].Offsets) {
		t.Errorf("Offsets = %v, want %v", snap.Offsets, l.Groups[0].Offsets)
	}
	wantParts := map[string][]int32{"orders": {0, 1, 2, 3, 4, 5}, "payments": {0, 1, 2, 3}}
	if !maps.EqualFunc(snap.Partitions, wantParts, slices.Equal) {
		t.Errorf("Partitions = %v, want %v", snap.Partitions, wantParts)
	}
	if len(snap.MissingTopics) != 0 || len(snap.Problems) != 0 {
		t.Errorf("MissingTopics = %v, Problems = %v; want none", snap.MissingTopics, snap.Problems)
	}
	// 4 directory reads; 2 registrations and 2+2 topic directories; 10 owners, 10 offsets and
	// 2 assignments.
	// With multiRead each wave is one request.
	if snap.Stats.Waves != 3 || snap.Stats.Reads != 4+6+22 || snap.Stats.Requests != 3 {
		t.Errorf("Stats = %+v, want 3 waves, 32 znodes read, 3 requests", snap.Stats)
	}

	groups, err := s.Groups(ctx)
	if err != nil || !slices.Equal(groups, []string{"billing"}) {
		t.Errorf("Groups = %v, %v; want [billing]", groups, err)
	}
	brokers, problems, err := s.Brokers(ctx)
	if err != nil || len(problems) != 0 || len(brokers) != 3 {
		t.Fatalf("Brokers = %v, %v, %v; want 3 brokers", brokers, problems, err)
	}
	for i, b := range brokers {
		if b.ID != int32(i+1) || b.Host != l.Brokers[i].Host || b.Port != 9092 {
			t.Errorf("broker %d = %+v, want id %d on %s:9092", i, b, i+1, l.Brokers[i].Host)
		}
	}
	topics, problems, err := s.Topics(ctx)
	if err != nil || len(problems) != 0 || len(topics) != 2 ||
		!slices.Equal(topics["orders"].Partitions[2], l.Topics["orders"].Partitions[2]) {
		t.Errorf("Topics = %v, %v, %v; want orders and payments as loaded", topics, problems, err)
	}
	data, _, err := s.Get(ctx, zkstate.PartitionStatePath("orders", 2))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := zkstate.ParsePartitionState(data); err != nil || st.Leader != l.Topics["orders"].Partitions[2][0] {
		t.Errorf("state of orders/2 = %+v, %v; want the first replica as leader", st, err)
	}
}

// SnapshotOf reads only the parts asked for, and what it reads equals the full Snapshot's.
// Registrations and partitions are always read: every assignment needs them.
func TestIntegration_SnapshotOfParts(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 30*time.Second)
	l := zkstate.ExampleLayout()
	if err := zkstate.LoadLayout(ctx, s, l); err != nil {
		t.Fatal(err)
	}
	full, err := s.Snapshot(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	g := l.Groups[0]
	listed := map[zkstate.TopicPartition]bool{}
	for tp := range g.Owners {
		listed[tp] = true
	}
	for _, tc := range []struct {
		name    string
		parts   zkstate.SnapshotPart
		owners  map[zkstate.TopicPartition]string
		listed  map[zkstate.TopicPartition]bool
		offsets map[zkstate.TopicPartition]int64
		reads   int // directories, then registrations and topic directories, then znodes
	}{
		{"registrations", 0, nil, nil, nil, 2 + 2 + 2},
		{"owners", zkstate.WithOwners, g.Owners, listed, nil, 3 + 4 + 12},
		// The names only: the owners directories' children, in the same three waves.
		{"owner names", zkstate.WithOwnerNames, nil, listed, nil, 3 + 4 + 2},
		{"offsets", zkstate.WithOffsets, nil, nil, g.Offsets, 3 + 4 + 12},
		{"all", zkstate.WithOwners | zkstate.WithOffsets, g.Owners, listed, g.Offsets, 4 + 6 + 22},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, err := s.SnapshotOf(ctx, "billing", tc.parts)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(snap.Consumers, full.Consumers, func(a, b zkstate.Consumer) bool {
				return a.ID == b.ID && maps.Equal(a.Registration.Subscription, b.Registration.Subscription)
			}) {
				t.Errorf("Consumers = %v, want %v", snap.Consumers, full.Consumers)
			}
			if !maps.EqualFunc(snap.Partitions, full.Partitions, slices.Equal) {
				t.Errorf("Partitions = %v, want %v", snap.Partitions, full.Partitions)
			}
			if len(snap.Owners) != len(tc.owners) || !maps.Equal(snap.Owners, tc.owners) {
				t.Errorf("Owners = %v, want %v", snap.Owners, tc.owners)
			}
			if len(snap.Offsets) != len(tc.offsets) || !maps.Equal(snap.Offsets, tc.offsets) {
				t.Errorf("Offsets = %v, want %v", snap.Offsets, tc.offsets)
			}
			if !maps.Equal(snap.Listed, tc.listed) || (snap.Listed == nil) != (tc.listed == nil) {
				t.Errorf("Listed = %v, want %v", snap.Listed, tc.listed)
			}
			if snap.Stats.Reads != tc.reads {
				t.Errorf("%d znodes read, want %d", snap.Stats.Reads, tc.reads)
			}
			if snap.Stats.Waves != 3 || snap.Stats.Requests != 3 {
				t.Errorf("%d waves, %d requests; want 3 of each", snap.Stats.Waves, snap.Stats.Requests)
			}
		})
	}
}

func TestIntegration_SnapshotReportsMalformedZnodes(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 30*time.Second)
	if err := zkstate.LoadLayout(ctx, s, zkstate.ExampleLayout()); err != nil {
		t.Fatal(err)
	}
	const g = "billing"
	c2 := zkstate.ExampleConsumer2
	badReg := zkstate.IDPath(g, c2)
	badOffset := zkstate.OffsetPath(g, "orders", 3)
	badOwner := zkstate.OwnerPath(g, "orders", 5)
	badName := zkstate.OffsetsTopicPath(g, "orders") + "/x7"
	ghost := zkstate.OffsetPath(g, "ghost", 0)
	for _, w := range []struct {
		path string
		data string
	}{{badReg, `{"version":1,"subscription":`}, {badOffset, "12a"}, {badOwner, "not a thread"}} {
		if _, err := s.Set(ctx, w.path, []byte(w.data), -1); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{badName, ghost} {
		if err := s.Create(ctx, p, []byte("7"), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}

	snap, err := s.Snapshot(ctx, g)
	if err != nil {
		t.Fatalf("Snapshot with malformed znodes = %v, want the rest of the group", err)
	}
	var paths []string
	for _, p := range snap.Problems {
		paths = append(paths, p.Path)
		if !errors.Is(p.Err, zkstate.ErrMalformed) {
			t.Errorf("problem %s: %v does not wrap ErrMalformed", p.Path, p.Err)
		}
	}
	wantPaths := []string{badReg, badOffset, badName, badOwner}
	sort.Strings(wantPaths)
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("Problems at %v, want %v", paths, wantPaths)
	}
	if _, ok := snap.Consumers[c2]; ok || len(snap.Consumers) != 1 {
		t.Errorf("Consumers = %v, want only %s (the other registration is malformed)", snap.Consumers, zkstate.ExampleConsumer1)
	}
	if _, ok := snap.Offsets[zkstate.TopicPartition{Topic: "orders", Partition: 3}]; ok || len(snap.Offsets) != 10 {
		t.Errorf("Offsets = %v, want the 9 good ones of the example plus ghost/0", snap.Offsets)
	}
	if got := snap.Owners[zkstate.TopicPartition{Topic: "orders", Partition: 5}]; got != "not a thread" || len(snap.Owners) != 10 {
		t.Errorf("owner of orders/5 = %q (%d owners), want the raw value kept among 10", got, len(snap.Owners))
	}
	if !slices.Equal(snap.MissingTopics, []string{"ghost"}) {
		t.Errorf("MissingTopics = %v, want [ghost]", snap.MissingTopics)
	}
	if len(snap.Partitions["orders"]) != 6 {
		t.Errorf("Partitions[orders] = %v, want 6 partitions", snap.Partitions["orders"])
	}

	// A malformed topic assignment is a problem too, not an error.
	if _, err := s.Set(ctx, zkstate.TopicPath("payments"), []byte("[]"), -1); err != nil {
		t.Fatal(err)
	}
	snap, err = s.Snapshot(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Partitions["payments"]; ok || !slices.ContainsFunc(snap.Problems, func(p zkstate.Problem) bool {
		return p.Path == zkstate.TopicPath("payments")
	}) {
		t.Errorf("with a malformed assignment: Partitions = %v, Problems = %v; want payments reported", snap.Partitions, snap.Problems)
	}
}

func TestIntegration_SnapshotOfUnknownGroup(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	_, err := s.Snapshot(ctx, "nope")
	if !errors.Is(err, zkstate.ErrNoNode) || err.Error() != `zkstate: group "nope" not found` {
		t.Errorf("Snapshot(nope) = %v, want `zkstate: group \"nope\" not found` wrapping ErrNoNode", err)
	}
	if groups, err := s.Groups(ctx); err != nil || len(groups) != 0 {
		t.Errorf("Groups on an empty tree = %v, %v; want none", groups, err)
	}
	// A group with offsets only (no consumer alive) is a group.
	if err := s.Create(ctx, zkstate.OffsetPath("idle", "orders", 0), []byte("5"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx, "idle")
	if err != nil || len(snap.Consumers) != 0 || snap.Offsets[zkstate.TopicPartition{Topic: "orders"}] != 5 ||
		!slices.Equal(snap.MissingTopics, []string{"orders"}) {
		t.Errorf("Snapshot(idle) = %+v, %v; want offset 5 for orders/0, orders missing", snap, err)
	}
}

func TestIntegration_SnapshotResolvesWildcardSubscriptions(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	l := zkstate.ExampleLayout()
	l.Groups = []zkstate.LayoutGroup{{
		Name: "audit",
		Consumers: []zkstate.LayoutConsumer{{
			ID:           "audit_host9-1700000000000-0badcafe",
			Registration: zkstate.ConsumerRegistration{Version: 1, Pattern: zkstate.PatternWhiteList, Subscription: map[string]int{"pay.*": 1}},
			Ephemeral:    true,
		}},
	}}
	if err := zkstate.LoadLayout(ctx, s, l); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot(ctx, "audit")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Partitions["orders"]; ok || len(snap.Partitions["payments"]) != 4 {
		t.Errorf("Partitions = %v, want payments only (the filter is pay.*)", snap.Partitions)
	}
	for _, c := range snap.Consumers {
		if c.EphemeralOwner != s.SessionID() {
			t.Errorf("consumer %s EphemeralOwner = 0x%x, want our session 0x%x", c.ID, c.EphemeralOwner, s.SessionID())
		}
	}
	if snap.Stats.Waves != 4 {
		t.Errorf("Stats = %+v, want 4 waves (the topic list, then the matching topics)", snap.Stats)
	}
}

// An owner znode's data, the thread, does not say whose it is: one deleted and created again by
// another session with the same thread holds the same data. The snapshot carries each owner
// znode's ephemeral owner (read in the same requests), so that a caller deciding whether an owner
// znode is still its own compares sessions (DESIGN §4), with no read more.
func TestIntegration_SnapshotOwnerSessions(t *testing.T) {
	connect := zktest.Connect(t)
	ours, theirs := zktest.OpenStore(t, connect), zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	for _, w := range []struct {
		s    *zkstate.Store
		p    int32
		opts zkstate.CreateOptions
	}{{ours, 0, eph}, {theirs, 1, eph}, {ours, 2, zkstate.CreateOptions{Parents: true}}} {
		if err := w.s.Create(ctx, zkstate.OwnerPath("g", "t", w.p), []byte("c-0"), w.opts); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := ours.SnapshotOf(ctx, "g", zkstate.WithOwners)
	if err != nil {
		t.Fatal(err)
	}
	tp := func(p int32) zkstate.TopicPartition { return zkstate.TopicPartition{Topic: "t", Partition: p} }
	want := map[zkstate.TopicPartition]int64{tp(0): ours.SessionID(), tp(1): theirs.SessionID(), tp(2): 0}
	if !maps.Equal(snap.OwnerSessions, want) {
		t.Errorf("OwnerSessions = %v, want %v", snap.OwnerSessions, want)
	}
	if names, err := ours.SnapshotOf(ctx, "g", zkstate.WithOwnerNames); err != nil || len(names.OwnerSessions) != 0 {
		t.Errorf("OwnerSessions of the names only = %v (%v), want none", names.OwnerSessions, err)
	}
}
