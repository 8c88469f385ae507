package main

import (
	"path"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 18 item 7: groups delete, refused while the group has members as Kafka refuses a group
// that is not empty; a dry run unless --execute; everything of the group goes.
func TestIntegration_GroupsDelete(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	p := zkstate.CreateOptions{Parents: true}
	if err := s.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath("idle", "orders", 0), zkstate.FormatOffset(5), p),
		zkstate.CreateOp(zkstate.OffsetPath("busy", "orders", 0), zkstate.FormatOffset(5), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, "fin", "orders", 0), zkstate.OwnOffset{Offset: 9, LeaderEpoch: -1}.Encode(), p)); err != nil {
		t.Fatal(err)
	}
	seedGroup(t, s, "busy", "", seedMember{zkstate.KindZK, "busy_h-1700000000000-00000001"})
	seedGroup(t, s, "fin", zkstate.ModeFinalized)
	exists := func(p string) bool {
		ok, _, err := s.Exists(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	finDir := path.Join(zkstate.BridgeGroupsPath(testRoot), "fin")

	r := runCLI(t, "groups", "delete", "idle", "fin", "--zk", zkc)
	if r.code != exitOK || !strings.Contains(r.stdout, "idle: would be deleted (legacy mode, 1 committed offset)") || !exists(zkstate.GroupPath("idle")) || !exists(finDir) {
		t.Fatalf("dry run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "groups", "delete", "idle", "fin", "--zk", zkc, "--execute")
	if r.code != exitOK || exists(zkstate.GroupPath("idle")) || exists(finDir) {
		t.Errorf("delete: exit %d, /consumers/idle %v, %s %v\n%s%s", r.code, exists(zkstate.GroupPath("idle")), finDir, exists(finDir), r.stdout, r.stderr)
	}
	r = runCLI(t, "groups", "delete", "busy", "--zk", zkc, "--execute")
	if r.code != exitBlocked || !strings.Contains(r.stderr, "group busy is not empty: 1 member (zk busy_h-1700000000000-00000001)") || !exists(zkstate.OffsetPath("busy", "orders", 0)) {
		t.Errorf("busy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "groups", "delete", "nope", "busy", "--zk", zkc, "--execute")
	if r.code != exitError || !strings.Contains(r.stdout, "group nope not found") {
		t.Errorf("unknown group: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// offsets delete clears both places OffsetFetch may read, only for the partitions named.
func TestIntegration_OffsetsDelete(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	const g = "od"
	p := zkstate.CreateOptions{Parents: true}
	own := func(o int64) []byte { return zkstate.OwnOffset{Offset: o, LeaderEpoch: -1}.Encode() }
	if err := s.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath(g, "orders", 0), zkstate.FormatOffset(5), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, g, "orders", 0), own(5), p),
		zkstate.CreateOp(zkstate.OffsetPath(g, "orders", 1), zkstate.FormatOffset(6), p),
		zkstate.CreateOp(zkstate.OffsetPath(g, "clicks", 0), zkstate.FormatOffset(7), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, g, "clicks", 1), own(8), p)); err != nil {
		t.Fatal(err)
	}
	seedGroup(t, s, g, zkstate.ModeKafka)
	offsets := func() string {
		t.Helper()
		var out []string
		for _, tp := range []struct {
			topic string
			p     int32
		}{{"orders", 0}, {"orders", 1}, {"clicks", 0}, {"clicks", 1}} {
			for _, path := range []string{zkstate.OffsetPath(g, tp.topic, tp.p), zkstate.OwnOffsetPath(testRoot, g, tp.topic, tp.p)} {
				if ok, _, _ := s.Exists(ctx, path); ok {
					out = append(out, strings.TrimPrefix(path, "/"))
				}
			}
		}
		return strings.Join(out, " ")
	}
	before := offsets()
	r := runCLI(t, "offsets", "delete", g, "--topic", "orders:0", "--zk", zkc)
	if r.code != exitOK || offsets() != before || !strings.Contains(r.stdout, "od     orders  0          5") {
		t.Fatalf("dry run: exit %d, %s\n%s%s", r.code, offsets(), r.stdout, r.stderr)
	}
	r = runCLI(t, "offsets", "delete", g, "--topic", "orders:0", "--topic", "clicks", "--zk", zkc, "--execute")
	if want := "consumers/od/offsets/orders/1"; r.code != exitOK || offsets() != want {
		t.Errorf("delete: exit %d, left %q, want %q\n%s%s", r.code, offsets(), want, r.stdout, r.stderr)
	}
	seedGroup(t, s, g, "", seedMember{zkstate.KindZK, "od_h-1700000000000-00000001"})
	r = runCLI(t, "offsets", "delete", g, "--topic", "orders", "--zk", zkc, "--execute")
	if r.code != exitBlocked || offsets() == "" {
		t.Errorf("with a member: exit %d, left %q\n%s", r.code, offsets(), r.stderr)
	}
	r = runCLI(t, "offsets", "delete", g, "--topic", "orders", "--zk", zkc, "--execute", "--force")
	if r.code != exitOK || offsets() != "" {
		t.Errorf("forced: exit %d, left %q\n%s%s", r.code, offsets(), r.stdout, r.stderr)
	}
}

// groups delete is one ZooKeeper multi over what it read: whatever happens to the group between
// the read (census and trees) and the delete — a 0.8 consumer registering, an offset committed,
// a bridge persisting a Kafka member — fails it whole, and nothing is deleted (a census then a
// recursive delete would have deleted the new consumer's registration under its feet).
func TestIntegration_GroupsDeleteAtomic(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	p := zkstate.CreateOptions{Parents: true}
	between := map[string]func(g string) error{
		"a consumer registers": func(g string) error {
			reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"orders": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1700000000000}
			return s.Create(ctx, zkstate.IDPath(g, g+"_late-1700000000000-00000001"), reg.Encode(), zkstate.CreateOptions{Ephemeral: true, Parents: true})
		},
		"an offset is committed": func(g string) error {
			_, err := s.Set(ctx, zkstate.OffsetPath(g, "orders", 0), zkstate.FormatOffset(6), -1)
			return err
		},
		"a new partition's offset appears": func(g string) error {
			return s.Create(ctx, zkstate.OffsetPath(g, "orders", 1), zkstate.FormatOffset(1), p)
		},
		"a bridge records an offset": func(g string) error {
			return s.Create(ctx, zkstate.OwnOffsetPath(testRoot, g, "orders", 3), zkstate.OwnOffset{Offset: 9, LeaderEpoch: -1}.Encode(), p)
		},
	}
	for name, change := range between {
		t.Run(name, func(t *testing.T) {
			g := "g" + strings.ReplaceAll(name, " ", "_")
			g = strings.ReplaceAll(g, "'", "")
			if err := s.Multi(ctx,
				zkstate.CreateOp(zkstate.OffsetPath(g, "orders", 0), zkstate.FormatOffset(5), p),
				zkstate.CreateOp(zkstate.IDsPath(g), nil, p),
				zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, g, "orders", 0), zkstate.OwnOffset{Offset: 5, LeaderEpoch: -1}.Encode(), p)); err != nil {
				t.Fatal(err)
			}
			d, err := planGroupDelete(ctx, s, testRoot, g)
			if err != nil {
				t.Fatal(err)
			}
			if err := change(g); err != nil {
				t.Fatal(err)
			}
			err = d.apply(ctx, s)
			if ce, ok := err.(codedError); !ok || ce.code != exitBlocked || !strings.Contains(ce.msg, "nothing deleted") {
				t.Fatalf("delete after the group changed = %v, want exit %d, nothing deleted", err, exitBlocked)
			}
			for _, p := range []string{zkstate.OffsetPath(g, "orders", 0), zkstate.IDsPath(g), zkstate.OwnOffsetPath(testRoot, g, "orders", 0)} {
				if ok, _, err := s.Exists(ctx, p); err != nil || !ok {
					t.Errorf("%s deleted (%v): the delete was not all-or-nothing", p, err)
				}
			}
		})
	}
}
