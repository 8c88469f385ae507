package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 17 §7: DeleteGroups of a legacy group with a live consumer answered success though the
// consumer kept consuming (Kafka answers NON_EMPTY_GROUP for a group with members). The
// bridge now refuses, keeps the group's offsets, and deletes it once the consumer is gone.
func TestIntegration_DeleteGroupsLegacyMembers(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	loadTopicsLayout(t, zk, map[string]int32{"events": 2}, false)
	b := startBridge(t, connect, clientsNode, func(c *bridge.Config) { c.LegacyListen = "127.0.0.1:0" })
	ctx := t.Context()
	const g = "old-app"

	rec := &startRecorder{}
	cl, err := legacy.NewClient(legacy.ClientConfig{
		Brokers:         []string{b.LegacyAddr().String()},
		GroupID:         g,
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
	zktest.Eventually(t, 15*time.Second, "the legacy consumer is started", func() (bool, string) {
		return len(rec.last()) == 2, fmtParts(rec.last())
	})
	// An offset the consumer committed (written as a 0.8 consumer would).
	_ = zk.Create(ctx, zkstate.OffsetPath(g, "events", 0), nil, zkstate.CreateOptions{Parents: true})
	if _, err := zk.Set(ctx, zkstate.OffsetPath(g, "events", 0), []byte("17"), -1); err != nil {
		t.Fatal(err)
	}

	kc, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	del := func() int16 {
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Groups = []string{g}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, kc)
		if err != nil || len(resp.Groups) != 1 {
			t.Fatalf("DeleteGroups: %+v %v", resp, err)
		}
		return resp.Groups[0].ErrorCode
	}
	if c := del(); c != 68 {
		t.Errorf("DeleteGroups with a live legacy consumer: %s, want NON_EMPTY_GROUP", codeName(c))
	}
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath(g, "events", 0)); err != nil || string(d) != "17" {
		t.Errorf("offset after the refused delete: %q %v", d, err)
	}

	stopClient()
	<-done
	done <- nil // for the deferred wait
	zktest.Eventually(t, 15*time.Second, "the group deleted once its consumer is gone", func() (bool, string) {
		c := del()
		return c == 0 || c == 69, codeName(c)
	})
}
