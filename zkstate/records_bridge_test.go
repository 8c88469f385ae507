package zkstate_test

import (
	"reflect"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
)

// The bridge's own records (zkstate/records_bridge.go): the samples are what the bridge writes
// (bridge/records.go through these encoders, bridge/group.Record for the group record).

func TestBridgeRecordPaths(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{zkstate.BridgesPath("/zkbridge"), "/zkbridge/bridges"},
		{zkstate.BridgePath("/zkbridge", 9000), "/zkbridge/bridges/9000"},
		{zkstate.BridgeGroupPath("/zkbridge", "g"), "/zkbridge/groups/g"},
		{zkstate.EpochPath("/zkbridge", "g"), "/zkbridge/groups/g/epoch"},
		{zkstate.GroupRecordPath("/zkbridge", "g"), "/zkbridge/groups/g/record"},
		{zkstate.OwnOffsetsPath("/r", "g"), "/r/groups/g/offsets"},
		{zkstate.OwnOffsetsTopicPath("/r", "g", "t"), "/r/groups/g/offsets/t"},
		{zkstate.OwnOffsetPath("/r", "g", "t", 7), "/r/groups/g/offsets/t/7"},
		{zkstate.HostedMemberPath("/r", "g", "c"), "/r/groups/g/hosted/c"},
		{zkstate.ModePath("/r", "g"), "/r/groups/g/mode"},
	} {
		if tc.got != tc.want {
			t.Errorf("path %q, want %q", tc.got, tc.want)
		}
	}
}

func TestParseEpochGolden(t *testing.T) {
	type c = recordsGoldenCase[zkstate.Epoch]
	recordsWalkGolden(t, "testdata/epoch", map[string]c{
		"bridge-v1.json":               {want: zkstate.Epoch{NodeID: 9000, AcquiredMs: 1700000000000}},
		"bridge-v1-no-acquired.json":   {want: zkstate.Epoch{NodeID: 2}},
		"bridge-v1-released.json":      {want: zkstate.Epoch{NodeID: 9000, AcquiredMs: 1700000000000, Released: true}},
		"malformed-no-node.json":       {errHas: "no node_id"},
		"malformed-acquired-text.json": {errHas: `acquired "yesterday"`},
		"malformed-truncated.json":     {errHas: "not JSON"},
	}, zkstate.ParseEpoch)
}

func TestParseOwnOffsetGolden(t *testing.T) {
	type c = recordsGoldenCase[zkstate.OwnOffset]
	recordsWalkGolden(t, "testdata/ownoffset", map[string]c{
		"bridge-v1.json":                {want: zkstate.OwnOffset{Offset: 1200, LeaderEpoch: 3, Metadata: "m", CommittedMs: 1700000000000}},
		"bridge-v1-zero.json":           {want: zkstate.OwnOffset{Offset: 0, LeaderEpoch: -1, CommittedMs: 1700000000001}},
		"malformed-no-version.json":     {errHas: "version 0"},
		"malformed-timestamp-text.json": {errHas: `commit_timestamp "noon"`},
		"malformed-bare-offset.json":    {errHas: "not a JSON object"},
	}, zkstate.ParseOwnOffset)
}

func TestParseGroupRecordHeadGolden(t *testing.T) {
	type c = recordsGoldenCase[zkstate.GroupRecordHead]
	recordsWalkGolden(t, "testdata/grouprecord", map[string]c{
		"bridge-v1.json": {want: zkstate.GroupRecordHead{Group: "billing", ProtocolType: "consumer", Members: []zkstate.GroupRecordMember{
			{ID: "kgo-a", InstanceID: "billing-1", Kind: zkstate.KindKafka}, {ID: "kgo-b", Kind: zkstate.KindKafka}}}},
		"bridge-v1-deleted.json":        {want: zkstate.GroupRecordHead{Group: "gone", Deleted: true}},
		"malformed-members-object.json": {errHas: "group record"},
	}, zkstate.ParseGroupRecordHead)
}

