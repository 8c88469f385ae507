package zkstate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
)

// Layout is a Kafka 0.8-era ZooKeeper layout that LoadLayout writes in one go: what a cluster of
// 0.8.2 brokers and a few groups of 0.8.2 high-level consumers leave in ZooKeeper. It is for
// tests, benchmarks and the demo, never for a production ensemble (LoadLayout replaces what is
// there).
type Layout struct {
	// Brokers go to /brokers/ids/<id>, written with BrokerRegistration.Encode.
	Brokers []BrokerRegistration
	// Topics go to /brokers/topics/<t> (partition -> replica broker ids).
	Topics map[string]TopicAssignment
	// States go to /brokers/topics/<t>/partitions/<p>/state, as the 0.8.2 controller writes
	// them; a partition without one has no state znode (as before a controller ran).
	States map[TopicPartition]PartitionState
	Groups []LayoutGroup
	// TopicIDs writes the topics as Kafka 2.8+ in ZooKeeper mode does (KIP-516): version 3 of
	// /brokers/topics/<t> with a "topic_id". A topic without a TopicID gets LayoutTopicID's.
	TopicIDs bool
}

// LayoutTopicID is the id a Layout with TopicIDs gives a topic that has none: derived from the
// name, so that loading twice gives the same ids (Kafka draws them at random).
func LayoutTopicID(topic string) [16]byte {
	sum := sha256.Sum256([]byte("zkstate layout topic id\x00" + topic))
	var id [16]byte
	copy(id[:], sum[:])
	return id
}

// LayoutGroup is one consumer group of a Layout, under /consumers/<Name>.
type LayoutGroup struct {
	Name      string
	Consumers []LayoutConsumer
	// Owners maps a partition to the owning thread id, "<consumerID>-<n>".
	Owners map[TopicPartition]string
	// Offsets maps a partition to the next offset to consume.
	Offsets map[TopicPartition]int64
}

// LayoutConsumer is one registration under /consumers/<g>/ids. Ephemeral makes it an ephemeral
// node of the loading Store's session, as a live 0.8 consumer's is; it then disappears with
// that session. Persistent registrations outlive the loader (the demo uses them).
type LayoutConsumer struct {
	ID           string
	Registration ConsumerRegistration
	Ephemeral    bool
}

// LoadLayout writes l with Multi (split into requests under the size limit; see Multi). It
// first deletes what it is about to write, so loading twice gives the same tree: the
// /consumers/<g> subtree of every group, /brokers/topics/<t> of every topic and
// /brokers/ids/<id> of every broker of l. Other znodes are left alone.
func LoadLayout(ctx context.Context, s *Store, l Layout) error {
	var replace []string
	for _, g := range l.Groups {
		if g.Name == "" {
			return fmt.Errorf("zkstate: load layout: a group has no name")
		}
		replace = append(replace, GroupPath(g.Name))
	}
	for _, t := range sortedKeys(l.Topics) {
		replace = append(replace, TopicPath(t))
	}
	for _, b := range l.Brokers {
		replace = append(replace, BrokerPath(b.ID))
	}
	for _, p := range replace {
		if err := s.DeleteRecursive(ctx, p); err != nil {
			return fmt.Errorf("zkstate: load layout: replace: %w", err)
		}
	}
	if err := s.Multi(ctx, l.ops()...); err != nil {
		return fmt.Errorf("zkstate: load layout: %w", err)
	}
	return nil
}

// ops lists the creates of the layout in a stable order, parents before children.
func (l Layout) ops() []Op {
	parents := CreateOptions{Parents: true}
	var ops []Op
	brokers := slices.Clone(l.Brokers)
	slices.SortFunc(brokers, func(a, b BrokerRegistration) int { return int(a.ID) - int(b.ID) })
	for _, b := range brokers {
		ops = append(ops, CreateOp(BrokerPath(b.ID), b.Encode(), parents))
	}
	for _, t := range sortedKeys(l.Topics) {
		a := l.Topics[t]
		if l.TopicIDs {
			a.Version = max(a.Version, 3)
			if a.TopicID == ([16]byte{}) {
				a.TopicID = LayoutTopicID(t)
			}
		}
		ops = append(ops, CreateOp(TopicPath(t), a.Encode(), parents))
	}
	for _, tp := range sortedTPs(l.States) {
		ops = append(ops, CreateOp(PartitionStatePath(tp.Topic, tp.Partition), encodePartitionState(l.States[tp]), parents))
	}
	for _, g := range l.Groups {
		ops = append(ops,
			CreateOp(GroupPath(g.Name), nil, parents),
			CreateOp(IDsPath(g.Name), nil, CreateOptions{}))
		consumers := slices.Clone(g.Consumers)
		slices.SortFunc(consumers, func(a, b LayoutConsumer) int {
			switch {
			case a.ID < b.ID:
				return -1
			case a.ID > b.ID:
				return 1
			}
			return 0
		})
		for _, c := range consumers {
			ops = append(ops, CreateOp(IDPath(g.Name, c.ID), c.Registration.Encode(),
				CreateOptions{Ephemeral: c.Ephemeral, Parents: true}))
		}
		for _, tp := range sortedTPs(g.Owners) {
			ops = append(ops, CreateOp(OwnerPath(g.Name, tp.Topic, tp.Partition), []byte(g.Owners[tp]), parents))
		}
		for _, tp := range sortedTPs(g.Offsets) {
			ops = append(ops, CreateOp(OffsetPath(g.Name, tp.Topic, tp.Partition), FormatOffset(g.Offsets[tp]), parents))
		}
	}
	return ops
}

