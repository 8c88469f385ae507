package bridge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group whose epoch names us, which now maps to a bridge that joined, is released by the
// rescan that follows the join, unless it has an actor then: the rescan leaves the group to
// the actor, which hands it over. An actor whose load failed hands nothing over: it refuses the
// group for refuseHold and ends, and the group's epoch went on naming us, unreleased, until a
// later change of the live bridges had every group read again. Meanwhile the group's new owner
// waits for a release that does not come, and the group is served by nobody. The release side
// of the recheck (recheck.go): the actor the rescan left the group to is followed, and when it
// ends without having loaded the group, the group is decided again, and released.
//
// The order is forced: 9001's answers from ZooKeeper are held (zktest.Proxy.Mute) from before
// the group's load until 9003 has registered, so that 9001 learns at once that its load failed
// (the group's record is not a record) and that 9003 joined; its rescan then finds the group's
// refusing actor.
func TestIntegration_SeveralBridgesRefusedGroupMappingElsewhereIsReleased(t *testing.T) {
	ctx := t.Context()
	const a, b, c int32 = 9001, 9002, 9003
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	slow := func(cfg *bridge.Config) { cfg.ZKSessionTimeout = 15 * time.Second }
	h := startBridge(t, proxy.Addr()+connect[i:], a, slow)
	s := startBridge(t, connect, b, nil)
	zktest.Eventually(t, 10*time.Second, "each bridge sees the other", func() (bool, string) {
		ga, gb := brokersOf(t, h.Addr().String()), brokersOf(t, s.Addr().String())
		return len(ga) == 2 && len(gb) == 2, fmt.Sprint(ga, gb)
	})
	name := movingGroup("relrecheck", a, []int32{a, b}, c, []int32{a, b, c})
	// 9001 held the group (its actor ended, idle); its record is unreadable now.
	held := zkstate.Epoch{NodeID: a, AcquiredMs: time.Now().UnixMilli()}.Encode()
	if err := zk.Create(ctx, zkstate.EpochPath(bridge.DefaultRoot, name), held, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := zk.Create(ctx, zkstate.GroupRecordPath(bridge.DefaultRoot, name), []byte("not a record"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}

	proxy.Mute()
	unmuted := false
	defer func() {
		if !unmuted {
			proxy.Unmute()
		}
	}()
	answered := describeLater(t, h, name)
	time.Sleep(100 * time.Millisecond) // the load's requests reach ZooKeeper; their answers wait
	startBridge(t, connect, c, nil)
	zktest.Eventually(t, 10*time.Second, "9003 registered", func() (bool, string) {
		ok, _, err := zk.Exists(ctx, zkstate.BridgePath(bridge.DefaultRoot, c))
		return err == nil && ok, fmt.Sprint(ok, err)
	})
	proxy.Unmute()
	unmuted = true
	if d := <-answered; d.Err == group.ErrNone {
		t.Fatalf("9001 answered the Describe (%+v) though the group's record is not a record", d)
	}
	// 9001's actor refuses the group for refuseHold (1 s); then 9001 must release it by itself.
	zktest.Eventually(t, 8*time.Second, "9001 no longer holds the group that maps to 9003", func() (bool, string) {
		e := epochOf(ctx, zk, name)
		return e.NodeID != a || e.Released, fmt.Sprintf("%+v", e)
	})
}

// movingGroup is a group name that from maps to among the ids before, and to among after.
func movingGroup(prefix string, from int32, before []int32, to int32, after []int32) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		o1, _ := placement.Owner(name, before)
		o2, _ := placement.Owner(name, after)
		if o1 == from && o2 == to {
			return name
		}
	}
}

// describeLater asks g to describe the group in the background (for at most 20 s), the answer
// on the channel returned: for a request whose answer a test holds back.
func describeLater(t *testing.T, g groups, name string) <-chan group.DescribeReply {
	answered := make(chan group.DescribeReply, 1)
	go func() {
		rctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		r, _ := g.Do(rctx, name, func(tok group.Token) group.Event { return group.Describe{Token: tok} })
		d, _ := r.(group.DescribeReply)
		answered <- d
	}()
	return answered
}
