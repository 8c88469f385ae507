package bridge_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// /readyz says not ready while the bridge's registration does not exist in its current session:
// every group's load is refused then (it waits for the registration), so an orchestrator must
// not count the bridge as serving. Here another session holds the path (a restart after a kill -9
// whose session has not expired yet, or a duplicate node id); once it is free the bridge
// registers and is ready.
func TestIntegration_ReadyzWaitsForTheRegistration(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	regPath := zkstate.BridgePath(bridge.DefaultRoot, 9001)
	old := zkstate.BridgeRegistration{NodeID: 9001, Kafka: "127.0.0.1:1", Advertised: "127.0.0.1:1"}
	if err := zk.CreateEphemeral(t.Context(), regPath, old.Encode()); err != nil {
		t.Fatal(err)
	}
	h := startBridge(t, connect, 9001, nil)
	admin := "http://" + h.AdminAddr().String() + "/readyz"
	// The bridge retries its registration every second: two tries seen refused.
	for range 2 {
		time.Sleep(time.Second)
		if code, body := httpGet(t, admin); code != 503 || !strings.Contains(body, "registration") {
			t.Fatalf("/readyz while another session holds %s: %d %q, want 503 naming the registration", regPath, code, body)
		}
	}
	if err := zk.DeleteEphemeral(t.Context(), regPath); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "/readyz once registered", func() (bool, string) {
		code, body := httpGet(t, admin)
		return code == 200, fmt.Sprint(code, body)
	})
}
