package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group write that times out is not a lost group: the epoch is still ours, the error says
// timeout and not fenced (writeFenced), the next write succeeds, and no offset is lost or moves
// backwards, although the timed-out multi may commit after the caller gave up. Only an epoch
// moved by another bridge fences. The commits are of 1,000 partitions: ~2,000 ops that zkstate
// sends as several multis of a few hundred ops.
func TestIntegration_GroupWriteTimeoutIsNotFencing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	store, err := zkstate.Open(ctx, zkstate.Config{Connect: zktest.Connect(t), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	const root, name, topic, partitions = "/zkbridge", "g", "t", 1000
	gs := newGroupStore(store, root, name, 1, zerolog.Nop())
	commit := func(offset int64) []group.OffsetCommitPartition {
		offs := make([]group.OffsetCommitPartition, partitions)
		for p := range offs {
			offs[p] = group.OffsetCommitPartition{Topic: topic, Partition: int32(p), Offset: offset, LeaderEpoch: -1}
		}
		return offs
	}
	// read returns every partition's offset: the 0.8 znode's, and the bridge's own record's.
	read := func() (zk08, own []int64) {
		t.Helper()
		zk08, own = make([]int64, partitions), make([]int64, partitions)
		for p := range int32(partitions) {
			data, _, err := store.Get(ctx, zkstate.OffsetPath(name, topic, p))
			if err != nil {
				t.Fatalf("offset %d: %v", p, err)
			}
			if zk08[p], err = strconv.ParseInt(string(data), 10, 64); err != nil {
				t.Fatalf("offset %d: %q", p, data)
			}
			data, _, err = store.Get(ctx, zkstate.OwnOffsetPath(root, name, topic, p))
			if err != nil {
				t.Fatalf("own offset %d: %v", p, err)
			}
			od, err := zkstate.ParseOwnOffset(data)
			if err != nil {
				t.Fatalf("own offset %d: %v", p, err)
			}
			own[p] = od.Offset
		}
		return zk08, own
	}
	if _, err := gs.write(ctx, nil, commit(1), time.Now()); err != nil {
		t.Fatalf("first commit: %v", err)
	}

	// A write that outlives its context: ZooKeeper is slower than the caller's patience.
	short, stop := context.WithTimeout(ctx, time.Millisecond)
	_, err = gs.write(short, nil, commit(2), time.Now())
	stop()
	if err == nil {
		t.Skip("the 2,000-op commit finished within 1 ms; nothing timed out")
	}
	if !errors.Is(err, context.DeadlineExceeded) || writeFenced(err) {
		t.Fatalf("timed-out write: %v (fenced %v), want a timeout that does not fence", err, writeFenced(err))
	}

	// The group is still ours: the next commit goes through, after whatever of the timed-out
	// one ZooKeeper still applies.
	if _, err := gs.write(ctx, nil, commit(3), time.Now()); err != nil {
		t.Fatalf("commit after a timeout: %v (fenced %v)", err, writeFenced(err))
	}
	time.Sleep(200 * time.Millisecond) // nothing of the timed-out write may land later
	zk08, own := read()
	for p := range partitions {
		if zk08[p] != 3 || own[p] != 3 {
			t.Fatalf("partition %d: offset %d (own record %d) after commits 1, 2 (timed out), 3; want 3", p, zk08[p], own[p])
		}
	}

	// Another bridge takes the group over: its epoch moves. That, and only that, fences.
	if _, err := store.Set(ctx, zkstate.EpochPath(root, name), []byte(`{"version":1,"node_id":2}`), -1); err != nil {
		t.Fatal(err)
	}
	_, err = gs.write(ctx, nil, commit(4), time.Now())
	if !errors.Is(err, ErrFenced) || !writeFenced(err) {
		t.Fatalf("write after a takeover: %v, want ErrFenced", err)
	}
	zk08, own = read()
	for p := range partitions {
		if zk08[p] != 3 || own[p] != 3 {
			t.Fatalf("partition %d: offset %d (own record %d) after a fenced commit of 4; want 3", p, zk08[p], own[p])
		}
	}
}

// The group record is the engine's to encode (bridge/group imports only the standard library);
// zkstate.GroupRecordHead is how migrate and the CLI read it. The two must agree on the fields
// the head reads, or a census would miss the Kafka members a record holds.
func TestGroupRecordReadsAsItsHead(t *testing.T) {
	for _, rec := range []group.Record{
		{Version: 1, Group: "billing", Generation: 4, ProtocolType: "consumer", ProtocolName: "range", Leader: "kgo-a",
			Members: []group.RecordMember{
				{ID: "kgo-a", InstanceID: "billing-1", Kind: group.KindKafka, ProtocolType: "consumer"},
				{ID: "kgo-b", Kind: group.KindKafka, ProtocolType: "consumer"},
			}},
		{Version: 1, Group: "gone", Generation: 9, Deleted: true},
	} {
		data, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		head, err := zkstate.ParseGroupRecordHead(data)
		if err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if head.Group != rec.Group || head.Deleted != rec.Deleted || head.ProtocolType != rec.ProtocolType || len(head.Members) != len(rec.Members) {
			t.Fatalf("%s read as %+v", data, head)
		}
		for i, m := range rec.Members {
			h := head.Members[i]
			if h.ID != string(m.ID) || h.InstanceID != string(m.InstanceID) || h.Kind != zkstate.KindKafka {
				t.Errorf("member %d: %+v read as %+v", i, m, h)
			}
		}
	}
}
