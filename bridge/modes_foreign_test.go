package bridge

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

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

// BenchmarkCheckForeignOurs is the foreign check at one change of /consumers/<g>/ids of a
// Kafka group whose registrations are all the claimer's (a join of 1,000 members sees about as
// many changes, each with every registration): it asks ZooKeeper nothing, and its cost is
// telling ours from the others.
func BenchmarkCheckForeignOurs(b *testing.B) {
	const g, n = "foreign-bench", 1000
	ids := make([]string, n)
	have := make(map[string][]byte, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("consumer-%d-4b9f0c3e-8d2a-4f1e-9c7b-%012d", i, i)
		have[zkstate.IDPath(g, ids[i])] = nil
	}
	cl := &claimer{group: g}
	cl.publishOurs(have, nil)
	cs := newClaimers()
	cs.m[g] = cl
	m := &groupModes{root: "/zkbridge", log: zerolog.Nop(), groups: map[string]*modeEntry{}, ours: cs.ours}
	ctx := context.Background()
	for b.Loop() {
		if m.checkForeign(ctx, nil, g, ids) {
			b.Fatal("a foreign registration found among ours")
		}
	}
}
