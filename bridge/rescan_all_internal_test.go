package bridge

import (
	"testing"

	"github.com/rs/zerolog"
)

// A handover whose release failed leaves the group's epoch naming us while the group maps
// elsewhere; only a rescan that reads every group releases it. The rescan after a change that
// only removed bridges reads only the moved groups (narrowScan), so the failed release must
// make the next one read everything, once.
func TestNarrowScanReadsEveryGroupAfterAFailedRelease(t *testing.T) {
	c := &coordinator{cfg: Config{NodeID: 9001}, peers: newPeerSet(9001, "/zkbridge", zerolog.Nop())}
	c.peers.serving.Store(true)
	before := &liveView{ids: []int32{9001, 9002, 9003}}
	after := &liveView{ids: []int32{9001, 9002}}
	c.scannedView, c.scannedSession = before, 7
	if c.narrowScan(after, 7) == nil {
		t.Fatal("a removal-only change after a complete rescan read every group")
	}
	c.rescanAll.Store(true) // leave: the release failed
	if c.narrowScan(after, 7) != nil {
		t.Fatal("the rescan after a failed release read only the moved groups: the group that names us stays unreleased")
	}
	if c.narrowScan(after, 7) == nil {
		t.Fatal("every later rescan read every group: once is enough")
	}
}
