package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// `offsets export` prints what OffsetFetch answers. A finalized group's commits go to the
// bridge's own records only (DESIGN §1: no /consumers mirror once finalized), so an export that
// read /consumers/<g>/offsets printed the offsets from before finalization. Here a group with
// 0.8 offsets is finalized, a Kafka client commits through a running bridge, and the export
// must equal the client's OffsetFetch: the new commits, and the 0.8 offset of the partition the
// client did not commit.
func TestIntegration_OffsetsExportOfFinalizedGroupIsWhatOffsetFetchAnswers(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	const g = "fin"
	p := zkstate.CreateOptions{Parents: true}
	if err := s.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath(g, "orders", 0), zkstate.FormatOffset(5), p),
		zkstate.CreateOp(zkstate.OffsetPath(g, "orders", 1), zkstate.FormatOffset(6), p),
		zkstate.CreateOp(zkstate.OffsetPath(g, "orders", 2), zkstate.FormatOffset(7), p)); err != nil {
		t.Fatal(err)
	}
	seedGroup(t, s, g, zkstate.ModeFinalized)

	b := startBridgeOnKfake(t, zkc, nil)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	// A commit outside any generation (generation -1, no member id: what kafka-consumer-groups
	// and every admin client send), as Kafka accepts for a group without members.
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = g, -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "orders"
	for part, off := range map[int32]int64{0: 100, 1: 200} {
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset = part, off
		ct.Partitions = append(ct.Partitions, cp)
	}
	commit.Topics = append(commit.Topics, ct)
	resp, err := commit.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("commit %s/%d: error %d", rt.Topic, rp.Partition, rp.ErrorCode)
			}
		}
	}

	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = g // no topics: every committed partition (v2+)
	fresp, err := fetch.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if fresp.ErrorCode != 0 {
		t.Fatalf("OffsetFetch: error %d", fresp.ErrorCode)
	}
	var fetched []offsetRow
	for _, rt := range fresp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 || rp.Offset < 0 {
				t.Fatalf("OffsetFetch %s/%d: offset %d, error %d", rt.Topic, rp.Partition, rp.Offset, rp.ErrorCode)
			}
			fetched = append(fetched, offsetRow{Topic: rt.Topic, Partition: rp.Partition, Offset: rp.Offset})
		}
	}
	slices.SortFunc(fetched, func(a, b offsetRow) int { return int(a.Partition - b.Partition) })
	want := []offsetRow{{"orders", 0, 100}, {"orders", 1, 200}, {"orders", 2, 7}}
	if !slices.Equal(fetched, want) {
		t.Fatalf("OffsetFetch answers %+v, want %+v", fetched, want)
	}

	r := runCLI(t, "offsets", "export", g, "--zk", zkc, "--format", "json")
	if r.code != exitOK {
		t.Fatalf("offsets export: exit %d: %s", r.code, r.stderr)
	}
	var exported []offsetRow
	if err := json.Unmarshal([]byte(r.stdout), &exported); err != nil {
		t.Fatalf("offsets export json: %v\n%s", err, r.stdout)
	}
	if !slices.Equal(exported, fetched) {
		t.Errorf("offsets export of a finalized group = %+v, OffsetFetch answers %+v", exported, fetched)
	}
	r = runCLI(t, "offsets", "export", g, "--zk", zkc)
	if want := "topic,partition,offset\norders,0,100\norders,1,200\norders,2,7\n"; r.code != exitOK || r.stdout != want {
		t.Errorf("offsets export csv: exit %d\n%s%s; want\n%s", r.code, r.stdout, r.stderr, want)
	}
}
