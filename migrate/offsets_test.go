package migrate_test

import (
	"errors"
	"testing"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// An import writes where the group's mode keeps offsets (0.8 znodes; the bridge's records once
// finalized), with compare-and-set: a commit between the read and the write fails it whole.
func TestIntegration_WriteOffsets(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	p := zkstate.CreateOptions{Parents: true}
	seed(t, s, "g", zkstate.ModeMixed)
	if err := s.Create(ctx, zkstate.OffsetPath("g", "t", 0), zkstate.FormatOffset(10), p); err != nil {
		t.Fatal(err)
	}
	read := func(group string) migrate.GroupOffsets {
		t.Helper()
		g, err := migrate.ReadOffsets(ctx, s, root, group)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := read("g")
	in := []migrate.Offset{{Topic: "t", Partition: 0, Offset: 15}, {Topic: "t", Partition: 1, Offset: 3}}
	changes := migrate.Diff(g.Offsets, in)

	// A consumer commits between our read and our write: nothing is written.
	if _, err := s.Set(ctx, zkstate.OffsetPath("g", "t", 0), zkstate.FormatOffset(11), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.WriteOffsets(ctx, s, root, g, changes); !errors.Is(err, migrate.ErrOffsetsChanged) {
		t.Fatalf("write over a concurrent commit: %v", err)
	}
	if ok, _, _ := s.Exists(ctx, zkstate.OffsetPath("g", "t", 1)); ok {
		t.Fatal("a failed import wrote t/1")
	}
	g = read("g")
	n, err := migrate.WriteOffsets(ctx, s, root, g, migrate.Diff(g.Offsets, in))
	if err != nil || n != 2 {
		t.Fatalf("write: %d %v", n, err)
	}
	got := map[int32]int64{}
	for _, o := range read("g").Offsets {
		got[o.Partition] = o.Offset
	}
	if got[0] != 15 || got[1] != 3 {
		t.Errorf("offsets after import: %v", got)
	}

	// A finalized group: the bridge's records are written, and they are what its consumers see
	// even where a 0.8 znode is newer than the finalization.
	seed(t, s, "f", zkstate.ModeKafka)
	if err := s.Create(ctx, zkstate.OffsetPath("f", "t", 0), zkstate.FormatOffset(100), p); err != nil {
		t.Fatal(err)
	}
	c, err := migrate.ReadCensus(ctx, s, root, "f", migrate.CensusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zkstate.SetMode(ctx, s, root, "f", zkstate.ModeKafka, zkstate.ModeFinalized, "test", c.ModeVersion); err != nil {
		t.Fatal(err)
	}
	g = read("f")
	if len(g.Offsets) != 1 || g.Offsets[0].Offset != 100 {
		t.Fatalf("finalized before import: %+v", g.Offsets)
	}
	if _, err := migrate.WriteOffsets(ctx, s, root, g, migrate.Diff(g.Offsets, []migrate.Offset{{Topic: "t", Partition: 0, Offset: 120}})); err != nil {
		t.Fatal(err)
	}
	data, _, err := s.Get(ctx, zkstate.OwnOffsetPath(root, "f", "t", 0))
	if err != nil {
		t.Fatal(err)
	}
	if own, err := zkstate.ParseOwnOffset(data); err != nil || own.Offset != 120 {
		t.Errorf("own record %+v %v", own, err)
	}
	if g = read("f"); g.Offsets[0].Offset != 120 {
		t.Errorf("finalized after import: %+v", g.Offsets)
	}
}

func TestIntegration_RecordHandoff(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	seed(t, s, "g", zkstate.ModeFinalized)
	_, v := modeOf(t, s, "g")
	for i := range 2 {
		h, err := migrate.RecordHandoff(ctx, s, root, "g", migrate.Handoff{By: "me", AtMs: 1, Bootstrap: "k:9092", Offsets: 4 + i}, v)
		if err != nil || h.Seq != int32(i+1) {
			t.Fatalf("handoff %d: %+v %v", i, h, err)
		}
	}
	hs, err := migrate.ReadHandoffs(ctx, s, root, "g")
	if err != nil || len(hs) != 2 || hs[1].Offsets != 5 || hs[1].Bootstrap != "k:9092" {
		t.Fatalf("%+v %v", hs, err)
	}
	// A stale mode version: not recorded.
	if _, err := migrate.RecordHandoff(ctx, s, root, "g", migrate.Handoff{By: "me"}, v+1); !errors.Is(err, zkstate.ErrBadVersion) {
		t.Errorf("stale mode version: %v", err)
	}
}
