package bridge_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 17 §1: without --upstream the bridge listed the brokers registered in ZooKeeper in its
// Metadata, kgo sent FindCoordinator to one of them, and the group was coordinated by the real
// cluster (JoinGroup ×4, OffsetCommit ×157 there, none at the bridge). With UpstreamAuto (the
// serve command's default) a bridge next to registered brokers relays to them: a kgo group
// given only the bridge's address is coordinated by the bridge, and no group request reaches a
// broker.
func TestIntegration_NoBypassWithRegisteredBrokers(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{fromZK: true, auto: true})
	want := e.produce(t, "bypass", 30)
	seen := newDfSeen()
	e.startMember(t, "no-bypass", seen)
	e.waitStable(t, "no-bypass", 1)
	seen.waitAll(t, want, false)
	e.checkGroupsStayedOffKfake(t)
	if code, body := httpGet(t, "http://"+e.b.AdminAddr().String()+"/readyz"); code != 200 || strings.Contains(body, "note:") {
		t.Errorf("/readyz = %d %q, want ok without a note", code, body)
	}
}

// Serving groups only next to registered brokers is for tests and demos: the bridge says so in
// /readyz (and its log), since clients may then bypass it.
func TestIntegration_GroupOnlySaysItMayBeBypassed(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	loadTopicsLayout(t, zk, map[string]int32{"orders": 1}, false) // registers a broker
	b := startBridge(t, connect, clientsNode, func(c *bridge.Config) { c.NodeID = clientsNode + 1 })
	// Ready once the bridge's registration exists (a round trip after start).
	var code int
	var body string
	zktest.Eventually(t, 10*time.Second, "/readyz", func() (bool, string) {
		code, body = httpGet(t, "http://"+b.AdminAddr().String()+"/readyz")
		return code == 200, fmt.Sprint(code, body)
	})
	if !strings.Contains(body, "note: serving groups only next to 1 brokers") {
		t.Errorf("/readyz = %d %q, want ok and a note that clients may bypass the bridge", code, body)
	}
}
