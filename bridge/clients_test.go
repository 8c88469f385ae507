package bridge_test

// Unmodified Kafka clients against the real bridge and a real ZooKeeper (issue 3, "Test with
// real clients"), the cases bridge/kgo_test.go does not cover: segmentio/kafka-go's
// ConsumerGroup, librdkafka (Debian's kcat) alone as a static member and together with kgo in
// one group, two live kgo clients with one instance id, and member ids full of characters a
// znode name cannot hold. Every partition of the test topics is led by the bridge's own node
// id, so no client dials a broker that does not exist; the bridge does not serve Fetch yet (the
// data path is another issue), so the clients never consume a record and kcat logs fetch
// errors. These tests check group membership, ownership and offsets only.

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// clientsNode is the bridge's node id in these tests; it leads every partition.
const clientsNode int32 = 9000

// loadTopics writes /brokers for topics (name → partition count): one broker, clientsNode, that
// leads every partition. The bridge's Metadata replaces that broker by its own listener, so
// clients only ever dial the bridge.
func loadTopics(t testing.TB, zk *zkstate.Store, topics map[string]int32) {
	t.Helper()
	loadTopicsLayout(t, zk, topics, false)
}

// loadTopicsWithIDs is loadTopics as Kafka 2.8+ in ZooKeeper mode writes the topics: version 3
// of the znode, with a topic id (KIP-516), as kfake's topics have one.
func loadTopicsWithIDs(t testing.TB, zk *zkstate.Store, topics map[string]int32) {
	t.Helper()
	loadTopicsLayout(t, zk, topics, true)
}

func loadTopicsLayout(t testing.TB, zk *zkstate.Store, topics map[string]int32, ids bool) {
	t.Helper()
	layout := zkstate.Layout{
		Brokers:  []zkstate.BrokerRegistration{{ID: clientsNode, Version: 1, Host: "127.0.0.1", Port: 1, JMXPort: -1, Timestamp: "1"}},
		Topics:   map[string]zkstate.TopicAssignment{},
		States:   map[zkstate.TopicPartition]zkstate.PartitionState{},
		TopicIDs: ids,
	}
	version := 1
	if ids {
		version = 3
	}
	for topic, n := range topics {
		a := zkstate.TopicAssignment{Version: version, Partitions: map[int32][]int32{}}
		for p := range n {
			a.Partitions[p] = []int32{clientsNode}
			layout.States[zkstate.TopicPartition{Topic: topic, Partition: p}] = zkstate.PartitionState{Version: 1, Leader: clientsNode, ISR: []int32{clientsNode}}
		}
		layout.Topics[topic] = a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, zk, layout); err != nil {
		t.Fatalf("LoadLayout: %v", err)
	}
}

// describedMember is one member of a DescribeGroups answer, with its partitions of one topic.
type describedMember struct {
	clientID, clientHost, instanceID string
	partitions                       []int32
}

// describeWire asks DescribeGroups v4 (the last non-flexible version, the first with instance
// ids) over the Kafka wire, as a client or an admin tool does, and decodes each member's
// consumer-protocol assignment of topic.
func describeWire(t *testing.T, addr, g, topic string) (state string, members map[string]describedMember) {
	t.Helper()
	r := kmsg.NewPtrDescribeGroupsRequest()
	r.SetVersion(4)
	r.Groups = []string{g}
	dg := kafkaRoundTrip(t, addr, r).(*kmsg.DescribeGroupsResponse).Groups[0]
	if dg.ErrorCode != 0 {
		t.Fatalf("DescribeGroups(%s): error %d", g, dg.ErrorCode)
	}
	members = map[string]describedMember{}
	for _, m := range dg.Members {
		dm := describedMember{clientID: m.ClientID, clientHost: m.ClientHost}
		if m.InstanceID != nil {
			dm.instanceID = *m.InstanceID
		}
		if len(m.MemberAssignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				t.Fatalf("member %s: assignment %x: %v", m.MemberID, m.MemberAssignment, err)
			}
			for _, at := range a.Topics {
				if at.Topic == topic {
					dm.partitions = append(dm.partitions, at.Partitions...)
				}
			}
		}
		slices.Sort(dm.partitions)
		members[m.MemberID] = dm
	}
	return dg.State, members
}

