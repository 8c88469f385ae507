package bridge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// startRecorder is a legacy.Handler that keeps the last Start it got.
type startRecorder struct {
	mu    sync.Mutex
	parts []legacy.PartitionOffset
}

func (r *startRecorder) OnStop() {}
func (r *startRecorder) OnStart(parts []legacy.PartitionOffset) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts = append([]legacy.PartitionOffset(nil), parts...)
	return nil
}
func (r *startRecorder) last() []legacy.PartitionOffset {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.parts
}

// The daemon serves legacy consumers next to Kafka clients: a legacy.Client that knows only the
// bridge's legacy address consults, registers and is started on every partition of its topic,
// with its owners in ZooKeeper (issue 4, item 2: `zkbridge serve --legacy-listen`).
func TestIntegration_BridgeServesLegacyConsumers(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := zkstate.LoadLayout(ctx, s, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}, 2: {1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, 9001, func(c *bridge.Config) { c.LegacyListen = "127.0.0.1:0" })
	if b.LegacyAddr() == nil {
		t.Fatal("no legacy listener")
	}

	rec := &startRecorder{}
	cl, err := legacy.NewClient(legacy.ClientConfig{
		Brokers:         []string{b.LegacyAddr().String()},
		GroupID:         "old-app",
		ConsumerID:      "old-app_host-1-0000abcd",
		Subscription:    map[string]int{"events": 1},
		AutoCommit:      true,
		AutoOffsetReset: legacy.ResetSmallest,
		PingInterval:    200 * time.Millisecond,
		MaxPingRetries:  3,
		Handler:         rec,
		Logger:          newLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopClient := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.Run(runCtx) }()
	defer func() {
		stopClient()
		<-done
	}()

	zktest.Eventually(t, 15*time.Second, "the legacy consumer is started on events/0-2", func() (bool, string) {
		parts := rec.last()
		return len(parts) == 3, "started on " + fmtParts(parts)
	})
	for _, p := range rec.last() {
		if p.Offset != legacy.OffsetSmallest {
			t.Errorf("start offset of %s/%d = %d, want %d (auto_offset_reset smallest, nothing committed)", p.Topic, p.Partition, p.Offset, legacy.OffsetSmallest)
		}
	}
	zktest.Eventually(t, 10*time.Second, "owners in ZooKeeper", func() (bool, string) {
		snap, err := s.Snapshot(ctx, "old-app")
		if err != nil {
			return false, err.Error()
		}
		return len(snap.Owners) == 3 && snap.Owners[zkstate.TopicPartition{Topic: "events", Partition: 2}] == "old-app_host-1-0000abcd-0", "owners incomplete"
	})
}

func fmtParts(ps []legacy.PartitionOffset) string { return fmt.Sprint(ps) }
