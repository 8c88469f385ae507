package kafkatest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// KafkaGoGroupConfig is a segmentio/kafka-go ConsumerGroup as the tests run it: heartbeats
// every 100 ms, a 10 s session and rebalance timeout, a 100 ms backoff between joins, reading
// from the first offset. Callers adjust the copy they get.
func KafkaGoGroupConfig(group, topic string, brokers ...string) kafka.ConsumerGroupConfig {
	return kafka.ConsumerGroupConfig{
		ID:                group,
		Brokers:           brokers,
		Topics:            []string{topic},
		HeartbeatInterval: 100 * time.Millisecond,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  100 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
	}
}

// KafkaGoMember runs one kafka-go ConsumerGroup until the test ends and records the generation
// it was handed last.
type KafkaGoMember struct {
	cg *kafka.ConsumerGroup

	mu  sync.Mutex
	gen *kafka.Generation
}

// StartKafkaGo starts a ConsumerGroup with cfg; t.Cleanup closes it.
func StartKafkaGo(t testing.TB, cfg kafka.ConsumerGroupConfig) *KafkaGoMember {
	t.Helper()
	cg, err := kafka.NewConsumerGroup(cfg)
	if err != nil {
		t.Fatalf("kafka.NewConsumerGroup: %v", err)
	}
	m := &KafkaGoMember{cg: cg}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			gen, err := cg.Next(ctx)
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
					return
				}
				continue // a rebalance or a retry: Next tries again
			}
			m.mu.Lock()
			m.gen = gen
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		cg.Close()
		<-done
	})
	return m
}

// Current returns the member's latest generation (nil and id -1 before the first), its member
// id and its partitions of topic, sorted.
func (m *KafkaGoMember) Current(topic string) (gen *kafka.Generation, id int32, member string, partitions []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen == nil {
		return nil, -1, "", nil
	}
	for _, a := range m.gen.Assignments[topic] {
		partitions = append(partitions, int32(a.ID))
	}
	slices.Sort(partitions)
	return m.gen, m.gen.ID, m.gen.MemberID, partitions
}