// What the encoders write is exactly what the bridge wrote before they moved here (the bytes
// of records already in ZooKeeper), and it parses back.
func TestBridgeRecordsEncode(t *testing.T) {
	e := zkstate.Epoch{NodeID: 9000, AcquiredMs: 1700000000000}
	if got, want := string(e.Encode()), `{"version":1,"node_id":9000,"acquired":"1700000000000"}`; got != want {
		t.Errorf("epoch %s, want %s", got, want)
	}
	if back, err := zkstate.ParseEpoch(e.Encode()); err != nil || back != e {
		t.Errorf("epoch round trip: %+v, %v", back, err)
	}
	o := zkstate.OwnOffset{Offset: 1200, LeaderEpoch: -1, Metadata: `a "b"`, CommittedMs: 1700000000000}
	if got, want := string(o.Encode()), `{"version":1,"offset":1200,"leader_epoch":-1,"metadata":"a \"b\"","commit_timestamp":"1700000000000"}`; got != want {
		t.Errorf("own offset %s, want %s", got, want)
	}
	if back, err := zkstate.ParseOwnOffset(o.Encode()); err != nil || !reflect.DeepEqual(back, o) {
		t.Errorf("own offset round trip: %+v, %v", back, err)
	}
}

// The committed-offset rule (DESIGN §1: ZooKeeper stays the truth until a group is finalized;
// a finalized group's truth is the bridge's records), one row per case it decides.
func TestOffsetPairFetch(t *testing.T) {
	own := func(off int64, zxid int64) zkstate.OffsetPair {
		return zkstate.OffsetPair{HasOwn: true, Own: zkstate.OwnOffset{Offset: off, LeaderEpoch: 3, Metadata: "m"}, OwnZxid: zxid}
	}
	with := func(p zkstate.OffsetPair, zk, zxid int64) zkstate.OffsetPair {
		p.HasZK, p.ZK, p.ZKZxid = true, zk, zxid
		return p
	}
	const finalZxid = 10
	none := zkstate.FetchedOffset{}
	for _, tc := range []struct {
		name      string
		pair      zkstate.OffsetPair
		finalized bool
		want      zkstate.FetchedOffset
		ok        bool
	}{
		{"0.8 only", with(zkstate.OffsetPair{}, 10, 5), false, zkstate.FetchedOffset{Offset: 10, LeaderEpoch: -1}, true},
		{"bridge commit: its epoch and metadata", with(own(20, 6), 20, 6), false, zkstate.FetchedOffset{Offset: 20, LeaderEpoch: 3, Metadata: "m"}, true},
		{"0.8 commit since the bridge's: the record is not this offset's", with(own(20, 6), 25, 8), false, zkstate.FetchedOffset{Offset: 25, LeaderEpoch: -1}, true},
		{"record only, not finalized: no commit", own(60, 13), false, none, false},
		{"nothing", zkstate.OffsetPair{}, false, none, false},

		{"finalized, 0.8 only", with(zkstate.OffsetPair{}, 10, 5), true, zkstate.FetchedOffset{Offset: 10, LeaderEpoch: -1}, true},
		{"finalized, one bridge commit", with(own(20, 6), 20, 6), true, zkstate.FetchedOffset{Offset: 20, LeaderEpoch: 3, Metadata: "m"}, true},
		{"finalized, bridge commit after finalization", with(own(35, 12), 30, 6), true, zkstate.FetchedOffset{Offset: 35, LeaderEpoch: 3, Metadata: "m"}, true},
		{"finalized, 0.8 write after finalization is ignored", with(own(40, 6), 99, 15), true, zkstate.FetchedOffset{Offset: 40, LeaderEpoch: 3, Metadata: "m"}, true},
		{"finalized, zk member committed after the bridge, before finalization", with(own(45, 6), 50, 8), true, zkstate.FetchedOffset{Offset: 50, LeaderEpoch: -1}, true},
		{"finalized, record only", own(60, 13), true, zkstate.FetchedOffset{Offset: 60, LeaderEpoch: 3, Metadata: "m"}, true},
		{"finalized, nothing", zkstate.OffsetPair{}, true, none, false},
	} {
		got, ok := tc.pair.Fetch(tc.finalized, finalZxid)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: Fetch = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	// finalZxid unknown (0): the later write wins, whenever it was.
	if got, _ := with(own(40, 6), 99, 15).Fetch(true, 0); got.Offset != 99 {
		t.Errorf("finalized at an unknown zxid: %d, want the later write, 99", got.Offset)
	}
}

// BenchmarkOwnOffsetEncode: one record per partition of every commit.
func BenchmarkOwnOffsetEncode(b *testing.B) {
	o := zkstate.OwnOffset{Offset: 123456789, LeaderEpoch: 7, CommittedMs: 1796466220588}
	b.ReportAllocs()
	for b.Loop() {
		_ = o.Encode()
	}
}
