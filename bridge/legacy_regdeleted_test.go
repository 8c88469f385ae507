package bridge_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// legacyTimeline records, in one order, when each consumer starts fetching which partitions
// and when it stops (a legacy.Handler per consumer): a partition in two consumers' fetching at
// once would be consumed twice.
type legacyTimeline struct {
	mu       sync.Mutex
	fetching map[string][]int32 // consumer → partitions it fetches now
	overlaps []string
}

func (l *legacyTimeline) handler(id string, r *legacyRound) legacy.Handler {
	return legacy.HandlerFuncs{
		Stop: func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.fetching, id)
		},
		Start: func(parts []legacy.PartitionOffset) error {
			l.mu.Lock()
			for _, p := range parts {
				for other, ps := range l.fetching {
					if other != id && slices.Contains(ps, p.Partition) {
						l.overlaps = append(l.overlaps, fmt.Sprintf("%s started on partition %d while %s fetches it", id, p.Partition, other))
					}
				}
				l.fetching[id] = append(l.fetching[id], p.Partition)
			}
			l.mu.Unlock()
			return r.OnStart(parts)
		},
	}
}

// A legacy group's bridge whose registration another client deletes while its session lives
// (and a client holds the path, so that it stays away: the other bridges count the bridge gone
// for as long): its Kafka groups are fenced (register_deleted_test.go), its legacy groups are
// not, and need not be. A legacy member's partitions are held by its owner znodes, ephemerals
// of the bridge's session, which the registration's deletion leaves alone; the registration only
// says which bridge takes a group's Registers. So a consumer that registers meanwhile with
// another bridge, which now counts the group its own, shares the group as members of two
// coordinators do (federated 0.8: each plans over every /ids registration and claims only its
// own members' part, waiting for the other's owner znodes): no partition is fetched by two
// consumers at once, and once the registration is back the group moves to its bridge again.
// The same rule as for an expiry of the session (the group checks its owner znodes, and
// rebalances when they went with the session): here they did not go.
func TestIntegration_SeveralBridgesLegacyGroupAcrossItsBridgesRegistrationDeleted(t *testing.T) {
	ctx := t.Context()
	connect, zk := legacyEventsLayout(t)
	const a, b int32 = 9001, 9002
	h := startBridge(t, connect, a, withLegacy)
	s := startBridge(t, connect, b, withLegacy)
	name := ownedGroup("old-regdeleted", a, a, b)
	aAddr, bAddr := h.LegacyAddr().String(), s.LegacyAddr().String()
	zktest.Eventually(t, 10*time.Second, "9002 names 9001 for the group", func() (bool, string) {
		r := legacyExchange(t, bAddr, &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse)
		return r.CoordinatorID == a, fmt.Sprint(r.CoordinatorID)
	})
	timeline := &legacyTimeline{fetching: map[string][]int32{}}
	consumer := func(id, addr string) *legacyRound {
		r := &legacyRound{}
		cl, err := legacy.NewClient(legacy.ClientConfig{Brokers: []string{addr}, GroupID: name, ConsumerID: id,
			Subscription: map[string]int{"events": 1}, AutoOffsetReset: legacy.ResetSmallest,
			PingInterval: 500 * time.Millisecond, MaxPingRetries: 3, Handler: timeline.handler(id, r),
			Logger: zerolog.New(&testLog{t: t}).With().Timestamp().Str("consumer", id).Logger()})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cl.Run(cctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		return r
	}
	r1 := consumer("c1", aAddr)
	legacySettled(t, zk, name, []string{"c1"}, []*legacyRound{r1}, a, nil)
	snap, err := zk.Snapshot(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	owners := snap.Owners

	// Another client deletes 9001's registration and holds the path (with nothing 9002 can
	// parse), in one Multi: 9001 cannot make it again, and 9002 counts it gone.
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)
	if err := zk.Multi(ctx, zkstate.DeleteOp(regPath, -1),
		zkstate.CreateOp(regPath, []byte("held by the test"), zkstate.CreateOptions{Ephemeral: true})); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "9002 names itself for the group", func() (bool, string) {
		r := legacyExchange(t, bAddr, &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse)
		return r.CoordinatorID == b, fmt.Sprint(r.CoordinatorID)
	})
	// 9001 keeps its consumer and its partitions' owner znodes.
	time.Sleep(time.Second)
	if now, err := zk.Snapshot(ctx, name); err != nil || !maps.Equal(now.Owners, owners) || !maps.Equal(now.OwnerSessions, snap.OwnerSessions) {
		t.Errorf("owner znodes after the deletion: %v (%v), want %v", now.Owners, err, owners)
	}
	if n, _ := r1.state(); n != 1 {
		t.Errorf("c1 started %d times, want once (not stopped for the deletion)", n)
	}

	// c2 knows 9002 only: it registers there, and shares the group with c1.
	r2 := consumer("c2", bAddr)
	zktest.Eventually(t, 20*time.Second, "c1 (9001) and c2 (9002) share the partitions", func() (bool, string) {
		_, p1 := r1.state()
		_, p2 := r2.state()
		hosts := hostedBy(t, zk, name, "c1", "c2")
		return len(p1) == 2 && len(p2) == 2 && hosts[0] == a && hosts[1] == b, fmt.Sprint(p1, p2, hosts)
	})

	// The path freed: 9001 registers again and the group comes back to it.
	if err := zk.Delete(ctx, regPath, -1); err != nil {
		t.Fatal(err)
	}
	legacySettled(t, zk, name, []string{"c1", "c2"}, []*legacyRound{r1, r2}, a, nil)
	timeline.mu.Lock()
	defer timeline.mu.Unlock()
	for _, o := range timeline.overlaps {
		t.Error(o)
	}
}
