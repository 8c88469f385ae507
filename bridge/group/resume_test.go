package group

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestResumedLeaderPlanMatchesItsAssignment runs franz-go's own cooperative-sticky balancer, as
// a static leader told to skip the assignment does (it balances anyway and rejoins, asking for a
// rebalance, when its share of the plan differs from what its SyncGroup returns), on what the
// JoinGroup reply shows it. The subscriptions are those of a group seen rebalanced after a crash
// (BenchmarkCrashFailoverDataPath): stored at the generation's last join, they say a follower
// owned nothing then, and the resumed leader owns nothing now. Shown as stored, franz-go's plan
// gave the leader partitions 2 and 4 where the group had assigned it 1 and 2.
func TestResumedLeaderPlanMatchesItsAssignment(t *testing.T) {
	const topic = "orders"
	sub := func(owned ...int32) []byte {
		m := kmsg.NewConsumerMemberMetadata()
		m.Version = 3
		m.Topics = []string{topic}
		if len(owned) > 0 {
			o := kmsg.NewConsumerMemberMetadataOwnedPartition()
			o.Topic, o.Partitions = topic, owned
			m.OwnedPartitions = append(m.OwnedPartitions, o)
		}
		m.Generation = 2
		return m.AppendTo(nil)
	}
	assign := func(ps ...int32) []byte {
		a := kmsg.NewConsumerMemberAssignment()
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic, at.Partitions = topic, ps
		a.Topics = append(a.Topics, at)
		return a.AppendTo(nil)
	}
	type member struct {
		id       string
		meta     []byte
		assigned []int32
	}
	members := []member{
		{"m0-1c34", sub(), []int32{4, 5}},
		{"m1-b70e", sub(0, 3), []int32{0, 3}},
		{"m2-276f", sub(), []int32{1, 2}}, // the leader, resumed
	}
	var shown []kmsg.JoinGroupResponseMember
	assigned := map[string][]int32{}
	for _, m := range members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		jm.ProtocolMetadata = ownedAsAssigned(m.meta, assign(m.assigned...), 3)
		shown = append(shown, jm)
		assigned[m.id] = m.assigned
	}
	mb, topics, err := kgo.CooperativeStickyBalancer().MemberBalancer(shown)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int32{}
	for tp := range topics {
		counts[tp] = 6
	}
	plan, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(counts)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range plan.IntoSyncAssignment() {
		var got kmsg.ConsumerMemberAssignment
		if err := got.ReadFrom(a.MemberAssignment); err != nil {
			t.Fatal(err)
		}
		if len(got.Topics) != 1 || !slices.Equal(sortedInts(got.Topics[0].Partitions), assigned[a.MemberID]) {
			t.Errorf("franz-go's plan gives %s %v, the group assigned it %v", a.MemberID, got.Topics, assigned[a.MemberID])
		}
	}
}

func sortedInts(s []int32) []int32 {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
