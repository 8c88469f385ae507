package bridge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A bridge's registration deleted by another client while the bridge's session lives (any client
// may delete another session's ephemeral: an operator's mistake, a cleanup script): the other
// bridges see the bridge gone and take its groups, so the bridge must stop answering them as soon
// as it hears of the deletion, as after an expiry, make its registration again and serve once it
// exists. Before, nothing made it again in the same session (zkstate's reclaim runs on a new
// session only) and the bridge answered its loaded groups from memory while 9002 held their
// epochs: two bridges answered one group. Here 9001 hears of the deletion late (its proxy holds
// ZooKeeper's answers back) so that 9002 takes the group first, as it may whenever it hears first.
func TestIntegration_SeveralBridgesRegistrationDeletedByAnotherClient(t *testing.T) {
	ctx := t.Context()
	const a, b int32 = 9001, 9002
	// A session long enough that 9001's client keeps its connection while its answers are held.
	zk, proxy, h, s, name := twoBridgesOneProxied(t, "regdeleted", func(c *bridge.Config) { c.ZKSessionTimeout = 15 * time.Second })
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)
	_, st, err := zk.Get(ctx, regPath)
	if err != nil {
		t.Fatal(err)
	}
	heartbeat := func(g groups) (group.HeartbeatReply, error) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := g.Do(rctx, name, func(tok group.Token) group.Event {
			return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i-a", Generation: 1}
		})
		hb, _ := r.(group.HeartbeatReply)
		return hb, err
	}

	proxy.Mute()
	if err := zk.Delete(ctx, regPath, st.Version); err != nil {
		proxy.Unmute()
		t.Fatal(err)
	}
	zktest.Eventually(t, 8*time.Second, "9002 takes the group", func() (bool, string) {
		hb, err := heartbeat(s)
		e := epochOf(ctx, zk, name)
		return err == nil && e.NodeID == b && !e.Released, fmt.Sprintf("%+v %v %+v", hb, err, e)
	})
	proxy.Unmute() // 9001 hears of the deletion

	// 9001 makes its registration again in the same session (not waited for with Eventually, so
	// that a bridge that never does still shows the heartbeat below).
	back := false
	for deadline := time.Now().Add(10 * time.Second); !back && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ok, st2, err := zk.Exists(ctx, regPath)
		back = err == nil && ok && st2.EphemeralOwner == st.EphemeralOwner
	}
	if !back {
		t.Errorf("9001's registration was not made again in its session 0x%x", st.EphemeralOwner)
	}
	// 9001 answers the group only once it holds its epoch again (9002 hands it back once it sees
	// 9001's registration), never while 9002 holds it.
	if hb, err := heartbeat(h); err == nil && hb.Err == group.ErrNone {
		if e := epochOf(ctx, zk, name); e.NodeID != a || e.Released {
			t.Errorf("9001 answered a heartbeat while 9002 holds the group's epoch (%+v): two bridges answer one group", e)
		}
	}
	zktest.Eventually(t, 20*time.Second, "9001 serves the group again", func() (bool, string) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := h.Do(rctx, name, joinEvent("a", "i-a", "10.0.0.1", "orders"))
		if err != nil {
			return false, err.Error()
		}
		j := r.(group.JoinReply)
		e := epochOf(ctx, zk, name)
		return j.Err == group.ErrNone && e.NodeID == a && !e.Released, fmt.Sprintf("%+v %+v", j, e)
	})
	code, body := httpGet(t, "http://"+h.AdminAddr().String()+"/metrics")
	if want := "zkbridge_bridges_registration_deleted_total 1"; code != 200 || !strings.Contains(body, want) {
		t.Errorf("9001's /metrics: %d, want %q", code, want)
	}
}
