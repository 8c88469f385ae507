package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, append([]string{"zkbridge"}, args...), strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

// golden compares got with testdata/<name>, rewriting it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from golden (run with -update and read the diff)\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

func TestHelpListsCommands(t *testing.T) {
	r := runCLI(t, "--help")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	for _, want := range []string{"groups", "offsets", "demo", "version", "--log-format", "--log-level"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help does not mention %q:\n%s", want, r.stdout)
		}
	}
}

func TestVersion(t *testing.T) {
	r := runCLI(t, "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "zkbridge ") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{
		{"--log-format", "xml", "version"},
		{"--log-level", "loud", "version"},
		{"groups", "describe"},
		{"groups", "describe", "a", "b"},
		{"groups", "list", "--output", "yaml"},
		{"offsets", "export", "g", "--format", "xml"},
		{"groups", "list", "--no-such-flag"},
		{"serve", "--zk", "127.0.0.1:1", "--drain-producer-linger", "-1s"},
	} {
		r := runCLI(t, args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, r.code, exitUsage, r.stderr)
		}
	}
}

// An unreachable ZooKeeper is a one-line error and exit 1 within --zk-timeout, not a hang.
func TestUnreachableZooKeeperFailsFast(t *testing.T) {
	start := time.Now()
	r := runCLI(t, "groups", "list", "--zk", "127.0.0.1:1", "--zk-timeout", "1s")
	if r.code != exitError {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, exitError, r.stderr)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("took %v, want about the 1s timeout", el)
	}
	if lines := strings.Count(strings.TrimSpace(r.stderr), "\n"); lines != 0 || !strings.HasPrefix(r.stderr, "zkbridge: ") {
		t.Errorf("want one error line starting with 'zkbridge: ', got %q", r.stderr)
	}
}

func TestJSONLogFormat(t *testing.T) {
	r := runCLI(t, "--log-format", "json", "--log-level", "debug", "groups", "list", "--zk", "127.0.0.1:1", "--zk-timeout", "300ms")
	if r.code != exitError {
		t.Fatalf("exit %d", r.code)
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if strings.HasPrefix(line, "zkbridge: ") {
			continue
		}
		if !strings.HasPrefix(line, "{") {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
}
