package bridge_test

// Several bridges as one service (issue 15, "Test"): librdkafka (kcat) and kgo members across
// a drain of their group's owner, and a fourth bridge joining three under live kgo
// static members. Through every move: no rebalance, no partition owned twice (the members'
// views and the owner znodes: at no sample do two bridges' sessions hold owner znodes of one
// group), no committed offset moved backwards.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// ownerSampler reads the owner znodes and the 0.8 offsets of groups every 20 ms until stopped,
// and records every sample at which one group's owner znodes belong to two ZooKeeper sessions
// (two bridges) or an offset is below one read before.
type ownerSampler struct {
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	samples    int
	violations []string
}

func sampleOwners(t *testing.T, zk *zkstate.Store, topic string, groups ...string) *ownerSampler {
	s := &ownerSampler{stop: make(chan struct{}), done: make(chan struct{})}
	last := map[string]int64{}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, g := range groups {
				s.sample(t.Context(), zk, g, topic, last)
			}
		}
	}()
	t.Cleanup(s.finish)
	return s
}

func (s *ownerSampler) sample(ctx context.Context, zk *zkstate.Store, g, topic string, last map[string]int64) {
	owners := zkstate.GroupPath(g) + "/owners/" + topic
	kids, _, err := zk.Children(ctx, owners)
	if err != nil {
		return
	}
	paths := make([]string, len(kids))
	for i, k := range kids {
		paths[i] = owners + "/" + k
	}
	reads, err := zk.GetMany(ctx, paths)
	if err != nil {
		return
	}
	sessions := map[int64]bool{}
	for _, r := range reads {
		if r.Err == nil {
			sessions[r.Stat.EphemeralOwner] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if len(sessions) > 1 {
		s.violations = append(s.violations, fmt.Sprintf("%s: owner znodes of %d sessions at once", g, len(sessions)))
	}
	for p := range int32(6) {
		d, _, err := zk.Get(ctx, zkstate.OffsetPath(g, topic, p))
		if err != nil {
			continue
		}
		off, err := strconv.ParseInt(string(d), 10, 64)
		key := fmt.Sprintf("%s/%d", g, p)
		if err == nil && off < last[key] {
			s.violations = append(s.violations, fmt.Sprintf("%s: offset %d after %d", key, off, last[key]))
		}
		last[key] = max(last[key], off)
	}
}

func (s *ownerSampler) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// check stops the sampler and fails t with what it saw.
func (s *ownerSampler) check(t *testing.T) {
	t.Helper()
	s.finish()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples < 10 {
		t.Errorf("only %d samples of the owner znodes", s.samples)
	}
	for _, v := range s.violations {
		t.Error(v)
	}
}

// stableOn waits until group is Stable with n members on bridge b and returns its description.
func stableOn(t *testing.T, b *running, name string, n int) group.Description {
	t.Helper()
	var d group.Description
	zktest.Eventually(t, 30*time.Second, fmt.Sprintf("%s Stable with %d members on %v", name, n, b.Addr()), func() (bool, string) {
		r := describe(t, b, name)
		d = r.Group
		return r.Err == group.ErrNone && d.State == group.Stable && len(d.Members) == n,
			fmt.Sprintf("%v %v gen %d, %d members", r.Err, d.State, d.Generation, len(d.Members))
	})
	return d
}

// A librdkafka (kcat) and a kgo static member of one group, both given every bridge: the
// group's owner drains (SIGTERM) and its next owner carries the group on in the same
// generation with both members; the owner znodes never belong to two bridges at once.
func TestIntegration_SeveralBridgesKcatAcrossADrain(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	ids := []int32{9001, 9002, 9003}
	bridges := map[int32]*running{}
	var seeds []string
	for _, id := range ids {
		bridges[id] = startBridge(t, connect, id, nil)
		seeds = append(seeds, bridges[id].Addr().String())
	}
	zktest.Eventually(t, 10*time.Second, "every bridge lists the others", func() (bool, string) {
		got := brokersOf(t, seeds[0])
		return len(got) == 3, fmt.Sprint(got)
	})
	// A group whose owner is not 9001, the bridge that leads the partitions (clients fetch from
	// it, unanswered: the data path is not on).
	name := ""
	for i := 0; name == ""; i++ {
		if o, _ := placement.Owner(fmt.Sprintf("sk-%d", i), ids); o != 9001 {
			name = fmt.Sprintf("sk-%d", i)
		}
	}
	owner, _ := placement.Owner(name, ids)

	kg, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(name),
		kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(),
		kgo.InstanceID("kgo-static"),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(10*time.Second),
		kgo.RebalanceTimeout(5*time.Second),
		kgo.HeartbeatInterval(200*time.Millisecond),
		kgo.RetryTimeout(10*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			kg.PollFetches(ctx)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-polled; kg.Close() })
	kafkatest.StartKcat(t, seeds[0]+","+seeds[1]+","+seeds[2], name, "orders",
		"-X", "group.instance.id=kcat-static", "-X", "partition.assignment.strategy=range")

	before := stableOn(t, bridges[owner], name, 2)
	instances := func(d group.Description) []string {
		var out []string
		for _, m := range d.Members {
			out = append(out, string(m.InstanceID))
		}
		slices.Sort(out)
		return out
	}
	if got := instances(before); !slices.Equal(got, []string{"kcat-static", "kgo-static"}) {
		t.Fatalf("members %v, want kcat-static and kgo-static", got)
	}

	sampler := sampleOwners(t, zk, "orders", name)
	time.Sleep(200 * time.Millisecond)
	survivors := slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return id == owner })
	next, _ := placement.Owner(name, survivors)
	if err := bridges[owner].stop(); err != nil {
		t.Fatal(err)
	}
	after := stableOn(t, bridges[next], name, 2)
	time.Sleep(time.Second) // a rebalance the move caused would show now
	after = stableOn(t, bridges[next], name, 2)
	sampler.check(t)
	if after.Generation != before.Generation || !slices.Equal(instances(after), instances(before)) {
		t.Errorf("after the drain: generation %d members %v, want generation %d members %v (no rebalance)",
			after.Generation, instances(after), before.Generation, instances(before))
	}
}

