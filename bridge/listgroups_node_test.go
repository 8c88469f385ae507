package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
)

// Issue 18 item 4: "kafkajs admin.listGroups() returns every group four times: the bridge
// answers ListGroups on its own listener and on each proxy listener; a broker lists only the
// groups it coordinates." An admin client asks every broker of the metadata (kgo shards
// ListGroups to all of them, as kadm and kafkajs do); through a bridge in front of three
// brokers each group must come back once, from the bridge's node, and DescribeGroups on a proxy
// listener is NOT_COORDINATOR.
func TestIntegration_ListGroupsPerNode(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{})
	stableGroup(t, e.b, "listed-once", [2]group.InstanceID{})

	cl, err := kgo.NewClient(dfClientOpts(e.addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	seen := map[int32]int{} // node → listings of the group
	shards := cl.RequestSharded(ctx, kmsg.NewPtrListGroupsRequest())
	if len(shards) != 4 {
		t.Fatalf("ListGroups went to %d nodes, want 4 (the bridge and three proxy listeners)", len(shards))
	}
	for _, sh := range shards {
		if sh.Err != nil {
			t.Fatalf("node %d: %v", sh.Meta.NodeID, sh.Err)
		}
		resp := sh.Resp.(*kmsg.ListGroupsResponse)
		if resp.ErrorCode != 0 {
			t.Errorf("node %d: error code %d", sh.Meta.NodeID, resp.ErrorCode)
		}
		for _, g := range resp.Groups {
			if g.Group == "listed-once" {
				seen[sh.Meta.NodeID]++
			}
		}
	}
	if len(seen) != 1 || seen[dfNode] != 1 {
		t.Errorf("group listed by nodes %v, want once by the bridge's node %d", seen, dfNode)
	}

	describe := kmsg.NewPtrDescribeGroupsRequest()
	describe.Groups = []string{"listed-once"}
	for _, sh := range cl.RequestSharded(ctx, kmsg.NewPtrMetadataRequest()) {
		if sh.Err != nil {
			t.Fatal(sh.Err)
		}
		for _, b := range sh.Resp.(*kmsg.MetadataResponse).Brokers {
			r, err := cl.Broker(int(b.NodeID)).Request(ctx, describe)
			if err != nil {
				t.Fatalf("describe on node %d: %v", b.NodeID, err)
			}
			g := r.(*kmsg.DescribeGroupsResponse).Groups[0]
			switch {
			case b.NodeID == dfNode && (g.ErrorCode != 0 || g.State != "Stable" || len(g.Members) != 2):
				t.Errorf("describe on the bridge: code %d, state %q, %d members; want Stable with 2", g.ErrorCode, g.State, len(g.Members))
			case b.NodeID != dfNode && g.ErrorCode != int16(newproto.ErrNotCoordinator):
				t.Errorf("describe on proxy node %d: code %d, want NOT_COORDINATOR", b.NodeID, g.ErrorCode)
			}
		}
		break
	}
}
