package bridge_test

import (
	"testing"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group loaded with its record takes its offset znodes for existing; one that never committed
// at all has none, nor their parents: the write's Multi finds the first missing, the next one
// creates it without its parents and fails too, and the write goes the long way (reads back,
// looks every znode and parent up, creates them): the commit is served and stored.
func TestIntegration_RestoredGroupsFirstCommitWithoutOffsetParents(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	a := startBridge(t, connect, 9001, nil)
	name := "never-committed"
	insts := [2]group.InstanceID{"i1", "i2"}
	stableGroup(t, a, name, insts)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, 9001, nil)
	r := do[group.OffsetCommitReply](t, b, name, func(tok group.Token) group.Event {
		return group.OffsetCommit{Token: tok, MemberID: "a", InstanceID: insts[0], Generation: 1,
			Offsets: []group.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 7, LeaderEpoch: -1}, {Topic: "orders", Partition: 3, Offset: 8, LeaderEpoch: -1}}}
	})
	for _, p := range r.Partitions {
		if p.Err != group.ErrNone {
			t.Fatalf("first commit after the restart: %+v", r.Partitions)
		}
	}
	for p, want := range map[int32]int64{0: 7, 3: 8} {
		data, _, err := zk.Get(t.Context(), zkstate.OffsetPath(name, "orders", p))
		if off, perr := zkstate.ParseOffset(data); err != nil || perr != nil || off != want {
			t.Errorf("0.8 offset of orders/%d: %d (%v, %v), want %d", p, off, err, perr, want)
		}
		data, _, err = zk.Get(t.Context(), zkstate.OwnOffsetPath(bridge.DefaultRoot, name, "orders", p))
		if own, perr := zkstate.ParseOwnOffset(data); err != nil || perr != nil || own.Offset != want {
			t.Errorf("the bridge's offset of orders/%d: %+v (%v, %v), want %d", p, own, err, perr, want)
		}
	}
}
