package newproto_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// testCluster: brokers 1 and 2, and 3 which is down (in replica lists,
// not in the broker list). orders-1's leader is the dead broker.
func testCluster() *fakeCluster {
	return &fakeCluster{
		brokers: []newproto.Broker{
			{NodeID: 2, Host: "10.0.0.2", Port: 9092},
			{NodeID: 1, Host: "10.0.0.1", Port: 9092, Rack: kmsg.StringPtr("rack-a")},
		},
		topics: map[string][]newproto.Partition{
			"orders": {
				{ID: 1, Leader: 3, Replicas: []int32{3, 2}, ISR: []int32{2}},
				{ID: 0, Leader: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}},
			},
			"__consumer_offsets": {{ID: 0, Leader: 2, Replicas: []int32{2}, ISR: []int32{2}}},
		},
	}
}

func metadataConfig() newproto.Config {
	return newproto.Config{
		NodeID:         7,
		AdvertisedHost: "bridge.test",
		AdvertisedPort: 19092,
		ClusterID:      "zk-cluster",
		Cluster:        testCluster(),
	}
}

type brokerView struct {
	id   int32
	host string
	port int32
	rack string
}

type partView struct {
	err                    int16
	id, leader, epoch      int32
	replicas, isr, offline []int32
}

func brokersOf(resp *kmsg.MetadataResponse) []brokerView {
	var out []brokerView
	for _, b := range resp.Brokers {
		bv := brokerView{b.NodeID, b.Host, b.Port, ""}
		if b.Rack != nil {
			bv.rack = *b.Rack
		}
		out = append(out, bv)
	}
	return out
}

func TestMetadataAllTopics(t *testing.T) {
	ts := startServer(t, metadataConfig())
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(0, 12) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(v)
			req.Topics = nil // all topics; v0 encodes it as an empty array
			req.AllowAutoTopicCreation = true
			resp := c.RoundTrip(req).(*kmsg.MetadataResponse)

			rack := "rack-a"
			if v == 0 {
				rack = "" // no rack before v1
			}
			want := []brokerView{{1, "10.0.0.1", 9092, rack}, {2, "10.0.0.2", 9092, ""}, {7, "bridge.test", 19092, ""}}
			if got := brokersOf(resp); !reflect.DeepEqual(got, want) {
				t.Errorf("brokers\n got %v\nwant %v", got, want)
			}
			if v >= 1 && resp.ControllerID != 1 {
				t.Errorf("controller %d, want 1 (lowest real broker)", resp.ControllerID)
			}
			if v >= 2 && (resp.ClusterID == nil || *resp.ClusterID != "zk-cluster") {
				t.Errorf("cluster id %v", resp.ClusterID)
			}
			if len(resp.Topics) != 2 {
				t.Fatalf("%d topics, want 2", len(resp.Topics))
			}
			off, orders := resp.Topics[0], resp.Topics[1]
			if *off.Topic != "__consumer_offsets" || *orders.Topic != "orders" {
				t.Fatalf("topics %q %q, want sorted by name", *off.Topic, *orders.Topic)
			}
			if v >= 1 && (!off.IsInternal || orders.IsInternal) {
				t.Errorf("is_internal: offsets %v orders %v", off.IsInternal, orders.IsInternal)
			}
			if orders.ErrorCode != 0 || orders.TopicID != [16]byte{} {
				t.Errorf("orders: error %d, id %x", orders.ErrorCode, orders.TopicID)
			}
			if v >= 8 && orders.AuthorizedOperations != -2147483648 {
				t.Errorf("authorized operations %d, want INT32_MIN", orders.AuthorizedOperations)
			}
			var parts []partView
			for _, p := range orders.Partitions {
				parts = append(parts, partView{p.ErrorCode, p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR, p.OfflineReplicas})
			}
			var offline []int32
			if v >= 5 {
				offline = []int32{3}
			}
			const epoch = -1 // unknown (v7+); before v7 kmsg's default
			want2 := []partView{
				{0, 0, 1, epoch, []int32{1, 2}, []int32{1, 2}, nil},
				{int16(newproto.ErrLeaderNotAvailable), 1, -1, epoch, []int32{3, 2}, []int32{2}, offline},
			}
			if !reflect.DeepEqual(parts, want2) {
				t.Errorf("orders partitions\n got %+v\nwant %+v", parts, want2)
			}
		})
	}
}

