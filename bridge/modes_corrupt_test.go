package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 17 build item 3: a garbage mode record stopped its group with a retriable
// COORDINATOR_NOT_AVAILABLE and said so only in the log. /readyz names the group in a note
// (readiness stays 200: the other groups are served, and the record is shared, so no other
// bridge could serve this one either), until the record is repaired.
func TestIntegration_ReadyzNamesCorruptModeRecords(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	ctx := context.Background()
	p := zkstate.CreateOptions{Parents: true}
	mp := zkstate.ModePath(bridge.DefaultRoot, "sick")
	if err := zk.Create(ctx, mp, []byte("garbage"), p); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, clientsNode, nil)
	admin := "http://" + b.AdminAddr().String() + "/readyz"
	zktest.Eventually(t, 10*time.Second, "/readyz names the corrupt mode record", func() (bool, string) {
		code, body := httpGet(t, admin)
		return code == 200 && strings.Contains(body, "note: group sick: mode record "+mp+" does not parse") &&
			strings.Contains(body, "zkbridge repair --group sick --mode"), body
	})
	// One written while the bridge runs is seen by its watch.
	if err := zk.Create(ctx, zkstate.ModePath(bridge.DefaultRoot, "ill"), []byte(`{"version":1,"mode":"nope"}`), p); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "/readyz names the second group", func() (bool, string) {
		code, body := httpGet(t, admin)
		return code == 200 && strings.Contains(body, "note: group ill: mode record") && strings.Contains(body, "group sick"), body
	})
	_, v, _, _ := zkstate.ReadMode(ctx, zk, bridge.DefaultRoot, "sick")
	if _, err := zkstate.RepairMode(ctx, zk, bridge.DefaultRoot, "sick", zkstate.ModeKafka, "ops", "test", v); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "/readyz forgets the repaired group", func() (bool, string) {
		code, body := httpGet(t, admin)
		return code == 200 && !strings.Contains(body, "group sick") && strings.Contains(body, "group ill"), body
	})
}
