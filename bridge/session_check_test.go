package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A Kafka member of a mixed group whose session timeout is not below the bridge's ZooKeeper
// session timeout could go on consuming after a crash of the bridge while zk and legacy members
// take its partitions (issue 5, "Noticed": the crash window). With --mixed-session-check=refuse
// its JoinGroup is answered INVALID_SESSION_TIMEOUT (26); a member with a shorter session is
// admitted; with the default (warn) both are. With the data path on both are admitted under
// refuse too: a member that fetches through the bridge fetches nothing once it is dead, and
// nothing while it cannot vouch for its session (fetchgate.go, TestIntegration_MixedBridgeKilled).
func TestIntegration_MixedSessionCheck(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	const g = "checked"
	if _, _, err := zkstate.InitMode(t.Context(), zk, bridge.DefaultRoot, g, zkstate.ModeMixed, "test", "session check"); err != nil {
		t.Fatalf("InitMode: %v", err)
	}
	join := func(addr string, session time.Duration) int16 {
		req := wireJoinReq(g, "")
		req.SessionTimeoutMillis = int32(session.Milliseconds())
		return kafkaRoundTrip(t, addr, req).(*kmsg.JoinGroupResponse).ErrorCode
	}
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	// startBridge asks ZooKeeper for a 4 s session, which the test server grants.
	for _, tc := range []struct {
		check       bridge.SessionCheck
		relay       bool
		long, short int16
	}{
		{bridge.SessionCheckRefuse, false, 26, 79},
		{bridge.SessionCheckWarn, false, 79, 79},
		{bridge.SessionCheckRefuse, true, 79, 79},
	} {
		b := startBridge(t, connect, 1, func(c *bridge.Config) {
			c.MixedSessionCheck = tc.check
			if tc.relay {
				c.Upstream, c.ProxyListen = kf.ListenAddrs(), "127.0.0.1:0"
			}
		})
		addr := b.Addr().String()
		if got := join(addr, 4*time.Second); got != tc.long {
			t.Errorf("%s (relay %v): JoinGroup with a 4 s session timeout: error %d, want %d", tc.check, tc.relay, got, tc.long)
		}
		if got := join(addr, 3*time.Second); got != tc.short {
			t.Errorf("%s (relay %v): JoinGroup with a 3 s session timeout: error %d, want %d", tc.check, tc.relay, got, tc.short)
		}
		body := modeMetrics(t, b)
		want := `zkbridge_groups_mode_refusals_total{request="kafka_join_mixed_session"} 0`
		if tc.long == 26 {
			want = `zkbridge_groups_mode_refusals_total{request="kafka_join_mixed_session"} 1`
		}
		if !strings.Contains(body, want) {
			t.Errorf("%s (relay %v): /metrics lacks %s", tc.check, tc.relay, want)
		}
		if err := b.stop(); err != nil {
			t.Fatal(err)
		}
	}
}