// coversOnce reports whether the lists hold 0..n-1 exactly once, none of them empty.
func coversOnce(n int32, lists ...[]int32) bool {
	var all []int32
	for _, l := range lists {
		if len(l) == 0 {
			return false
		}
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) != int(n) {
		return false
	}
	for i, p := range all {
		if p != int32(i) {
			return false
		}
	}
	return true
}

// mirrorConsumerID is the shape of the 0.8 consumer ids the bridge derives (mirror.go):
// <group>_<sanitised host>-<ms>-<8 hex digits of the member id's FNV-1a hash>; this matches what
// follows the group name. Nothing of a raw member id (spaces, '/', '@', parentheses) may reach
// a znode name.
var mirrorConsumerID = regexp.MustCompile(`^_[A-Za-z0-9._-]+-[0-9]+-([0-9a-f]{8})$`)

// memberHash is the hash part of the consumer id the mirror gives a member (mirror.go
// consumerID), so a test can tell which member a registration and its owners belong to.
func memberHash(id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return fmt.Sprintf("%08x", h.Sum32())
}

// checkOwnership waits until the Kafka 0.8 mirror of group g (DESIGN.md §4, issue 3 rule 7) is
// exactly want: one registration under /consumers/<g>/ids per member, subscribed to topic, and
// an owner /consumers/<g>/owners/<topic>/<p> holding "<consumer-id>-0" of the member that was
// assigned p, for every partition of want and no other. want maps member ids to partitions.
func checkOwnership(t *testing.T, zk *zkstate.Store, g, topic string, want map[string][]int32) {
	t.Helper()
	ctx := t.Context()
	byHash := map[string]string{}
	total := 0
	for id, ps := range want {
		byHash[memberHash(id)] = id
		total += len(ps)
	}
	zktest.Eventually(t, 15*time.Second, "0.8 mirror of "+g, func() (bool, string) {
		snap, err := zk.Snapshot(ctx, g)
		if err != nil {
			return false, err.Error()
		}
		if len(snap.Problems) > 0 {
			return false, fmt.Sprintf("problems %v", snap.Problems)
		}
		consumers := map[string]string{} // consumer id → member id
		for cid, c := range snap.Consumers {
			m := mirrorConsumerID.FindStringSubmatch(strings.TrimPrefix(cid, g))
			if m == nil || !strings.HasPrefix(cid, g+"_") {
				return false, fmt.Sprintf("registration %q is not <group>_<host>-<ms>-<hash>", cid)
			}
			// The hash is the member id's, or the instance id's for a static member (whose
			// consumer id survives its restarts); the hosted-member znode names the member.
			member, ok := byHash[m[1]]
			if data, _, err := zk.Get(ctx, zkstate.HostedMemberPath("/zkbridge", g, cid)); err == nil {
				if h, err := zkstate.ParseHostedMember(data); err == nil && h.Kind == zkstate.KindKafka {
					_, ok = want[h.Member]
					member = h.Member
				}
			}
			if !ok {
				return false, fmt.Sprintf("registration %q of no current member", cid)
			}
			if c.Registration.Subscription[topic] != 1 || c.Registration.Pattern != zkstate.PatternStatic {
				return false, fmt.Sprintf("registration %q: %+v", cid, c.Registration)
			}
			consumers[cid] = member
		}
		if len(consumers) != len(want) {
			return false, fmt.Sprintf("%d registrations %v, want %d", len(consumers), slices.Sorted(maps.Keys(snap.Consumers)), len(want))
		}
		got := map[string][]int32{}
		for tp, thread := range snap.Owners {
			cid, n, err := zkstate.ParseThreadID(thread)
			if err != nil || n != 0 || tp.Topic != topic {
				return false, fmt.Sprintf("owner %v = %q", tp, thread)
			}
			member, ok := consumers[cid]
			if !ok {
				return false, fmt.Sprintf("owner %v = %q: no such registration", tp, thread)
			}
			got[member] = append(got[member], tp.Partition)
		}
		if len(snap.Owners) != total {
			return false, fmt.Sprintf("%d owners, want %d", len(snap.Owners), total)
		}
		for id, ps := range want {
			g := slices.Sorted(slices.Values(got[id]))
			if !slices.Equal(g, slices.Sorted(slices.Values(ps))) {
				return false, fmt.Sprintf("member %q owns %v in ZooKeeper, was assigned %v", id, g, ps)
			}
		}
		return true, ""
	})
}

