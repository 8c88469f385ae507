package bridge_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// End to end through the Kafka wire with an unmodified client (franz-go's kgo) as the oracle:
// two consumers, one static, join a group hosted by the bridge; the assignment covers every
// partition once and is mirrored in /consumers/<g>/owners; a commit lands in the 0.8 offsets
// znode and OffsetFetch reads it back; the dynamic member leaving rebalances its partitions
// to the static one; the static member restarting gets its partitions back with no new
// generation (KIP-345).
func TestIntegration_KgoConsumersThroughTheWire(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	// One topic led by the bridge's own node id, so the client never dials a broker that does
	// not exist (the bridge does not serve Fetch yet; the client keeps its group regardless).
	loadTopics(t, zk, map[string]int32{"orders": 6})
	b := startBridge(t, connect, 9000, nil)

	newClient := func(opts ...kgo.Opt) *kgo.Client {
		cl, _ := kafkatest.PollKgo(t, append(kafkatest.KgoGroupOpts("kg", "orders", b.Addr().String()), opts...)...)
		return cl
	}
	static := newClient(kgo.InstanceID("static-1"))
	dynamic := newClient()

	// assigned waits for a Stable group whose members together own every partition once and
	// returns each member's partitions, the generation and the description.
	assigned := func(members int) (map[group.MemberID][]int32, group.Description) {
		t.Helper()
		var owned map[group.MemberID][]int32
		var d group.Description
		zktest.Eventually(t, 20*time.Second, fmt.Sprintf("Stable with %d members covering orders", members), func() (bool, string) {
			d = describe(t, b, "kg").Group
			owned = map[group.MemberID][]int32{}
			var all []int32
			for _, m := range d.Members {
				var a kmsg.ConsumerMemberAssignment
				if err := a.ReadFrom(m.Assignment); err != nil {
					return false, fmt.Sprintf("member %s assignment: %v", m.MemberID, err)
				}
				for _, tp := range a.Topics {
					owned[m.MemberID] = append(owned[m.MemberID], tp.Partitions...)
					all = append(all, tp.Partitions...)
				}
			}
			slices.Sort(all)
			return d.State == group.Stable && len(d.Members) == members && slices.Equal(all, []int32{0, 1, 2, 3, 4, 5}),
				fmt.Sprintf("%v gen %d, %d members, partitions %v", d.State, d.Generation, len(d.Members), all)
		})
		return owned, d
	}
	owned, _ := assigned(2)
	for id, ps := range owned {
		if len(ps) == 0 {
			t.Errorf("member %s got no partitions: %v", id, owned)
		}
	}
	zktest.Eventually(t, 10*time.Second, "owners mirrored", func() (bool, string) {
		snap, err := zk.Snapshot(ctx, "kg")
		if err != nil {
			return false, err.Error()
		}
		return len(snap.Owners) == 6 && len(snap.Consumers) == 2 && len(snap.Problems) == 0,
			fmt.Sprintf("%d owners, %d consumers, problems %v", len(snap.Owners), len(snap.Consumers), snap.Problems)
	})

	// Commit through the wire, read back from ZooKeeper and through OffsetFetch.
	if err := kafkatest.KgoCommit(ctx, static, "orders", map[int32]int64{owned[staticMember(t, b)][0]: 17}); err != nil {
		t.Fatalf("CommitOffsetsSync: %v", err)
	}
	p := owned[staticMember(t, b)][0]
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath("kg", "orders", p)); err != nil || string(d) != "17" {
		t.Fatalf("0.8 offset of orders/%d = %q, %v; want 17", p, d, err)
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "kg"
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "orders", []int32{p}
	fetch.Topics = append(fetch.Topics, ft)
	resp, err := dynamic.Request(ctx, fetch)
	if err != nil {
		t.Fatalf("OffsetFetch: %v", err)
	}
	if fr := resp.(*kmsg.OffsetFetchResponse); len(fr.Topics) != 1 || fr.Topics[0].Partitions[0].Offset != 17 {
		t.Fatalf("OffsetFetch = %+v, want orders/%d at 17", fr, p)
	}

	// The dynamic member leaves: one rebalance hands everything to the static member.
	dynamic.Close()
	_, before := assigned(1)

	// The static member restarts: same instance id, its partitions back, same generation.
	static.Close()
	newClient(kgo.InstanceID("static-1"))
	zktest.Eventually(t, 20*time.Second, "static member back", func() (bool, string) {
		d := describe(t, b, "kg").Group
		if len(d.Members) != 1 || d.Members[0].MemberID == before.Members[0].MemberID {
			return false, fmt.Sprintf("members %+v", d.Members)
		}
		return true, ""
	})
	_, after := assigned(1)
	if after.Generation != before.Generation {
		t.Errorf("static restart moved the generation from %d to %d, want no rebalance", before.Generation, after.Generation)
	}
}

// staticMember returns the member id of instance static-1.
func staticMember(t *testing.T, g groups) group.MemberID {
	t.Helper()
	for _, m := range describe(t, g, "kg").Group.Members {
		if m.InstanceID == "static-1" {
			return m.MemberID
		}
	}
	t.Fatal("no member with instance id static-1")
	return ""
}
