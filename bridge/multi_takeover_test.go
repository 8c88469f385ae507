package bridge_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A bridge that takes groups over after their holder's session ended (its rescan when the live
// bridges change) loads each with three ZooKeeper requests in a row: it takes the epoch at the
// version the rescan read, then checks the holder, then reads the record. It took five: whether
// a record exists, the epoch again, the holder's registration, the epoch write, the record.
// Counted here by the requests that differ, Exists: one per group taken, where it was two.
func TestIntegration_SeveralBridgesTakeoverLoadsInFewerRequests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	const gone, taker, other = int32(9101), int32(9102), int32(9103)
	var names []string
	for i := range 8 {
		names = append(names, ownedGroup(fmt.Sprintf("tk%d", i), taker, taker, other))
	}
	a := startBridge(t, connect, gone, nil)
	for _, name := range names {
		stableGroup(t, a, name, [2]group.InstanceID{"s1", "s2"})
	}
	if err := a.stop(); err != nil { // alone: nothing is handed over, the epochs still name it
		t.Fatal(err)
	}
	b := startBridge(t, connect, taker, nil)
	before := zkRequests(t, b, "exists")
	startBridge(t, connect, other, nil) // b's live bridges change: it takes its groups over
	zktest.Eventually(t, 20*time.Second, "the taker holds every group", func() (bool, string) {
		for _, name := range names {
			if e := epochOf(ctx, zk, name); e.NodeID != taker || e.Released {
				return false, fmt.Sprintf("%s: epoch %+v", name, e)
			}
		}
		return true, ""
	})
	zktest.Eventually(t, 10*time.Second, "every group loaded", func() (bool, string) {
		n := 0
		for _, name := range names {
			if r := describe(t, b, name); r.Err == group.ErrNone && r.Group.Generation == 1 {
				n++
			}
		}
		return n == len(names), fmt.Sprintf("%d of %d", n, len(names))
	})
	exists := zkRequests(t, b, "exists") - before
	t.Logf("%d Exists requests for %d groups taken over", exists, len(names))
	if exists > int64(len(names))*3/2 {
		t.Errorf("%d Exists requests for %d groups taken over; want one a group", exists, len(names))
	}
}

var zkRequestsLine = regexp.MustCompile(`(?m)^zkbridge_zk_requests_total\{kind="([a-z]+)"\} ([0-9.e+]+)$`)

// zkRequests is the bridge's count of ZooKeeper requests of kind (zkbridge_zk_requests_total).
func zkRequests(t *testing.T, b *running, kind string) int64 {
	t.Helper()
	_, body := httpGet(t, "http://"+b.AdminAddr().String()+"/metrics")
	for _, m := range zkRequestsLine.FindAllStringSubmatch(body, -1) {
		if m[1] == kind {
			f, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(f)
		}
	}
	t.Fatalf("/metrics lacks zkbridge_zk_requests_total{kind=%q}", kind)
	return 0
}
