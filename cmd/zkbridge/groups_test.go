package main

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// loadDemo writes the example layout under a fresh chroot of the real ZooKeeper through the demo
// command itself, so the demo is tested too.
func loadDemo(t *testing.T) string {
	t.Helper()
	zkc := zktest.Connect(t)
	r := runCLI(t, "demo", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("demo: exit %d, stderr %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "Group billing: 2 members, 10 partitions, 0 unowned") {
		t.Fatalf("demo output lacks the group summary:\n%s", r.stdout)
	}
	return zkc
}

func openTestStore(t *testing.T, connect string) *zkstate.Store {
	t.Helper()
	return zktest.OpenStore(t, connect)
}

func TestIntegration_GroupsOverExampleLayout(t *testing.T) {
	zkc := loadDemo(t)

	r := runCLI(t, "groups", "list", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("groups list: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "groups_list.golden", r.stdout)

	r = runCLI(t, "groups", "describe", "billing", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("describe: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "describe_billing.golden", r.stdout)

	r = runCLI(t, "groups", "describe", "billing", "--zk", zkc, "--output", "json")
	if r.code != exitOK {
		t.Fatalf("describe json: exit %d: %s", r.code, r.stderr)
	}
	var v groupView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("describe --output json is not JSON: %v\n%s", err, r.stdout)
	}
	if len(v.Members) != 2 || len(v.Partitions) != 10 || len(v.Unowned) != 0 {
		t.Errorf("json view: %d members, %d partitions, %d unowned; want 2, 10, 0", len(v.Members), len(v.Partitions), len(v.Unowned))
	}

	r = runCLI(t, "offsets", "export", "billing", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("offsets export: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "offsets_billing.csv", r.stdout)

	r = runCLI(t, "offsets", "export", "billing", "--zk", zkc, "--format", "json")
	var rows []offsetRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 10 {
		t.Errorf("offsets export json: %v, %d rows\n%s", err, len(rows), r.stdout)
	}
}

func TestIntegration_UnknownGroupIsOneLineError(t *testing.T) {
	zkc := loadDemo(t)
	for _, args := range [][]string{
		{"groups", "describe", "nope", "--zk", zkc},
		{"offsets", "export", "nope", "--zk", zkc},
	} {
		r := runCLI(t, args...)
		if r.code != exitError {
			t.Errorf("%v: exit %d, want %d", args, r.code, exitError)
		}
		if !strings.Contains(r.stderr, `group "nope" not found`) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: want one line naming the group, got %q", args, r.stderr)
		}
	}
}

// Malformed znode data is reported with its path and the reason; the rest of the group still
// shows (issue "Foundation", Bad input).
func TestIntegration_DescribeReportsMalformedZnodes(t *testing.T) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	ctx := context.Background()
	bad := zkstate.IDPath("billing", "billing_broken-1-deadbeef")
	if err := s.Create(ctx, bad, []byte(`{"version":1,"subscription":`), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, zkstate.OffsetPath("billing", "orders", 3), []byte("12a"), -1); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "groups", "describe", "billing", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("describe: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"Problems (2):",
		"/consumers/billing/ids/billing_broken-1-deadbeef: ",
		"/consumers/billing/offsets/orders/3: ",
		"billing_host1-1700000000000-1a2b3c4d", // the good members still show
		"payments  3          billing_host2-1700000000500-5e6f7a8b-1  533",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("describe output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "malformed znode skipped") {
		t.Errorf("no warning logged for the malformed znodes: %q", r.stderr)
	}
}

// `groups describe` tells each member's kind from the hosted-member znodes the bridges write
// beside their members' registrations (zkstate/hosted.go): kafka and legacy members hosted by a
// bridge, zk members for registrations without one (issue 5 item 6).
func TestIntegration_DescribeShowsMemberKinds(t *testing.T) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	ctx := context.Background()
	for _, m := range []struct {
		id     string
		topic  string
		hosted zkstate.HostedMember
	}{
		{"billing_legacy-1700000001000-0000abcd", "orders", zkstate.HostedMember{Kind: zkstate.KindLegacy, Node: 9000, Member: "billing_legacy-1700000001000-0000abcd"}},
		{"billing_kgo-1700000002000-1234abcd", "payments", zkstate.HostedMember{Kind: zkstate.KindKafka, Node: 9001, Member: "kgo-3f2a", Instance: "billing-1"}},
	} {
		// Persistent, as the demo's registrations are: the hosted znode describes the
		// registration held by the same session (here none).
		reg := zkstate.ConsumerRegistration{Version: 1, Pattern: zkstate.PatternStatic, Subscription: map[string]int{m.topic: 1}, TimestampMs: 1700000000000}
		if err := s.Create(ctx, zkstate.IDPath("billing", m.id), reg.Encode(), zkstate.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(ctx, zkstate.HostedMemberPath("/zkbridge", "billing", m.id), m.hosted.Encode(), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(ctx, zkstate.HostedMemberPath("/zkbridge", "billing", "billing_broken"), []byte(`{"version":1,"kind":"zk"}`), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "groups", "describe", "billing", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("describe: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "describe_billing_kinds.golden", r.stdout)

	r = runCLI(t, "groups", "describe", "billing", "--zk", zkc, "--output", "json")
	if r.code != exitOK {
		t.Fatalf("describe json: exit %d: %s", r.code, r.stderr)
	}
	var v groupView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("describe --output json is not JSON: %v\n%s", err, r.stdout)
	}
	kinds := map[string]string{}
	for _, m := range v.Members {
		kinds[m.ID] = m.Kind
		if m.ID == "billing_kgo-1700000002000-1234abcd" && (m.Node == nil || *m.Node != 9001 || m.MemberID != "kgo-3f2a" || m.Instance != "billing-1") {
			t.Errorf("kafka member in json: %+v", m)
		}
	}
	want := map[string]string{
		"billing_host1-1700000000000-1a2b3c4d":  "zk",
		"billing_host2-1700000000500-5e6f7a8b":  "zk",
		"billing_legacy-1700000001000-0000abcd": "legacy",
		"billing_kgo-1700000002000-1234abcd":    "kafka",
	}
	if !maps.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	if len(v.Problems) != 1 || v.Problems[0].Path != "/zkbridge/groups/billing/hosted/billing_broken" {
		t.Errorf("problems %v, want the malformed hosted znode", v.Problems)
	}
}
