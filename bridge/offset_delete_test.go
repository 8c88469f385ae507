package bridge_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

func offsetDelete(g string, topics map[string][]int32) *kmsg.OffsetDeleteRequest {
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = g
	for _, t := range []string{"clicks", "orders"} {
		ps, ok := topics[t]
		if !ok {
			continue
		}
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = t
		for _, p := range ps {
			rp := kmsg.NewOffsetDeleteRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	return req
}

// codesOf is topic → partition codes of an OffsetDelete response.
func codesOf(r *kmsg.OffsetDeleteResponse) map[string][]int16 {
	out := map[string][]int16{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			out[t.Topic] = append(out[t.Topic], p.ErrorCode)
		}
	}
	return out
}

// Issue 18 item 7: OffsetDelete (API key 47, KIP-496) is served, as Kafka's coordinator serves it:
// the offsets of a topic the group's members subscribe to stay (GROUP_SUBSCRIBED_TO_TOPIC) —
// Kafka members by their consumer protocol metadata, 0.8 consumers by their registration — and
// the others go from both places OffsetFetch reads; a group nobody knows is GROUP_ID_NOT_FOUND.
func TestIntegration_OffsetDelete(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	b := startBridge(t, connect, 1, nil)
	addr := b.Addr().String()
	exists := func(p string) bool {
		ok, _, err := zk.Exists(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	// Kafka members subscribed to orders, with offsets of orders and clicks.
	const g = "od"
	stableGroup(t, b, g, [2]group.InstanceID{})
	if c := commit(t, b, g, "a", "", 1,
		group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 10, LeaderEpoch: -1},
		group.OffsetCommitPartition{Topic: "clicks", Partition: 0, Offset: 20, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone || c.Partitions[1].Err != group.ErrNone {
		t.Fatalf("commit: %+v", c)
	}
	r := kafkaRoundTrip(t, addr, offsetDelete(g, map[string][]int32{"orders": {0}, "clicks": {0, 1}})).(*kmsg.OffsetDeleteResponse)
	got := codesOf(r)
	if r.ErrorCode != 0 || len(got["orders"]) != 1 || got["orders"][0] != int16(newproto.ErrGroupSubscribedToTopic) || len(got["clicks"]) != 2 || got["clicks"][0] != 0 || got["clicks"][1] != 0 {
		t.Errorf("OffsetDelete in a Stable group: top %d, %v; want orders GROUP_SUBSCRIBED_TO_TOPIC, clicks NONE", r.ErrorCode, got)
	}
	if exists(zkstate.OffsetPath(g, "clicks", 0)) || exists(zkstate.OwnOffsetPath(bridge.DefaultRoot, g, "clicks", 0)) {
		t.Error("clicks/0 still has an offset znode")
	}
	offs, err := b.FetchOffsets(ctx, g, nil)
	if err != nil || len(offs) != 1 || offs[0].Topic != "orders" || offs[0].Offset != 10 {
		t.Errorf("OffsetFetch after the delete: %+v, %v; want orders/0 at 10 only", offs, err)
	}

	// A 0.8 consumer subscribed to orders: its topic's offsets stay too.
	const z = "od-zk"
	p := zkstate.CreateOptions{Parents: true}
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"orders": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1700000000000}
	if err := zk.Multi(ctx,
		zkstate.CreateOp(zkstate.IDPath(z, "od-zk_h-1700000000000-00000001"), reg.Encode(), p),
		zkstate.CreateOp(zkstate.OffsetPath(z, "orders", 0), zkstate.FormatOffset(5), p),
		zkstate.CreateOp(zkstate.OffsetPath(z, "clicks", 0), zkstate.FormatOffset(6), p)); err != nil {
		t.Fatal(err)
	}
	r = kafkaRoundTrip(t, addr, offsetDelete(z, map[string][]int32{"orders": {0}, "clicks": {0}})).(*kmsg.OffsetDeleteResponse)
	got = codesOf(r)
	if r.ErrorCode != 0 || got["orders"][0] != int16(newproto.ErrGroupSubscribedToTopic) || got["clicks"][0] != 0 {
		t.Errorf("OffsetDelete in a group with a 0.8 consumer: top %d, %v", r.ErrorCode, got)
	}
	if !exists(zkstate.OffsetPath(z, "orders", 0)) || exists(zkstate.OffsetPath(z, "clicks", 0)) {
		t.Error("want orders/0 kept and clicks/0 deleted")
	}

	// Nobody knows the group.
	r = kafkaRoundTrip(t, addr, offsetDelete("nobody", map[string][]int32{"orders": {0}})).(*kmsg.OffsetDeleteResponse)
	if r.ErrorCode != int16(newproto.ErrGroupIDNotFound) {
		t.Errorf("unknown group: top %d, want GROUP_ID_NOT_FOUND", r.ErrorCode)
	}
}
