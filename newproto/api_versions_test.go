package newproto_test

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// wantTable is the ApiVersions table stated independently of the code: the
// keys the bridge serves and their ranges (the brief of the Kafka-wire
// issue, DESIGN.md section 5).
var wantTable = map[int16][2]int16{
	3:  {0, 12}, // Metadata
	8:  {0, 8},  // OffsetCommit
	9:  {0, 8},  // OffsetFetch (v10 only while every topic has an id: TestApiVersionsOffsetFetchByID)
	10: {0, 4},  // FindCoordinator
	11: {0, 9},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 5},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	15: {0, 5},  // DescribeGroups
	16: {0, 4},  // ListGroups
	18: {0, 4},  // ApiVersions
	42: {0, 2},  // DeleteGroups
	47: {0, 0},  // OffsetDelete
}

func tableOf(t *testing.T, keys []kmsg.ApiVersionsResponseApiKey) map[int16][2]int16 {
	t.Helper()
	got := map[int16][2]int16{}
	for i, k := range keys {
		if i > 0 && keys[i-1].ApiKey >= k.ApiKey {
			t.Errorf("api keys not sorted: %d after %d", k.ApiKey, keys[i-1].ApiKey)
		}
		got[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	return got
}

func TestApiVersions(t *testing.T) {
	ts := startServer(t, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(0, 4) {
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(v)
		req.ClientSoftwareName, req.ClientSoftwareVersion = "newproto-test", "1.0.0"
		resp := c.RoundTrip(req).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != 0 {
			t.Errorf("v%d: error %d", v, resp.ErrorCode)
		}
		if got := tableOf(t, resp.ApiKeys); !reflect.DeepEqual(got, wantTable) {
			t.Errorf("v%d: table\n got %v\nwant %v", v, got, wantTable)
		}
		if resp.ThrottleMillis != 0 || resp.FinalizedFeaturesEpoch != -1 || len(resp.SupportedFeatures) != 0 {
			t.Errorf("v%d: throttle %d, features epoch %d, features %v", v, resp.ThrottleMillis, resp.FinalizedFeaturesEpoch, resp.SupportedFeatures)
		}
	}
}

// TestApiVersionsUnsupportedVersion checks KIP-511: a version above ours,
// even one no codec knows, is answered UNSUPPORTED_VERSION in the v0 format
// with a v0 header, and carries the table so the client can retry at our
// maximum. The connection stays usable.
func TestApiVersionsUnsupportedVersion(t *testing.T) {
	ts := startServer(t, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range []int16{5, 42, 32767} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(v)
		if v > req.MaxVersion() {
			// kmsg cannot encode this version; write the frame by
			// hand: a v3+ (flexible) header and a body we don't know.
			c.Corr++
			frame := binary.BigEndian.AppendUint16(nil, 18)
			frame = binary.BigEndian.AppendUint16(frame, uint16(v))
			frame = binary.BigEndian.AppendUint32(frame, uint32(c.Corr))
			frame = append(frame, 0xff, 0xff, 0) // null client id, no tags
			frame = append(frame, 1, 2, 3, 4, 5) // body of the future
			c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(frame))), frame...))
		} else {
			req.ClientSoftwareName, req.ClientSoftwareVersion = "x", "1"
			c.Send(req)
		}
		corr, r := c.Recv(18, 0)
		if corr != c.Corr {
			t.Fatalf("v%d: correlation id %d, want %d", v, corr, c.Corr)
		}
		resp := r.(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != int16(newproto.ErrUnsupportedVersion) {
			t.Errorf("v%d: error %d, want UNSUPPORTED_VERSION", v, resp.ErrorCode)
		}
		if got := tableOf(t, resp.ApiKeys); got[18] != [2]int16{0, 4} || !reflect.DeepEqual(got, wantTable) {
			t.Errorf("v%d: table %v", v, got)
		}
	}
	kafkatest.CheckAlive(t, c)
}

func TestApiVersionsInvalidSoftwareName(t *testing.T) {
	ts := startServer(t, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	for _, tc := range []struct{ name, version string }{
		{"", "1.0"},
		{"kgo", "-1"},
		{"bad name", "1.0"},
	} {
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(3)
		req.ClientSoftwareName, req.ClientSoftwareVersion = tc.name, tc.version
		resp := c.RoundTrip(req).(*kmsg.ApiVersionsResponse)
		if resp.ErrorCode != int16(newproto.ErrInvalidRequest) || len(resp.ApiKeys) != 0 {
			t.Errorf("%q/%q: error %d, %d keys; want INVALID_REQUEST and none", tc.name, tc.version, resp.ErrorCode, len(resp.ApiKeys))
		}
	}
}

// OffsetFetch is advertised up to v10 (topics by id) only while every topic
// of the cluster has an id: a client offered v10 names topics by id, and
// franz-go's admin requests do so even for a topic Metadata gave no id,
// which no server could then answer. Without ids it stays at v8.
func TestApiVersionsOffsetFetchByID(t *testing.T) {
	offsetFetchMax := func(cluster newproto.Cluster) int16 {
		t.Helper()
		cfg := metadataConfig()
		cfg.Cluster = cluster
		c := kafkatest.Dial(t, startServer(t, cfg).addr)
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(3)
		req.ClientSoftwareName, req.ClientSoftwareVersion = "newproto-test", "1.0.0"
		resp := c.RoundTrip(req).(*kmsg.ApiVersionsResponse)
		return tableOf(t, resp.ApiKeys)[int16(kmsg.OffsetFetch)][1]
	}
	all := map[string][16]byte{"orders": {1}, "__consumer_offsets": {2}}
	for _, tc := range []struct {
		name    string
		cluster newproto.Cluster
		want    int16
	}{
		{"every topic has an id", &idCluster{fakeCluster: testCluster(), ids: all}, 10},
		{"a topic without id", &idCluster{fakeCluster: testCluster(), ids: map[string][16]byte{"orders": {1}}}, 8},
		{"a zero id", &idCluster{fakeCluster: testCluster(), ids: map[string][16]byte{"orders": {1}, "__consumer_offsets": {}}}, 8},
		{"a cluster that knows no ids", testCluster(), 8},
		{"no topics", &idCluster{fakeCluster: &fakeCluster{}, ids: all}, 8},
	} {
		if got := offsetFetchMax(tc.cluster); got != tc.want {
			t.Errorf("%s: OffsetFetch advertised up to v%d, want v%d", tc.name, got, tc.want)
		}
	}
}
