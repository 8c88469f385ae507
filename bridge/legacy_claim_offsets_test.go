package bridge

import (
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
