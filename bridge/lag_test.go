package bridge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 18 item 6: the daemon exports lag per group, topic and partition in kafka_exporter's
// names, refreshed on a schedule, finalized groups included — against a kfake cluster with known
// high watermarks (orders/0 ends at 7, orders/1 at 3).
func TestIntegration_LagMetrics(t *testing.T) {
	t.Parallel()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for p, n := range map[int32]int{0: 7, 1: 3} {
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl.Close()

	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	p := zkstate.CreateOptions{Parents: true}
	if err := zk.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath("old", "orders", 0), zkstate.FormatOffset(2), p),
		zkstate.CreateOp(zkstate.OffsetPath("old", "orders", 1), zkstate.FormatOffset(3), p),
		// A finalized group: its offsets are the bridge's records.
		zkstate.CreateOp(zkstate.OffsetPath("fin", "orders", 0), zkstate.FormatOffset(1), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(bridge.DefaultRoot, "fin", "orders", 0), zkstate.OwnOffset{Offset: 4, LeaderEpoch: -1}.Encode(), p)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := zkstate.InitMode(ctx, zk, bridge.DefaultRoot, "fin", zkstate.ModeFinalized, "test", "seeded"); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, 1, func(c *bridge.Config) {
		c.ProxyListen = "127.0.0.1:0"
		c.Upstream = kf.ListenAddrs()
		c.LagInterval = 200 * time.Millisecond
	})
	want := []string{
		`kafka_consumergroup_lag{consumergroup="old",partition="0",topic="orders"} 5`,
		`kafka_consumergroup_lag{consumergroup="old",partition="1",topic="orders"} 0`,
		`kafka_consumergroup_current_offset{consumergroup="old",partition="0",topic="orders"} 2`,
		`kafka_consumergroup_lag{consumergroup="fin",partition="0",topic="orders"} 3`,
		`kafka_consumergroup_current_offset{consumergroup="fin",partition="0",topic="orders"} 4`,
		`kafka_topic_partition_current_offset{partition="0",topic="orders"} 7`,
		`kafka_topic_partition_current_offset{partition="1",topic="orders"} 3`,
	}
	zktest.Eventually(t, 10*time.Second, "lag series", func() (bool, string) {
		_, body := httpGet(t, "http://"+b.AdminAddr().String()+"/metrics")
		var missing []string
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		return len(missing) == 0, fmt.Sprint(missing)
	})

	// A commit moves the series at the next refresh.
	if _, err := zk.Set(ctx, zkstate.OffsetPath("old", "orders", 0), zkstate.FormatOffset(7), -1); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "lag after a commit", func() (bool, string) {
		_, body := httpGet(t, "http://"+b.AdminAddr().String()+"/metrics")
		return strings.Contains(body, `kafka_consumergroup_lag{consumergroup="old",partition="0",topic="orders"} 0`), ""
	})
}
