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
