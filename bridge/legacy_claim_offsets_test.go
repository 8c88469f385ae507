package bridge

import (
	"fmt"
	"testing"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// A partition the claim saw free before waiting, which a zk member then took, consumed,
// committed and released while the claim waited for another one, is claimed from the offset
// committed meanwhile, not from the one read before the wait: the starting offsets are read
// once our owner znodes are written, when nobody else can commit them any more. Before, the
// member started from the offset read before the wait, behind the zk member's commit
// (TestIntegration_MigrateCyclesKeepOffsets: "l10 starts tb-2 at 1131, before the last commit
// 1137", a legacy member taking tb-2 from z10 that had claimed it during the wait).
func TestIntegration_LegacyClaimAfterWaitReadsOffsetsCommittedMeanwhile(t *testing.T) {
	w := legacyStartWaiting(t) // a waits for t-1; t-0 and t-2 were free when the claim read them
	zkMember := legacyOpenStore(t, w.connect)
	t.Cleanup(func() { zkMember.Close() })
	// The zk member's rebalance (ZCC): claim t-2, consume, commit, release.
	if err := zkMember.Create(w.ctx, w.owner(2), []byte("zk-consumer-1-0"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := zkMember.Create(w.ctx, zkstate.OffsetPath("g", "t", 2), []byte("77"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := zkMember.Delete(w.ctx, w.owner(2), -1); err != nil {
		t.Fatal(err)
	}
	// t-1 is released: the claim goes through.
	if err := w.other.Delete(w.ctx, w.owner(1), -1); err != nil {
		t.Fatal(err)
	}
	legacyWaitStable(t, w.store, "g", []*legacyTestConsumer{w.a}, map[string][]int32{"t": {0, 1, 2}})
	parts, _, _ := w.a.lastStart()
	found := false
	for _, p := range parts {
		if p.Partition == 2 {
			found = true
			if p.Offset != 77 {
				t.Errorf("a starts t-2 at %d, want 77, the offset committed while the claim waited", p.Offset)
			}
		}
	}
	if !found {
		t.Errorf("a's Start %v lacks t-2", parts)
	}
	if got := legacyOffsetsInZK(t, w.store, "g")[legacy.TopicPartition{Topic: "t", Partition: 2}]; got < 77 {
		t.Errorf("t-2's committed offset is %d after the claim, want at least 77", got)
	}
}

// After a wait, a claim reads again once its Multi is in only the offsets it read before the
// wait: those of the partitions it saw free then (t-0 and t-2). The partition it waited for
// (t-1) was read again, owner and offset, in the round that found it released, just before
// the Multi.
func TestIntegration_LegacyClaimAfterWaitRereadsOnlyWhatItReadBefore(t *testing.T) {
	w := legacyStartWaiting(t) // a waits for t-1; t-0 and t-2 were free when the claim read them
	if err := w.other.Delete(w.ctx, w.owner(1), -1); err != nil {
		t.Fatal(err)
	}
	legacyWaitStable(t, w.store, "g", []*legacyTestConsumer{w.a}, map[string][]int32{"t": {0, 1, 2}})
	if got := w.coord.Stats().OffsetsReread; got != 2 {
		t.Errorf("the claim read %d offsets again after its Multi, want 2 (t-0 and t-2)", got)
	}
}

// A claim that did not wait reads no offset again after its Multi: it read them in the same
// round, just before, and starts its members from them.
func TestIntegration_LegacyClaimWithoutWaitRereadsNoOffsets(t *testing.T) {
	legacyCheckLeaks(t)
	ctx := t.Context()
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 3)
	for p := range int32(3) {
		if err := store.Create(ctx, zkstate.OffsetPath("g", "t", p), []byte(fmt.Sprint(50+p)), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	env := legacyStart(t, store, "", nil)
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a}, map[string][]int32{"t": {0, 1, 2}})
	parts, _, _ := a.lastStart()
	if len(parts) != 3 {
		t.Fatalf("a's Start %v, want t-0, t-1 and t-2", parts)
	}
	for _, p := range parts {
		if p.Offset != int64(50+p.Partition) {
			t.Errorf("a starts t-%d at %d, want %d, the committed offset", p.Partition, p.Offset, 50+p.Partition)
		}
	}
	st := env.coord.Stats()
	if st.ClaimWaits != 0 {
		t.Fatalf("the claim waited %d times; this test is about a claim that did not", st.ClaimWaits)
	}
	if st.OffsetsReread != 0 {
		t.Errorf("the claim read %d offsets again after its Multi, want none", st.OffsetsReread)
	}
}
