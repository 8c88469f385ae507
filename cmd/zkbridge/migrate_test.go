package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

const testRoot = "/zkbridge"

// seedMember is a simulated member: "zk" (a registration alone), "kafka" or "legacy" (a
// registration and the bridge's hosted znode), "record" (a Kafka member in the group record).
type seedMember struct{ kind, id string }

// seedGroup writes a group's mode record (none for mode "") and members, as a bridge and 0.8
// consumers leave them (persistent: the test's session stands for every member's).
func seedGroup(t *testing.T, s *zkstate.Store, group string, mode zkstate.Mode, members ...seedMember) {
	t.Helper()
	ctx := t.Context()
	parents := zkstate.CreateOptions{Parents: true}
	var ops []zkstate.Op
	var record []string
	for _, m := range members {
		switch m.kind {
		case "record":
			record = append(record, fmt.Sprintf(`{"id":%q,"kind":"kafka","client_id":"c","client_host":"h","protocol_type":"consumer","protocols":[{"name":"range"}]}`, m.id))
			continue
		case zkstate.KindKafka, zkstate.KindLegacy:
			h := zkstate.HostedMember{Kind: m.kind, Node: 9000, Member: m.id}
			ops = append(ops, zkstate.CreateOp(zkstate.HostedMemberPath(testRoot, group, m.id), h.Encode(), parents))
		}
		reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"orders": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1700000000000}
		ops = append(ops, zkstate.CreateOp(zkstate.IDPath(group, m.id), reg.Encode(), parents))
	}
	if record != nil {
		data := fmt.Sprintf(`{"version":1,"group":%q,"generation":1,"protocol_type":"consumer","protocol_name":"range","leader":"x","members":[%s]}`, group, strings.Join(record, ","))
		ops = append(ops, zkstate.CreateOp(zkstate.GroupRecordPath(testRoot, group), []byte(data), parents))
	}
	if len(ops) > 0 {
		if err := s.Multi(ctx, ops...); err != nil {
			t.Fatal(err)
		}
	}
	if mode != "" {
		if _, _, err := zkstate.InitMode(ctx, s, testRoot, group, mode, "test-seed", "seeded"); err != nil {
			t.Fatal(err)
		}
	}
}

// migrateLayout loads the demo (group billing: two 0.8 consumers, no mode recorded) and adds
// groups in every mode, with members of every kind and a stale mirror.
func migrateLayout(t *testing.T) (string, *zkstate.Store) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	seedGroup(t, s, "clicks", zkstate.ModeMixed, seedMember{"kafka", "clicks-k1"}, seedMember{"legacy", "clicks-l1"})
	seedGroup(t, s, "orders", zkstate.ModeKafka, seedMember{"kafka", "orders-k1"}, seedMember{"record", "orders-k2"})
	seedGroup(t, s, "archive", zkstate.ModeFinalized)
	seedGroup(t, s, "fresh", zkstate.ModeLegacy)
	// orders: the bridge committed t/0 twice, the mirror holds the first commit only.
	p := zkstate.CreateOptions{Parents: true}
	if err := s.Multi(t.Context(),
		zkstate.CreateOp(zkstate.OffsetPath("orders", "orders", 0), zkstate.FormatOffset(10), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, "orders", "orders", 0), zkstate.OwnOffset{Offset: 10, LeaderEpoch: -1}.Encode(), p)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(t.Context(), zkstate.OwnOffsetPath(testRoot, "orders", "orders", 0), zkstate.OwnOffset{Offset: 12, LeaderEpoch: -1}.Encode(), -1); err != nil {
		t.Fatal(err)
	}
	return zkc, s
}

