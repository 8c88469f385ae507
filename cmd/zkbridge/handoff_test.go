package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// clusterOffsets reads a group's committed offsets from the cluster with franz-go (another
// client than the one handoff commits with).
func clusterOffsets(t *testing.T, addrs []string, group string) map[string]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, tp := range resp.Topics {
		for _, p := range tp.Partitions {
			if p.Offset >= 0 {
				out[tp.Topic+"/"+string(rune('0'+p.Partition))] = p.Offset
			}
		}
	}
	return out
}

// Handoff of a finalized group with no members to an in-process kfake cluster: the offsets
// the group's consumers see (the bridge's records, and a 0.8 offset from before finalization)
// are committed, read back and recorded; a re-run commits and records nothing; groups that are
// not finalized, or have members, are not handed off.
func TestIntegration_Handoff(t *testing.T) {
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	addrs := kf.ListenAddrs()
	bootstrap := strings.Join(addrs, ",")

	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	p := zkstate.CreateOptions{Parents: true}
	// Group "done": a 0.8 offset for orders/0 (a zk member's, before finalization) and the
	// bridge's records for orders/1-2, then finalized.
	seedGroup(t, s, "done", zkstate.ModeKafka)
	if err := s.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath("done", "orders", 0), zkstate.FormatOffset(100), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, "done", "orders", 1), zkstate.OwnOffset{Offset: 200, LeaderEpoch: -1, Metadata: "m1"}.Encode(), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, "done", "orders", 2), zkstate.OwnOffset{Offset: 300, LeaderEpoch: -1}.Encode(), p)); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "migrate", "apply", "--group", "done", "--to", "finalized", "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitOK {
		t.Fatalf("finalize: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, "handoff", "--group", "done", "--bootstrap", bootstrap, "--zk", zkc, "--dry-run")
	if r.code != exitOK || !strings.Contains(r.stdout, "would commit") || len(clusterOffsets(t, addrs, "done")) != 0 {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, "handoff", "--group", "done", "--bootstrap", bootstrap, "--zk", zkc, "--who", "ops@test", "--execute")
	if r.code != exitOK {
		t.Fatalf("handoff: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	golden(t, "handoff_done.golden", strings.ReplaceAll(r.stdout, bootstrap, "BOOTSTRAP"))
	got := clusterOffsets(t, addrs, "done")
	if got["orders/0"] != 100 || got["orders/1"] != 200 || got["orders/2"] != 300 || len(got) != 3 {
		t.Errorf("cluster holds %v", got)
	}
	hs, err := migrate.ReadHandoffs(ctx, s, testRoot, "done")
	if err != nil || len(hs) != 1 || hs[0].Offsets != 3 || hs[0].Bootstrap != bootstrap || hs[0].By != "ops@test" {
		t.Fatalf("handoff records %+v %v", hs, err)
	}

	// Again: nothing to commit, nothing recorded.
	r = runCLI(t, "handoff", "--group", "done", "--bootstrap", bootstrap, "--zk", zkc, "--output", "json", "--execute")
	var rep handoffReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitOK || rep.Committed != 0 || !rep.Verified || rep.Handoff != nil {
		t.Errorf("re-run: exit %d %v %+v", r.code, err, rep)
	}
	if hs, _ := migrate.ReadHandoffs(ctx, s, testRoot, "done"); len(hs) != 1 {
		t.Errorf("re-run recorded again: %+v", hs)
	}

	// The cluster ahead of the bridge (consumers ran against it since): blocked unless --force.
	if _, err := s.Set(ctx, zkstate.OwnOffsetPath(testRoot, "done", "orders", 2), zkstate.OwnOffset{Offset: 250, LeaderEpoch: -1}.Encode(), -1); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "handoff", "--group", "done", "--bootstrap", bootstrap, "--zk", zkc, "--execute")
	if r.code != exitBlocked || !strings.Contains(r.stderr, "ahead of the bridge's for 1 partition") || clusterOffsets(t, addrs, "done")["orders/2"] != 300 {
		t.Errorf("cluster ahead: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "handoff", "--group", "done", "--bootstrap", bootstrap, "--zk", zkc, "--force", "--execute")
	if r.code != exitOK || clusterOffsets(t, addrs, "done")["orders/2"] != 250 {
		t.Errorf("forced: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Not finalized: refused. Members left: blocked.
	seedGroup(t, s, "busy", zkstate.ModeFinalized, seedMember{"record", "k1"})
	for group, want := range map[string]struct {
		code int
		msg  string
	}{
		"billing": {exitRefused, "only a finalized group is handed off"},
		"busy":    {exitBlocked, "still has 1 member (kafka k1)"},
	} {
		r = runCLI(t, "handoff", "--group", group, "--bootstrap", bootstrap, "--zk", zkc, "--execute")
		if r.code != want.code || !strings.Contains(r.stderr, want.msg) {
			t.Errorf("%s: exit %d %q, want %d with %q", group, r.code, r.stderr, want.code, want.msg)
		}
	}
}
