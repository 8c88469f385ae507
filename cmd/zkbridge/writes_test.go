package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Issue 18 item 7: one convention for every command that writes — a dry run unless --execute,
// as kafka-consumer-groups. A bare command says so on stderr and writes nothing; --dry-run (the
// old flag of migrate apply, rollback and handoff) still works and silences the notice; both
// flags at once are a usage error.
func TestIntegration_WriteCommandsDryRunUnlessExecute(t *testing.T) {
	zkc, s := migrateLayout(t)
	mode := func(g string) zkstate.Mode {
		t.Helper()
		rec, _, _, err := zkstate.ReadMode(t.Context(), s, testRoot, g)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Mode
	}
	for _, tc := range []struct {
		name  string
		args  []string
		group string
		want  zkstate.Mode // after --execute
	}{
		{"migrate apply", []string{"migrate", "apply", "--group", "fresh", "--to", "mixed"}, "fresh", zkstate.ModeMixed},
		{"rollback", []string{"rollback", "--group", "orders", "--to", "mixed"}, "orders", zkstate.ModeMixed},
	} {
		before := mode(tc.group)
		args := append(tc.args, "--zk", zkc, "--who", "ops@test")
		r := runCLI(t, args...)
		if r.code != exitOK || !strings.Contains(r.stderr, "DRY RUN: nothing written. "+tc.name+" writes only with --execute") ||
			!strings.Contains(r.stdout, "Dry run: nothing was written. Run `zkbridge "+tc.name+" ... --execute`") {
			t.Errorf("bare %s: exit %d\nstdout %s\nstderr %s", tc.name, r.code, r.stdout, r.stderr)
		}
		if m := mode(tc.group); m != before {
			t.Fatalf("bare %s moved %s from %s to %s", tc.name, tc.group, before, m)
		}
		r = runCLI(t, append(args, "--dry-run")...)
		if r.code != exitOK || strings.Contains(r.stderr, "DRY RUN") || mode(tc.group) != before {
			t.Errorf("%s --dry-run: exit %d, stderr %q, mode %s", tc.name, r.code, r.stderr, mode(tc.group))
		}
		r = runCLI(t, append(args, "--dry-run", "--execute")...)
		if r.code != exitUsage || mode(tc.group) != before {
			t.Errorf("%s --dry-run --execute: exit %d, want %d; mode %s", tc.name, r.code, exitUsage, mode(tc.group))
		}
		r = runCLI(t, append(args, "--execute")...)
		if r.code != exitOK || strings.Contains(r.stderr, "DRY RUN") || strings.Contains(r.stdout, "Dry run") || mode(tc.group) != tc.want {
			t.Errorf("%s --execute: exit %d, mode %s, want %s\n%s%s", tc.name, r.code, mode(tc.group), tc.want, r.stdout, r.stderr)
		}
	}
	// offsets import: the same flags.
	r := runCLIStdin(t, "orders,0,1\n", "offsets", "import", "billing", "--zk", zkc, "--dry-run", "--execute")
	if r.code != exitUsage {
		t.Errorf("offsets import --dry-run --execute: exit %d", r.code)
	}
	r = runCLIStdin(t, "orders,0,1\n", "offsets", "import", "billing", "--zk", zkc)
	if !strings.Contains(r.stderr, "DRY RUN: nothing written. offsets import writes only with --execute") {
		t.Errorf("bare offsets import: stderr %q", r.stderr)
	}
}

// Every leaf command's --help lists its exit codes (exits.go), and the README's table names
// every command of that table.
func TestExitCodesDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(cmds []*cli.Command, prefix []string)
	walk = func(cmds []*cli.Command, prefix []string) {
		for _, c := range cmds {
			path := append(append([]string(nil), prefix...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(c.Subcommands, path)
				continue
			}
			r := runCLI(t, append(path, "--help")...)
			if !strings.Contains(r.stdout, "Exit codes:") || !strings.Contains(r.stdout, "2  usage") {
				t.Errorf("zkbridge %s --help lists no exit codes", strings.Join(path, " "))
			}
		}
	}
	walk(newApp(&env{}).Commands, nil)
	for cmd := range commandExits {
		if !strings.Contains(string(readme), "`"+cmd+"`") {
			t.Errorf("README's exit code table lacks `%s`", cmd)
		}
	}
}

// The progress line of a long run: done/total, rate, ETA at that rate.
func TestProgressLine(t *testing.T) {
	counts := map[migrate.Status]int{migrate.StatusApplied: 240, migrate.StatusBlocked: 10}
	for _, tc := range []struct {
		done, total int
		elapsed     time.Duration
		want        string
	}{
		{0, 1000, 0, "[                              ] 0/1000  done 0  blocked 0  failed 0"},
		{250, 1000, 10 * time.Second, "[=======                       ] 250/1000  done 240  blocked 10  failed 0  25.0 groups/s  ETA 30s"},
		{1000, 1000, 20 * time.Second, "[==============================] 1000/1000  done 240  blocked 10  failed 0  50.0 groups/s"},
	} {
		c := counts
		if tc.done == 0 {
			c = map[migrate.Status]int{}
		}
		if got := progressLine(tc.done, tc.total, c, tc.elapsed, ""); got != tc.want {
			t.Errorf("progressLine(%d/%d after %s)\n got %q\nwant %q", tc.done, tc.total, tc.elapsed, got, tc.want)
		}
	}
}
