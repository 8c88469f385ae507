package bridge_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// After a kill -9, a survivor does not name the dead bridge as a group's coordinator while its
// listener refuses connections: it names the group's next owner, itself, at once (before
// 2026-12-05 it held the answer until the dead bridge's session expired), so that a client's
// retry does not fail on the dead address and back off for seconds. The lease is kept: the
// survivor serves no request of the group while the dead bridge is still registered (a commit
// sent to it waits, and is answered once the registration is gone, or NOT_COORDINATOR after its
// bound). An answer naming the dead bridge is allowed only after a full hold (the view had not
// left it out yet, and ZooKeeper expired the session later than the hold's bound). Asked through
// franz-go (its 10 s read deadline), one key (v3) and batched (v4, with a group the survivor
// owns).
func TestIntegration_SeveralBridgesFindCoordinatorWhileOwnerDead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := startChildAndSurvivor(t, "held")
	const dead, survivor = childNode, survivorNode
	own := ownedGroup("held-own", survivor, dead, survivor)
	regPath := zkstate.BridgePath(bridge.DefaultRoot, dead)

	clients := map[int16]*kgo.Client{}
	for v, max := range map[int16]*kversion.Versions{3: kversion.V2_8_0(), 4: kversion.Stable()} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.surv.Addr().String()), kgo.MaxVersions(max))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients[v] = cl
	}
	ask := func(v int16, keys ...string) ([]int32, time.Duration) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.SetVersion(v)
		if v >= 4 {
			req.CoordinatorKeys = keys
		} else {
			req.CoordinatorKey = keys[0]
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		resp, err := clients[v].SeedBrokers()[0].Request(rctx, req)
		took := time.Since(start)
		if err != nil {
			t.Errorf("v%d FindCoordinator after %v: %v", v, took, err)
			return nil, took
		}
		fc := resp.(*kmsg.FindCoordinatorResponse)
		if fc.Version != v {
			t.Errorf("asked v%d, answered v%d", v, fc.Version)
		}
		if v < 4 {
			return []int32{fc.NodeID}, took
		}
		var ids []int32
		for _, c := range fc.Coordinators {
			ids = append(ids, c.NodeID)
		}
		return ids, took
	}
	// The survivor lists two brokers as soon as it runs (the layout registers broker 9001 in
	// /brokers): it knows the child once it names it.
	zktest.Eventually(t, 10*time.Second, "the survivor names the child for the group", func() (bool, string) {
		got, _ := ask(3, e.name)
		return len(got) == 1 && got[0] == dead, fmt.Sprintf("coordinator %v", got)
	})

	killed := time.Now()
	e.child.kill()
	// A client's first retry after its failed dial comes 250 ms later (franz-go's first
	// backoff); the survivor's last probe of the child stands 100 ms.
	time.Sleep(250 * time.Millisecond)
	var gone atomic.Int64 // when the registration was first seen gone, unix ns
	go func() {
		for ctx.Err() == nil && gone.Load() == 0 {
			if ok, _, err := e.zk.Exists(ctx, regPath); err == nil && !ok {
				gone.Store(time.Now().UnixNano())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for _, v := range []int16{3, 4} {
		wg.Go(func() {
			keys := []string{e.name}
			if v >= 4 {
				keys = append(keys, own)
			}
			for time.Since(killed) < e.session+20*time.Second && !t.Failed() {
				got, took := ask(v, keys...)
				if len(got) != len(keys) {
					t.Errorf("v%d: %d coordinators for %d keys", v, len(got), len(keys))
					return
				}
				if v >= 4 && got[1] != survivor {
					t.Errorf("v4: %s named %d, want the survivor %d", own, got[1], survivor)
				}
				switch got[0] {
				case dead:
					// Only a full hold may end naming the dead bridge; margin for a loaded box.
					if took < newproto.DefaultCoordinatorHold-time.Second {
						t.Errorf("v%d: the dead bridge named %v after asking (%v after the kill), want the answer held", v, took, time.Since(killed))
						return
					}
				case survivor:
					registered, _, err := e.zk.Exists(ctx, regPath)
					if err != nil {
						t.Error(err)
					}
					switch g := gone.Load(); {
					case registered && took > newproto.DefaultCoordinatorHold-time.Second:
						t.Errorf("v%d: the survivor named itself after %v while the dead bridge is registered, want at once", v, took)
					case !registered && g != 0 && took > time.Second && time.Since(time.Unix(0, g)) > 2*time.Second:
						// Held (the view had not left the dead bridge out): the hold ends with
						// the view change, not at its bound.
						t.Errorf("v%d: the survivor named %v after the registration was gone, want at the view change", v, time.Since(time.Unix(0, g)))
					}
					t.Logf("v%d: the survivor named after %v (held %v, dead bridge registered: %v)", v, time.Since(killed), took, registered)
					if v == 3 {
						commitServedAfterTheLease(t, e, regPath)
					}
					return
				default:
					t.Errorf("v%d: named %d", v, got[0])
					return
				}
			}
			t.Errorf("v%d: the survivor never named itself", v)
		})
	}
	wg.Wait()
}

// commitServedAfterTheLease commits into e's group through the survivor until the commit is
// served: none is served while the dead bridge's registration exists (the lease); one sent before
// its session ends waits for it.
func commitServedAfterTheLease(t *testing.T, e childAndSurvivor, regPath string) {
	t.Helper()
	for deadline := time.Now().Add(e.session + 20*time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		r, err := e.surv.Do(ctx, e.name, func(tok group.Token) group.Event {
			return group.OffsetCommit{Token: tok, Generation: group.NoGeneration,
				Offsets: []group.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 5, LeaderEpoch: -1}}}
		})
		cancel()
		rep, _ := r.(group.OffsetCommitReply)
		if err != nil || len(rep.Partitions) != 1 {
			t.Errorf("commit through the survivor: %+v, %v", r, err)
			return
		}
		switch code := rep.Partitions[0].Err; code {
		case group.ErrNone:
			if registered, _, err := e.zk.Exists(t.Context(), regPath); err != nil || registered {
				t.Errorf("the survivor served a commit while the dead bridge is registered (%v)", err)
			}
			return
		case group.ErrNotCoordinator, group.ErrCoordinatorNotAvailable:
		default:
			t.Errorf("commit through the survivor: code %d", code)
			return
		}
	}
	t.Error("the survivor never served the group's commit")
}