func TestMetadataNamedTopics(t *testing.T) {
	ts := startServer(t, metadataConfig())
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(0, 12) {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		for _, name := range []string{"orders", "missing", "orders"} {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(name)
			req.Topics = append(req.Topics, rt)
		}
		resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 2 {
			t.Fatalf("v%d: %d topics, want orders and missing once each", v, len(resp.Topics))
		}
		if got := resp.Topics[0]; *got.Topic != "orders" || got.ErrorCode != 0 || len(got.Partitions) != 2 {
			t.Errorf("v%d: orders: %q error %d, %d partitions", v, *got.Topic, got.ErrorCode, len(got.Partitions))
		}
		if got := resp.Topics[1]; *got.Topic != "missing" || got.ErrorCode != int16(newproto.ErrUnknownTopicOrPartition) || len(got.Partitions) != 0 {
			t.Errorf("v%d: missing: %q error %d", v, *got.Topic, got.ErrorCode)
		}
	}
}

// From v1 an empty topic list asks for no topics (null asks for all).
func TestMetadataNoTopics(t *testing.T) {
	ts := startServer(t, metadataConfig())
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(1, 12) {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		req.Topics = []kmsg.MetadataRequestTopic{}
		resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
		if len(resp.Topics) != 0 || len(resp.Brokers) != 3 {
			t.Errorf("v%d: %d topics, %d brokers; want 0 and 3", v, len(resp.Topics), len(resp.Brokers))
		}
	}
}

func TestMetadataTopicByID(t *testing.T) {
	ts := startServer(t, metadataConfig())
	c := kafkatest.Dial(t, ts.addr)
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	rt := kmsg.NewMetadataRequestTopic()
	rt.TopicID = [16]byte{1, 2, 3}
	req.Topics = append(req.Topics, rt)
	resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != int16(newproto.ErrUnknownTopicID) || resp.Topics[0].TopicID != rt.TopicID {
		t.Fatalf("topics %+v, want one UNKNOWN_TOPIC_ID", resp.Topics)
	}
}

// Without a Cluster, or with one whose brokers include our node id, the
// broker list holds our node once and the controller is a real broker or
// ours. Without an advertised address we advertise the address dialed.
func TestMetadataOurNode(t *testing.T) {
	t.Run("no cluster", func(t *testing.T) {
		ts := startServer(t, newproto.Config{NodeID: 5})
		c := kafkatest.Dial(t, ts.addr)
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(1)
		resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
		want := []brokerView{{5, "127.0.0.1", ts.port(), ""}}
		if got := brokersOf(resp); !reflect.DeepEqual(got, want) || resp.ControllerID != 5 || len(resp.Topics) != 0 {
			t.Errorf("brokers %v controller %d topics %d; want %v, 5, 0", got, resp.ControllerID, len(resp.Topics), want)
		}
	})
	t.Run("same id as a broker", func(t *testing.T) {
		cfg := metadataConfig()
		cfg.NodeID = 1
		ts := startServer(t, cfg)
		c := kafkatest.Dial(t, ts.addr)
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(4)
		resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
		want := []brokerView{{1, "bridge.test", 19092, ""}, {2, "10.0.0.2", 9092, ""}}
		if got := brokersOf(resp); !reflect.DeepEqual(got, want) || resp.ControllerID != 2 {
			t.Errorf("brokers %v controller %d; want %v, 2", got, resp.ControllerID, want)
		}
	})
}

// Metadata before v13 has no top-level error. A Cluster that fails (the
// bridge with ZooKeeper away and nothing cached) used to close the
// connection, and clients reconnected in a loop (issue 17 §5): the answer is
// our node alone, every topic asked for LEADER_NOT_AVAILABLE, which clients
// retry after their backoff, on the same connection.
func TestMetadataClusterError(t *testing.T) {
	cfg := metadataConfig()
	cfg.Cluster = &fakeCluster{err: errors.New("zookeeper session expired")}
	ts := startServer(t, cfg)
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(0, 12) {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr("orders")
		req.Topics = append(req.Topics, mt)
		resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
		if got := brokersOf(resp); len(got) != 1 || got[0].id != 7 {
			t.Errorf("v%d: brokers %v, want our node alone", v, got)
		}
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != int16(newproto.ErrLeaderNotAvailable) {
			t.Errorf("v%d: topics %+v, want orders LEADER_NOT_AVAILABLE", v, resp.Topics)
		}
		if v >= 1 {
			req.Topics = nil // all topics: none known
			if resp := c.RoundTrip(req).(*kmsg.MetadataResponse); len(resp.Topics) != 0 {
				t.Errorf("v%d: all topics answered %d", v, len(resp.Topics))
			}
		}
	}
	kafkatest.CheckAlive(t, c)
}

