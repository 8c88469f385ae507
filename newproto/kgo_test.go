package newproto_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// franz-go's kgo client is an oracle for the wire: it negotiates versions
// with ApiVersions (sending its own maximum first, so KIP-511's fallback is
// exercised), validates response headers and bodies, and resolves a group
// coordinator by FindCoordinator + the node id in Metadata, as real
// consumers do.

func newKgoClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID("kgo-test"),
		kgo.RetryTimeout(3 * time.Second),
	}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// kgoCluster has no other brokers: every partition is led by our node, so
// kgo never dials an address that does not exist.
func kgoCluster() *fakeCluster {
	return &fakeCluster{topics: map[string][]newproto.Partition{
		"orders":   {{ID: 0, Leader: 7, Replicas: []int32{7}, ISR: []int32{7}}, {ID: 1, Leader: 7, Replicas: []int32{7}, ISR: []int32{7}}},
		"payments": {{ID: 0, Leader: 7, Replicas: []int32{7}, ISR: []int32{7}}},
	}}
}

func TestKgoRoundTrips(t *testing.T) {
	var heartbeats atomic.Int32
	coord := kafkatest.FuncCoordinator{Fn: func(_ context.Context, req *newproto.Request) (kmsg.Response, error) {
		if hb, ok := req.Msg.(*kmsg.HeartbeatRequest); ok && hb.Group == "orders-consumer" {
			heartbeats.Add(1)
			return kmsg.NewPtrHeartbeatResponse(), nil
		}
		return nil, newproto.ErrGroupIDNotFound
	}}
	ts := startServer(t, newproto.Config{NodeID: 7, ClusterID: "kgo-cluster", Cluster: kgoCluster(), Coordinator: coord})
	cl := newKgoClient(t, ts.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("ApiVersions", func(t *testing.T) {
		resp, err := cl.Request(ctx, kmsg.NewPtrApiVersionsRequest())
		if err != nil {
			t.Fatal(err)
		}
		av := resp.(*kmsg.ApiVersionsResponse)
		if av.ErrorCode != 0 || len(av.ApiKeys) != len(wantTable) {
			t.Fatalf("error %d, %d keys", av.ErrorCode, len(av.ApiKeys))
		}
		// kgo opened with its own maximum (v5), was told
		// UNSUPPORTED_VERSION at v0, and retried at our v4.
		for v, want := range map[string]float64{"5": 1, "4": 1} {
			labels := map[string]string{"api": "ApiVersions", "api_version": v}
			if got := kafkatest.CounterValue(t, ts.reg, "zkbridge_kafka_requests_total", labels); got < want {
				t.Errorf("ApiVersions v%s requests = %v, want >= %v", v, got, want)
			}
		}
	})

	t.Run("Metadata", func(t *testing.T) {
		req := kmsg.NewPtrMetadataRequest() // nil topics: all
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		md := resp.(*kmsg.MetadataResponse)
		if md.Version < 12 {
			t.Errorf("negotiated Metadata v%d, want our max 12", md.Version)
		}
		if len(md.Brokers) != 1 || md.Brokers[0].NodeID != 7 || md.Brokers[0].Port != ts.port() {
			t.Errorf("brokers %+v", md.Brokers)
		}
		if md.ClusterID == nil || *md.ClusterID != "kgo-cluster" || len(md.Topics) != 2 {
			t.Errorf("cluster %v, %d topics", md.ClusterID, len(md.Topics))
		}
	})

	t.Run("FindCoordinator", func(t *testing.T) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "orders-consumer"
		req.CoordinatorKeys = []string{"orders-consumer"}
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		fc := resp.(*kmsg.FindCoordinatorResponse)
		node, code := fc.NodeID, fc.ErrorCode
		if fc.Version >= 4 && len(fc.Coordinators) == 1 {
			node, code = fc.Coordinators[0].NodeID, fc.Coordinators[0].ErrorCode
		}
		if code != 0 || node != 7 {
			t.Errorf("v%d: node %d error %d", fc.Version, node, code)
		}
	})

	// kgo routes a group request to the coordinator: FindCoordinator,
	// then the broker with that node id from Metadata, then the request.
	t.Run("Heartbeat via coordinator lookup", func(t *testing.T) {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = "orders-consumer", "m-1", 1
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if hb := resp.(*kmsg.HeartbeatResponse); hb.ErrorCode != 0 || hb.Version != 4 {
			t.Errorf("heartbeat v%d error %d", hb.Version, hb.ErrorCode)
		}
		if n := heartbeats.Load(); n != 1 {
			t.Errorf("coordinator saw %d heartbeats, want 1", n)
		}
	})

	t.Run("coordinator error code", func(t *testing.T) {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{"nobody"}
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		dg := resp.(*kmsg.DescribeGroupsResponse)
		if len(dg.Groups) != 1 || !errors.Is(kerr.ErrorForCode(dg.Groups[0].ErrorCode), kerr.GroupIDNotFound) {
			t.Errorf("groups %+v, want GROUP_ID_NOT_FOUND", dg.Groups)
		}
	})
}

// Without a Coordinator kgo sees COORDINATOR_NOT_AVAILABLE, retries it as
// retriable, and gives up at its retry timeout with that error.
func TestKgoCoordinatorNotAvailable(t *testing.T) {
	ts := startServer(t, newproto.Config{NodeID: 7, Cluster: kgoCluster()})
	cl := newKgoClient(t, ts.addr, kgo.RetryTimeout(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID = "g", "m"
	resp, err := cl.Request(ctx, req)
	if err == nil {
		err = kerr.ErrorForCode(resp.(*kmsg.HeartbeatResponse).ErrorCode)
	}
	if !errors.Is(err, kerr.CoordinatorNotAvailable) {
		t.Fatalf("got %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
}
