package main

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
)

// startBridgeOnKfake runs a bridge on ZooKeeper zkc that relays to a one-broker kfake cluster
// holding topic orders (3 partitions), with a 100 ms initial rebalance delay (mod adjusts the
// group config further), and waits until it is ready. At cleanup the bridge stops, then the
// cluster.
func startBridgeOnKfake(t *testing.T, zkc string, mod func(*group.Config)) *bridge.Bridge {
	t.Helper()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	gc := group.DefaultConfig()
	gc.InitialRebalanceDelay = 100 * time.Millisecond
	if mod != nil {
		mod(&gc)
	}
	b, err := bridge.New(bridge.Config{
		ZKConnect: zkc, KafkaListen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", Upstream: kf.ListenAddrs(),
		ProxyListen: "127.0.0.1:0", Group: gc, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("bridge: %v", err)
		}
	})
	select {
	case <-b.Ready():
	case err := <-done:
		t.Fatalf("bridge: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("bridge not ready")
	}
	return b
}