// startKafkaGo starts a kafka-go member of g with clientID (kafka-go sends it in every request)
// and a 5 s rebalance timeout.
func startKafkaGo(t *testing.T, addr, g, topic, clientID string) *kafkatest.KafkaGoMember {
	t.Helper()
	cfg := kafkatest.KafkaGoGroupConfig(g, topic, addr)
	cfg.Dialer = &kafka.Dialer{ClientID: clientID, Timeout: 10 * time.Second}
	cfg.RebalanceTimeout = 5 * time.Second
	return kafkatest.StartKafkaGo(t, cfg)
}

// segmentio/kafka-go's ConsumerGroup (JoinGroup v1/v2, SyncGroup v0, Heartbeat v0, OffsetCommit
// v2, OffsetFetch v1, consumer-protocol metadata that says version 1 but lacks owned
// partitions) with two members, issue 3 "Test with real clients": the assignment its leader
// computes covers every partition exactly once; Generation.CommitOffsets lands in
// /consumers/<g>/offsets/<t>/<p> (rule 7) and OffsetFetch reads it back.
//
// The client ids hold spaces, '/', '@' and parentheses, as kafka-go's own default
// ("<prog>@<host> (github.com/segmentio/kafka-go)") does, and the bridge's member ids start with
// the client id (Kafka's generateMemberId). The 0.8 mirror must still hold one well-formed
// registration per member and one owner per partition: no znode path is built from a raw
// member id.
func TestIntegration_KafkaGoConsumerGroup(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	const g, topic = "kafka-go group", "clicks"
	loadTopics(t, zk, map[string]int32{topic: 6})
	b := startBridge(t, connect, clientsNode, nil)
	addr := b.Addr().String()

	a := startKafkaGo(t, addr, g, topic, "billing/worker 1@host-a (github.com/segmentio/kafka-go)")
	c := startKafkaGo(t, addr, g, topic, "billing/worker 2@host-b (github.com/segmentio/kafka-go)")

	zktest.Eventually(t, 20*time.Second, "2 kafka-go members Stable, covering 6 partitions", func() (bool, string) {
		_, ga, _, pa := a.Current(topic)
		_, gc, _, pc := c.Current(topic)
		d := describe(t, b, g).Group
		return d.State == group.Stable && len(d.Members) == 2 && ga == gc && ga == int32(d.Generation) && coversOnce(6, pa, pc),
			fmt.Sprintf("%v gen %d with %d members; a gen %d %v, c gen %d %v", d.State, d.Generation, len(d.Members), ga, pa, gc, pc)
	})
	genA, _, idA, pa := a.Current(topic)
	_, _, idC, pc := c.Current(topic)
	t.Logf("a %q: %v; c %q: %v", idA, pa, idC, pc)
	for _, id := range []string{idA, idC} {
		if !strings.ContainsAny(id, "/ @") {
			t.Fatalf("member id %q has none of '/', ' ', '@': the test does not check what it says", id)
		}
	}

	// DescribeGroups over the wire: both members, with kafka-go's client ids.
	state, members := describeWire(t, addr, g, topic)
	if state != "Stable" || len(members) != 2 || members[idA].clientID != "billing/worker 1@host-a (github.com/segmentio/kafka-go)" ||
		!slices.Equal(members[idA].partitions, pa) || !slices.Equal(members[idC].partitions, pc) {
		t.Errorf("DescribeGroups: %s %+v", state, members)
	}

	// The 0.8 mirror, despite the member ids.
	checkOwnership(t, zk, g, topic, map[string][]int32{idA: pa, idC: pc})

	// A commit through kafka-go's Generation (OffsetCommit v2 with a retention time).
	if err := genA.CommitOffsets(map[string]map[int]int64{topic: {int(pa[0]): 77}}); err != nil {
		t.Fatalf("Generation.CommitOffsets: %v", err)
	}
	if d, _, err := zk.Get(t.Context(), zkstate.OffsetPath(g, topic, pa[0])); err != nil || string(d) != "77" {
		t.Fatalf("0.8 offset %s = %q, %v; want 77", zkstate.OffsetPath(g, topic, pa[0]), d, err)
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.SetVersion(1) // kafka-go's version
	fetch.Group = g
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = topic, []int32{pa[0], pc[0]}
	fetch.Topics = append(fetch.Topics, ft)
	fr := kafkaRoundTrip(t, addr, fetch).(*kmsg.OffsetFetchResponse)
	got := map[int32]int64{}
	for _, rt := range fr.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Errorf("OffsetFetch %s/%d: error %d", rt.Topic, rp.Partition, rp.ErrorCode)
			}
			got[rp.Partition] = rp.Offset
		}
	}
	if want := map[int32]int64{pa[0]: 77, pc[0]: -1}; !maps.Equal(got, want) {
		t.Errorf("OffsetFetch = %v, want %v (-1: nothing committed)", got, want)
	}
}

