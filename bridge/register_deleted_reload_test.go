package bridge_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group whose load failed because another client deleted our registration before the load's
// write of the epoch (errRegistrationGone) is refused for a while by its actor, which then ends.
// The registration is made again at once, and the rescans that follow it (the registration's,
// the live view's) find the group mapping to us with an epoch another bridge holds or released:
// they would take it over, but the group still has its refusing actor then. Once that actor
// ends, the bridge must load the group itself, with no client's request: a group whose members
// are idle, or legacy, asks nothing. Before, it stayed unloaded (its epoch released by 9002)
// until a client asked.
//
// The order is forced: 9001's takeover of a released group (started by one Describe) is held on
// its way to ZooKeeper (zktest.Proxy.HoldWrites) while the test deletes 9001's registration, and
// 9001 hears nothing until 9002 has taken the group (Mute). Then 9001 hears both at once: its
// write failed (the group refused), its registration deleted (made again, rescans), and 9002
// hands the group back.
func TestIntegration_SeveralBridgesGroupRefusedAfterRegistrationDeletedIsLoadedAgain(t *testing.T) {
	ctx := t.Context()
	const a, b int32 = 9001, 9002
	zk, proxy, h, _, _ := twoBridgesOneProxied(t, "regreload", func(c *bridge.Config) { c.ZKSessionTimeout = 15 * time.Second })
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)
	name := ownedGroup("regreload-idle", a, a, b)
	// A group 9002 handed over (its members idle), which nothing has loaded since.
	released := zkstate.Epoch{NodeID: b, AcquiredMs: time.Now().UnixMilli(), Released: true}.Encode()
	if err := zk.Create(ctx, zkstate.EpochPath(bridge.DefaultRoot, name), released, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	rec, err := json.Marshal(group.Record{Version: group.RecordVersion, Group: name, Generation: 3, Members: []group.RecordMember{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := zk.Create(ctx, zkstate.GroupRecordPath(bridge.DefaultRoot, name), rec, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	_, st, err := zk.Get(ctx, regPath)
	if err != nil {
		t.Fatal(err)
	}

	proxy.HoldWrites()
	answered := describeLater(t, h, name)
	zktest.Eventually(t, 10*time.Second, "9001 writes the group's epoch", func() (bool, string) {
		return proxy.HeldWrites() == 1, fmt.Sprint(proxy.HeldWrites())
	})
	proxy.Mute()
	unmuted := false
	defer func() {
		if !unmuted {
			proxy.Unmute()
		}
	}()
	if err := zk.Delete(ctx, regPath, st.Version); err != nil {
		t.Fatal(err)
	}
	proxy.Release() // the write reaches ZooKeeper after the deletion: it fails
	zktest.Eventually(t, 10*time.Second, "9002 takes the group", func() (bool, string) {
		e := epochOf(ctx, zk, name)
		return e.NodeID == b && !e.Released, fmt.Sprintf("%+v", e)
	})
	proxy.Unmute()
	unmuted = true
	if d := <-answered; d.Err == group.ErrNone {
		t.Errorf("9001 answered the Describe (%+v) though its takeover failed", d)
	}
	zktest.Eventually(t, 10*time.Second, "9001 registered again", func() (bool, string) {
		ok, st2, err := zk.Exists(ctx, regPath)
		return err == nil && ok && st2.EphemeralOwner == st.EphemeralOwner, fmt.Sprint(ok, err)
	})
	// No request for the group from here on: 9002 hands it back, and 9001 takes it by itself.
	zktest.Eventually(t, 10*time.Second, "9001 holds the group again without a request", func() (bool, string) {
		e := epochOf(ctx, zk, name)
		return e.NodeID == a && !e.Released, fmt.Sprintf("%+v", e)
	})
	if d := describe(t, h, name); d.Err != group.ErrNone || d.Group.Generation != 3 {
		t.Errorf("9001's Describe once it holds the group: %+v, want generation 3 (the record taken over)", d)
	}
}
