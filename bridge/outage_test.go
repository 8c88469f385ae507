package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 17 §5: during a ZooKeeper outage Metadata closed the connection, so clients reconnected
// in a loop, and commits resumed seconds after the quorum returned. Cut from ZooKeeper (a
// proxy that drops every connection, for longer than the session timeout, so the session
// expires), the bridge answers Metadata from its last view and FindCoordinator
// COORDINATOR_NOT_AVAILABLE, both retriable; once the link is back, the time to the first
// accepted commit is logged (docs/benchmarks.md: "ZooKeeper outages").
func TestIntegration_ZooKeeperOutageAnswers(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	zk := zktest.OpenStore(t, connect)
	loadTopicsLayout(t, zk, map[string]int32{"orders": 1}, false)
	b := startBridge(t, proxy.Addr()+connect[i:], clientsNode, func(c *bridge.Config) {
		c.MetadataMaxAge = 100 * time.Millisecond
	})
	addr, admin := b.Addr().String(), "http://"+b.AdminAddr().String()
	const g = "outage"
	commit := func(off int64) int16 {
		return kafkaRoundTrip(t, addr, groupCommit(g, "", -1, "orders", 0, off)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	if c := commit(1); c != 0 {
		t.Fatalf("commit: %s", codeName(c))
	}
	metadata := kmsg.NewPtrMetadataRequest()
	metadata.SetVersion(4)
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("orders")
	metadata.Topics = append(metadata.Topics, mt)
	find := kmsg.NewPtrFindCoordinatorRequest()
	find.SetVersion(1)
	find.CoordinatorKey = g

	proxy.Freeze()
	cut := time.Now()
	zktest.Eventually(t, 10*time.Second, "the bridge sees the outage", func() (bool, string) {
		code, body := httpGet(t, admin+"/readyz")
		return code == 503, body
	})
	// Past the session timeout (4 s): the session expires on the server, the bridge fences its
	// groups; Metadata and FindCoordinator are still answered, on the connection they came on.
	for time.Since(cut) < 5*time.Second {
		m := kafkaRoundTrip(t, addr, metadata).(*kmsg.MetadataResponse)
		if len(m.Topics) != 1 || *m.Topics[0].Topic != "orders" || (m.Topics[0].ErrorCode != 0 && m.Topics[0].ErrorCode != 5) {
			t.Fatalf("Metadata during the outage: %+v", m.Topics)
		}
		if f := kafkaRoundTrip(t, addr, find).(*kmsg.FindCoordinatorResponse); f.ErrorCode != 15 {
			t.Fatalf("FindCoordinator during the outage: %s, want COORDINATOR_NOT_AVAILABLE", codeName(f.ErrorCode))
		}
		if c := commit(2); c != 15 && c != 16 {
			t.Fatalf("commit during the outage: %s, want COORDINATOR_NOT_AVAILABLE or NOT_COORDINATOR", codeName(c))
		}
		time.Sleep(250 * time.Millisecond)
	}

	proxy.Thaw()
	back := time.Now()
	var firstCommit time.Duration
	for {
		c := commit(3)
		if c == 0 {
			firstCommit = time.Since(back)
			break
		}
		if time.Since(back) > 30*time.Second {
			t.Fatalf("no commit accepted 30 s after the outage: %s", codeName(c))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f := kafkaRoundTrip(t, addr, find).(*kmsg.FindCoordinatorResponse); f.ErrorCode != 0 {
		t.Errorf("FindCoordinator after the outage: %s", codeName(f.ErrorCode))
	}
	t.Logf("outage %v; first commit accepted %v after ZooKeeper was reachable again", back.Sub(cut).Round(time.Millisecond), firstCommit.Round(time.Millisecond))
}