// encodePartitionState writes a partition state as 0.8.2's ZkUtils.leaderAndIsrZkData does.
func encodePartitionState(st PartitionState) []byte {
	version := st.Version
	if version == 0 {
		version = 1
	}
	b := []byte(`{"controller_epoch":`)
	b = strconv.AppendInt(b, int64(st.ControllerEpoch), 10)
	b = append(b, `,"leader":`...)
	b = strconv.AppendInt(b, int64(st.Leader), 10)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(version), 10)
	b = append(b, `,"leader_epoch":`...)
	b = strconv.AppendInt(b, int64(st.LeaderEpoch), 10)
	b = append(b, `,"isr":[`...)
	for i, r := range st.ISR {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(r), 10)
	}
	return append(b, "]}"...)
}

func sortedTPs[V any](m map[TopicPartition]V) []TopicPartition {
	tps := make([]TopicPartition, 0, len(m))
	for tp := range m {
		tps = append(tps, tp)
	}
	slices.SortFunc(tps, func(a, b TopicPartition) int {
		switch {
		case a.Topic < b.Topic:
			return -1
		case a.Topic > b.Topic:
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	return tps
}

// Consumer ids of ExampleLayout, in 0.8.2's consumerIdString form
// (<group>_<host>-<startup ms>-<first 8 hex digits of a UUID>).
const (
	ExampleConsumer1 = "billing_host1-1700000000000-1a2b3c4d"
	ExampleConsumer2 = "billing_host2-1700000000500-5e6f7a8b"
)

// ExampleLayout is a small, realistic 0.8.2 cluster: brokers 1-3, topic "orders" with 6
// partitions and "payments" with 4 (replication factor 2, leaders on the first replica), and
// group "billing" with two consumers of 2 threads each, both subscribed to both topics, owning
// the partitions as 0.8.2's range assignor gives them and with an offset for every partition.
//
// The owners, worked by hand: the threads sorted as strings are host1-…-0, host1-…-1,
// host2-…-0, host2-…-1. orders has 6 partitions for 4 threads, 1 each and the first 6%4=2
// threads one more: host1-0 gets 0-1, host1-1 gets 2-3, host2-0 gets 4, host2-1 gets 5.
// payments has 4 partitions, one per thread in order.
func ExampleLayout() Layout {
	l := Layout{
		Topics: map[string]TopicAssignment{},
		States: map[TopicPartition]PartitionState{},
	}
	for id := int32(1); id <= 3; id++ {
		l.Brokers = append(l.Brokers, BrokerRegistration{
			ID: id, Version: 1, Host: "broker" + strconv.Itoa(int(id)), Port: 9092, JMXPort: -1,
			Timestamp: strconv.Itoa(1699999990000 + int(id)),
		})
	}
	// Replicas as 0.8.2's AdminUtils.assignReplicasToBrokers places them for a fixed start
	// broker: partition p on broker (start+p)%3, the second replica on the next broker.
	addTopic := func(name string, partitions int, start int) {
		a := TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
		for p := 0; p < partitions; p++ {
			first := int32((start+p)%3) + 1
			second := first%3 + 1
			replicas := []int32{first, second}
			a.Partitions[int32(p)] = replicas
			l.States[TopicPartition{name, int32(p)}] = PartitionState{
				Version: 1, ControllerEpoch: 1, Leader: first, LeaderEpoch: 0, ISR: slices.Clone(replicas),
			}
		}
		l.Topics[name] = a
	}
	addTopic("orders", 6, 0)
	addTopic("payments", 4, 1)

	reg := func(ms int64) ConsumerRegistration {
		return ConsumerRegistration{
			Version:      1,
			Subscription: map[string]int{"orders": 2, "payments": 2},
			Pattern:      PatternStatic,
			TimestampMs:  ms,
		}
	}
	t := func(consumer string, n int) string { return consumer + "-" + strconv.Itoa(n) }
	c1, c2 := ExampleConsumer1, ExampleConsumer2
	g := LayoutGroup{
		Name: "billing",
		Consumers: []LayoutConsumer{
			{ID: c1, Registration: reg(1700000000000)},
			{ID: c2, Registration: reg(1700000000500)},
		},
		Owners: map[TopicPartition]string{
			{"orders", 0}:   t(c1, 0),
			{"orders", 1}:   t(c1, 0),
			{"orders", 2}:   t(c1, 1),
			{"orders", 3}:   t(c1, 1),
			{"orders", 4}:   t(c2, 0),
			{"orders", 5}:   t(c2, 1),
			{"payments", 0}: t(c1, 0),
			{"payments", 1}: t(c1, 1),
			{"payments", 2}: t(c2, 0),
			{"payments", 3}: t(c2, 1),
		},
		Offsets: map[TopicPartition]int64{
			{"orders", 0}: 1200, {"orders", 1}: 1187, {"orders", 2}: 1342,
			{"orders", 3}: 1250, {"orders", 4}: 1198, {"orders", 5}: 1311,
			{"payments", 0}: 540, {"payments", 1}: 522, {"payments", 2}: 561, {"payments", 3}: 533,
		},
	}
	l.Groups = []LayoutGroup{g}
	return l
}
