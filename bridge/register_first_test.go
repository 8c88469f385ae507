package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A bridge takes no group before its own registration exists (several-bridges.md: a survivor
// that takes a group checks the previous holder's registration after its write of the epoch, and
// a registration newer than the holder's epoch means a holder that came back). Bridge 9001
// restarts while its previous incarnation's registration still holds the path (a kill -9 whose
// session has not expired: the test holds the node), so its own registration waits. A request for
// a group that maps to 9001 must wait, then be refused (the load gives up), taking no epoch: a
// group it took would, once the old session
// ends, be taken over by the survivor 9002, whose check finds 9001's registration missing or newer
// than 9001's epoch, while 9001 goes on answering the group from memory: two bridges answering one
// group. Once 9001 is registered, it serves the group.
func TestIntegration_SeveralBridgesNoGroupBeforeRegistration(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	var name string
	for i := 0; name == ""; i++ {
		if n, _ := placement.Owner(fmt.Sprintf("regfirst-%d", i), []int32{9001, 9002}); n == 9001 {
			name = fmt.Sprintf("regfirst-%d", i)
		}
	}
	regPath := zkstate.BridgePath(bridge.DefaultRoot, 9001)
	old := zkstate.BridgeRegistration{NodeID: 9001, Kafka: "127.0.0.1:1", Advertised: "127.0.0.1:1"}
	if err := zk.CreateEphemeral(t.Context(), regPath, old.Encode()); err != nil {
		t.Fatal(err)
	}
	s := startBridge(t, connect, 9002, nil)
	zktest.Eventually(t, 10*time.Second, "9002 sees 9001", func() (bool, string) {
		got := brokersOf(t, s.Addr().String())
		return len(got) == 2, fmt.Sprint(got)
	})
	// A load waits for the registration up to the load timeout: short here, so that the
	// request below is answered (refused) while the old registration still holds the path.
	h := startBridge(t, connect, 9001, func(c *bridge.Config) { c.LoadTimeout = time.Second })
	epochOf := func() (zkstate.Epoch, bool) {
		data, _, err := zk.Get(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name))
		if errors.Is(err, zkstate.ErrNoNode) {
			return zkstate.Epoch{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		e, err := zkstate.ParseEpoch(data)
		if err != nil {
			t.Fatal(err)
		}
		return e, true
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	r, err := h.Do(ctx, name, joinEvent("a", "i1", "10.0.0.1", "orders"))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	j := r.(group.JoinReply)
	if j.Err == group.ErrNone {
		t.Errorf("9001 answered a JoinGroup before its registration existed: %+v; want it refused", j)
		syncAll(t, h, name, j.Generation, []group.MemberID{"a"}, []group.InstanceID{"i1"},
			map[group.MemberID][]byte{"a": assignment("orders", 0, 1, 2, 3, 4, 5)})
	} else if j.Err != group.ErrCoordinatorNotAvailable {
		t.Errorf("JoinGroup on 9001 before its registration: %v, want COORDINATOR_NOT_AVAILABLE (retriable)", j.Err)
	}
	if e, ok := epochOf(); ok && e.NodeID == 9001 && !e.Released {
		t.Errorf("9001 holds the group's epoch before its registration exists: %+v", e)
	}

	// The previous incarnation's session ends: 9002 takes what 9001 holds, 9001 registers.
	if err := zk.DeleteEphemeral(t.Context(), regPath); err != nil {
		t.Fatal(err)
	}
	if j.Err == group.ErrNone {
		// The hole, shown: once 9002 holds the epoch, 9001 must not answer the group.
		zktest.Eventually(t, 10*time.Second, "9002 takes the group's epoch", func() (bool, string) {
			e, ok := epochOf()
			return ok && e.NodeID == 9002 && !e.Released, fmt.Sprintf("%+v", e)
		})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		r, err := h.Do(ctx, name, func(tok group.Token) group.Event {
			return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i1", Generation: j.Generation}
		})
		cancel()
		if hb, ok := r.(group.HeartbeatReply); err == nil && ok && hb.Err == group.ErrNone {
			t.Errorf("9001 answered a heartbeat of the group after 9002 took its epoch: two bridges answer one group")
		}
		return
	}
	// Registered now, 9001 serves the group (its clients retry the refusal).
	zktest.Eventually(t, 10*time.Second, "9001 serves the group once registered", func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		r, err := h.Do(ctx, name, joinEvent("a", "i1", "10.0.0.1", "orders"))
		if err != nil {
			return false, err.Error()
		}
		j := r.(group.JoinReply)
		return j.Err == group.ErrNone && j.Generation >= 1, fmt.Sprintf("%+v", j)
	})
	if e, ok := epochOf(); !ok || e.NodeID != 9001 {
		t.Errorf("the group's epoch after 9001 served it: %+v (exists %v), want 9001's", e, ok)
	}
}
