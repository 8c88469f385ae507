package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A mixed group — one 0.8 zk member (zkconsumer) and two kgo members — on three bridges, moved
// by clean handovers: its owner drained (SIGTERM), then its successor drained, then the first
// bridge joining again and taking the group back. The Kafka members carry on in their
// generation across a clean handover, so their /ids registrations and owner znodes must stay
// in ZooKeeper the whole time: a zk member that saw them go would rebalance, take their
// partitions while they still consume them, and commit offsets it read before theirs.
// After each handover: no partition consumed by two members at once (the members' views), no
// partition a Kafka member consumes without its owner znode or under the zk member's (the
// owner znodes, polled), no committed offset moving backwards.
func TestIntegration_SeveralBridgesMixedGroup(t *testing.T) {
	// The topics' leader is broker 1, registered at 127.0.0.1:1 where nobody listens. Bridge 1
	// stands for it in Metadata, so bridge 1 stays up: while it was away, Metadata listed
	// 127.0.0.1:1, and a kgo member told NOT_COORDINATOR looks its coordinator up at any broker
	// it knows; two lookups in a row at brokers that refuse the connection end its heartbeat,
	// and it loses its partitions and rejoins (a rebalance no real cluster would cause). So the
	// group starts on bridge 2, moves to 3, then to 1, and bridge 2 joins again and takes it back.
	ids := []int32{1, 2, 3}
	var name string
	for i := 0; name == ""; i++ {
		n := fmt.Sprintf("mixed-several-%d", i)
		if ownerAmong(n, ids) == 2 && ownerAmong(n, []int32{1, 3}) == 3 {
			name = n
		}
	}
	topics := map[string]int{"ta": 4, "tb": 4}
	mc := newMixedCluster(t, name, topics)
	withMixed := func(c *bridge.Config) {
		c.LegacyListen = "127.0.0.1:0"
		c.HeartbeatHold = mixedHeartbeatHold
	}
	bridges := map[int32]*running{1: mc.b}
	for _, id := range ids[1:] {
		bridges[id] = startBridge(t, mc.connect, id, withMixed)
	}
	zktest.Eventually(t, 10*time.Second, "three bridges listed", func() (bool, string) {
		got := brokersOf(t, mc.b.Addr().String())
		return len(got) >= 3, fmt.Sprint(got)
	})
	first, firstLegacy := bridges[2].Addr().String(), bridges[2].LegacyAddr().String()
	var seeds []string
	for _, id := range ids {
		seeds = append(seeds, bridges[id].Addr().String())
	}
	// A kgo member may still lose its partitions at a handover for a reason of its own: a
	// drained bridge's address stays among its seeds, and two coordinator lookups in a row at
	// addresses that refuse the connection end its heartbeat; it gives its partitions up and
	// rejoins, which rebalances the group. A lost member stops consuming first, so the checks
	// below hold all the same.
	mc.lostOK = true
	stopZ1 := mc.zkMember("z1")
	// As in the other several-bridges tests: a member looks the coordinator up in a Metadata
	// at most 100 ms old (a bridge that joins is unknown to its last one).
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(100 * time.Millisecond), kgo.RetryTimeout(10 * time.Second)}
	k1, stopK1 := mc.kafkaMember("k1", opts...)
	k2, stopK2 := mc.kafkaMember("k2", opts...)
	kafka := map[string]*kgo.Client{"k1": k1, "k2": k2}
	mc.waitConverged(45*time.Second, 3, kafka)

	zID := name + "_z1"
	owners := watchMixedOwners(t, mc, []string{zID}, "k1", "k2")
	offsets := watchOffsets(t, mc.zk, 20*time.Millisecond, topics, name)
	probe := probeGroup(t, k1, name)

	handover := func(what string, do func() int32) {
		t.Helper()
		gen, zAssigns := generationOf(t, mc.zk, name), mc.views.assigns(zID)
		probe.reset()
		start := time.Now()
		to := do()
		zktest.Eventually(t, 20*time.Second, fmt.Sprintf("bridge %d holds the group", to), func() (bool, string) {
			e := epochOf(t.Context(), mc.zk, name)
			return e.NodeID == to && !e.Released, fmt.Sprintf("epoch %+v", e)
		})
		zktest.Eventually(t, 20*time.Second, fmt.Sprintf("bridge %d holds the Kafka members' znodes", to), func() (bool, string) {
			return kafkaZnodesOf(t, mc, to)
		})
		took := time.Since(start)
		mc.waitConverged(45*time.Second, 3, kafka)
		// The members heartbeat at the new owner before anything else happens (a kgo member
		// closed while it looks for its coordinator reports its partitions lost): the probe
		// is answered there, and the members heartbeat every 200 ms.
		moved := time.Now()
		zktest.Eventually(t, 20*time.Second, "the probe answered by the new owner", func() (bool, string) {
			return probe.okSince(moved), ""
		})
		time.Sleep(time.Second)
		t.Logf("%s: the group on bridge %d after %v; generation %d → %d; z1 rebalanced %d times; longest wait of a group request %v (%d probes)",
			what, to, took.Round(time.Millisecond), gen, generationOf(t, mc.zk, name), mc.views.assigns(zID)-zAssigns,
			probe.longest().Round(time.Millisecond), probe.count())
	}
	owner := func() int32 { return epochOf(t.Context(), mc.zk, name).NodeID }
	live := slices.Clone(ids)
	drain := func() int32 {
		from := owner()
		if err := bridges[from].stop(); err != nil {
			t.Fatalf("draining bridge %d: %v", from, err)
		}
		live = slices.DeleteFunc(live, func(id int32) bool { return id == from })
		return ownerAmong(name, live)
	}
	handover("owner drained", drain)
	handover("successor drained", drain)
	// A restarted bridge keeps its addresses, as in a rolling restart: a client knows a broker
	// id at one address until its next Metadata.
	handover("first bridge joins again", func() int32 {
		bridges[2] = startBridge(t, mc.connect, 2, func(c *bridge.Config) {
			withMixed(c)
			c.KafkaListen, c.LegacyListen = first, firstLegacy
		})
		return 2
	})
	owners.check(t)
	offsets.check(t)
	// The members leave before the bridges stop (the cleanups would stop the bridge started
	// last first, a handover under members that are closing), one at a time: a kgo member
	// closed in the middle of a rebalance reports its partitions lost.
	probe.stop()
	stopK1()
	mc.waitConverged(45*time.Second, 2, map[string]*kgo.Client{"k2": k2})
	stopK2()
	stopZ1()
	mc.views.check(t)
	mc.ledger.check(t)
}

