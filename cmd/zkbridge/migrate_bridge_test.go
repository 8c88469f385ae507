package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// End to end with a running bridge: the census finds a Kafka member the bridge hosts (its
// hosted znode and its record entry count once), a rollback to legacy is blocked by it, a
// forced one has the bridge rebalance it out, and the group then migrates forward again.
func TestIntegration_MigrateWithRunningBridge(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	const g = "e2e"
	seedGroup(t, s, g, zkstate.ModeMixed)

	b := startBridgeOnKfake(t, zkc, func(gc *group.Config) { gc.MinSessionTimeout = 100 * time.Millisecond })

	_, stopMember := kafkatest.PollKgo(t, kgo.SeedBrokers(b.Addr().String()), kgo.ConsumerGroup(g), kgo.ConsumeTopics("orders"),
		kgo.Balancers(kgo.RangeBalancer()), // mixed groups take eager assignors only
		kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(200*time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))

	status := func() statusRow {
		t.Helper()
		r := runCLI(t, "migrate", "status", "--group", g, "--zk", zkc, "--output", "json")
		var rows []statusRow
		if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != exitOK || len(rows) != 1 {
			t.Fatalf("status: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
		}
		return rows[0]
	}
	waitFor := func(what string, ok func(statusRow) bool) statusRow {
		t.Helper()
		var row statusRow
		zktest.Eventually(t, 20*time.Second, what, func() (bool, string) {
			row = status()
			return ok(row), fmt.Sprintf("status %+v", row)
		})
		return row
	}
	// The member is in the group record first, then the mirror registers it in /ids, a moment
	// before its hosted znode: in between the registration reads as a zk member beside the
	// record's Kafka member (which only ever blocks a step to kafka, the careful mistake). Once
	// the mirror is done it is one Kafka member, its registration and record entry counted once.
	row := waitFor("the Kafka member mirrored and counted once", func(r statusRow) bool {
		return r.Members.Kafka == 1 && r.Members.ZK == 0 && r.MemberList[0].Source == "ids"
	})
	if row.Members.Legacy != 0 || len(row.MemberList) != 1 || row.MemberList[0].Node != bridge.DefaultNodeID {
		t.Errorf("status %+v", row)
	}

	r := runCLI(t, "rollback", "--group", g, "--to", "legacy", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitBlocked || !strings.Contains(r.stdout, "1 kafka member remains") {
		t.Fatalf("rollback: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "rollback", "--group", g, "--to", "legacy", "--force", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitOK {
		t.Fatalf("forced rollback: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The bridge rebalances the member out and refuses it.
	waitFor("the Kafka member rebalanced out", func(r statusRow) bool { return r.Members.Kafka == 0 })

	stopMember()
	r = runCLI(t, "migrate", "apply", "--group", g, "--to", "kafka", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitOK || !strings.Contains(r.stdout, "legacy→mixed, mixed→kafka") {
		t.Fatalf("apply to kafka: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
