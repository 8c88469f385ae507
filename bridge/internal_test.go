package bridge

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
)

// kafka-go's ConsumerGroup writes member metadata with version 1 but without the owned
// partitions version 1 adds (issue 3 §7: parse leniently); franz-go and the Java client write
// the full version. Both must give the subscription.
func TestSubscribedTopicsLenient(t *testing.T) {
	full := kmsg.NewConsumerMemberMetadata()
	full.Version = 3
	full.Topics = []string{"orders", "payments"}
	full.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "orders", Partitions: []int32{1}}}

	// kafka-go: version 1, topics, user data, and nothing after.
	var kafkaGo []byte
	kafkaGo = binary.BigEndian.AppendUint16(kafkaGo, 1)
	kafkaGo = binary.BigEndian.AppendUint32(kafkaGo, 2)
	for _, topic := range []string{"orders", "payments"} {
		kafkaGo = binary.BigEndian.AppendUint16(kafkaGo, uint16(len(topic)))
		kafkaGo = append(kafkaGo, topic...)
	}
	kafkaGo = binary.BigEndian.AppendUint32(kafkaGo, 0) // empty user data

	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"franz-go v3", full.AppendTo(nil)},
		{"kafka-go v1 without owned partitions", kafkaGo},
	} {
		got, err := subscribedTopics(tc.b)
		if err != nil || strings.Join(got, ",") != "orders,payments" {
			t.Errorf("%s: subscribedTopics = %v, %v; want orders,payments", tc.name, got, err)
		}
	}
	if _, err := subscribedTopics([]byte{0, 1, 0xff}); err == nil {
		t.Errorf("subscribedTopics(garbage) succeeded")
	}
}

func TestAssignedPartitions(t *testing.T) {
	a := kmsg.NewConsumerMemberAssignment()
	a.Version = 1
	a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "orders", Partitions: []int32{0, 2}}}
	got, err := assignedPartitions(a.AppendTo(nil))
	if err != nil || len(got) != 1 || got[0].topic != "orders" || len(got[0].partitions) != 2 {
		t.Fatalf("assignedPartitions = %+v, %v", got, err)
	}
	if got, err := assignedPartitions(nil); err != nil || got != nil {
		t.Errorf("assignedPartitions(empty) = %+v, %v; want nothing", got, err)
	}
	if _, err := assignedPartitions([]byte{0, 0, 0, 0, 0, 9}); err == nil {
		t.Errorf("assignedPartitions(truncated) succeeded")
	}
}

// The mirror of one member in exact 0.8 formats: the consumer id parses as 0.8.2's
// consumerIdString, owners hold <consumer-id>-0, the registration reads back.
func TestBuildMirror(t *testing.T) {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"orders", "payments"}
	asg := kmsg.NewConsumerMemberAssignment()
	asg.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "orders", Partitions: []int32{0, 1}}}
	d := group.Description{
		Group: "billing", State: group.Stable, ProtocolType: "consumer", Generation: 4,
		Members: []group.MemberDescription{
			{MemberID: "client-1-uuid", ClientHost: "/10.1.2.3", Metadata: meta.AppendTo(nil), Assignment: asg.AppendTo(nil)},
			{MemberID: "broken", ClientHost: "/10.1.2.4", Metadata: []byte{0, 9}, Assignment: asg.AppendTo(nil)},
		},
	}
	seen := map[group.MemberID]int64{"gone": 1}
	now := time.UnixMilli(1700000000123)
	ms := buildMirror("billing", d, seen, now, zerolog.Nop(), nil)
	if _, ok := seen["gone"]; ok || seen["client-1-uuid"] != now.UnixMilli() {
		t.Errorf("seen = %v, want only the present members, first seen now", seen)
	}
	if len(ms.ids) != 1 || len(ms.owners) != 2 {
		t.Fatalf("mirror = %d ids, %d owners; want 1 and 2 (the broken member left out)", len(ms.ids), len(ms.owners))
	}
	for p, data := range ms.ids {
		cid := strings.TrimPrefix(p, zkstate.IDsPath("billing")+"/")
		if !strings.HasPrefix(cid, "billing_10.1.2.3-1700000000123-") || len(cid) != len("billing_10.1.2.3-1700000000123-")+8 {
			t.Errorf("consumer id %q, want billing_10.1.2.3-1700000000123-<8 hex>", cid)
		}
		reg, err := zkstate.ParseConsumerRegistration(data)
		if err != nil || reg.Subscription["orders"] != 1 || reg.Subscription["payments"] != 1 || reg.TimestampMs != now.UnixMilli() {
			t.Errorf("registration %s = %+v, %v", data, reg, err)
		}
		if want := `{"version":1,"subscription":{"orders":1,"payments":1},"pattern":"static","timestamp":"1700000000123"}`; string(data) != want {
			t.Errorf("registration = %s, want %s", data, want)
		}
		owner := string(ms.owners[zkstate.OwnerPath("billing", "orders", 1)])
		if c, n, err := zkstate.ParseThreadID(owner); err != nil || c != cid || n != 0 {
			t.Errorf("owner of orders/1 = %q, want %s-0", owner, cid)
		}
	}
	d.ProtocolType = "connect"
	if ms := buildMirror("billing", d, seen, now, zerolog.Nop(), nil); len(ms.ids)+len(ms.owners) != 0 {
		t.Errorf("a connect group was mirrored: %+v", ms)
	}
}

func TestSanitizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"/10.0.0.1":        "10.0.0.1",
		"/0:0:0:0:0:0:0:1": "0_0_0_0_0_0_0_1",
		"host-a.example":   "host-a.example",
		"":                 "unknown",
	} {
		if got := sanitizeHost(in); got != want {
			t.Errorf("sanitizeHost(%q) = %q, want %q", in, got, want)
		}
	}
}

// One bad entry of an OffsetCommit is answered by itself (UNKNOWN_TOPIC_OR_PARTITION for a
// name ZooKeeper cannot hold or a topic or partition the cluster does not have,
// OFFSET_OUT_OF_RANGE for an offset below -1), the engine's answers for the rest keep their
// places, and each refusal is counted (issue 17: Kafka's KafkaApis.handleOffsetCommitRequest
// answers unknown partitions before the coordinator sees them).
func TestScreenOffsets(t *testing.T) {
	c := testLimitsCoordinator(t, Config{}, fakeTopics{"a": {0}, "c": {0, 1, 2}})
	ev := group.OffsetCommit{Token: 9, Offsets: []group.OffsetCommitPartition{
		{Topic: "a", Partition: 0}, {Topic: "x/y", Partition: 0}, {Topic: "b", Partition: -1}, {Topic: "c", Partition: 2},
		{Topic: "nope", Partition: 0}, {Topic: "c", Partition: 3}, {Topic: "a", Partition: 0, Offset: -7}, {Topic: "c", Partition: 1, Offset: -1},
	}}
	check, err := c.commitCheck(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	valid, fix := c.screenOffsets(ev, check)
	if len(valid.Offsets) != 3 || valid.Offsets[0].Topic != "a" || valid.Offsets[1].Topic != "c" || valid.Offsets[2].Offset != -1 {
		t.Fatalf("screened = %+v", valid.Offsets)
	}
	got := fix(group.OffsetCommitReply{Token: 9, Partitions: []group.OffsetCommitResult{
		{Topic: "a", Err: group.ErrNone}, {Topic: "c", Partition: 2, Err: group.ErrIllegalGeneration}, {Topic: "c", Partition: 1},
	}}).(group.OffsetCommitReply)
	want := []group.ErrorCode{group.ErrNone, errUnknownTopicOrPartition, errUnknownTopicOrPartition, group.ErrIllegalGeneration,
		errUnknownTopicOrPartition, errUnknownTopicOrPartition, errOffsetOutOfRange, group.ErrNone}
	for i, p := range got.Partitions {
		if p.Err != want[i] || p.Topic != ev.Offsets[i].Topic || p.Partition != ev.Offsets[i].Partition {
			t.Errorf("partition %d = %+v, want %s/%d with %v", i, p, ev.Offsets[i].Topic, ev.Offsets[i].Partition, want[i])
		}
	}
	for limit, n := range map[string]float64{limitUnknownTopic: 4, limitNegativeOffset: 1} {
		if got := metricValue(t, c.metrics.limitRefusals.WithLabelValues(limit)); got != n {
			t.Errorf("refusals{limit=%q} = %v, want %v", limit, got, n)
		}
	}

	clean := group.OffsetCommit{Offsets: []group.OffsetCommitPartition{{Topic: "a"}}}
	check, _ = c.commitCheck(context.Background(), clean)
	if _, fix := c.screenOffsets(clean, check); fix != nil {
		t.Errorf("a clean commit got a fix")
	}
}

// A commit of more partitions than MaxCommitPartitions is refused as a whole with
// INVALID_COMMIT_OFFSET_SIZE (what Kafka answers a commit too large for its offsets topic).
func TestScreenOffsetsTooMany(t *testing.T) {
	c := testLimitsCoordinator(t, Config{MaxCommitPartitions: 2}, fakeTopics{"a": {0, 1, 2}})
	ev := group.OffsetCommit{Offsets: []group.OffsetCommitPartition{{Topic: "a"}, {Topic: "a", Partition: 1}, {Topic: "a", Partition: 2}}}
	check, err := c.commitCheck(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	valid, fix := c.screenOffsets(ev, check)
	if len(valid.Offsets) != 0 {
		t.Fatalf("screened = %+v, want none", valid.Offsets)
	}
	for _, p := range fix(group.OffsetCommitReply{}).(group.OffsetCommitReply).Partitions {
		if p.Err != errInvalidCommitOffsetSize {
			t.Errorf("%+v, want INVALID_COMMIT_OFFSET_SIZE", p)
		}
	}
	if got := metricValue(t, c.metrics.limitRefusals.WithLabelValues(limitCommitPartitions)); got != 3 {
		t.Errorf("refusals = %v, want 3", got)
	}
	ev.Offsets = ev.Offsets[:2]
	check, _ = c.commitCheck(context.Background(), ev)
	if _, fix := c.screenOffsets(ev, check); fix != nil {
		t.Errorf("a commit at the limit was refused")
	}
}

// Without /brokers/topics (no Kafka cluster registered) nothing can be checked: any topic is
// accepted, and the gauge says so.
func TestScreenOffsetsNoTopicsNode(t *testing.T) {
	c := testLimitsCoordinator(t, Config{}, fakeTopics(nil))
	ev := group.OffsetCommit{Offsets: []group.OffsetCommitPartition{{Topic: "anything", Partition: 7}}}
	check, err := c.commitCheck(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, fix := c.screenOffsets(ev, check); fix != nil {
		t.Errorf("refused without a topic list")
	}
	if got := metricValue(t, c.metrics.topicCheck); got != 0 {
		t.Errorf("topic_check = %v, want 0", got)
	}
}

// metricValue reads one counter or gauge.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if c := out.GetCounter(); c != nil {
		return c.GetValue()
	}
	return out.GetGauge().GetValue()
}

// fakeTopics is a topicSource: topic → partition ids; nil: ZooKeeper has no /brokers/topics.
type fakeTopics map[string][]int32

func (f fakeTopics) Topics(context.Context) (map[string][]newproto.Partition, error) {
	out := map[string][]newproto.Partition{}
	for t, ps := range f {
		for _, p := range ps {
			out[t] = append(out[t], newproto.Partition{ID: p})
		}
	}
	return out, nil
}

func (f fakeTopics) HasTopicsNode() bool { return f != nil }

func testLimitsCoordinator(t testing.TB, cfg Config, topics topicSource) *coordinator {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := newCoordinator(cfg.withDefaults(), zerolog.Nop(), m)
	t.Cleanup(c.close)
	c.topics = topics
	return c
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"billing", "a.b-c_d", "zookeeper", "with space", "ünïcode"} {
		if err := validName("group", ok); err != nil {
			t.Errorf("validName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00b", "a\x01", "\ufff5", string([]byte{0xff})} {
		if err := validName("group", bad); err == nil {
			t.Errorf("validName(%q) accepted", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "ZKConnect") {
		t.Errorf("Validate(zero) = %v, want ZKConnect required", err)
	}
	c := Config{ZKConnect: "127.0.0.1:2181"}.withDefaults()
	if c.Root != DefaultRoot || c.NodeID != DefaultNodeID || c.KafkaListen != DefaultKafkaListen ||
		c.AdminListen != DefaultAdminListen || c.Group != group.DefaultConfig() {
		t.Errorf("defaults = %+v", c)
	}
	for _, bad := range []Config{
		{ZKConnect: "h:1", Root: "zkbridge"},
		{ZKConnect: "h:1", Root: "/"},
		{ZKConnect: "h:1", NodeID: -1},
		{ZKConnect: "h:1", KafkaListen: "nope"},
		{ZKConnect: "h:1", AdvertisedAddr: "host"},
		{ZKConnect: "h:1", AdvertisedAddr: "host:0"},
		{ZKConnect: "h:1", WriteTimeout: -time.Second},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", bad)
		}
	}
	if err := (Config{ZKConnect: "h:1/chroot", AdvertisedAddr: "kafka.example:9092"}).Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
}

// BenchmarkCommitCheck is what the commit limits add to an OffsetCommit of n partitions of a
// 1,000-partition topic (limits.go): the cluster's topics from its cache, one lookup per
// partition. Compare with BenchmarkOffsetCommit's time per request (a ZooKeeper write).
func BenchmarkCommitCheck(b *testing.B) {
	parts := make([]int32, 1000)
	for i := range parts {
		parts[i] = int32(i)
	}
	for _, n := range []int{1, 100} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			c := testLimitsCoordinator(b, Config{}, fakeTopics{"commits": parts})
			src := c.topics.(fakeTopics)
			cached, _ := src.Topics(context.Background())
			c.topics = cachedTopics(cached)
			ev := group.OffsetCommit{}
			for p := range n {
				ev.Offsets = append(ev.Offsets, group.OffsetCommitPartition{Topic: "commits", Partition: int32(p * 7 % 1000), Offset: 5})
			}
			b.ResetTimer()
			for range b.N {
				check, err := c.commitCheck(context.Background(), ev)
				if err != nil {
					b.Fatal(err)
				}
				if _, fix := c.screenOffsets(ev, check); fix != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}

// cachedTopics is a topicSource that answers from a map built once, as cluster answers from
// its cache.
type cachedTopics map[string][]newproto.Partition

func (c cachedTopics) Topics(context.Context) (map[string][]newproto.Partition, error) { return c, nil }
func (c cachedTopics) HasTopicsNode() bool                                             { return true }