// kafkaZnodesOf reports whether every Kafka member's hosted-member znode is an ephemeral of
// bridge node's session (the session of its registration); the other ephemerals of a Kafka
// member move with it in one Multi.
func kafkaZnodesOf(t *testing.T, mc *mixedCluster, node int32) (bool, string) {
	ctx := t.Context()
	_, reg, err := mc.zk.Get(ctx, zkstate.BridgePath(bridge.DefaultRoot, node))
	if err != nil {
		return false, err.Error()
	}
	hosted, err := mc.hosted(ctx)
	if err != nil {
		return false, err.Error()
	}
	n := 0
	for cid, h := range hosted {
		if h.Kind != zkstate.KindKafka {
			continue
		}
		n++
		_, st, err := mc.zk.Get(ctx, zkstate.HostedMemberPath(bridge.DefaultRoot, mc.group, cid))
		if err != nil {
			return false, err.Error()
		}
		if st.EphemeralOwner != reg.EphemeralOwner {
			return false, fmt.Sprintf("%s is session %#x's, not %#x's", cid, st.EphemeralOwner, reg.EphemeralOwner)
		}
	}
	return n > 0, fmt.Sprintf("%d Kafka members hosted", n)
}

// ownerAmong is the placement owner of name among ids.
func ownerAmong(name string, ids []int32) int32 {
	o, _ := placement.Owner(name, ids)
	return o
}

