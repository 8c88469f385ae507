package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Mixed groups (issue 5 items 3-5): Kafka members and unmodified 0.8 (zk) members in one group
// share one assignment, the 0.8.2 one over every registration, with exclusive ownership.

type mtp = zkstate.TopicPartition

// views records what every member of every kind consumes, from its own callbacks, and flags a
// partition handed to a member while another still consumes it (DESIGN §3: no partition is
// handed to a new owner before its old owner has let go).
type views struct {
	mu         sync.Mutex
	consuming  map[string]map[mtp]bool // member name → partitions
	violations []string
}

func newViews() *views { return &views{consuming: map[string]map[mtp]bool{}} }

func (v *views) assign(name string, parts []mtp) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for other, ps := range v.consuming {
		if other == name {
			continue
		}
		for _, p := range parts {
			if ps[p] {
				v.violations = append(v.violations, fmt.Sprintf("%s-%d handed to %s while %s consumes it", p.Topic, p.Partition, name, other))
			}
		}
	}
	if v.consuming[name] == nil {
		v.consuming[name] = map[mtp]bool{}
	}
	for _, p := range parts {
		v.consuming[name][p] = true
	}
}

func (v *views) revoke(name string, parts []mtp) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if parts == nil {
		delete(v.consuming, name)
		return
	}
	for _, p := range parts {
		delete(v.consuming[name], p)
	}
}

func (v *views) of(name string) map[mtp]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.consuming[name])
}

func (v *views) check(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.violations {
		t.Error(s)
	}
}

func kgoParts(m map[string][]int32) []mtp {
	var out []mtp
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, mtp{Topic: t, Partition: p})
		}
	}
	return out
}

// mixedCluster is a chroot with one 0.8.2 broker registration and topics, a bridge and an admin
// session.
type mixedCluster struct {
	t       *testing.T
	connect string
	zk      *zkstate.Store
	b       *running
	views   *views
	group   string
	topics  []string
}

func newMixedCluster(t *testing.T, g string, topics map[string]int) *mixedCluster {
	t.Helper()
	connect := zktest.Connect(t)
	zk := openStore(t, connect)
	l := zkstate.Layout{
		Brokers: []zkstate.BrokerRegistration{{ID: 1, Version: 1, Host: "127.0.0.1", Port: 1, JMXPort: -1, Timestamp: "1700000000000"}},
		Topics:  map[string]zkstate.TopicAssignment{},
	}
	mc := &mixedCluster{t: t, connect: connect, zk: zk, views: newViews(), group: g}
	for name, n := range topics {
		a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
		for p := range n {
			a.Partitions[int32(p)] = []int32{1}
		}
		l.Topics[name] = a
		mc.topics = append(mc.topics, name)
	}
	sort.Strings(mc.topics)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, zk, l); err != nil {
		t.Fatalf("LoadLayout: %v", err)
	}
	if _, _, err := zkstate.InitMode(ctx, zk, bridge.DefaultRoot, g, zkstate.ModeMixed, "test", "mixed group test"); err != nil {
		t.Fatalf("InitMode: %v", err)
	}
	mc.b = startBridge(t, connect, 1, nil)
	return mc
}

// zkMember starts an unmodified-0.8.2 consumer (zkconsumer) named name, with one thread per topic.
func (mc *mixedCluster) zkMember(name string) (stop func()) {
	t := mc.t
	t.Helper()
	sub := map[string]int{}
	for _, tp := range mc.topics {
		sub[tp] = 1
	}
	id := mc.group + "_" + name
	cfg := zkconsumer.Config{
		Connect: mc.connect, GroupID: mc.group, ConsumerID: name, Subscription: sub,
		SessionTimeout: 6 * time.Second, RebalanceBackoff: 200 * time.Millisecond, RebalanceMaxRetries: 50,
		Logger: newLogger(t).With().Str("zk_member", name).Logger(),
		Handler: zkconsumer.Handler{
			OnAssign: func(offsets map[zkstate.TopicPartition]int64) {
				mc.views.assign(id, slices.Collect(maps.Keys(offsets)))
			},
			OnRevoke: func() { mc.views.revoke(id, nil) },
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	c, err := zkconsumer.New(ctx, cfg)
	if err != nil {
		t.Fatalf("zkconsumer.New(%s): %v", name, err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopRun()
			cctx, c2 := context.WithTimeout(context.Background(), 20*time.Second)
			defer c2()
			_ = c.Close(cctx)
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, zkconsumer.ErrClosed) {
				t.Errorf("Run(%s) = %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// kafkaMember starts a kgo group member named name (its views name) with an eager balancer.
func (mc *mixedCluster) kafkaMember(name string, opts ...kgo.Opt) (cl *kgo.Client, stop func()) {
	t := mc.t
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(mc.b.Addr().String()),
		kgo.ConsumerGroup(mc.group),
		kgo.ConsumeTopics(mc.topics...),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(6 * time.Second),
		kgo.RebalanceTimeout(5 * time.Second),
		kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.RetryTimeout(5 * time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mc.views.assign(name, kgoParts(m))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mc.views.revoke(name, kgoParts(m))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mc.views.revoke(name, kgoParts(m))
		}),
	}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	pctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			cl.PollFetches(pctx)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			cl.Close() // leaves the group (LeaveGroup), after revoking
			mc.views.revoke(name, nil)
		})
	}
	t.Cleanup(stop)
	return cl, stop
}

// kafkaNames maps the consumer ids of the bridge's Kafka members to their member ids, from the
// hosted-member znodes.
func (mc *mixedCluster) hosted(ctx context.Context) (map[string]zkstate.HostedMember, error) {
	kids, _, err := mc.zk.Children(ctx, zkstate.HostedPath(bridge.DefaultRoot, mc.group))
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]zkstate.HostedMember{}
	for _, cid := range kids {
		data, _, err := mc.zk.Get(ctx, zkstate.HostedMemberPath(bridge.DefaultRoot, mc.group, cid))
		if err != nil {
			return nil, err
		}
		h, err := zkstate.ParseHostedMember(data)
		if err != nil {
			return nil, err
		}
		out[cid] = h
	}
	return out, nil
}

