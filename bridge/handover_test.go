package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// The new owner of a group waits for a live holder's release for as long as the load may take
// (Config.LoadTimeout), not for two one-second waits: a handover on a loaded ZooKeeper takes
// longer than that, and giving up made the group answer NOT_COORDINATOR for another second
// (the 4-5 s commit stalls of the rolling restart, docs/benchmarks.md). Here bridge A holds a
// group that maps to B and releases it only after 4 s; B's commit (its write may take 10 s)
// waits and lands.
func TestIntegration_SeveralBridgesNewOwnerWaitsForARelease(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	a := startBridge(t, connect, 9001, nil)
	b := startBridge(t, connect, 9002, func(c *bridge.Config) { c.WriteTimeout = 10 * time.Second })
	ids := []int32{9001, 9002}
	name := ""
	for i := 0; name == ""; i++ {
		if owner, _ := placement.Owner(fmt.Sprintf("wait-%d", i), ids); owner == 9002 {
			name = fmt.Sprintf("wait-%d", i)
		}
	}
	zk := zktest.OpenStore(t, connect)
	zktest.Eventually(t, 10*time.Second, "A names B the coordinator", func() bool {
		r, err := a.Do(t.Context(), name, func(tok group.Token) group.Event { return group.Describe{Token: tok} })
		return err == nil && r.(group.DescribeReply).Err == group.ErrNotCoordinator
	})
	// A holds the group (as it would while it hands it over) and is alive.
	held := zkstate.Epoch{NodeID: 9001, AcquiredMs: time.Now().UnixMilli()}.Encode()
	if err := zk.Create(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name), held, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	commitWaitsForRelease(t, zk, b, name, 4*time.Second, "the new owner")
	data, _, err := zk.Get(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := zkstate.ParseEpoch(data); err != nil || e.NodeID != 9002 || e.Released {
		t.Fatalf("epoch after the commit: %+v, %v; want held by 9002", e, err)
	}
}

// A bridge left alone by a drain waits for the draining holder's release as any new owner
// does. With two bridges, the one that stays has no other live bridge once the other marks its
// registration draining; it took an epoch held by a live bridge for a group it cannot serve and
// refused the group NOT_COORDINATOR for a second (refuseHold), though the holder was handing
// the group to it (the 1 s steps of the two-bridge handover, docs/benchmarks.md "the
// handover's ZooKeeper chain"). Here 9001 is registered draining and holds the group's epoch,
// and releases it 2 s later; 9002's commit waits and lands.
func TestIntegration_SeveralBridgesLastBridgeWaitsForADrainingHolder(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	b := startBridge(t, connect, 9002, func(c *bridge.Config) { c.WriteTimeout = 10 * time.Second })
	draining := zkstate.BridgeRegistration{NodeID: 9001, Kafka: "127.0.0.1:1", Advertised: "127.0.0.1:1", Draining: true}.Encode()
	if err := zk.CreateEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001), draining); err != nil {
		t.Fatal(err)
	}
	name := "alone-0"
	held := zkstate.Epoch{NodeID: 9001, AcquiredMs: time.Now().UnixMilli()}.Encode()
	if err := zk.Create(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name), held, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	commitWaitsForRelease(t, zk, b, name, 2*time.Second, "the bridge left alone")
}

// commitWaitsForRelease has node 9001, which holds the group's epoch, release it after hold,
// and checks that b's offset commit meanwhile waits for the release and then lands.
func commitWaitsForRelease(t *testing.T, zk *zkstate.Store, b *running, name string, hold time.Duration, who string) {
	t.Helper()
	releasedAt := make(chan struct{})
	defer func() { <-releasedAt }()
	go func() {
		defer close(releasedAt)
		time.Sleep(hold)
		released := zkstate.Epoch{NodeID: 9001, AcquiredMs: time.Now().UnixMilli(), Released: true}.Encode()
		if _, err := zk.Set(context.Background(), zkstate.EpochPath(bridge.DefaultRoot, name), released, 0); err != nil {
			t.Errorf("releasing: %v", err)
		}
	}()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	r, err := b.Do(ctx, name, func(tok group.Token) group.Event {
		return group.OffsetCommit{Token: tok, Generation: -1,
			Offsets: []group.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 7, LeaderEpoch: -1}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	oc := r.(group.OffsetCommitReply)
	if len(oc.Partitions) != 1 || oc.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit on %s after %v: %+v, want NONE once the holder released the group", who, time.Since(start), oc.Partitions)
	}
	if took := time.Since(start); took < hold-500*time.Millisecond {
		t.Fatalf("commit answered after %v, before the holder released the group", took)
	}
}
