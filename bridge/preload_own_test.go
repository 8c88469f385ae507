package bridge_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// epochStats reads the groups' epochs: who holds each (-1: none, or released) and its stat. A
// ZooKeeper multi is one transaction: the epochs one Multi wrote share its zxid (Mzxid).
func epochStats(t *testing.T, zk *zkstate.Store, names []string) (holders []int32, stats []zkstate.Stat) {
	t.Helper()
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = zkstate.EpochPath(bridge.DefaultRoot, name)
	}
	reads, err := zk.GetMany(t.Context(), paths)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reads {
		e, _ := zkstate.ParseEpoch(r.Data)
		if r.Err != nil || e.Released {
			e.NodeID = -1
		}
		holders, stats = append(holders, e.NodeID), append(stats, r.Stat)
	}
	return holders, stats
}

// Our own registration deleted by another client while the prepared takeovers are on their way
// (an operator, a cleanup script): they must not write the epochs then, as no write of an epoch
// does while we look gone (register_own.go: ownCheck). 9002's first write is held on its way to
// ZooKeeper with every request after it (zktest.Proxy.HoldWrites), the test deletes 9002's
// registration, and 9002 hears nothing while its Multis reach ZooKeeper after the deletion. Once
// it hears, it makes its registration again and takes the groups.
func TestIntegration_SeveralBridgesPreparedOwnRegistrationGone(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	peer := startFakePeer(t)
	names := preloadSetup(t, connect, zk, 4, peer)
	proxy, b := preloadSurvivor(t, connect, peer)
	_, was := epochStats(t, zk, names)
	killAndAwaitPrepared(t, peer, b, len(names))
	quiet(t, b)
	own := zkstate.BridgePath(bridge.DefaultRoot, 9002)
	_, st, err := zk.Get(t.Context(), own)
	if err != nil {
		t.Fatal(err)
	}
	proxy.HoldWrites()
	if err := zk.DeleteEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001)); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "9002 sends its takeovers", func() (bool, string) {
		return proxy.HeldWrites() == 1, fmt.Sprint(proxy.HeldWrites())
	})
	proxy.Mute()
	unmuted := false
	defer func() {
		if !unmuted {
			proxy.Unmute()
		}
	}()
	if err := zk.Delete(t.Context(), own, st.Version); err != nil {
		t.Fatal(err)
	}
	proxy.Release() // the takeovers reach ZooKeeper after the deletion
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		holders, stats := epochStats(t, zk, names)
		for i, name := range names {
			if holders[i] != 9001 || stats[i].Version != was[i].Version {
				t.Fatalf("epoch of %s held by %d at version %d while 9002's registration did not exist; want 9001's at %d", name, holders[i], stats[i].Version, was[i].Version)
			}
		}
	}
	proxy.Unmute()
	unmuted = true
	// The loads failed (fenced); the members' next requests load the groups again once 9002 is
	// registered again.
	zktest.Eventually(t, 20*time.Second, "9002 registered again and serves every group", func() (bool, string) {
		ok, _, err := zk.Exists(t.Context(), own)
		served := 0
		for _, name := range names {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			r, err := b.Do(ctx, name, func(tok group.Token) group.Event {
				return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i1", Generation: 1}
			})
			cancel()
			if h, isHB := r.(group.HeartbeatReply); err == nil && isHB && h.Err == group.ErrNone {
				served++
			}
		}
		holders, _ := epochStats(t, zk, names)
		return err == nil && ok && served == len(names) && !slices.ContainsFunc(holders, func(h int32) bool { return h != 9002 }),
			fmt.Sprint(ok, err, served, holders)
	})
}
