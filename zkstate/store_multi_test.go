package zkstate_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A batch of many small ops (the shape of a 1,000-partition offset commit) goes to ZooKeeper in
// requests of a few hundred ops, each guarded: all of it is applied, a stale guard applies none
// of it, and a failure in a later request leaves exactly the earlier requests applied.
func TestIntegration_MultiSplitsManySmallOps(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 40*time.Second)
	if err := s.Create(ctx, "/epoch", nil, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := func(dir string, n int) []zkstate.Op {
		ops := []zkstate.Op{zkstate.CheckOp("/epoch", 0)}
		for i := range n {
			ops = append(ops, zkstate.CreateOp(fmt.Sprintf("%s/%d", dir, i), []byte("12345"), zkstate.CreateOptions{Parents: true}))
		}
		return ops
	}

	if err := s.Multi(ctx, nodes("/all", 1000)...); err != nil {
		t.Fatalf("Multi of 1,001 ops: %v", err)
	}
	if kids, _, err := s.Children(ctx, "/all"); err != nil || len(kids) != 1000 {
		t.Fatalf("/all has %d children (%v), want 1000", len(kids), err)
	}

	if _, err := s.Set(ctx, "/epoch", nil, 0); err != nil {
		t.Fatal(err)
	}
	var me *zkstate.MultiError
	err := s.Multi(ctx, nodes("/stale", 1000)...)
	if !errors.As(err, &me) || me.Index != 0 || me.Applied != 0 || !errors.Is(err, zkstate.ErrBadVersion) {
		t.Fatalf("Multi with a stale guard = %v, want op 0 failing with ErrBadVersion, nothing applied", err)
	}
	if ok, _, _ := s.Exists(ctx, "/stale"); ok {
		t.Error("a stale guard let part of the batch through")
	}

	ops := nodes("/part", 600)
	ops[0] = zkstate.CheckOp("/epoch", 1)
	ops = append(ops, zkstate.CreateOp("/part/0", nil, zkstate.CreateOptions{})) // exists by then
	err = s.Multi(ctx, ops...)
	if !errors.As(err, &me) || me.Index != 601 || !errors.Is(err, zkstate.ErrNodeExists) {
		t.Fatalf("Multi = %v, want op 601 failing with ErrNodeExists", err)
	}
	if me.Applied < 2 || me.Applied > 601 {
		t.Errorf("MultiError.Applied = %d, want the ops of the earlier requests", me.Applied)
	}
	kids, _, _ := s.Children(ctx, "/part")
	if len(kids) != me.Applied-1 { // op 0 is the guard
		t.Errorf("/part has %d children, want Applied-1 = %d", len(kids), me.Applied-1)
	}
}

// A create with Parents under a parent that exists (the first commit of a group's next
// partition: /consumers/<g>/offsets/<t> and the bridge's own offsets directory are there) looks
// up that parent alone, not each of its ancestors; missing parents are created as before, and
// ancestors created by the batch itself are not looked up.
func TestIntegration_MultiParentsLookUpFromTheParent(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	if err := s.Create(ctx, "/c/g/offsets/t/0", []byte("1"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	exists := func(ops ...zkstate.Op) int64 {
		t.Helper()
		before := s.Requests()[zkstate.ReqExists]
		if err := s.Multi(ctx, ops...); err != nil {
			t.Fatalf("Multi: %v", err)
		}
		return s.Requests()[zkstate.ReqExists] - before
	}
	parents := zkstate.CreateOptions{Parents: true}
	// Two partitions under one existing parent: one lookup (before: /c/g/offsets/t, /c/g/offsets,
	// /c/g and /c).
	if n := exists(zkstate.CreateOp("/c/g/offsets/t/1", []byte("2"), parents), zkstate.CreateOp("/c/g/offsets/t/2", []byte("3"), parents)); n != 1 {
		t.Errorf("creates under an existing parent looked up %d znodes, want 1 (the parent)", n)
	}
	// A new topic: its directory is missing, then its ancestors are looked up (one more wave),
	// and the directory is created.
	if n := exists(zkstate.CreateOp("/c/g/offsets/u/0", []byte("4"), parents)); n != 4 {
		t.Errorf("a create under a missing parent looked up %d znodes, want 4 (/c/g/offsets/u, then /c/g/offsets, /c/g, /c)", n)
	}
	// A whole new tree, one of whose directories the batch creates itself.
	if n := exists(zkstate.CreateOp("/d", nil, zkstate.CreateOptions{}), zkstate.CreateOp("/d/e/f", []byte("5"), parents)); n != 1 {
		t.Errorf("a create under a tree the batch begins looked up %d znodes, want 1 (/d/e)", n)
	}
	for p, want := range map[string]string{"/c/g/offsets/t/1": "2", "/c/g/offsets/t/2": "3", "/c/g/offsets/u/0": "4", "/d/e/f": "5"} {
		if data, _, err := s.Get(ctx, p); err != nil || string(data) != want {
			t.Errorf("Get(%s) = %q, %v; want %q", p, data, err, want)
		}
	}
}
