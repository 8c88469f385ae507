package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A fenced group answers at once: once the bridge knows it no longer owns a group (here: its
// registration deleted by another client, so the others count it gone and take its groups),
// the group's actor releases its 0.8 mirror in ZooKeeper before it ends, and a request that
// came meanwhile waited for that release. With ZooKeeper slow or cut off, as it often is when a
// bridge is fenced, that was seconds: a paused bridge resumed with its link cut left a member's
// heartbeat unanswered for over 5 s (TestIntegration_SeveralBridgesPausedOwnerAnswersNothing
// failed so, once, under load). The answer, COORDINATOR_NOT_AVAILABLE (as the lease's), is known
// at the fence: the member looks for the group's coordinator again at once.
//
// The order is forced: 9001's writes to ZooKeeper are held (zktest.Proxy.HoldWrites) from
// before the deletion, so the mirror's release never ends while the test asks.
func TestIntegration_SeveralBridgesFencedGroupAnswersAtOnce(t *testing.T) {
	ctx := t.Context()
	const a int32 = 9001
	zk, proxy, h, _, name := twoBridgesOneProxied(t, "fenceclose", func(c *bridge.Config) { c.ZKSessionTimeout = 15 * time.Second })
	mirrorWritten(t, zk, name)
	heartbeat := func(wait time.Duration) (group.HeartbeatReply, error) {
		rctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		r, err := h.Do(rctx, name, func(tok group.Token) group.Event {
			return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i-a", Generation: 1}
		})
		hb, _ := r.(group.HeartbeatReply)
		return hb, err
	}
	if r, err := heartbeat(5 * time.Second); err != nil || r.Err != group.ErrNone {
		t.Fatalf("heartbeat before the fence: %+v %v", r, err)
	}
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)
	_, st, err := zk.Get(ctx, regPath)
	if err != nil {
		t.Fatal(err)
	}
	fenced := counterOf(t, h, "zkbridge_groups_fenced_total")
	proxy.HoldWrites()
	defer proxy.Release()
	if err := zk.Delete(ctx, regPath, st.Version); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "9001 fences the group", func() (bool, string) {
		n := counterOf(t, h, "zkbridge_groups_fenced_total")
		return n > fenced, fmt.Sprint(n)
	})
	start := time.Now()
	r, err := heartbeat(3 * time.Second)
	if err != nil {
		t.Fatalf("a heartbeat of the fenced group: %v after %v, want an answer at once", err, time.Since(start).Round(time.Millisecond))
	}
	if r.Err != group.ErrCoordinatorNotAvailable {
		t.Errorf("a heartbeat of the fenced group answered %v, want COORDINATOR_NOT_AVAILABLE", r.Err)
	}
}

// mirrorWritten waits for the 0.8 mirror of twoBridgesOneProxied's group (its two ids and the
// owners of orders' six partitions), which is written after its sync, in the background.
func mirrorWritten(t *testing.T, zk *zkstate.Store, name string) {
	t.Helper()
	ctx := t.Context()
	zktest.Eventually(t, 10*time.Second, "the group's 0.8 mirror written", func() (bool, string) {
		ids, _, err := zk.Children(ctx, zkstate.IDsPath(name))
		if err != nil || len(ids) != 2 {
			return false, fmt.Sprint(ids, err)
		}
		for p := range int32(6) {
			if ok, _, err := zk.Exists(ctx, zkstate.OwnerPath(name, "orders", p)); err != nil || !ok {
				return false, fmt.Sprintf("owner of orders/%d: %v %v", p, ok, err)
			}
		}
		return true, ""
	})
}

// counterOf is a bridge's counter name, summed over its labels.
func counterOf(t testing.TB, r *running, name string) float64 {
	t.Helper()
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
