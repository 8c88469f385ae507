package bridge_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A draining bridge keeps answering until its groups' members have heard NOT_COORDINATOR
// (handover_linger.go), as a Kafka broker does on a controlled shutdown: sarama looks for the
// coordinator again on that answer and keeps its generation, but ends its session when its
// heartbeat meets a closed listener, and its leader's rejoin then rebalances the group
// (TestIntegration_SeveralBridgesSarama saw it in two runs of three).
func TestIntegration_SeveralBridgesDrainTellsMembers(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	a := startBridge(t, connect, 9001, nil)
	b := startBridge(t, connect, 9002, nil)
	zktest.Eventually(t, 10*time.Second, "both bridges listed", func() (bool, string) {
		got := brokersOf(t, b.Addr().String())
		return len(got) == 2, fmt.Sprint(got)
	})
	name := ownedGroup("tell", 9001, 9001, 9002)
	insts := [2]group.InstanceID{"i1", "i2"}
	stableGroup(t, a, name, insts)
	// A member's client keeps a connection to its coordinator.
	held, err := net.DialTimeout("tcp", a.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	stopped := make(chan error, 1)
	go func() { stopped <- a.stop() }()
	// Its registration is deleted once every group is handed over.
	zktest.Eventually(t, 10*time.Second, "9001's registration deleted after the drain", func() (bool, string) {
		_, _, err := zk.Get(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001))
		return err != nil, fmt.Sprint(err)
	})
	for i, m := range []string{"a", "b"} {
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.SetVersion(3)
		inst := string(insts[i])
		hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = name, m, 1, &inst
		resp := kafkaRoundTrip(t, a.Addr().String(), hb).(*kmsg.HeartbeatResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != kerr.NotCoordinator {
			t.Errorf("member %s's heartbeat to the drained bridge: %v, want NOT_COORDINATOR", m, err)
		}
	}
	told := time.Now()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("9001 stopped %v after both members were told", time.Since(told).Round(time.Millisecond))
	case <-time.After(2 * time.Second):
		t.Error("9001 still lingers 2 s after every member of its group was told")
	}
}
