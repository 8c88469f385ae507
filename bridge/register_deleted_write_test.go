package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group's load waits for the bridge's registration (register_own.go: awaitOwn) and writes the
// group's epoch after; another client may delete the registration in between. The epoch must
// then not be written: the other bridges count the bridge gone, and a bridge that reads the
// epoch takes the group (its holder's registration is missing, or, once made again, newer than
// the epoch's write), while the first answers it. Here the order is forced: 9001's write of a new
// group's epoch is held on its way to ZooKeeper (zktest.Proxy.HoldWrites) while the test deletes
// 9001's registration, and 9001 hears nothing until 9002 has taken the group (Mute). Before
// the write checked the registration, 9001 wrote the epoch after the deletion.
func TestIntegration_SeveralBridgesRegistrationDeletedBeforeTheEpochWrite(t *testing.T) {
	ctx := t.Context()
	const a, b int32 = 9001, 9002
	zk, proxy, h, s, fixture := twoBridgesOneProxied(t, "regwrite", func(c *bridge.Config) { c.ZKSessionTimeout = 15 * time.Second })
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)
	// The fixture group's 0.8 mirror (its ids and owners) is written after its sync, in the
	// background: once it is, the next write of 9001's connection is the new group's epoch, the
	// one the test holds. Held instead, the mirror's write kept the load waiting behind it and
	// the join reached 9001 only after it had the group back (it then answered it, rightly).
	mirrorWritten(t, zk, fixture)
	name := ownedGroup("regwrite-new", a, a, b)
	// Its mode persisted, so that the first write of its first join is its epoch's.
	mode, _, err := zkstate.DefaultMode(ctx, zk, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := zkstate.InitMode(ctx, zk, bridge.DefaultRoot, name, mode, "test", "fixture"); err != nil {
		t.Fatal(err)
	}
	join := func(g groups, member group.MemberID) (group.JoinReply, error) {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		r, err := g.Do(rctx, name, joinEvent(member, group.InstanceID("i-"+member), "10.0.0.1", "orders"))
		j, _ := r.(group.JoinReply)
		return j, err
	}
	_, st, err := zk.Get(ctx, regPath)
	if err != nil {
		t.Fatal(err)
	}

	proxy.HoldWrites()
	first := make(chan group.JoinReply, 1)
	go func() {
		j, err := join(h, "a")
		if err != nil {
			j.Err = group.ErrCoordinatorNotAvailable
		}
		first <- j
	}()
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
	proxy.Release() // the write reaches ZooKeeper after the deletion
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if e := epochOf(ctx, zk, name); e.NodeID == a {
			t.Errorf("9001 wrote the group's epoch while its registration did not exist (%+v)", e)
			break
		}
	}
	// 9002, which sees 9001 gone, takes the group and answers it. The epoch is its own creation:
	// one 9001 had written 9002 would have taken over at once (its rescan finds it held by a
	// bridge that has no registration), before the loop above sees it.
	zktest.Eventually(t, 10*time.Second, "9002 serves the group", func() (bool, string) {
		j, err := join(s, "b")
		e := epochOf(ctx, zk, name)
		return err == nil && j.Err == group.ErrNone && e.NodeID == b, fmt.Sprintf("%+v %v %+v", j, err, e)
	})
	if _, est, err := zk.Get(ctx, zkstate.EpochPath(bridge.DefaultRoot, name)); err != nil || est.Version != 0 {
		t.Errorf("the group's epoch when 9002 serves it: version %d (%v), want 0 (created by 9002): 9001 wrote it first, after its registration was deleted", est.Version, err)
	}
	proxy.Unmute() // 9001 hears of the deletion, and its write's answer
	unmuted = true
	if j := <-first; j.Err == group.ErrNone {
		t.Errorf("9001 answered the join (%+v) while 9002 holds the group's epoch (%+v): two bridges answer one group", j, epochOf(ctx, zk, name))
	}
	// 9001 makes its registration again, 9002 hands the group back, and 9001 serves it.
	zktest.Eventually(t, 10*time.Second, "9001 registered again", func() (bool, string) {
		ok, st2, err := zk.Exists(ctx, regPath)
		return err == nil && ok && st2.EphemeralOwner == st.EphemeralOwner, fmt.Sprint(ok, err)
	})
	zktest.Eventually(t, 20*time.Second, "9001 serves the group again", func() (bool, string) {
		j, err := join(h, "a")
		e := epochOf(ctx, zk, name)
		return err == nil && j.Err == group.ErrNone && e.NodeID == a && !e.Released, fmt.Sprintf("%+v %v %+v", j, err, e)
	})
}
