package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

func runCLIStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"zkbridge"}, args...), strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func offsetOf(t *testing.T, s *zkstate.Store, group, topic string, p int32) int64 {
	t.Helper()
	data, _, err := s.Get(t.Context(), zkstate.OffsetPath(group, topic, p))
	if err != nil {
		t.Fatal(err)
	}
	off, err := zkstate.ParseOffset(data)
	if err != nil {
		t.Fatal(err)
	}
	return off
}

// Import: a dry run prints the diff and writes nothing; --execute writes; an active group's
// offsets are not moved backwards without --force; what export writes imports back unchanged.
func TestIntegration_OffsetsImportCSV(t *testing.T) {
	zkc := loadDemo(t) // billing: 2 registered 0.8 consumers (active), offsets orders/0-5, payments/0-3
	s := openTestStore(t, zkc)

	// Forward moves and a new partition: a dry run first.
	in := "topic,partition,offset\norders,0,1250\norders,1,1187\npayments,4,7\n"
	r := runCLIStdin(t, in, "offsets", "import", "billing", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("dry run: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "import_dry_run.golden", r.stdout)
	if got := offsetOf(t, s, "billing", "orders", 0); got != 1200 {
		t.Fatalf("dry run wrote orders/0 = %d", got)
	}

	r = runCLIStdin(t, in, "offsets", "import", "billing", "--zk", zkc, "--execute")
	if r.code != exitOK || !strings.Contains(r.stdout, "wrote 2 offsets") {
		t.Fatalf("execute: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if a, b := offsetOf(t, s, "billing", "orders", 0), offsetOf(t, s, "billing", "payments", 4); a != 1250 || b != 7 {
		t.Errorf("after import: orders/0 = %d, payments/4 = %d", a, b)
	}

	// Backwards on an active group: refused (exit 3), dry run or not, nothing written.
	back := "orders,0,1000\norders,2,1400\n"
	for _, args := range [][]string{{}, {"--execute"}} {
		r = runCLIStdin(t, back, append([]string{"offsets", "import", "billing", "--zk", zkc}, args...)...)
		if r.code != exitBlocked || !strings.Contains(r.stdout, "refused: group billing is active (2 members) and the import moves 1 offset backwards") {
			t.Errorf("backwards %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if a, b := offsetOf(t, s, "billing", "orders", 0), offsetOf(t, s, "billing", "orders", 2); a != 1250 || b != 1342 {
		t.Errorf("a refused import wrote: orders/0 = %d, orders/2 = %d", a, b)
	}
	r = runCLIStdin(t, back, "offsets", "import", "billing", "--zk", zkc, "--execute", "--force")
	if r.code != exitOK || offsetOf(t, s, "billing", "orders", 0) != 1000 {
		t.Errorf("forced: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Round trip: export, then import the export: every partition unchanged, nothing written.
	exp := runCLI(t, "offsets", "export", "billing", "--zk", zkc)
	file := filepath.Join(t.TempDir(), "billing.csv")
	if err := os.WriteFile(file, []byte(exp.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	_, before, _ := s.Get(t.Context(), zkstate.OffsetPath("billing", "orders", 0))
	r = runCLI(t, "offsets", "import", "billing", "--zk", zkc, "--file", file, "--execute", "--output", "json")
	var rep importReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitOK {
		t.Fatalf("round trip: exit %d %v\n%s", r.code, err, r.stdout)
	}
	if g := rep.Groups[0]; g.Counts[migrate.ChangeUnchanged] != 11 || g.Written != 0 {
		t.Errorf("round trip: %+v", g)
	}
	if _, after, _ := s.Get(t.Context(), zkstate.OffsetPath("billing", "orders", 0)); after.Version != before.Version {
		t.Error("an unchanged offset was written")
	}

	// An idle group (no member) may go backwards.
	seedGroup(t, s, "idle", zkstate.ModeLegacy)
	if err := s.Create(t.Context(), zkstate.OffsetPath("idle", "orders", 0), zkstate.FormatOffset(50), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	r = runCLIStdin(t, "orders,0,40\n", "offsets", "import", "idle", "--zk", zkc, "--execute")
	if r.code != exitOK || offsetOf(t, s, "idle", "orders", 0) != 40 {
		t.Errorf("idle backwards: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Kafka's ExportZkOffsets format: every group of the file, or the one asked for; its mistakes
// are usage errors naming the line.
func TestIntegration_OffsetsImportExportZkOffsetsFormat(t *testing.T) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	seedGroup(t, s, "audit", zkstate.ModeLegacy)
	file := strings.Join([]string{
		"/consumers/billing/offsets/orders/3:1300",
		"/consumers/billing/offsets/payments/0:541",
		"/consumers/audit/offsets/orders/0:77",
		"",
	}, "\n")

	r := runCLIStdin(t, file, "offsets", "import", "billing", "--zk", zkc, "--execute")
	if r.code != exitOK || !strings.Contains(r.stdout, "Ignored 1 line of other groups.") {
		t.Fatalf("one group: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if a, b := offsetOf(t, s, "billing", "orders", 3), offsetOf(t, s, "billing", "payments", 0); a != 1300 || b != 541 {
		t.Errorf("billing after import: %d %d", a, b)
	}
	if ok, _, _ := s.Exists(t.Context(), zkstate.OffsetPath("audit", "orders", 0)); ok {
		t.Error("a line of another group was imported")
	}
	r = runCLIStdin(t, file, "offsets", "import", "--zk", zkc, "--execute")
	if r.code != exitOK || offsetOf(t, s, "audit", "orders", 0) != 77 {
		t.Errorf("every group: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	for in, want := range map[string]string{
		"/consumers/g/offsets/t/1-0:5\n":                           "a Kafka 0.7",
		"/consumers/g/offsets/t/1:x\n":                             `offset "x"`,
		"/consumers/g/owners/t/1:5\n":                              "is not /consumers/<group>/offsets/<topic>/<partition>",
		"/consumers/g/offsets/t/1:5\n/consumers/g/offsets/t/1:6\n": "already on line 1",
	} {
		r := runCLIStdin(t, in, "offsets", "import", "--zk", zkc)
		if r.code != exitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("%q: exit %d %q, want usage error with %q", in, r.code, r.stderr, want)
		}
	}
	r = runCLIStdin(t, "orders,0,1\n", "offsets", "import", "--zk", zkc)
	if r.code != exitUsage || !strings.Contains(r.stderr, "give the <group> argument") {
		t.Errorf("CSV without a group: exit %d %q", r.code, r.stderr)
	}
}

// A finalized group's import writes the bridge's records, which is where its offsets live.
func TestIntegration_OffsetsImportFinalized(t *testing.T) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	seedGroup(t, s, "done", zkstate.ModeFinalized)
	r := runCLIStdin(t, "orders,0,900\n", "offsets", "import", "done", "--zk", zkc, "--execute")
	if r.code != exitOK || !strings.Contains(r.stdout, "(finalized: the bridge's records)") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	data, _, err := s.Get(t.Context(), zkstate.OwnOffsetPath(testRoot, "done", "orders", 0))
	if err != nil {
		t.Fatal(err)
	}
	if own, err := zkstate.ParseOwnOffset(data); err != nil || own.Offset != 900 {
		t.Errorf("record %+v %v", own, err)
	}
	if ok, _, _ := s.Exists(t.Context(), zkstate.OffsetPath("done", "orders", 0)); ok {
		t.Error("the 0.8 mirror of a finalized group was written")
	}
}