// converged checks that the group is settled: the owners in ZooKeeper are complete, disjoint and
// the 0.8.2 range assignment over every registration, and every member's own view is exactly its
// share. kafka maps the Kafka members' view names to their clients.
func (mc *mixedCluster) converged(ctx context.Context, registrations int, kafka map[string]*kgo.Client) (bool, string) {
	snap, err := mc.zk.Snapshot(ctx, mc.group)
	if err != nil {
		return false, err.Error()
	}
	if len(snap.Consumers) != registrations {
		return false, fmt.Sprintf("%d registrations, want %d", len(snap.Consumers), registrations)
	}
	in := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: snap.Partitions}
	for cid, c := range snap.Consumers {
		sub := legacy.Subscription{}
		for tp, ths := range zkstate.ConsumerThreads(cid, c.Registration) {
			sub[tp] = ths
		}
		in.Consumers[cid] = sub
	}
	want := map[mtp]string{}
	for tp, th := range legacy.Range(in) {
		want[mtp{Topic: tp.Topic, Partition: tp.Partition}] = th
	}
	total := 0
	for _, t := range mc.topics {
		total += len(snap.Partitions[t])
	}
	if len(want) != total {
		return false, fmt.Sprintf("0.8.2 assigns %d of %d partitions", len(want), total)
	}
	if !maps.Equal(want, snap.Owners) {
		return false, fmt.Sprintf("owners %v, want %v", snap.Owners, want)
	}
	hosted, err := mc.hosted(ctx)
	if err != nil {
		return false, err.Error()
	}
	byMember := map[string]string{} // kafka member id → consumer id
	for cid, h := range hosted {
		byMember[h.Member] = cid
	}
	share := map[string]map[mtp]bool{} // consumer id → partitions
	for tp, th := range want {
		cid, _, _ := zkstate.ParseThreadID(th)
		if share[cid] == nil {
			share[cid] = map[mtp]bool{}
		}
		share[cid][tp] = true
	}
	for cid := range snap.Consumers {
		name := cid
		if h, ok := hosted[cid]; ok {
			name = ""
			for n, cl := range kafka {
				if id, _ := cl.GroupMetadata(); id == h.Member {
					name = n
				}
			}
			if name == "" {
				return false, "no client for hosted member " + h.Member
			}
		}
		if got := mc.views.of(name); !maps.Equal(got, share[cid]) && (len(got) > 0 || len(share[cid]) > 0) {
			return false, fmt.Sprintf("%s consumes %v, its share is %v", name, got, share[cid])
		}
	}
	_ = byMember
	return true, ""
}

func (mc *mixedCluster) waitConverged(timeout time.Duration, registrations int, kafka map[string]*kgo.Client) {
	mc.t.Helper()
	eventually(mc.t, timeout, "the mixed group converged", func() (bool, string) {
		ctx, cancel := context.WithTimeout(mc.t.Context(), 5*time.Second)
		defer cancel()
		return mc.converged(ctx, registrations, kafka)
	})
	mc.views.check(mc.t)
}

// Two Kafka members and two zk members over three topics of eight partitions: the bridge's
// members count in /ids, the assignment is the 0.8.2 range result over all four, and ownership
// stays exclusive as members of each kind leave and come back.
func TestIntegration_MixedKafkaAndZKMembers(t *testing.T) {
	mc := newMixedCluster(t, "mx", map[string]int{"ta": 8, "tb": 8, "tc": 8})
	stopZ1 := mc.zkMember("z1")
	mc.zkMember("z2")
	k1, _ := mc.kafkaMember("k1")
	k2, stopK2 := mc.kafkaMember("k2")
	kafka := map[string]*kgo.Client{"k1": k1, "k2": k2}
	mc.waitConverged(30*time.Second, 4, kafka)

	// A zk member leaves: the other three take its partitions.
	stopZ1()
	mc.waitConverged(30*time.Second, 3, kafka)

	// A Kafka member leaves.
	stopK2()
	delete(kafka, "k2")
	mc.waitConverged(30*time.Second, 2, kafka)

	// Both kinds come back.
	mc.zkMember("z3")
	k3, _ := mc.kafkaMember("k3")
	kafka["k3"] = k3
	mc.waitConverged(30*time.Second, 4, kafka)
}

var _ = strconv.Itoa
var _ = strings.Cut
