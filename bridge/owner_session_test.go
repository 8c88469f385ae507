package bridge

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// An owner znode is the bridge's only while its session holds it (DESIGN §4): its data, the
// thread, does not say whose it is. One deleted behind the bridge's back and created again by
// another session with the very thread the bridge wrote — a consumer restarted under the same
// consumer id, the next owner of the group adopting the bridge's znodes (mixed_adopt.go) — holds
// the same data. A claim round of a mixed group's Kafka members that reads the owners took it
// for one it still held: the claim completed without creating it, the Kafka member was given the
// partition while another session's znode owned it (when that session ends, the partition looks
// free to every zk member while the Kafka member consumes it, and nothing creates it again), and
// a later release without zk members in the group (one unchecked Multi) deleted the other
// session's znode. The round must wait for it as for any foreign owner.
func TestIntegration_MixedClaimWaitsForAnOwnerAnotherSessionMadeAgain(t *testing.T) {
	t.Parallel()
	ours, theirs, ctx := abaSessions(t)
	legacySetTopic(t, ours, "t", 2)
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// A claimer without its goroutine: the test runs the rounds.
	cl := &claimer{store: ours, group: "g", log: zerolog.Nop(), metrics: m, backoff: claimBackoff, backoffMax: claimBackoffMax,
		kafka: kafkaPart{held: mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}, unsure: map[string][]byte{}}}
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}.Encode()
	c := &claim{done: make(chan struct{}), gen: 1, ids: map[string][]byte{zkstate.IDPath("g", "k"): reg},
		in: mixedInput{Group: "g", Strategy: legacy.StrategyRange, Members: []mixedMember{{ID: group.MemberID("m"), CID: "k", Topics: []string{"t"}}}}}
	first := cl.newClaimRun(c)
	first.round = 1 // kafkaRound counts the rounds; the first is optimistic
	if res, _ := cl.round(ctx, first); res == nil {
		t.Fatal("the first claim of t-0 and t-1 did not complete")
	}
	moved := zkstate.OwnerPath("g", "t", 1)
	if err := theirs.Delete(ctx, moved, -1); err != nil {
		t.Fatal(err)
	}
	eph := zkstate.CreateOptions{Ephemeral: true}
	if err := theirs.MultiAtomic(ctx, zkstate.CreateOp(moved, []byte("k-0"), eph)); err != nil {
		t.Fatal(err)
	}

	// The next generation's second round, which reads the owner znodes.
	r := cl.newClaimRun(c)
	r.round = 2
	res, next := cl.round(ctx, r)
	if res != nil {
		t.Errorf("the claim completed, giving t-1 to k while session 0x%x holds its owner znode: %v", theirs.SessionID(), res.parts)
	} else if next.owner != moved {
		t.Errorf("the claim waits for %q, want %s", next.owner, moved)
	}
	if _, held := cl.kafka.held.owners[moved]; held {
		t.Errorf("%s still counts as held by the bridge", moved)
	}
	cl.noZKMembers.Store(true) // the release's unchecked Multi
	cl.releaseThreads(ctx, []string{"k-0"})
	if _, st, err := theirs.Get(ctx, moved); err != nil || st.EphemeralOwner != theirs.SessionID() {
		t.Errorf("the other session's owner znode after the bridge's release: owner 0x%x, %v", st.EphemeralOwner, err)
	}
}

// The read of a legacy group trusts the owner znodes the last claim's Multi left, in the same
// session and with the same thread, without reading their stat. One deleted and created again
// by another session with the same thread (a legacy member that moved to another coordinator
// under the same consumer id) passed for ours: a plan that kept it started our member on a
// partition another session owns, and one that moved it to another of our threads deleted the
// other session's znode at version 0, its version as much as ours. It is not ours, and the claim
// waits for it.
func TestIntegration_LegacyReadGroupLeavesAnOwnerAnotherSessionMadeAgain(t *testing.T) {
	t.Parallel()
	ours, theirs, ctx := abaSessions(t)
	rd := abaReader(t, ours)
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	// The last claim gave a both partitions; b has joined since, and range moves t-1 to b-0.
	kept, moved := zkstate.OwnerPath("g", "t", 0), zkstate.OwnerPath("g", "t", 1)
	if err := ours.MultiAtomic(ctx, zkstate.CreateOp(kept, []byte("a-0"), eph), zkstate.CreateOp(moved, []byte("a-0"), eph)); err != nil {
		t.Fatal(err)
	}
	sid := ours.SessionID()
	written := map[legacy.TopicPartition]legacyOwner{
		legacyTP("t", 0): {Thread: "a-0", Version: 0, Session: sid},
		legacyTP("t", 1): {Thread: "a-0", Version: 0, Session: sid},
	}
	if err := theirs.Delete(ctx, moved, -1); err != nil {
		t.Fatal(err)
	}
	if err := theirs.MultiAtomic(ctx, zkstate.CreateOp(moved, []byte("a-0"), eph)); err != nil {
		t.Fatal(err)
	}

	members := map[string]legacyMemberSpec{
		"a": {Subscription: legacySub("t"), Reset: legacy.ResetSmallest},
		"b": {Subscription: legacySub("t"), Reset: legacy.ResetSmallest},
	}
	view, _, err := rd.readGroup(ctx, func(id string) bool { _, ok := members[id]; return ok }, written, sid, false)
	if err != nil {
		t.Fatal(err)
	}
	if o := view.owners[legacyTP("t", 1)]; o.Session == sid {
		t.Errorf("t-1 read as %+v, ours; its owner znode is session 0x%x's", o, theirs.SessionID())
	}
	in := legacyPlanInput{Group: "g", Strategy: legacy.StrategyRange, Session: sid, Members: members,
		Partitions: map[string][]int32{"t": {0, 1}}, Others: view.others, Owners: view.owners,
		Committed: map[legacy.TopicPartition]int64{}, OffsetNodes: map[legacy.TopicPartition]bool{}}
	plan, err := legacyPlanRebalance(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range legacyOpStrings(slices.Concat(plan.Ops, plan.Release)) {
		if strings.HasPrefix(op, "delete "+moved) {
			t.Errorf("the claim deletes the other session's %s: %s", moved, op)
		}
	}
	if !slices.Equal(plan.Foreign, []legacy.TopicPartition{legacyTP("t", 1)}) {
		t.Errorf("foreign %v, want [t-1]: its owner must let go first", plan.Foreign)
	}
}
