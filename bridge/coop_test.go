package bridge_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Cooperative members in mixed groups (issue 18 item 3, KIP-429).

// ownerWatch samples the group's owner znodes against what every member consumes by its own
// view: a partition a member consumed both before and after the read of /owners must have had
// that member's thread in its owner znode, at every sample (DESIGN §3: ownership in ZooKeeper
// is exclusive and true at every instant, not only once the group settled).
type ownerWatch struct {
	mc *mixedCluster
	mu sync.Mutex
	// kafka maps view names to the clients of the Kafka members (their member ids say which
	// hosted consumer id is theirs).
	kafka      map[string]*kgo.Client
	samples    int
	violations []string
}

func (mc *mixedCluster) watchOwners(ctx context.Context) *ownerWatch {
	w := &ownerWatch{mc: mc, kafka: map[string]*kgo.Client{}}
	go func() {
		for ctx.Err() == nil {
			w.sample(ctx)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

func (w *ownerWatch) add(name string, cl *kgo.Client) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kafka[name] = cl
}

func (w *ownerWatch) sample(ctx context.Context) {
	mc := w.mc
	before := mc.views.all()
	snap, err := mc.zk.Snapshot(ctx, mc.group)
	if err != nil {
		return
	}
	hosted, err := mc.hosted(ctx)
	if err != nil {
		return
	}
	after := mc.views.all()
	w.mu.Lock()
	defer w.mu.Unlock()
	member := map[string]string{} // Kafka member id → view name
	for name, cl := range w.kafka {
		if id, _ := cl.GroupMetadata(); id != "" {
			member[id] = name
		}
	}
	w.samples++
	for name, parts := range before {
		for p := range parts {
			if !after[name][p] {
				continue // released meanwhile
			}
			th, owned := snap.Owners[p]
			if !owned {
				w.violations = append(w.violations, fmt.Sprintf("%s consumes %s-%d, which has no owner znode", name, p.Topic, p.Partition))
				continue
			}
			cid := legacy.ConsumerOf(th)
			holder := cid
			if h, ok := hosted[cid]; ok && h.Kind == zkstate.KindKafka {
				if holder, ok = member[h.Member]; !ok {
					continue // a member this sample cannot name yet
				}
			}
			if holder != name {
				w.violations = append(w.violations, fmt.Sprintf("%s consumes %s-%d, whose owner znode holds %s (%s)", name, p.Topic, p.Partition, th, holder))
			}
		}
	}
}

func (w *ownerWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples < 10 {
		t.Errorf("only %d samples of the owner znodes", w.samples)
	}
	for i, v := range w.violations {
		if i == 20 {
			t.Errorf("... and %d more", len(w.violations)-20)
			break
		}
		t.Error(v)
	}
	t.Logf("owner znodes sampled %d times against the members' views", w.samples)
}

// all is every member's view.
func (v *views) all() map[string]map[mtp]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]map[mtp]bool, len(v.consuming))
	for name, ps := range v.consuming {
		out[name] = maps.Clone(ps)
	}
	return out
}

// franz-go's default consumers (cooperative-sticky only, KIP-429) in a mixed group with a zk and
// a legacy member: they are admitted, and every partition that moves away from one of them moves
// in two generations — it is given to nobody until its owner revoked it and rejoined — so that
// no partition is consumed by two members at once (the members' views), the owner znodes say
// who consumes what at every sample, no Kafka member ever loses a partition, and every
// hand-over resumes at the last commit.
func TestIntegration_MixedCooperativeMembers(t *testing.T) {
	t.Parallel()
	mc := newMixedCluster(t, "coop", map[string]int{"ta": 6, "tb": 6})
	watch := mc.watchOwners(t.Context())
	coop := kgo.Balancers(kgo.CooperativeStickyBalancer())
	mc.zkMember("z1")
	mc.legacyMember("l1")
	k1, stopK1 := mc.kafkaMember("k1", coop)
	watch.add("k1", k1)
	kafka := map[string]*kgo.Client{"k1": k1}
	mc.waitConverged(30*time.Second, 3, kafka)

	// A second cooperative member: k1's and the others' partitions move to it.
	k2, _ := mc.kafkaMember("k2", coop)
	watch.add("k2", k2)
	kafka["k2"] = k2
	mc.waitConverged(30*time.Second, 4, kafka)

	// A zk member joins: both Kafka members give partitions up to it, two generations each.
	stopZ2 := mc.zkMember("0z2") // its consumer id sorts first: it takes partitions of the Kafka members
	mc.waitConverged(30*time.Second, 5, kafka)

	// It leaves again, and a Kafka member leaves (it revokes everything and sends LeaveGroup).
	stopZ2()
	mc.waitConverged(30*time.Second, 4, kafka)
	stopK1()
	delete(kafka, "k1")
	mc.waitConverged(30*time.Second, 3, kafka)

	k3, _ := mc.kafkaMember("k3", coop)
	watch.add("k3", k3)
	kafka["k3"] = k3
	mc.waitConverged(30*time.Second, 4, kafka)
	time.Sleep(300 * time.Millisecond)

	watch.check(t)
	mc.views.check(t)
	mc.ledger.check(t)
	// The two-generation rule was exercised: Kafka members gave up part of what they consumed
	// while keeping the rest (an eager member gives up everything).
	partial := 0
	for _, c := range slices.Clone(mc.views.history) {
		if !c.assign && c.parts != nil && (c.name == "k1" || c.name == "k2" || c.name == "k3") && len(mc.views.ownedAt(c.name, c.at)) > 0 {
			partial++
		}
	}
	if partial == 0 {
		t.Error("no Kafka member revoked part of its partitions: the cooperative path was not exercised")
	}
}