// lockedCluster is a Cluster a test changes between requests.
type lockedCluster struct {
	mu      sync.Mutex
	brokers []newproto.Broker
	topics  map[string][]newproto.Partition
}

func (c *lockedCluster) Brokers(context.Context) ([]newproto.Broker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.brokers), nil
}

func (c *lockedCluster) Topics(context.Context) (map[string][]newproto.Partition, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.topics), nil
}

func (c *lockedCluster) change(f func(c *lockedCluster)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// Metadata's per-topic answers are built once and reused (03_metadata.go),
// so every change of the cluster view must show in the next answer: a
// broker coming back, a leader moving, even within a partition list the
// Cluster changed in place, and partitions added.
func TestMetadataFollowsClusterChanges(t *testing.T) {
	base := testCluster()
	cl := &lockedCluster{brokers: base.brokers, topics: base.topics}
	cfg := metadataConfig()
	cfg.Cluster = cl
	ts := startServer(t, cfg)
	c := kafkatest.Dial(t, ts.addr)
	orders := func() []partView {
		t.Helper()
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(9)
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("orders")
		req.Topics = append(req.Topics, rt)
		resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
		var parts []partView
		for _, p := range resp.Topics[0].Partitions {
			parts = append(parts, partView{p.ErrorCode, p.Partition, p.Leader, p.LeaderEpoch, p.Replicas, p.ISR, p.OfflineReplicas})
		}
		return parts
	}
	check := func(step string, want []partView) {
		t.Helper()
		for range 2 { // built, then reused
			if got := orders(); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: orders partitions\n got %+v\nwant %+v", step, got, want)
			}
		}
	}
	check("broker 3 down", []partView{
		{0, 0, 1, -1, []int32{1, 2}, []int32{1, 2}, nil},
		{int16(newproto.ErrLeaderNotAvailable), 1, -1, -1, []int32{3, 2}, []int32{2}, []int32{3}},
	})
	cl.change(func(c *lockedCluster) {
		c.brokers = append(c.brokers, newproto.Broker{NodeID: 3, Host: "10.0.0.3", Port: 9092})
	})
	check("broker 3 back", []partView{
		{0, 0, 1, -1, []int32{1, 2}, []int32{1, 2}, nil},
		{0, 1, 3, -1, []int32{3, 2}, []int32{2}, nil},
	})
	cl.change(func(c *lockedCluster) {
		// In place, in the slice the Cluster returned before: partition 1
		// (element 0) gets leader 2, partition 0 (element 1) ISR [1].
		p := c.topics["orders"]
		p[0].Leader = 2
		p[1].ISR[1] = 1
		p[1].ISR = p[1].ISR[:1]
	})
	check("leader moved in place", []partView{
		{0, 0, 1, -1, []int32{1, 2}, []int32{1}, nil},
		{0, 1, 2, -1, []int32{3, 2}, []int32{2}, nil},
	})
	cl.change(func(c *lockedCluster) {
		c.topics["orders"] = append(slices.Clone(c.topics["orders"]), newproto.Partition{ID: 2, Leader: 3, Replicas: []int32{3}, ISR: []int32{3}})
	})
	check("partition added", []partView{
		{0, 0, 1, -1, []int32{1, 2}, []int32{1}, nil},
		{0, 1, 2, -1, []int32{3, 2}, []int32{2}, nil},
		{0, 2, 3, -1, []int32{3}, []int32{3}, nil},
	})
}

// idCluster is a Cluster whose topics may have ids (Kafka 2.8+ writes them
// to ZooKeeper).
type idCluster struct {
	*fakeCluster
	ids map[string][16]byte
}

func (c *idCluster) TopicIDs(context.Context) (map[string][16]byte, error) { return c.ids, c.err }