// kgo and librdkafka (kcat -G, static with group.instance.id) in one group, issue 3 "Test with
// real clients": both agree on the range assignor (librdkafka offers range and roundrobin,
// kgo is told to offer range), both members show up in DescribeGroups (kcat with librdkafka's
// client id "rdkafka" and its instance id), their assignments cover every partition exactly
// once, and the ownership of every partition is mirrored in /consumers/<g>/owners (rule 7),
// each owner naming the registration of the member that was assigned it.
func TestIntegration_KgoAndKcatInOneGroup(t *testing.T) {
	kafkatest.KcatPath(t)
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	const g, topic = "kgo-kcat", "events"
	loadTopics(t, zk, map[string]int32{topic: 6})
	b := startBridge(t, connect, clientsNode, nil)
	addr := b.Addr().String()

	k := kafkatest.StartKgo(t, addr, g, topic, kgo.Balancers(kgo.RangeBalancer()), kgo.ClientID("kgo-member"))
	zktest.Eventually(t, 15*time.Second, "kgo alone Stable", func() (bool, string) {
		d := describe(t, b, g).Group
		return d.State == group.Stable && len(d.Members) == 1 && len(k.Partitions()) == 6, fmt.Sprintf("%v %d members", d.State, len(d.Members))
	})
	kafkatest.StartKcat(t, addr, g, topic, "-X", "group.instance.id=kcat-static")

	var members map[string]describedMember
	zktest.Eventually(t, 30*time.Second, "kgo and kcat Stable, covering 6 partitions", func() (bool, string) {
		var state string
		state, members = describeWire(t, addr, g, topic)
		var lists [][]int32
		for _, m := range members {
			lists = append(lists, m.partitions)
		}
		return state == "Stable" && len(members) == 2 && coversOnce(6, lists...), fmt.Sprintf("%s %+v", state, members)
	})
	want := map[string][]int32{}
	clients := map[string]string{}
	for id, m := range members {
		want[id] = m.partitions
		clients[m.clientID] = m.instanceID
		if m.clientHost != "/127.0.0.1" {
			t.Errorf("member %s: client host %q", id, m.clientHost)
		}
	}
	if fmt.Sprint(clients) != "map[kgo-member: rdkafka:kcat-static]" {
		t.Errorf("described clients (client id → instance id) %v, want kgo-member dynamic and rdkafka static as kcat-static", clients)
	}
	// kgo learns its partitions from its SyncGroup answer, a moment after the coordinator
	// has them.
	kid, _ := k.GroupMetadata()
	zktest.Eventually(t, 5*time.Second, "kgo holds what DescribeGroups says", func() (bool, string) {
		return slices.Equal(want[kid], k.Partitions()), fmt.Sprintf("kgo holds %v, DescribeGroups says %v", k.Partitions(), want[kid])
	})
	t.Logf("members %+v", members)
	checkOwnership(t, zk, g, topic, want)
}

