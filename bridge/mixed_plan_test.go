package bridge

import (
	"maps"
	"slices"
	"testing"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// The two-generation rule of KIP-429 in a mixed group (issue 18 item 3): a Kafka member that
// lists a partition as owned in its JoinGroup metadata still consumes it, so the partition moves
// only after its owner revoked it in a generation of its own. In the first generation nobody is
// given it and its owner znode stays where it is (ownership in ZooKeeper is exclusive at every
// instant); the member revokes it and rejoins without it; the second generation hands it over.
// A member that lists nothing (eager: it revoked everything before its JoinGroup) hands its
// partitions over in one generation, as before.
func TestPlanMixedCooperative(t *testing.T) {
	const session = 7
	tp := func(p int32) legacy.TopicPartition { return legacy.TopicPartition{Topic: "t", Partition: p} }
	tps := func(ps ...int32) []legacy.TopicPartition {
		var out []legacy.TopicPartition
		for _, p := range ps {
			out = append(out, tp(p))
		}
		return out
	}
	owner := func(p int32) string { return zkstate.OwnerPath("g", "t", p) }
	held := func(th string, ps ...int32) map[string]string {
		out := map[string]string{}
		for _, p := range ps {
			out[owner(p)] = th
		}
		return out
	}
	snap := func(others ...string) *zkstate.GroupSnapshot {
		s := &zkstate.GroupSnapshot{Group: "g", Consumers: map[string]zkstate.Consumer{},
			Owners: map[zkstate.TopicPartition]string{}, Partitions: map[string][]int32{"t": {0, 1, 2, 3}}}
		for _, cid := range others {
			s.Consumers[cid] = zkstate.Consumer{Registration: zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic}}
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		members []mixedMember
		others  []string
		held    map[string]string
		// want: each member's part of t, the owner znodes released and claimed, and what waits
		// for its owner to revoke it.
		want     map[group.MemberID][]int32
		release  []string
		claim    map[string]string
		withheld []string
	}{{
		name: "first generation: k2 joins, k1 still consumes t/2 and t/3",
		members: []mixedMember{
			{ID: "k1", CID: "a", Topics: []string{"t"}, Owned: tps(0, 1, 2, 3)},
			{ID: "k2", CID: "b", Topics: []string{"t"}},
		},
		held:     held("a-0", 0, 1, 2, 3),
		want:     map[group.MemberID][]int32{"k1": {0, 1}, "k2": nil},
		claim:    map[string]string{},
		withheld: []string{owner(2), owner(3)},
	}, {
		name: "second generation: k1 revoked them and rejoined without them",
		members: []mixedMember{
			{ID: "k1", CID: "a", Topics: []string{"t"}, Owned: tps(0, 1)},
			{ID: "k2", CID: "b", Topics: []string{"t"}},
		},
		held:    held("a-0", 0, 1, 2, 3),
		want:    map[group.MemberID][]int32{"k1": {0, 1}, "k2": {2, 3}},
		release: []string{owner(2), owner(3)},
		claim:   map[string]string{owner(2): "b-0", owner(3): "b-0"},
	}, {
		name: "eager: k1 listed nothing, its partitions move at once",
		members: []mixedMember{
			{ID: "k1", CID: "a", Topics: []string{"t"}},
			{ID: "k2", CID: "b", Topics: []string{"t"}},
		},
		held:    held("a-0", 0, 1, 2, 3),
		want:    map[group.MemberID][]int32{"k1": {0, 1}, "k2": {2, 3}},
		release: []string{owner(2), owner(3)},
		claim:   map[string]string{owner(2): "b-0", owner(3): "b-0"},
	}, {
		name:     "to a zk member: k1 keeps the owner znodes of what it still consumes",
		members:  []mixedMember{{ID: "k1", CID: "a", Topics: []string{"t"}, Owned: tps(0, 1, 2, 3)}},
		others:   []string{"z"},
		held:     held("a-0", 0, 1, 2, 3),
		want:     map[group.MemberID][]int32{"k1": {0, 1}},
		claim:    map[string]string{},
		withheld: []string{owner(2), owner(3)},
	}, {
		name:    "to a zk member, revoked: released",
		members: []mixedMember{{ID: "k1", CID: "a", Topics: []string{"t"}, Owned: tps(0, 1)}},
		others:  []string{"z"},
		held:    held("a-0", 0, 1, 2, 3),
		want:    map[group.MemberID][]int32{"k1": {0, 1}},
		release: []string{owner(2), owner(3)},
		claim:   map[string]string{},
	}, {
		// A member's word counts only for what the bridge holds for it: k2 lists t/0, which
		// the bridge holds for k1, who no longer lists it (eager).
		name: "owned but not held for the member: not kept",
		members: []mixedMember{
			{ID: "k1", CID: "a", Topics: []string{"t"}},
			{ID: "k2", CID: "b", Topics: []string{"t"}, Owned: tps(0, 3)},
		},
		held:    held("a-0", 0, 1, 2, 3),
		want:    map[group.MemberID][]int32{"k1": {0, 1}, "k2": {2, 3}},
		release: []string{owner(2), owner(3)},
		claim:   map[string]string{owner(2): "b-0", owner(3): "b-0"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := mixedInput{Group: "g", Strategy: legacy.StrategyRange, Members: tc.members,
				Ours: map[string]bool{}, Held: tc.held, Session: session, Snap: snap(tc.others...)}
			for _, mm := range tc.members {
				in.Ours[mm.CID] = true
			}
			p, err := planMixed(in)
			if err != nil {
				t.Fatal(err)
			}
			for id, want := range tc.want {
				if got := p.Assignments[id]["t"]; !slices.Equal(got, want) {
					t.Errorf("%s gets %v, want %v", id, got, want)
				}
			}
			if !slices.Equal(p.Release, tc.release) {
				t.Errorf("release %v, want %v", p.Release, tc.release)
			}
			if !maps.Equal(p.Claim, tc.claim) {
				t.Errorf("claim %v, want %v", p.Claim, tc.claim)
			}
			if !slices.Equal(p.Withheld, tc.withheld) {
				t.Errorf("withheld %v, want %v", p.Withheld, tc.withheld)
			}
		})
	}
}