// assigns counts the assignments member name was handed (its rebalances, for a zk member).
func (v *views) assigns(name string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, c := range v.history {
		if c.name == name && c.assign {
			n++
		}
	}
	return n
}

// mixedOwners polls a mixed group's owner znodes and flags each partition that a Kafka member
// consumed for the whole of a poll while its owner znode was missing or a zk member's.
type mixedOwners struct {
	mu    sync.Mutex
	polls int
	bad   []string
	stop  func()
}

func watchMixedOwners(t *testing.T, mc *mixedCluster, zkIDs []string, kafka ...string) *mixedOwners {
	w := &mixedOwners{}
	w.stop = pollEvery(t, 20*time.Millisecond, func(ctx context.Context) {
		t0 := time.Now()
		snap, err := mc.zk.SnapshotOf(ctx, mc.group, zkstate.WithOwners)
		t1 := time.Now()
		if err == nil {
			w.mu.Lock()
			w.polls++
			for _, k := range kafka {
				before, after := mc.views.ownedAt(k, t0), mc.views.ownedAt(k, t1)
				for p := range before {
					if !after[p] {
						continue
					}
					th, ok := snap.Owners[p]
					cid, _, _ := zkstate.ParseThreadID(th)
					switch {
					case !ok:
						w.bad = append(w.bad, fmt.Sprintf("%s consumes %s-%d, which has no owner znode", k, p.Topic, p.Partition))
					case slices.Contains(zkIDs, cid):
						w.bad = append(w.bad, fmt.Sprintf("%s consumes %s-%d, whose owner znode is %s's", k, p.Topic, p.Partition, th))
					}
				}
			}
			w.mu.Unlock()
		}
	})
	return w
}

func (w *mixedOwners) check(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, s := range w.bad {
		if i == 10 {
			t.Errorf("... %d more", len(w.bad)-10)
			break
		}
		t.Error(s)
	}
	t.Logf("owner znodes: %d polls, %d violations", w.polls, len(w.bad))
}

// groupProbe sends a group request through a member's client every 20 ms (a heartbeat of a
// member id the group does not know: the group's coordinator answers UNKNOWN_MEMBER_ID at once,
// and the client looks for the coordinator again on NOT_COORDINATOR, as for a commit) and keeps
// the longest wait for an answer from the group's coordinator.
type groupProbe struct {
	stop func()
	mu   sync.Mutex
	n    int
	max  time.Duration
	last time.Time // of the last answer
}

func probeGroup(t *testing.T, cl *kgo.Client, g string) *groupProbe {
	p := &groupProbe{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			req := kmsg.NewPtrHeartbeatRequest()
			req.Group, req.MemberID, req.Generation = g, "probe", 1
			start := time.Now()
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
			resp, err := req.RequestWith(rctx, cl)
			rcancel()
			took := time.Since(start)
			if err == nil && errors.Is(kerr.ErrorForCode(resp.ErrorCode), kerr.UnknownMemberID) {
				p.mu.Lock()
				p.n++
				p.max = max(p.max, took)
				p.last = time.Now()
				p.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	p.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(p.stop)
	return p
}

func (p *groupProbe) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n, p.max = 0, 0
}

func (p *groupProbe) longest() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.max
}

// okSince reports whether a probe sent after t was answered.
func (p *groupProbe) okSince(t time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last.After(t.Add(30 * time.Millisecond))
}

func (p *groupProbe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// pollEvery runs poll every d on a goroutine until the returned stop (also run at the test's
// cleanup), which returns once the goroutine has.
func pollEvery(t *testing.T, d time.Duration, poll func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			poll(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