func TestIntegration_MigratePlanStatusApply(t *testing.T) {
	zkc, s := migrateLayout(t)

	r := runCLI(t, "migrate", "status", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("status: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "migrate_status.golden", r.stdout)

	r = runCLI(t, "migrate", "plan", "--all", "--to", "kafka", "--zk", zkc)
	if r.code != exitBlocked {
		t.Fatalf("plan: exit %d, want %d (blocked): %s", r.code, exitBlocked, r.stderr)
	}
	golden(t, "migrate_plan_kafka.golden", r.stdout)
	if !strings.Contains(r.stderr, "2 of 5 groups planned blocked by a precondition") {
		t.Errorf("plan stderr: %q", r.stderr)
	}

	r = runCLI(t, "migrate", "plan", "--match", "f.*", "--to", "mixed", "--zk", zkc, "--output", "json")
	var rows []planRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != exitOK {
		t.Fatalf("plan json: exit %d %v\n%s", r.code, err, r.stdout)
	}
	if len(rows) != 1 || rows[0].Group != "fresh" || rows[0].Status != migrate.StatusReady || len(rows[0].Steps) != 1 {
		t.Errorf("plan json: %+v", rows)
	}

	// Apply to mixed: billing (default legacy) and fresh move, the others are past or there.
	r = runCLI(t, "migrate", "apply", "--all", "--to", "mixed", "--zk", zkc, "--who", "ops@test", "--batch", "2", "--execute")
	if r.code != exitOK {
		t.Fatalf("apply: exit %d: %s\n%s", r.code, r.stderr, r.stdout)
	}
	golden(t, "migrate_apply_mixed.golden", r.stdout)
	trs, err := zkstate.ReadTransitions(t.Context(), s, testRoot, "billing")
	if err != nil || len(trs) != 1 || trs[0].From != zkstate.ModeLegacy || trs[0].To != zkstate.ModeMixed || trs[0].By != "ops@test" {
		t.Errorf("billing's transitions: %+v %v", trs, err)
	}

	// Re-run: nothing left to do, nothing recorded again.
	r = runCLI(t, "migrate", "apply", "--all", "--to", "mixed", "--zk", zkc, "--who", "ops@test", "--output", "json", "--execute")
	var rep applyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitOK {
		t.Fatalf("apply json: exit %d %v\n%s", r.code, err, r.stdout)
	}
	if rep.Summary[migrate.StatusAtTarget] != 3 || rep.Summary[migrate.StatusPast] != 2 || rep.Summary[migrate.StatusApplied] != 0 {
		t.Errorf("re-run summary %v", rep.Summary)
	}
	if trs, _ := zkstate.ReadTransitions(t.Context(), s, testRoot, "billing"); len(trs) != 1 {
		t.Errorf("re-run recorded again: %+v", trs)
	}

	// To kafka: blocked by billing's 0.8 consumers and clicks' legacy member; exit 3.
	r = runCLI(t, "migrate", "apply", "--group", "billing,clicks", "--to", "kafka", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitBlocked || !strings.Contains(r.stdout, "2 zk members remain (billing_host1-1700000000000-1a2b3c4d, billing_host2-1700000000500-5e6f7a8b)") {
		t.Errorf("apply to kafka: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Dry run: nothing written.
	r = runCLI(t, "migrate", "apply", "--group", "fresh", "--to", "finalized", "--zk", zkc, "--dry-run")
	if r.code != exitOK || !strings.Contains(r.stdout, "mixed→kafka, kafka→finalized") || !strings.Contains(r.stdout, "Dry run: nothing was written.") {
		t.Errorf("dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if rec, _, _, _ := zkstate.ReadMode(t.Context(), s, testRoot, "fresh"); rec.Mode != zkstate.ModeMixed {
		t.Errorf("dry run moved fresh to %s", rec.Mode)
	}
}

func TestIntegration_MigrateUsage(t *testing.T) {
	for _, args := range [][]string{
		{"migrate", "plan", "--to", "kafka"},                              // no groups chosen
		{"migrate", "plan", "--all", "--group", "x", "--to", "kafka"},     // two ways
		{"migrate", "plan", "--all"},                                      // no --to
		{"migrate", "plan", "--all", "--to", "kraft"},                     // unknown mode
		{"migrate", "plan", "--match", "(", "--to", "kafka"},              // bad pattern
		{"migrate", "apply", "--all", "--to", "kafka", "--parallel", "0"}, // bad parallelism
		{"migrate", "status", "--output", "yaml"},
		{"rollback"},
		{"rollback", "--group", "g", "--to", "kafka"},
		{"offsets", "import", "--file", "/dev/null", "--format", "xml"},
		{"handoff", "--group", "g"},
	} {
		r := runCLI(t, append(args, "--zk", "127.0.0.1:1", "--zk-timeout", "200ms")...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, r.code, exitUsage, r.stderr)
		}
	}
	r := runCLI(t, "migrate", "apply", "--help")
	for _, want := range []string{"Exit codes:", "3  blocked", "4  refused", "--batch", "--pause", "--dry-run", "--wait", "Resumable"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("migrate apply --help lacks %q", want)
		}
	}
}

func TestIntegration_Rollback(t *testing.T) {
	zkc, s := migrateLayout(t)

	// A finalized group: refused with the reason, exit 4, nothing changed.
	_, before, _, _ := zkstate.ReadMode(t.Context(), s, testRoot, "archive")
	r := runCLI(t, "rollback", "--group", "archive", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitRefused || !strings.Contains(r.stdout, "finalized is terminal: the ZooKeeper mirror is no longer written") {
		t.Errorf("rollback of a finalized group: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "rollback", "--group", "archive", "--to", "legacy", "--force", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitRefused {
		t.Errorf("forced rollback of a finalized group: exit %d", r.code)
	}
	if _, after, _, _ := zkstate.ReadMode(t.Context(), s, testRoot, "archive"); after != before {
		t.Errorf("refused rollback changed the record: version %d → %d", before, after)
	}

	// kafka → mixed always; then to legacy blocked by the Kafka members, exit 3.
	r = runCLI(t, "rollback", "--group", "orders", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitOK || !strings.Contains(r.stdout, "kafka→mixed") {
		t.Errorf("rollback kafka→mixed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "rollback", "--group", "orders", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitBlocked || !strings.Contains(r.stdout, "2 kafka members remain (orders-k1, orders-k2)") {
		t.Errorf("rollback to legacy with Kafka members: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "rollback", "--group", "orders", "--to", "legacy", "--force", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitOK || !strings.Contains(r.stdout, "mixed→legacy (forced)") {
		t.Errorf("forced rollback: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if rec, _, _, _ := zkstate.ReadMode(t.Context(), s, testRoot, "orders"); rec.Mode != zkstate.ModeLegacy {
		t.Errorf("orders is %s", rec.Mode)
	}
	// At legacy there is nothing behind.
	r = runCLI(t, "rollback", "--group", "orders", "--zk", zkc, "--execute")
	if r.code != exitRefused || !strings.Contains(r.stderr, "nothing to roll back to") {
		t.Errorf("rollback at legacy: exit %d %s", r.code, r.stderr)
	}
	// An unknown group is an error, not a new group.
	r = runCLI(t, "rollback", "--group", "nope", "--zk", zkc, "--execute")
	if r.code != exitError || !strings.Contains(r.stderr, `group "nope": group not found`) {
		t.Errorf("unknown group: exit %d %s", r.code, r.stderr)
	}
}