// From v10 a topic carries its id: the znode's, or the zero Uuid for a
// topic that has none. A topic asked for by id is answered by name.
func TestMetadataTopicIDs(t *testing.T) {
	ordersID := [16]byte{0x55, 0xf5, 0x95, 0xa5, 0xb1, 0xef, 0x42, 0x3d, 0x89, 0x83, 0x75, 0x83, 0xaf, 0x68, 0x41, 0x6d}
	cfg := metadataConfig()
	cfg.Cluster = &idCluster{fakeCluster: testCluster(), ids: map[string][16]byte{"orders": ordersID}}
	ts := startServer(t, cfg)
	c := kafkatest.Dial(t, ts.addr)

	idsOf := func(resp *kmsg.MetadataResponse) map[string][16]byte {
		out := map[string][16]byte{}
		for _, rt := range resp.Topics {
			if rt.Topic != nil {
				out[*rt.Topic] = rt.TopicID
			}
		}
		return out
	}
	for _, v := range []int16{10, 12} {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(v)
		resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
		want := map[string][16]byte{"orders": ordersID, "__consumer_offsets": {}}
		if got := idsOf(resp); !reflect.DeepEqual(got, want) {
			t.Errorf("v%d all topics: ids %v, want %v", v, got, want)
		}
	}

	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	for _, id := range [][16]byte{ordersID, {1, 2, 3}} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = id
		req.Topics = append(req.Topics, rt)
	}
	resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 2 {
		t.Fatalf("%d topics, want 2", len(resp.Topics))
	}
	if rt := resp.Topics[0]; rt.Topic == nil || *rt.Topic != "orders" || rt.TopicID != ordersID || rt.ErrorCode != 0 || len(rt.Partitions) != 2 {
		t.Errorf("by id: %+v, want orders with its two partitions", rt)
	}
	if rt := resp.Topics[1]; rt.Topic != nil || rt.TopicID != [16]byte{1, 2, 3} || rt.ErrorCode != int16(newproto.ErrUnknownTopicID) {
		t.Errorf("unknown id: %+v, want UNKNOWN_TOPIC_ID", rt)
	}
}

// topicsHidden is an Authorizer that lets nobody DESCRIBE the topics it names.
type topicsHidden map[string]bool

func (h topicsHidden) Authorize(_, _ string, _ authz.Operation, res authz.Resource) bool {
	return !(res.Type == authz.Topic && h[res.Name])
}

// With an Authorizer, a topic the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED
// without partitions: by its name when named, by its id alone (name null) when asked for by id,
// as KafkaApis answers (topic ids are not sensitive); an id nobody knows stays UNKNOWN_TOPIC_ID,
// and an all-topics request leaves the topic out.
func TestMetadataTopicDescribeByID(t *testing.T) {
	ordersID := [16]byte{0x55, 0xf5, 0x95, 0xa5}
	cfg := metadataConfig()
	cfg.Cluster = &idCluster{fakeCluster: testCluster(), ids: map[string][16]byte{"orders": ordersID}}
	cfg.Authorizer = topicsHidden{"orders": true}
	ts := startServer(t, cfg)
	c := kafkatest.Dial(t, ts.addr)

	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	for _, id := range [][16]byte{ordersID, {1, 2, 3}} {
		rt := kmsg.NewMetadataRequestTopic()
		rt.TopicID = id
		req.Topics = append(req.Topics, rt)
	}
	resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
	if len(resp.Topics) != 2 {
		t.Fatalf("%d topics, want 2", len(resp.Topics))
	}
	if rt := resp.Topics[0]; rt.Topic != nil || rt.TopicID != ordersID || rt.ErrorCode != int16(newproto.ErrTopicAuthorizationFailed) || len(rt.Partitions) != 0 {
		t.Errorf("by id: %+v, want TOPIC_AUTHORIZATION_FAILED with the id alone", rt)
	}
	if rt := resp.Topics[1]; rt.ErrorCode != int16(newproto.ErrUnknownTopicID) {
		t.Errorf("unknown id: %+v, want UNKNOWN_TOPIC_ID", rt)
	}

	byName := kmsg.NewPtrMetadataRequest()
	byName.SetVersion(12)
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("orders")
	byName.Topics = append(byName.Topics, rt)
	got := c.RoundTrip(byName).(*kmsg.MetadataResponse).Topics
	if len(got) != 1 || got[0].Topic == nil || *got[0].Topic != "orders" || got[0].TopicID != ([16]byte{}) ||
		got[0].ErrorCode != int16(newproto.ErrTopicAuthorizationFailed) || len(got[0].Partitions) != 0 {
		t.Errorf("by name: %+v, want orders TOPIC_AUTHORIZATION_FAILED", got)
	}

	all := kmsg.NewPtrMetadataRequest()
	all.SetVersion(12)
	for _, rt := range c.RoundTrip(all).(*kmsg.MetadataResponse).Topics {
		if rt.Topic != nil && *rt.Topic == "orders" {
			t.Errorf("all topics lists orders: %+v", rt)
		}
	}
}
