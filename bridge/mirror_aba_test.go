package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
)

// An owner znode the bridge holds for a Kafka member can be deleted by someone else (a 0.8.2
// consumer deletes every owner it believes its own, ZCC:580-590) and created again by another
// session, at version 0 like ours. Releasing the partition must then leave the new owner alone:
// a delete checked by version alone (or not checked) would take another member's partition
// away from it (the ABA of issue 14 item 2).
func TestIntegration_MixedReleaseLeavesARecreatedOwner(t *testing.T) {
	t.Parallel()
	ours, theirs, ctx := abaSessions(t)
	gone, kept := zkstate.OwnerPath("g", "t", 0), zkstate.OwnerPath("g", "t", 1)
	mi, held := abaClaimedBoth(ctx, t, ours, gone, kept)
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	// t/0 changes hands behind the bridge's back; t/1 stays the bridge's.
	if err := theirs.Delete(ctx, gone, -1); err != nil {
		t.Fatal(err)
	}
	if err := theirs.MultiAtomic(ctx, zkstate.CreateOp(gone, []byte("z-0"), eph)); err != nil {
		t.Fatal(err)
	}
	mi.releaseOwners(ctx, held, []string{gone, kept})

	data, st, err := theirs.Get(ctx, gone)
	if err != nil {
		t.Fatalf("the re-created owner znode was deleted by the bridge's release: %v", err)
	}
	if string(data) != "z-0" || st.EphemeralOwner != theirs.SessionID() {
		t.Errorf("owner of t/0 is %q of session 0x%x, want z-0 of 0x%x", data, st.EphemeralOwner, theirs.SessionID())
	}
	if ok, _, err := theirs.Exists(ctx, kept); err != nil || ok {
		t.Errorf("the bridge's own owner znode of t/1 was not released (exists %v, %v)", ok, err)
	}
	if len(held.owners) != 0 {
		t.Errorf("still held after the release: %v", held.owners)
	}
}

// The check before a release reads every owner znode released in one request, however few:
// a Kafka member's leave releases about ten of them in a mixed group, and a Get each made a
// leave of BenchmarkMixedStabilize's mixed group cost 40 % more requests than before the check.
func TestIntegration_MixedReleaseChecksInOneRequest(t *testing.T) {
	t.Parallel()
	connect := legacyConnect(t)
	ours := legacyOpenStore(t, connect)
	defer ours.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mi := &claimer{store: ours, group: "g", log: zerolog.Nop(), metrics: m}
	held := &mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}
	claim := map[string]string{}
	for p := range int32(5) {
		claim[zkstate.OwnerPath("g", "t", p)] = "k-0"
	}
	if err := mi.claimOwners(ctx, held, claim); err != nil {
		t.Fatal(err)
	}
	before := ours.Requests()
	mi.releaseOwners(ctx, held, sortedKeys(claim))
	after := ours.Requests()
	sent := func(kind string) int64 { return after[kind] - before[kind] }
	if reads := sent(zkstate.ReqGet) + sent(zkstate.ReqMultiRead); reads != 1 {
		t.Errorf("the release of 5 owner znodes read them in %d requests (%d gets, %d multiReads), want 1",
			reads, sent(zkstate.ReqGet), sent(zkstate.ReqMultiRead))
	}
	if d := sent(zkstate.ReqMulti) + sent(zkstate.ReqDelete); d != 1 {
		t.Errorf("the release of 5 owner znodes deleted them in %d requests, want 1 Multi", d)
	}
	if len(held.owners) != 0 {
		t.Errorf("still held after the release: %v", held.owners)
	}
	for p := range claim {
		if ok, _, err := ours.Exists(ctx, p); err != nil || ok {
			t.Errorf("%s not released (exists %v, %v)", p, ok, err)
		}
	}
}

// An owner znode the Kafka side holds can be deleted behind its back and created again in the
// same session by the group's legacy side, for a legacy member's thread. The Kafka side's
// later drop of its stale entry (reconcile, when the mirror lets the partition go) must leave
// that znode alone: a check of the session alone takes it for ours and deletes the legacy
// member's partition.
func TestIntegration_MixedDropLeavesAnOwnerOurLegacySideRecreated(t *testing.T) {
	t.Parallel()
	ours, _, ctx := abaSessions(t)
	stale, kept := zkstate.OwnerPath("g", "t", 0), zkstate.OwnerPath("g", "t", 1)
	mi, held := abaClaimedBoth(ctx, t, ours, stale, kept)
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	if err := ours.Delete(ctx, stale, -1); err != nil {
		t.Fatal(err)
	}
	if err := ours.MultiAtomic(ctx, zkstate.CreateOp(stale, []byte("l-0"), eph)); err != nil {
		t.Fatal(err)
	}
	mi.reconcile(ctx, held, mirrorState{})

	if data, _, err := ours.Get(ctx, stale); err != nil || string(data) != "l-0" {
		t.Errorf("the owner znode our legacy side re-created: %q, %v; want l-0 (deleted by the Kafka side's drop)", data, err)
	}
	if ok, _, err := ours.Exists(ctx, kept); err != nil || ok {
		t.Errorf("the Kafka side's own owner znode of t/1 was not dropped (exists %v, %v)", ok, err)
	}
	if len(held.owners) != 0 {
		t.Errorf("still held after the drop: %v", held.owners)
	}
}

// abaClaimedBoth is a claimer of group g on ours that has claimed the owner znodes a and b for
// the Kafka thread k-0, and what it holds.
func abaClaimedBoth(ctx context.Context, t *testing.T, ours *zkstate.Store, a, b string) (*claimer, *mirrorState) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mi := &claimer{store: ours, group: "g", log: zerolog.Nop(), metrics: m}
	held := &mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}
	if err := mi.claimOwners(ctx, held, map[string]string{a: "k-0", b: "k-0"}); err != nil {
		t.Fatal(err)
	}
	return mi, held
}
