package bridge_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkMixedRebalance is the cost of one rebalance of a mixed group's Kafka members, eager
// (range) against cooperative (cooperative-sticky, KIP-429's two generations; issue 18 item 3):
// a group of one zk member and 4 kgo members on a topic of 24 partitions; each iteration a
// fifth kgo member joins, and the group is timed from its NewClient to converged (the owner
// znodes are the 0.8.2 range over every registration and each member consumes exactly its
// share); then it leaves, untimed. Per rebalance it reports the partitions that went
// unconsumed for a while during it (paused) and the partition-seconds they were unconsumed,
// from the members' own assign and revoke callbacks.
func BenchmarkMixedRebalance(b *testing.B) {
	for _, bal := range []struct {
		name string
		opt  kgo.Opt
	}{{"eager-range", kgo.Balancers(kgo.RangeBalancer())}, {"cooperative-sticky", kgo.Balancers(kgo.CooperativeStickyBalancer())}} {
		b.Run(bal.name, func(b *testing.B) { benchMixedRebalance(b, bal.opt) })
	}
}

func benchMixedRebalance(b *testing.B, balancer kgo.Opt) {
	const g, topic, parts, steady = "bench", "t", 24, 4
	connect := zktest.Connect(b)
	zk := zktest.OpenStore(b, connect)
	ctx := b.Context()
	l := zkstate.Layout{
		Brokers: []zkstate.BrokerRegistration{{ID: 1, Version: 1, Host: "127.0.0.1", Port: 1, JMXPort: -1, Timestamp: "1700000000000"}},
		Topics:  map[string]zkstate.TopicAssignment{topic: {Version: 1, Partitions: map[int32][]int32{}}},
	}
	for p := range int32(parts) {
		l.Topics[topic].Partitions[p] = []int32{1}
	}
	if err := zkstate.LoadLayout(ctx, zk, l); err != nil {
		b.Fatal(err)
	}
	if _, _, err := zkstate.InitMode(ctx, zk, bridge.DefaultRoot, g, zkstate.ModeMixed, "bench", "mixed rebalance"); err != nil {
		b.Fatal(err)
	}
	br := startBridgeTB(b, connect, func(c *bridge.Config) { c.HeartbeatHold = mixedHeartbeatHold })
	v := newViews()

	zc, err := zkconsumer.New(ctx, zkconsumer.Config{
		Connect: connect, GroupID: g, ConsumerID: "z1", Subscription: map[string]int{topic: 1},
		SessionTimeout: 6 * time.Second, RebalanceBackoff: 200 * time.Millisecond, RebalanceMaxRetries: 50,
		Logger: newLogger(b).Level(5),
		Handler: zkconsumer.Handler{
			OnAssign: func(o map[zkstate.TopicPartition]int64) { v.assign(g+"_z1", slices.Collect(maps.Keys(o))) },
			OnRevoke: func() { v.revoke(g+"_z1", nil) },
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	zctx, stopZ := context.WithCancel(context.Background())
	zdone := make(chan error, 1)
	go func() { zdone <- zc.Run(zctx) }()
	b.Cleanup(func() {
		stopZ()
		cctx, c2 := context.WithTimeout(context.Background(), 20*time.Second)
		defer c2()
		_ = zc.Close(cctx)
		<-zdone
	})

	kafka := map[string]*kgo.Client{}
	member := func(name string) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addr().String()), kgo.ConsumerGroup(g), kgo.ConsumeTopics(topic), balancer,
			kgo.DisableAutoCommit(), kgo.SessionTimeout(6*time.Second), kgo.RebalanceTimeout(5*time.Second),
			kgo.HeartbeatInterval(200*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { v.assign(name, kgoParts(m)) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				if len(m) > 0 {
					v.revoke(name, kgoParts(m))
				}
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				if len(m) > 0 {
					v.revoke(name, kgoParts(m))
				}
			}))
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				if fs := cl.PollFetches(context.Background()); fs.IsClientClosed() {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		kafka[name] = cl
		return cl
	}
	leave := func(name string) {
		kafka[name].Close()
		delete(kafka, name)
		v.revoke(name, nil)
	}
	b.Cleanup(func() {
		for name := range kafka {
			leave(name)
		}
	})
	converged := func() (bool, string) {
		return benchConverged(ctx, zk, br, g, topic, parts, v, kafka)
	}
	for i := range steady {
		member(fmt.Sprintf("k%d", i))
	}
	zktest.Eventually(b, 60*time.Second, "the group converged", converged)

	var took time.Duration
	var paused, pausedSeconds float64
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("n%d", i)
		start := time.Now()
		member(name)
		zktest.Eventually(b, 60*time.Second, "the group converged after a join", converged)
		end := time.Now()
		took += end.Sub(start)
		n, secs := pausedBetween(v, start, end, topic, parts)
		paused += float64(n)
		pausedSeconds += secs
		b.StopTimer()
		leave(name)
		zktest.Eventually(b, 60*time.Second, "the group converged after a leave", converged)
		b.StartTimer()
	}
	b.StopTimer()
	v.mu.Lock()
	violations := slices.Clone(v.violations)
	v.mu.Unlock()
	for _, s := range violations {
		b.Error(s)
	}
	n := float64(b.N)
	b.ReportMetric(took.Seconds()*1000/n, "ms-to-stable")
	b.ReportMetric(paused/n, "paused-partitions")
	b.ReportMetric(pausedSeconds/n, "paused-partition-s")
}

