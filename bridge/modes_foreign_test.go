package bridge

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// The foreign check of a kafka group asks ZooKeeper only about the registrations that are not
// this bridge's own: it ran at every join and leave with an exists per registration, so a join
// of n Kafka members cost about n²/2 reads (a third of a 10-member join's ZooKeeper requests)
// for a gauge that stays 0. A 0.8 consumer registered beside them is still found.
func TestIntegration_ForeignCheckSkipsOurRegistrations(t *testing.T) {
	t.Parallel()
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	other := legacyOpenStore(t, connect)
	t.Cleanup(func() { other.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const g = "foreign-skip"
	ours := map[string]bool{}
	for _, id := range []string{"k1", "k2", "k3", "k4", "k5"} {
		if err := store.CreateEphemeral(ctx, zkstate.IDPath(g, id), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		ours[id] = true
	}
	m := &groupModes{root: "/zkbridge", log: legacyTestLogger(t), groups: map[string]*modeEntry{},
		ours: func(string) map[string]bool { return maps.Clone(ours) }}

	check := func(ids []string) (bool, map[string]int64) {
		before := store.Requests()
		found := m.checkForeign(ctx, store, g, ids)
		after := store.Requests()
		d := map[string]int64{}
		for k, v := range after {
			if v > before[k] {
				d[k] = v - before[k]
			}
		}
		return found, d
	}

	if found, reqs := check(slices.Sorted(maps.Keys(ours))); found || len(reqs) != 0 {
		t.Fatalf("only our registrations: found=%v, ZooKeeper requests %v; want false and none", found, reqs)
	}

	if err := other.CreateEphemeral(ctx, zkstate.IDPath(g, "zk1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	found, reqs := check(append(slices.Sorted(maps.Keys(ours)), "zk1"))
	if !found || !slices.Equal(m.groups[g].foreign, []string{"zk1"}) {
		t.Fatalf("a 0.8 consumer beside ours: found=%v foreign=%v; want true [zk1]", found, m.groups[g].foreign)
	}
	if reqs[zkstate.ReqExists] != 1 {
		t.Fatalf("exists requests = %d (all %v); want 1, for the one registration that is not ours", reqs[zkstate.ReqExists], reqs)
	}
}
