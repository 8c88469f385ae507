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

// A bridge's registration deleted by another client right after the bridge made it, before the
// bridge read it back: the bridge must hear of it and make it again, as for any deletion while
// its session lives (register_deleted_test.go). The bridge read its own registration only
// through the watch of <root>/bridges' children, which reads our child once that watch has fired
// for the create and read the children again: a registration gone by then was never watched, and
// the bridge counted itself registered, with none, for as long as its session lived (its groups'
// loads past the wait then fail on the epoch's check of the registration, and the others take
// what it holds). Here the order is forced at 9001's start: its create is held on its way to
// ZooKeeper (zktest.Proxy.HoldWrites), then let through while 9001 hears nothing (Mute) until
// the test has deleted the registration.
func TestIntegration_SeveralBridgesRegistrationDeletedRightAfterItsCreate(t *testing.T) {
	ctx := t.Context()
	const a, b int32 = 9001, 9002
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	startBridge(t, connect, b, nil) // the other bridge, which takes what 9001 would hold
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)

	proxy.HoldWrites()
	cfg := testBridgeConfig(proxy.Addr()+connect[i:], a, newLogger(t).With().Int32("test_node", a).Logger())
	cfg.ZKSessionTimeout = 15 * time.Second
	h, err := bridge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r := &running{Bridge: h, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- h.Run(runCtx) }()
	t.Cleanup(func() {
		proxy.Unmute()
		proxy.Release()
		if err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	zktest.Eventually(t, 10*time.Second, "9001 sends its first write", func() (bool, string) {
		return proxy.HeldWrites() == 1, fmt.Sprint(proxy.HeldWrites())
	})
	proxy.Mute()
	proxy.Release() // 9001's registration is made; 9001 hears nothing of it yet
	var st zkstate.Stat
	zktest.Eventually(t, 10*time.Second, "9001's registration made", func() (bool, string) {
		ok, s, err := zk.Exists(ctx, regPath)
		st = s
		return err == nil && ok, fmt.Sprint(ok, err)
	})
	if err := zk.Delete(ctx, regPath, -1); err != nil {
		t.Fatal(err)
	}
	proxy.Unmute()
	select {
	case <-h.Ready():
	case err := <-r.done:
		t.Fatalf("Run ended before ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("9001 not ready after 20s")
	}

	// Made again, in the same session (not waited for with Eventually, so that the rest shows
	// what a bridge that never makes it does).
	back := false
	for deadline := time.Now().Add(10 * time.Second); !back && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ok, st2, err := zk.Exists(ctx, regPath)
		back = err == nil && ok && st2.EphemeralOwner == st.EphemeralOwner && st2.Czxid != st.Czxid
	}
	if !back {
		t.Errorf("9001's registration was not made again in its session 0x%x after its deletion", st.EphemeralOwner)
	}
	// 9001 serves a group that maps to it.
	name := ownedGroup("regcreate", a, a, b)
	zktest.Eventually(t, 20*time.Second, "9001 serves a group", func() (bool, string) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := h.Do(rctx, name, joinEvent("a", "i-a", "10.0.0.1", "orders"))
		if err != nil {
			return false, err.Error()
		}
		j := res.(group.JoinReply)
		e := epochOf(ctx, zk, name)
		return j.Err == group.ErrNone && e.NodeID == a, fmt.Sprintf("%+v %+v", j, e)
	})
	code, body := httpGet(t, "http://"+h.AdminAddr().String()+"/metrics")
	if want := "zkbridge_bridges_registration_deleted_total 1"; code != 200 || !strings.Contains(body, want) {
		t.Errorf("9001's /metrics: %d, want %q", code, want)
	}
}