// benchConverged is mixedCluster.converged for the benchmark: the owner znodes are the 0.8.2
// range assignment over every registration, and every member consumes exactly its share.
func benchConverged(ctx context.Context, zk *zkstate.Store, br *running, g, topic string, parts int, v *views, kafka map[string]*kgo.Client) (bool, string) {
	snap, err := zk.Snapshot(ctx, g)
	if err != nil {
		return false, err.Error()
	}
	if len(snap.Consumers) != len(kafka)+1 {
		return false, fmt.Sprintf("%d registrations", len(snap.Consumers))
	}
	in := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: snap.Partitions}
	for cid, c := range snap.Consumers {
		in.Consumers[cid] = legacy.Subscription(zkstate.ConsumerThreads(cid, c.Registration))
	}
	want := map[mtp]string{}
	for tp, th := range legacy.Range(in) {
		want[mtp{Topic: tp.Topic, Partition: tp.Partition}] = th
	}
	if len(want) != parts || !maps.Equal(want, snap.Owners) {
		return false, "owners differ from the 0.8.2 assignment"
	}
	hostedIDs := map[string]string{} // member id → consumer id
	kids, _, err := zk.Children(ctx, zkstate.HostedPath(bridge.DefaultRoot, g))
	if err != nil {
		return false, err.Error()
	}
	for _, cid := range kids {
		data, _, err := zk.Get(ctx, zkstate.HostedMemberPath(bridge.DefaultRoot, g, cid))
		if err != nil {
			return false, err.Error()
		}
		h, err := zkstate.ParseHostedMember(data)
		if err != nil {
			return false, err.Error()
		}
		hostedIDs[h.Member] = cid
	}
	share := map[string]map[mtp]bool{}
	for tp, th := range want {
		cid, _, _ := zkstate.ParseThreadID(th)
		if share[cid] == nil {
			share[cid] = map[mtp]bool{}
		}
		share[cid][tp] = true
	}
	for name, cl := range kafka {
		id, _ := cl.GroupMetadata()
		cid, ok := hostedIDs[id]
		if !ok {
			return false, name + " not hosted yet"
		}
		if got := v.of(name); !maps.Equal(got, share[cid]) && (len(got) > 0 || len(share[cid]) > 0) {
			return false, fmt.Sprintf("%s consumes %d partitions, its share is %d", name, len(got), len(share[cid]))
		}
	}
	_ = br
	return true, ""
}

// pausedBetween counts the partitions of topic that nobody consumed at some moment of
// [from, to] although somebody consumed them at from, and the partition-seconds they spent
// unconsumed, from the views' history.
func pausedBetween(v *views, from, to time.Time, topic string, parts int) (int, float64) {
	v.mu.Lock()
	history := slices.Clone(v.history)
	v.mu.Unlock()
	sort.SliceStable(history, func(i, j int) bool { return history[i].at.Before(history[j].at) })
	holders := map[mtp]map[string]bool{}
	apply := func(c viewChange) {
		if c.assign {
			for _, p := range c.parts {
				if holders[p] == nil {
					holders[p] = map[string]bool{}
				}
				holders[p][c.name] = true
			}
			return
		}
		for p, hs := range holders {
			if c.parts == nil || slices.Contains(c.parts, p) {
				delete(hs, c.name)
			}
		}
	}
	i := 0
	for ; i < len(history) && !history[i].at.After(from); i++ {
		apply(history[i])
	}
	since := map[mtp]time.Time{} // unconsumed since
	count := map[mtp]bool{}
	var secs float64
	for ; i < len(history) && !history[i].at.After(to); i++ {
		c := history[i]
		apply(c)
		for p := range int32(parts) {
			tp := mtp{Topic: topic, Partition: p}
			empty := len(holders[tp]) == 0
			t0, idle := since[tp]
			switch {
			case empty && !idle:
				since[tp] = c.at
				count[tp] = true
			case !empty && idle:
				secs += c.at.Sub(t0).Seconds()
				delete(since, tp)
			}
		}
	}
	for _, t0 := range since {
		secs += to.Sub(t0).Seconds()
	}
	return len(count), secs
}
