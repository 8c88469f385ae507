package bridge_test

import (
	"encoding/json"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A takeover a rescan started whose load fails is tried again by the bridge itself, with no
// client's request (recheck.go), and a load that keeps failing is tried more and more rarely,
// never in a loop. Here the group's epoch, released by a bridge that is gone, is writable by
// another ZooKeeper user only (its ACL): 9001's rescan at start takes the group over, every
// write of the epoch is refused (NoAuth), the actor refuses the group for refuseHold (1 s) and
// ends. The attempts are counted by zkbridge_groups_handovers_total{cause="takeover_released"}
// (one per takeover started): before, there was one, and the group waited for a client. The
// gaps between attempts must grow (refuseHold, then a wait of 1 s doubling: 2, 3, 5 s); wall
// time only as lower bounds, which a loaded machine lengthens, never shortens.
func TestIntegration_FailedTakeoverIsTriedAgainBackingOff(t *testing.T) {
	ctx := t.Context()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	name := "recheck-backoff"
	unwritableGroup(t, connect, zk, name)

	b := startBridge(t, connect, 9001, nil)
	var at []time.Time
	for deadline := time.Now().Add(40 * time.Second); len(at) < 4 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for n := int(handoversOf(t, b, "takeover_released")); len(at) < n; {
			at = append(at, time.Now())
		}
	}
	if len(at) < 4 {
		t.Fatalf("takeovers of a group whose load fails, in 40 s: %d, want 4 (tried again without a request)", len(at))
	}
	// refuseHold plus a wait of 1 s, 2 s, 4 s; 200 ms for the polling.
	for i, least := range []time.Duration{1800 * time.Millisecond, 2800 * time.Millisecond, 4800 * time.Millisecond} {
		if gap := at[i+1].Sub(at[i]); gap < least {
			t.Errorf("attempt %d came %v after the one before, want at least %v (backing off)", i+2, gap.Round(time.Millisecond), least)
		}
	}
	if e := epochOf(ctx, zk, name); e.NodeID != 9002 || !e.Released {
		t.Errorf("the epoch after the failed takeovers: %+v, want as it was (released by 9002)", e)
	}
	t.Log("attempts:", fmt.Sprint(gaps(at)))
}

// unwritableGroup makes the group name with a record (generation 3, no member) and an epoch
// released by 9002, both readable by every client and written only by another ZooKeeper user
// (their ACL): a takeover's write of the epoch is refused (NoAuth).
func unwritableGroup(t *testing.T, connect string, zk *zkstate.Store, name string) {
	t.Helper()
	ctx := t.Context()
	other := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.Digest = "someone-else:secret" })
	if err := zk.Create(ctx, path.Dir(zkstate.EpochPath(bridge.DefaultRoot, name)), nil, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(group.Record{Version: group.RecordVersion, Group: name, Generation: 3, Members: []group.RecordMember{}})
	if err != nil {
		t.Fatal(err)
	}
	released := zkstate.Epoch{NodeID: 9002, AcquiredMs: time.Now().UnixMilli(), Released: true}.Encode()
	if err := other.Create(ctx, zkstate.EpochPath(bridge.DefaultRoot, name), released, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := other.Create(ctx, zkstate.GroupRecordPath(bridge.DefaultRoot, name), rec, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// handoversOf is a bridge's zkbridge_groups_handovers_total of cause.
func handoversOf(t testing.TB, r *running, cause string) float64 {
	t.Helper()
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "zkbridge_groups_handovers_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cause" && l.GetValue() == cause {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// gaps is the time between each two times in order.
func gaps(at []time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(at))
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return out
}
