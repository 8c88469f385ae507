package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// bridgeTargetTopicIDs is bridgeTarget with the topic written as Kafka 2.8+ in ZooKeeper mode
// writes it, with a topic id (zkstate.Layout.TopicIDs), as kfake's topics have one.
func bridgeTargetTopicIDs(b *testing.B, topic string, partitions int32, gcfg group.Config) coordinatorTarget {
	b.Helper()
	connect := zktest.Connect(b)
	layout := zkstate.Layout{
		Brokers:  []zkstate.BrokerRegistration{{ID: clientsNode, Version: 4, Host: "127.0.0.1", Port: 1, JMXPort: -1, Timestamp: "1"}},
		Topics:   map[string]zkstate.TopicAssignment{},
		States:   map[zkstate.TopicPartition]zkstate.PartitionState{},
		TopicIDs: true,
	}
	a := zkstate.TopicAssignment{Version: 3, Partitions: map[int32][]int32{}}
	for p := range partitions {
		a.Partitions[p] = []int32{clientsNode}
		layout.States[zkstate.TopicPartition{Topic: topic, Partition: p}] = zkstate.PartitionState{Version: 1, Leader: clientsNode, ISR: []int32{clientsNode}}
	}
	layout.Topics[topic] = a
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, openStore(b, connect), layout); err != nil {
		b.Fatalf("LoadLayout: %v", err)
	}
	br := startBridgeTB(b, connect, func(c *bridge.Config) { c.Group = gcfg })
	return coordinatorTarget{name: "zkbridge", addr: br.Addr().String(), bridge: br}
}
