package zkstate_test

import (
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group as kafka-node 3.0.1's HighLevelConsumer leaves it in ZooKeeper (lib/zookeeper.js):
// registerConsumer creates /ids/<id> empty and sets its JSON in a second request, and
// addPartitionOwnership writes the bare consumer id into each owner znode. A snapshot reads both
// as kafka-node meant them: a consumer registering (not a malformed registration), then its
// only thread owning the partitions (not owners "not <consumerID>-<n>").
func TestIntegration_SnapshotReadsKafkaNodeFormats(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 30*time.Second)
	const g, id = "kn", "kn_5b3f0c1e-2f6d-4e8a-9b1c-0123456789ab"
	p := zkstate.CreateOptions{Parents: true}
	topic := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}}}
	if err := s.Create(ctx, zkstate.TopicPath("orders"), topic.Encode(), p); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, zkstate.IDPath(g, id), nil, zkstate.CreateOptions{Parents: true, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}

	snap, err := s.Snapshot(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := snap.Consumers[id]
	if !ok || !c.Registering || len(c.Registration.Subscription) != 0 || len(snap.Problems) != 0 {
		t.Fatalf("empty ids znode: consumer %+v (found %v), problems %v; want a consumer registering, no problem", c, ok, snap.Problems)
	}

	data := []byte(`{"version":1,"subscription":{"orders": 1},"pattern":"white_list","timestamp":"1764763200000"}`)
	if _, err := s.Set(ctx, zkstate.IDPath(g, id), data, -1); err != nil {
		t.Fatal(err)
	}
	for part := range int32(2) {
		if err := s.Create(ctx, zkstate.OwnerPath(g, "orders", part), []byte(id), zkstate.CreateOptions{Parents: true, Ephemeral: true}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err = s.Snapshot(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if c := snap.Consumers[id]; c.Registering || c.Registration.Subscription["orders"] != 1 || len(snap.Problems) != 0 {
		t.Fatalf("registered: consumer %+v, problems %v", c, snap.Problems)
	}
	for part := range int32(2) {
		thread := snap.Owners[zkstate.TopicPartition{Topic: "orders", Partition: part}]
		if cid, n, err := snap.OwnerOf(thread); err != nil || cid != id || n != 0 {
			t.Errorf("owner of orders/%d (%q) read as %q thread %d, %v; want %q thread 0", part, thread, cid, n, err, id)
		}
	}
}
