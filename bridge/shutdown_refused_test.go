package bridge_test

import (
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A bridge stopping while one of its groups is refused (its load failed: the actor answers the
// error for refuseHold, then ends) stops as fast as one without: the shutdown's hand-off of the
// mixed groups' Kafka members (mixed_handoff.go) has nothing to wait for from an actor that
// loaded nothing. Before, it waited for an answer the refused actor never gives, the whole
// hand-off timeout (10 s). Here the group is refused because its epoch is written only by
// another ZooKeeper user (unwritableGroup); the bridge is stopped as soon as its first takeover
// of it was started.
func TestIntegration_StopWhileAGroupIsRefusedDoesNotWaitTheHandoffTimeout(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	unwritableGroup(t, connect, zk, "refused-at-stop")
	b := startBridge(t, connect, 9001, func(c *bridge.Config) { c.HandoffTimeout = 10 * time.Second })
	zktest.Eventually(t, 20*time.Second, "9001 takes the group over", func() bool { return handoversOf(t, b, "takeover_released") >= 1 })
	start := time.Now()
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("the bridge took %v to stop while a group was refused, want well under the hand-off timeout (10 s)", took.Round(time.Millisecond))
	}
}