// The same for a legacy consumer's Consult naming its group: the survivor holds an answer that
// would name the killed owner (at most 3 s: the legacy client's default DialTimeout of 5 s
// covers its dial and the answer) and names itself once the dead bridge's registration is gone.
func TestIntegration_SeveralBridgesLegacyConsultHeldWhileOwnerDead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	const dead, survivor int32 = 9001, 9002
	const session = 4 * time.Second
	name := ownedGroup("old-held", dead, dead, survivor)
	child := startChildBridge(t, childSpec{ZKConnect: connect, NodeID: dead, ZKSessionTimeout: session})
	surv := startBridge(t, connect, survivor, withLegacy)
	consult := func() (int32, time.Duration) {
		start := time.Now()
		r := legacyExchange(t, surv.LegacyAddr().String(), &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse)
		return r.CoordinatorID, time.Since(start)
	}
	zktest.Eventually(t, 10*time.Second, "the survivor names the child for the group", func() (bool, string) {
		id, _ := consult()
		return id == dead, fmt.Sprintf("coordinator %d", id)
	})

	killed := time.Now()
	child.kill()
	time.Sleep(250 * time.Millisecond) // the survivor's last probe of the child stands 100 ms
	for time.Since(killed) < session+20*time.Second {
		id, took := consult()
		switch id {
		case dead:
			if took < 2*time.Second { // the 3 s hold, with a margin for a loaded box
				t.Fatalf("the dead bridge named %v after asking (%v after the kill), want the answer held", took, time.Since(killed))
			}
		case survivor:
			if registered, _, err := zk.Exists(ctx, zkstate.BridgePath(bridge.DefaultRoot, dead)); err != nil || registered {
				t.Fatalf("the survivor named itself while the dead bridge is registered (%v)", err)
			}
			t.Logf("the survivor named after %v (held %v)", time.Since(killed), took)
			return
		default:
			t.Fatalf("named %d", id)
		}
	}
	t.Fatal("the survivor never named itself")
}