// kcat alone with group.instance.id, issue 3 "librdkafka through Debian's kcat joins with
// -X group.instance.id=… and shows up in DescribeGroups": a static member (KIP-345) with
// librdkafka's client id, owning every partition, in the engine's state, in the persisted
// group record under the bridge's root (rule 6: members with instance ids) and in the 0.8
// mirror.
func TestIntegration_KcatStaticMember(t *testing.T) {
	kafkatest.KcatPath(t)
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	const g, topic = "kcat-static", "payments"
	loadTopics(t, zk, map[string]int32{topic: 4})
	b := startBridge(t, connect, clientsNode, nil)
	addr := b.Addr().String()
	kafkatest.StartKcat(t, addr, g, topic, "-X", "group.instance.id=x")

	var members map[string]describedMember
	zktest.Eventually(t, 20*time.Second, "kcat Stable", func() (bool, string) {
		var state string
		state, members = describeWire(t, addr, g, topic)
		return state == "Stable" && len(members) == 1, fmt.Sprintf("%s %+v", state, members)
	})
	id := slices.Collect(maps.Keys(members))[0]
	m := members[id]
	if m.instanceID != "x" || m.clientID != "rdkafka" || !coversOnce(4, m.partitions) || !strings.HasPrefix(id, "x-") {
		t.Errorf("DescribeGroups member %q: %+v; want static instance x (member id x-<uuid>), client rdkafka, partitions 0-3", id, m)
	}
	d := describe(t, b, g).Group
	if len(d.Members) != 1 || d.Members[0].InstanceID != "x" || string(d.Members[0].MemberID) != id {
		t.Errorf("engine's members %+v", d.Members)
	}
	rec, _, err := zk.Get(t.Context(), "/zkbridge/groups/"+g+"/record")
	if err != nil || !strings.Contains(string(rec), `"x"`) || !strings.Contains(string(rec), id) {
		t.Errorf("group record %s (%v) does not hold instance x with member %s", rec, err, id)
	}
	checkOwnership(t, zk, g, topic, map[string][]int32{id: m.partitions})
}

// Two live kgo clients with one instance id, issue 3 rule 5 ("any request whose instance id
// maps to another member id → FENCED_INSTANCE_ID") end to end: the second client's JoinGroup
// (empty member id, known instance, Stable group) replaces the first member with no rebalance
// and the cached assignment; the first client's next heartbeat is answered
// FENCED_INSTANCE_ID (82), which kgo reports as a group-management error. The instance id holds
// '/', ' ' and '@', so the member ids do too (Kafka prefixes them with the instance id): the
// 0.8 mirror follows the replacement with a well-formed registration of the new member id.
func TestIntegration_KgoSameInstanceIDFenced(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	const g, topic, inst = "twins", "orders", "pod/a b@zone-1"
	loadTopics(t, zk, map[string]int32{topic: 6})
	b := startBridge(t, connect, clientsNode, nil)
	addr := b.Addr().String()

	older := kafkatest.StartKgo(t, addr, g, topic, kgo.InstanceID(inst))
	zktest.Eventually(t, 15*time.Second, "the first client Stable with 6 partitions", func() (bool, string) {
		d := describe(t, b, g).Group
		return d.State == group.Stable && len(d.Members) == 1 && len(older.Partitions()) == 6,
			fmt.Sprintf("%v %d members, owns %v", d.State, len(d.Members), older.Partitions())
	})
	oldID, oldGen := older.GroupMetadata()
	before := describe(t, b, g).Group
	checkOwnership(t, zk, g, topic, map[string][]int32{oldID: {0, 1, 2, 3, 4, 5}})

	newer := kafkatest.StartKgo(t, addr, g, topic, kgo.InstanceID(inst))
	zktest.Eventually(t, 15*time.Second, "the older client fenced (82), the newer owning 6 partitions", func() (bool, string) {
		fenced, errs := older.Fenced()
		return fenced && len(newer.Partitions()) == 6, fmt.Sprintf("older errors %v, newer owns %v", errs, newer.Partitions())
	})
	newID, newGen := newer.GroupMetadata()
	d := describe(t, b, g).Group
	if newID == oldID || len(d.Members) != 1 || string(d.Members[0].MemberID) != newID || d.Members[0].InstanceID != inst {
		t.Errorf("members %+v, want only %q (instance %q) replacing %q", d.Members, newID, inst, oldID)
	}
	if d.Generation != before.Generation || newGen != oldGen || d.State != group.Stable {
		t.Errorf("replacement in a Stable group: %v generation %d (client %d), want Stable %d with no rebalance", d.State, d.Generation, newGen, before.Generation)
	}

	// The older member id, on the wire: fenced, whatever the request.
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(3)
	hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = g, oldID, oldGen, kmsg.StringPtr(inst)
	if r := kafkaRoundTrip(t, addr, hb).(*kmsg.HeartbeatResponse); r.ErrorCode != kerr.FencedInstanceID.Code {
		t.Errorf("heartbeat of the older member id: error %d, want FENCED_INSTANCE_ID (82)", r.ErrorCode)
	}
	checkOwnership(t, zk, g, topic, map[string][]int32{newID: {0, 1, 2, 3, 4, 5}})
}
