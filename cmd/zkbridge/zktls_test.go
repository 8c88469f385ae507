package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Every command that talks to ZooKeeper connects to its secureClientPort with --zk-tls (one
// flag set, zkFlags): Debian's ZooKeeper serving TLS, the commands given the CA only; reads
// answer, and the writes (migrate, rollback, offsets reset, groups delete) land in ZooKeeper as
// read over the plaintext port. A plaintext command on the secure port gets no session, and
// TLS files without --zk-tls are a usage error.
func TestIntegration_CommandsOverZooKeeperTLS(t *testing.T) {
	zk := zktest.StartTLS(t)
	plain := zktest.OpenStore(t, zk.Addr+"/clitls")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp := zkstate.TopicPartition{Topic: "orders", Partition: 0}
	if err := zkstate.LoadLayout(ctx, plain, zkstate.Layout{
		Topics: map[string]zkstate.TopicAssignment{"orders": {Version: 1, Partitions: map[int32][]int32{0: {1}}}},
		Groups: []zkstate.LayoutGroup{
			{Name: "billing", Offsets: map[zkstate.TopicPartition]int64{tp: 40}},
			{Name: "idle", Offsets: map[zkstate.TopicPartition]int64{tp: 7}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	secure := []string{"--zk", zk.Secure + "/clitls", "--zk-tls", "--zk-tls-ca", zk.CA.File, "--zk-timeout", "10s"}
	for _, args := range [][]string{
		{"groups", "list"},
		{"groups", "describe", "billing"},
		{"bridges"},
		{"offsets", "export", "billing"},
		{"migrate", "status"},
		{"migrate", "plan", "--group", "billing", "--to", "mixed"},
		{"migrate", "apply", "--group", "billing", "--to", "mixed", "--who", "ops@test", "--execute"},
		{"rollback", "--group", "billing", "--to", "legacy", "--who", "ops@test", "--execute"},
		{"offsets", "reset", "billing", "--to-offset", "12", "--topic", "orders:0", "--execute"},
		{"groups", "delete", "idle", "--execute"},
		{"repair", "--group", "billing"},
	} {
		r := runCLI(t, append(args, secure...)...)
		if r.code != exitOK {
			t.Fatalf("zkbridge %s over TLS: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if data, _, err := plain.Get(ctx, "/consumers/billing/offsets/orders/0"); err != nil || string(data) != "12" {
		t.Fatalf("billing's offset after a reset over TLS: %q, %v", data, err)
	}
	if ok, _, err := plain.Exists(ctx, "/consumers/idle"); err != nil || ok {
		t.Fatalf("idle after a delete over TLS: exists %v, %v", ok, err)
	}
	status := runCLI(t, append([]string{"migrate", "status", "--group", "billing"}, secure...)...)
	if !strings.Contains(status.stdout, "legacy") {
		t.Fatalf("billing's mode after apply and rollback over TLS:\n%s", status.stdout)
	}

	if r := runCLI(t, "groups", "list", "--zk", zk.Secure+"/clitls", "--zk-timeout", "2s"); r.code != exitError {
		t.Fatalf("plaintext on the secure port: exit %d, want %d\n%s", r.code, exitError, r.stderr)
	}
	if r := runCLI(t, "groups", "list", "--zk", zk.Addr+"/clitls", "--zk-tls-ca", zk.CA.File); r.code != exitUsage ||
		!strings.Contains(r.stderr, "--zk-tls") {
		t.Fatalf("--zk-tls-ca without --zk-tls: exit %d\n%s", r.code, r.stderr)
	}
}
