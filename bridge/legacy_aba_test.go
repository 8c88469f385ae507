package bridge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// A legacy claim that waited for a foreign owner keeps what it read before the wait, and its
// Multi then deletes the owner znodes that move between its threads, checked against the
// version read. If one was deleted meanwhile (a 0.8.2 consumer deletes the owners it believes
// its own, ZCC:580-590) and created again by another session, at version 0 like ours, that
// delete would take the partition away from its new owner (the ABA of issue 14 item 2). So the
// read after the wait reads those owner znodes again, and the plan then waits for the new owner
// instead of deleting it.
func TestIntegration_LegacyClaimAfterAWaitLeavesARecreatedOwner(t *testing.T) {
	t.Parallel()
	ours, theirs, ctx := abaSessions(t)
	rd := abaReader(t, ours)

	// Our a-0 holds t/1, which moves to our b-0 (range over t/0..t/1, threads a-0 and b-0);
	// z, a zk member that left, still holds t/0, which is a-0's now: the claim waits.
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	moved, waited := zkstate.OwnerPath("g", "t", 1), zkstate.OwnerPath("g", "t", 0)
	if err := ours.MultiAtomic(ctx, zkstate.CreateOp(moved, []byte("a-0"), eph)); err != nil {
		t.Fatal(err)
	}
	if err := theirs.MultiAtomic(ctx, zkstate.CreateOp(waited, []byte("z-0"), eph)); err != nil {
		t.Fatal(err)
	}
	in := legacyPlanInput{Group: "g", Strategy: legacy.StrategyRange, Session: ours.SessionID(),
		Members: map[string]legacyMemberSpec{
			"a": {Subscription: legacySub("t"), Reset: legacy.ResetSmallest},
			"b": {Subscription: legacySub("t"), Reset: legacy.ResetSmallest},
		},
		Partitions: map[string][]int32{"t": {0, 1}},
		Owners: map[legacy.TopicPartition]legacyOwner{
			legacyTP("t", 0): {Thread: "z-0", Version: 0, Session: theirs.SessionID()},
			legacyTP("t", 1): {Thread: "a-0", Version: 0, Session: ours.SessionID()},
		},
		Committed: map[legacy.TopicPartition]int64{}, OffsetNodes: map[legacy.TopicPartition]bool{},
	}
	plan, err := legacyPlanRebalance(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Foreign, []legacy.TopicPartition{legacyTP("t", 0)}) || !slices.Equal(plan.Moving, []legacy.TopicPartition{legacyTP("t", 1)}) {
		t.Fatalf("plan: foreign %v, moving %v; want t-0 foreign and t-1 moving", plan.Foreign, plan.Moving)
	}
	view := legacyGroupView{session: ours.SessionID(), owners: in.Owners, committed: in.Committed, nodes: in.OffsetNodes,
		others: map[string]map[string]int{}}
	w := &legacyWaited{view: view, foreign: plan.Foreign, moving: plan.Moving}

	// While the claim waits, z lets t/0 go, and t/1 changes hands behind our back.
	for _, p := range []string{waited, moved} {
		if err := theirs.Delete(ctx, p, -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := theirs.MultiAtomic(ctx, zkstate.CreateOp(moved, []byte("y-0"), eph)); err != nil {
		t.Fatal(err)
	}

	plan = abaReplanAfterWait(ctx, t, rd, w, in, moved, "which another session created again")
	if !slices.Equal(plan.Foreign, []legacy.TopicPartition{legacyTP("t", 1)}) {
		t.Errorf("foreign after the wait %v, want [t-1]: its new owner must let go first", plan.Foreign)
	}
}

// A legacy claim that waited keeps the registrations it read before the wait. Meanwhile a
// Kafka member of the same bridge may register and its claim create an owner znode of a
// partition the legacy claim waits for, in the bridge's own session (the claimer serves both
// kinds on one goroutine, between the legacy claim's rounds). The read after the wait must not
// take that znode for one of ours because its consumer is not among the registrations it knows:
// deleting it (a move to our thread) takes the partition from the Kafka member, whose claim
// holds it without reading it again, so nothing creates it again once the legacy claim, restarted
// by the new registration, lets it go. (MixedBridgeKilled/cut: owner znodes ta/3 and tb/3 stayed
// missing after the Kafka claim of a new generation had created them.) It waits instead.
func TestIntegration_LegacyClaimAfterAWaitLeavesOurKafkaMembersOwner(t *testing.T) {
	t.Parallel()
	ours, theirs, ctx := abaSessions(t)
	rd := abaReader(t, ours)

	// Range over t/0..t/3, threads l-0 (ours) and z-0: l gets t/0 and t/1. z, a zk member,
	// still holds t/0: the claim waits. t/1 is held by d-0, a legacy member of ours that left:
	// the claim moves it to l-0 (our leftover, still ours after the wait).
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	waited, leftover := zkstate.OwnerPath("g", "t", 0), zkstate.OwnerPath("g", "t", 1)
	if err := theirs.MultiAtomic(ctx, zkstate.CreateOp(waited, []byte("z-0"), eph)); err != nil {
		t.Fatal(err)
	}
	if err := ours.MultiAtomic(ctx, zkstate.CreateOp(leftover, []byte("d-0"), eph)); err != nil {
		t.Fatal(err)
	}
	in := legacyPlanInput{Group: "g", Strategy: legacy.StrategyRange, Session: ours.SessionID(),
		Members:    map[string]legacyMemberSpec{"l": {Subscription: legacySub("t"), Reset: legacy.ResetSmallest}},
		Others:     map[string]map[string]int{"z": {"t": 1}},
		Partitions: map[string][]int32{"t": {0, 1, 2, 3}},
		Owners: map[legacy.TopicPartition]legacyOwner{
			legacyTP("t", 0): {Thread: "z-0", Version: -1, Session: -1},
			legacyTP("t", 1): {Thread: "d-0", Version: 0, Session: ours.SessionID()},
		},
		Committed: map[legacy.TopicPartition]int64{}, OffsetNodes: map[legacy.TopicPartition]bool{},
	}
	plan, err := legacyPlanRebalance(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Foreign, []legacy.TopicPartition{legacyTP("t", 0)}) || !slices.Equal(plan.Moving, []legacy.TopicPartition{legacyTP("t", 1)}) {
		t.Fatalf("plan: foreign %v, moving %v; want t-0 foreign and t-1 moving", plan.Foreign, plan.Moving)
	}
	view := legacyGroupView{session: ours.SessionID(), owners: in.Owners, committed: in.Committed, nodes: in.OffsetNodes,
		others: in.Others}
	w := legacyWaitedView(in, plan, view)

	// While the claim waits, z lets t/0 go and k, a Kafka member of ours that registered after
	// the claim's read, claims it in our session.
	if err := theirs.Delete(ctx, waited, -1); err != nil {
		t.Fatal(err)
	}
	if err := ours.MultiAtomic(ctx, zkstate.CreateOp(waited, []byte("k-0"), eph)); err != nil {
		t.Fatal(err)
	}

	plan = abaReplanAfterWait(ctx, t, rd, w, in, waited, "which our Kafka member's claim created meanwhile")
	if !slices.Equal(plan.Foreign, []legacy.TopicPartition{legacyTP("t", 0)}) {
		t.Errorf("foreign after the wait %v, want [t-0]: its new owner must let go first", plan.Foreign)
	}
	if !slices.Equal(plan.Moving, []legacy.TopicPartition{legacyTP("t", 1)}) {
		t.Errorf("moving after the wait %v, want [t-1]: our leftover, unchanged, is still ours", plan.Moving)
	}
}

// The read of a group reads the stat of every owner znode it cannot trust (here the owners of
// a member gone) in one request, however few: a Get each made the legacy members' checks and
// claims in BenchmarkMixedStabilize's mixed group read a departed member's ten owners in ten.
func TestIntegration_LegacyReadGroupChecksOwnersInOneRequest(t *testing.T) {
	t.Parallel()
	connect := legacyConnect(t)
	ours := legacyOpenStore(t, connect)
	defer ours.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rd := abaReader(t, ours)
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	var ops []zkstate.Op
	for p := range int32(5) {
		ops = append(ops, zkstate.CreateOp(zkstate.OwnerPath("g", "t", p), []byte("gone-0"), eph))
	}
	if err := ours.MultiAtomic(ctx, ops...); err != nil {
		t.Fatal(err)
	}
	before := ours.Requests()
	view, _, err := rd.readGroup(ctx, func(string) bool { return false }, nil, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	after := ours.Requests()
	if gets := after[zkstate.ReqGet] - before[zkstate.ReqGet]; gets != 0 {
		t.Errorf("the read of the group sent %d Gets for 5 owner znodes to check, want none (one multiRead)", gets)
	}
	if len(view.owners) != 5 {
		t.Fatalf("owners read %v, want t-0..t-4", view.owners)
	}
	for tp, o := range view.owners {
		if o.Thread != "gone-0" || o.Session != ours.SessionID() || o.Version != 0 {
			t.Errorf("%v: %+v, want gone-0 of our session 0x%x at version 0", tp, o, ours.SessionID())
		}
	}
}

// A claim that waited reads what it waited for again (owner and offset of each foreign
// partition, our owners moving between our threads) in one request, however few, where it sent
// a Get each: two requests per partition waited for, on every round of a wait.
func TestIntegration_LegacyClaimRefreshesWhatItWaitedForInOneRequest(t *testing.T) {
	t.Parallel()
	ours, theirs, ctx := abaSessions(t)
	rd := abaReader(t, ours)
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	view := legacyGroupView{session: ours.SessionID(), owners: map[legacy.TopicPartition]legacyOwner{},
		committed: map[legacy.TopicPartition]int64{}, nodes: map[legacy.TopicPartition]bool{}, others: map[string]map[string]int{}}
	var foreign []legacy.TopicPartition
	for p := range int32(3) {
		tp := legacyTP("t", p)
		foreign = append(foreign, tp)
		view.owners[tp] = legacyOwner{Thread: "z-0", Version: 0, Session: theirs.SessionID()}
		if err := theirs.Create(ctx, zkstate.OffsetPath("g", "t", p), []byte(fmt.Sprint(10+p)), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := theirs.MultiAtomic(ctx, zkstate.CreateOp(zkstate.OwnerPath("g", "t", 2), []byte("z-0"), eph)); err != nil {
		t.Fatal(err)
	}
	before := ours.Requests()
	v, err := rd.refreshWaited(ctx, &legacyWaited{view: view, foreign: foreign})
	if err != nil {
		t.Fatal(err)
	}
	after := ours.Requests()
	if gets := after[zkstate.ReqGet] - before[zkstate.ReqGet]; gets != 0 {
		t.Errorf("the read after the wait sent %d Gets for 3 owners and 3 offsets, want none (one multiRead)", gets)
	}
	for p := range int32(3) {
		tp := legacyTP("t", p)
		o, held := v.owners[tp]
		if held != (p == 2) || v.committed[tp] != int64(10+p) {
			t.Errorf("%v after the wait: owner %+v (held %v), offset %d; want held only t-2, offset %d", tp, o, held, v.committed[tp], 10+p)
		}
	}
}

// abaSessions opens two sessions of a fresh chroot, the bridge's (ours) and another that
// re-creates what ours deletes (theirs), closed at the test's end, and a context bounding the
// test's own calls.
func abaSessions(t *testing.T) (ours, theirs *zkstate.Store, ctx context.Context) {
	connect := legacyConnect(t)
	ours, theirs = legacyOpenStore(t, connect), legacyOpenStore(t, connect)
	t.Cleanup(func() { ours.Close(); theirs.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ours, theirs, ctx
}

// abaReader is the legacy side's reader of group "g" on the store ours, as a claim uses it.
func abaReader(t *testing.T, ours *zkstate.Store) legacyReader {
	c, err := NewLegacyCoordinator(LegacyConfig{Store: ours, Logger: legacyTestLogger(t), AdvertisedHost: "127.0.0.1", AdvertisedPort: 1})
	if err != nil {
		t.Fatal(err)
	}
	return legacyReader{c: c, name: "g", log: legacyTestLogger(t), n: &legacyZKCount{}}
}

// abaReplanAfterWait is a waited claim's next round: the read after the wait, then the plan over
// it, which must not delete kept (a znode created again since the first read, as why says).
func abaReplanAfterWait(ctx context.Context, t *testing.T, rd legacyReader, w *legacyWaited, in legacyPlanInput, kept, why string) legacyPlan {
	t.Helper()
	v, err := rd.refreshWaited(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	in.Owners = v.owners
	plan, err := legacyPlanRebalance(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range legacyOpStrings(slices.Concat(plan.Ops, plan.Release)) {
		if strings.HasPrefix(op, "delete "+kept) {
			t.Errorf("the claim after the wait deletes %s, %s: %s", kept, why, op)
		}
	}
	return plan
}