// A fourth bridge joins three while kgo static members of six groups commit: the groups that
// map to it move there (a handover each), every group keeps its generation and members, no
// partition is held by two members (their own views) or by two bridges' owner znodes at once,
// and no 0.8 offset moves backwards.
func TestIntegration_SeveralBridgesFourthJoins(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	ids := []int32{9001, 9002, 9003}
	bridges := map[int32]*running{}
	var seeds []string
	for _, id := range ids {
		bridges[id] = startBridge(t, connect, id, nil)
		seeds = append(seeds, bridges[id].Addr().String())
	}
	zktest.Eventually(t, 10*time.Second, "every bridge lists the others", func() (bool, string) {
		got := brokersOf(t, seeds[0])
		return len(got) == 3, fmt.Sprint(got)
	})
	// Six groups, two of which map to the fourth bridge once it joins.
	all := append(slices.Clone(ids), 9004)
	var names []string
	moving := 0
	for i := 0; len(names) < 6; i++ {
		g := fmt.Sprintf("j4-%d", i)
		o, _ := placement.Owner(g, all)
		if o == 9004 && moving == 2 || o != 9004 && len(names)-moving == 4 {
			continue
		}
		if o == 9004 {
			moving++
		}
		names = append(names, g)
	}

	// Each member's own view: partition → holders, checked on every assignment.
	var viewMu sync.Mutex
	views := map[string]map[string][]int32{} // group → instance → partitions
	var overlaps []string
	setView := func(g, inst string, parts []int32) {
		viewMu.Lock()
		defer viewMu.Unlock()
		views[g][inst] = parts
		held := map[int32]string{}
		for other, ps := range views[g] {
			for _, p := range ps {
				if h, ok := held[p]; ok {
					overlaps = append(overlaps, fmt.Sprintf("%s: partition %d held by %s and %s", g, p, h, other))
				}
				held[p] = other
			}
		}
	}
	ctx := t.Context()
	clients := map[string]*kgo.Client{}
	for _, g := range names {
		views[g] = map[string][]int32{}
		for _, inst := range []string{"a", "b"} {
			cl, err := kgo.NewClient(
				kgo.SeedBrokers(seeds...),
				kgo.ConsumerGroup(g),
				kgo.ConsumeTopics("orders"),
				kgo.DisableAutoCommit(),
				kgo.InstanceID(inst),
				kgo.Balancers(kgo.RangeBalancer()),
				kgo.SessionTimeout(10*time.Second),
				kgo.RebalanceTimeout(5*time.Second),
				kgo.HeartbeatInterval(200*time.Millisecond),
				kgo.RetryTimeout(10*time.Second),
				kgo.MetadataMinAge(100*time.Millisecond),
				kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
					setView(g, inst, m["orders"])
				}),
				kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, _ map[string][]int32) {
					setView(g, inst, nil)
				}),
			)
			if err != nil {
				t.Fatal(err)
			}
			pctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for pctx.Err() == nil {
					cl.PollFetches(pctx)
					time.Sleep(20 * time.Millisecond)
				}
			}()
			t.Cleanup(func() { cancel(); <-done; cl.Close() })
			if inst == "a" {
				clients[g] = cl
			}
		}
	}
	gens := map[string]group.Generation{}
	for _, g := range names {
		o, _ := placement.Owner(g, ids)
		gens[g] = stableOn(t, bridges[o], g, 2).Generation
	}
	// Member a of each group commits partition 0 in a loop, wherever the group lives.
	cctx, stopCommits := context.WithCancel(ctx)
	var commits sync.WaitGroup
	for _, g := range names {
		commits.Go(func() {
			for off := int64(1); cctx.Err() == nil; off++ {
				c, cancel := context.WithTimeout(cctx, 5*time.Second)
				clients[g].CommitOffsetsSync(c, map[string]map[int32]kgo.EpochOffset{"orders": {0: {Epoch: -1, Offset: off}}}, nil)
				cancel()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	sampler := sampleOwners(t, zk, "orders", names...)
	time.Sleep(300 * time.Millisecond)

	fourth := startBridge(t, connect, 9004, nil)
	bridges[9004] = fourth
	for _, g := range names {
		o, _ := placement.Owner(g, all)
		d := stableOn(t, bridges[o], g, 2)
		if d.Generation != gens[g] {
			t.Errorf("%s on %d after the join: generation %d, want %d (no rebalance)", g, o, d.Generation, gens[g])
		}
	}
	time.Sleep(time.Second) // a rebalance a move caused would show now
	for _, g := range names {
		o, _ := placement.Owner(g, all)
		if d := stableOn(t, bridges[o], g, 2); d.Generation != gens[g] {
			t.Errorf("%s on %d a second after the join: generation %d, want %d", g, o, d.Generation, gens[g])
		}
	}
	stopCommits()
	commits.Wait()
	sampler.check(t)
	viewMu.Lock()
	defer viewMu.Unlock()
	for _, o := range overlaps {
		t.Error(o)
	}
	for _, g := range names {
		n := 0
		for _, ps := range views[g] {
			n += len(ps)
		}
		if n != 6 {
			t.Errorf("%s: the members hold %d partitions, want 6 (%v)", g, n, views[g])
		}
	}
}
