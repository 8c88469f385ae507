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

// A bridge takes no group in a new session before its registration exists in that session
// (several-bridges.md: a survivor taking a group checks the holder's registration after its
// write of the epoch, and keeps the group when there is none, or one newer than the epoch).
// Bridge 9001 serves a group, then its way to ZooKeeper is cut for longer than the session
// timeout: ZooKeeper expires the session and deletes its registration, and 9002 takes the group.
// When 9001 reconnects, with a new session, its registration is not there yet: here another
// session holds the path (the test), which stands for the re-creation not done yet and lets the
// test see the whole window, as in TestIntegration_SeveralBridgesNoGroupBeforeRegistration. A
// request for the group on 9001 then must be refused, taking no epoch: an epoch written by the
// new session before its registration looks, to 9002, like a dead bridge's, and both would
// answer the group. Once the path is free 9001 registers again and serves the group.
func TestIntegration_SeveralBridgesNoGroupBeforeRegistrationAfterExpiry(t *testing.T) {
	ctx := t.Context()
	const a, b int32 = 9001, 9002
	// A load waits for the registration up to the load timeout: short here, so that the
	// request below is answered (refused) while the path is held.
	zk, proxy, h, _, name := twoBridgesOneProxied(t, "regexpiry", func(c *bridge.Config) { c.LoadTimeout = time.Second })
	if e := epochOf(ctx, zk, name); e.NodeID != a || e.Released {
		t.Fatalf("the group's epoch before the cut: %+v, want 9001's", e)
	}

	// 9001 cut past its session timeout: its session expires, 9002 takes the group.
	proxy.Freeze()
	zktest.Eventually(t, 20*time.Second, "9002 takes the group after 9001's session expires", func() (bool, string) {
		e := epochOf(ctx, zk, name)
		return e.NodeID == b && !e.Released, fmt.Sprintf("%+v", e)
	})
	// 9001's registration held by another session while 9001 comes back: 9002 sees 9001 live
	// again and hands the group back (releases its epoch).
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)
	held := zkstate.BridgeRegistration{NodeID: a, Kafka: "127.0.0.1:1", Advertised: "127.0.0.1:1"}
	if err := zk.CreateEphemeral(ctx, regPath, held.Encode()); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "9002 releases the group to 9001", func() (bool, string) {
		e := epochOf(ctx, zk, name)
		return e.NodeID == b && e.Released, fmt.Sprintf("%+v", e)
	})
	proxy.Thaw()
	zktest.Eventually(t, 20*time.Second, "9001 has a new session", func() (bool, string) {
		_, body := httpGet(t, "http://"+h.AdminAddr().String()+"/readyz")
		return !strings.Contains(body, "zookeeper: no session"), body
	})
	if code, body := httpGet(t, "http://"+h.AdminAddr().String()+"/readyz"); code != 503 || !strings.Contains(body, "registration") {
		t.Errorf("9001's /readyz while another session holds its registration: %d %q, want 503 naming the registration", code, body)
	}

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r, err := h.Do(rctx, name, joinEvent("a", "i-a", "10.0.0.1", "orders"))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	j := r.(group.JoinReply)
	if j.Err == group.ErrNone {
		t.Errorf("9001 answered a JoinGroup in its new session before its registration existed: %+v; want it refused", j)
	} else if j.Err != group.ErrCoordinatorNotAvailable {
		t.Errorf("JoinGroup on 9001 before its registration: %v, want COORDINATOR_NOT_AVAILABLE (retriable)", j.Err)
	}
	if e := epochOf(ctx, zk, name); e.NodeID == a && !e.Released {
		t.Errorf("9001 took the group's epoch in its new session before its registration existed: %+v", e)
	}

	// The path is free: 9002 sees 9001 gone again and takes what 9001 holds; 9001 registers.
	if err := zk.DeleteEphemeral(ctx, regPath); err != nil {
		t.Fatal(err)
	}
	if j.Err == group.ErrNone {
		// The hole, shown: once 9002 holds the epoch, 9001 must not answer the group.
		zktest.Eventually(t, 10*time.Second, "9002 takes the group's epoch", func() (bool, string) {
			e := epochOf(ctx, zk, name)
			return e.NodeID == b && !e.Released, fmt.Sprintf("%+v", e)
		})
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := h.Do(hctx, name, func(tok group.Token) group.Event {
			return group.Heartbeat{Token: tok, MemberID: j.MemberID, InstanceID: "i-a", Generation: j.Generation}
		})
		cancel()
		if hb, ok := r.(group.HeartbeatReply); err == nil && ok && hb.Err == group.ErrNone {
			t.Errorf("9001 answered a heartbeat of the group after 9002 took its epoch: two bridges answer one group")
		}
		return
	}
	zktest.Eventually(t, 20*time.Second, "9001 serves the group once registered again", func() (bool, string) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := h.Do(rctx, name, joinEvent("a", "i-a", "10.0.0.1", "orders"))
		if err != nil {
			return false, err.Error()
		}
		j := r.(group.JoinReply)
		return j.Err == group.ErrNone, fmt.Sprintf("%+v", j)
	})
	if e := epochOf(ctx, zk, name); e.NodeID != a || e.Released {
		t.Errorf("the group's epoch after 9001 served it: %+v, want 9001's", e)
	}
	ok, st, err := zk.Exists(ctx, regPath)
	if err != nil || !ok || st.EphemeralOwner == zk.SessionID() {
		t.Errorf("9001's registration after it served the group: exists %v, owner 0x%x, err %v; want 9001's", ok, st.EphemeralOwner, err)
	}
}

// twoBridgesOneProxied starts 9001, configured by cfg, with its way to ZooKeeper through the
// returned proxy, and 9002 directly; once each sees the other, a group named from prefix that
// maps to 9001 is Stable on it with two static members. zk is the test's own session.
func twoBridgesOneProxied(t *testing.T, prefix string, cfg func(*bridge.Config)) (zk *zkstate.Store, proxy *zktest.Proxy, h, s *running, name string) {
	t.Helper()
	const a, b int32 = 9001, 9002
	connect := zktest.Connect(t)
	zk = zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	i := strings.IndexByte(connect, '/')
	proxy = zktest.StartProxy(t, connect[:i])
	name = ownedGroup(prefix, a, a, b)
	h = startBridge(t, proxy.Addr()+connect[i:], a, cfg)
	s = startBridge(t, connect, b, nil)
	zktest.Eventually(t, 10*time.Second, "each bridge sees the other", func() (bool, string) {
		ga, gb := brokersOf(t, h.Addr().String()), brokersOf(t, s.Addr().String())
		return len(ga) == 2 && len(gb) == 2, fmt.Sprint(ga, gb)
	})
	stableGroup(t, h, name, [2]group.InstanceID{"i-a", "i-b"})
	return zk, proxy, h, s, name
}
