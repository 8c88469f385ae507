package bridge_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// With several bridges only a group's owner counts the 0.8 consumers left in a kafka-mode group
// (the gauge and the warning); a peer watching /consumers/<g>/ids too sent as many ZooKeeper
// requests per join as the owner, for nothing. When the owner goes, the next owner counts.
func TestIntegration_SeveralBridgesOnlyTheOwnerCountsForeignZKMembers(t *testing.T) {
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	const owner, peer int32 = 9001, 9002
	name := ownedGroup("foreign", owner, owner, peer)
	bridges := map[int32]*running{owner: startBridge(t, connect, owner, nil), peer: startBridge(t, connect, peer, nil)}
	gauge := fmt.Sprintf(`zkbridge_group_foreign_zk_members{group=%q} `, name)
	stableGroup(t, bridges[owner], name, [2]group.InstanceID{"i-a", "i-b"})
	zktest.Eventually(t, 10*time.Second, "the owner's mirror written", func() (bool, string) {
		ids, _, err := zk.Children(ctx, zkstate.IDsPath(name))
		return err == nil && len(ids) == 2, fmt.Sprint(ids, err)
	})

	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"orders": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}
	if err := zk.Create(ctx, zkstate.IDPath(name, name+"_oldhost-1-0000beef"), reg.Encode(), zkstate.CreateOptions{Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "the owner reports the 0.8 consumer", func() (bool, string) {
		return strings.Contains(modeMetrics(t, bridges[owner]), gauge+"1"), "owner's gauge not 1"
	})
	if m := modeMetrics(t, bridges[peer]); strings.Contains(m, gauge) {
		t.Errorf("the peer %d reports the group it does not own: %s", peer, grepLine(m, gauge))
	}

	// The owner stops; the peer owns the group now and counts.
	if err := bridges[owner].stop(); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 20*time.Second, "the new owner reports the 0.8 consumer", func() (bool, string) {
		return strings.Contains(modeMetrics(t, bridges[peer]), gauge+"1"), "new owner's gauge not 1"
	})
}

func grepLine(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
