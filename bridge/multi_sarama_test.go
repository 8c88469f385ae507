package bridge_test

// sarama across several bridges with the data path (issue 15, "Test"): two static sarama
// members of one group, seeded with all three bridges, consume through the bridges' relay while
// the group's owner drains (SIGTERM) and then while its next owner is killed with SIGKILL.
// Kafka's rules: a clean coordinator move is no rebalance for static members (sarama 1.61's
// heartbeat loop finds the new coordinator on NOT_COORDINATOR and carries on in its
// generation); after a crash the members may rejoin, but never does a partition have two
// owners (the members' own views, the owner znodes) and no committed offset moves backwards.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// saramaViews is what each sarama member holds, as its own sessions say (Setup and Cleanup),
// with every moment two members claimed one partition.
type saramaViews struct {
	mu       sync.Mutex
	held     map[string][]int32 // member → partitions of its current session
	sessions map[string]int     // member → sessions set up
	overlaps []string
}

func (v *saramaViews) setup(member string, parts []int32) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sessions[member]++
	for other, ps := range v.held {
		for _, p := range parts {
			if other != member && slices.Contains(ps, p) {
				v.overlaps = append(v.overlaps, fmt.Sprintf("partition %d claimed by %s while %s holds it", p, member, other))
			}
		}
	}
	v.held[member] = slices.Clone(parts)
}

func (v *saramaViews) cleanup(member string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.held, member)
}

// counts returns the sessions each member set up so far, and the partitions held in all.
func (v *saramaViews) counts() (map[string]int, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, ps := range v.held {
		n += len(ps)
	}
	return maps.Clone(v.sessions), n
}

// saramaMember is one consumer-group member's handler: it records its sessions in views and
// every message in seen, and marks each for sarama's auto-commit.
type saramaMember struct {
	name  string
	views *saramaViews
	seen  *dfSeen
}

func (h saramaMember) Setup(s sarama.ConsumerGroupSession) error {
	h.views.setup(h.name, s.Claims()[dfTopic])
	return nil
}

func (h saramaMember) Cleanup(sarama.ConsumerGroupSession) error {
	h.views.cleanup(h.name)
	return nil
}

func (h saramaMember) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		h.seen.add(string(msg.Value), fmt.Sprintf("%s@%d/%d gen %d", h.name, msg.Partition, msg.Offset, s.GenerationID()))
		s.MarkMessage(msg, "")
	}
	return nil
}

// startSaramaMember runs a static sarama member of g, seeded with every bridge, until cleanup.
func startSaramaMember(t *testing.T, seeds []string, g, instance string, views *saramaViews, seen *dfSeen) {
	t.Helper()
	cfg := kafkatest.SaramaConfig(instance)
	cfg.Version = sarama.V2_8_0_0 // static membership (JoinGroup v5+)
	cfg.Consumer.Group.InstanceId = instance
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 12 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 5 * time.Second
	cfg.Consumer.Return.Errors = true
	// A group moving between bridges answers NOT_COORDINATOR for a moment (the handover):
	// give sarama's heartbeat and offset retries a few seconds, as one would in production.
	cfg.Metadata.Retry.Max = 40
	cfg.Metadata.Retry.Backoff = 100 * time.Millisecond
	cfg.Consumer.Offsets.Retry.Max = 40
	cg, err := sarama.NewConsumerGroup(seeds, g, cfg)
	if err != nil {
		t.Fatalf("sarama consumer group: %v", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan struct{})
	h := saramaMember{name: instance, views: views, seen: seen}
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{dfTopic}, h); err != nil && ctx.Err() == nil {
				t.Logf("%s: Consume: %v", instance, err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	go func() {
		for err := range cg.Errors() {
			t.Logf("%s: %v", instance, err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = cg.Close()
	})
}

func TestIntegration_SeveralBridgesSarama(t *testing.T) {
	e := dfStart(t, dfOpts{fromZK: true, partitions: 6})
	// a and b run in this process, c in a child one. The group lives on b, moves to c when b
	// drains, and to a when c is killed.
	const a, b, c = dfNode, dfNode + 1, dfNode + 2
	var g string
	for i := 0; g == ""; i++ {
		name := fmt.Sprintf("sarama-multi-%d", i)
		first, _ := placement.Owner(name, []int32{a, b, c})
		next, _ := placement.Owner(name, []int32{a, c})
		if first == b && next == c {
			g = name
		}
	}
	child := startChildBridge(t, childSpec{ZKConnect: e.connect, NodeID: c, ZKSessionTimeout: 4 * time.Second, UpstreamFromZK: true})
	second := startBridge(t, e.connect, b, func(cfg *bridge.Config) {
		cfg.UpstreamFromZK, cfg.ProxyListen, cfg.MetadataMaxAge = true, "127.0.0.1:0", time.Second
	})
	seeds := []string{e.addr, second.Addr().String(), child.addr}
	addrs := slices.Clone(seeds)
	for _, r := range []*running{e.b, second} {
		for _, p := range r.ProxyAddrs() {
			addrs = append(addrs, p.String())
		}
	}
	sameMetadataEverywhere(t, addrs, map[int32]string{a: e.addr, b: seeds[1], c: child.addr})

	views := &saramaViews{held: map[string][]int32{}, sessions: map[string]int{}}
	seen := newDfSeen()
	members := []string{"sarama-static-0", "sarama-static-1"}
	for _, m := range members {
		startSaramaMember(t, seeds, g, m, views, seen)
	}
	producer, all := startDfProducer(t, seeds, e.parts)

	stable := stableOn(t, second, g, 2)
	zktest.Eventually(t, 30*time.Second, "both members hold their partitions", func() (bool, string) {
		s, n := views.counts()
		return len(s) == 2 && n == int(e.parts), fmt.Sprintf("sessions %v, %d partitions held", s, n)
	})
	before := dfProduce(t, producer, "before", 60, all)
	seen.waitAll(t, before, true)
	e.waitZKOffsets(t, g, e.endOffsets(t))
	sessions, _ := views.counts()
	t.Logf("group %s Stable on %d in generation %d; sessions %v", g, b, stable.Generation, sessions)

	sampler := sampleOwners(t, e.zk, dfTopic, g)
	// SIGTERM of the owner: a clean handover to c, which sarama's static members ride out in
	// their generation (no new session on either).
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 20*time.Second, fmt.Sprintf("group %s taken over by %d", g, c), func() (bool, string) {
		ep := epochOf(t.Context(), e.zk, g)
		return ep.NodeID == c && !ep.Released, fmt.Sprintf("epoch %+v", ep)
	})
	drained := dfProduce(t, producer, "drained", 60, all)
	seen.waitAll(t, slices.Concat(before, drained), true)
	e.waitZKOffsets(t, g, e.endOffsets(t))
	if gen := generationOf(t, e.zk, g); gen != int32(stable.Generation) {
		t.Errorf("after the drain the group is in generation %d, want %d (no rebalance)", gen, stable.Generation)
	}
	if now, _ := views.counts(); !maps.Equal(now, sessions) {
		t.Errorf("sarama's sessions went from %v to %v across a clean handover, want none new (no rebalance)", sessions, now)
	}

	// SIGKILL of the new owner: a takes the group once c's session expires. The members may
	// rejoin (their heartbeats failed against a dead bridge); every record is still consumed,
	// those committed before the kill exactly once.
	killed := time.Now()
	child.kill()
	after := dfProduce(t, producer, "after", 60, all)
	seen.waitAll(t, slices.Concat(before, drained, after), false)
	seen.onceEach(t, slices.Concat(before, drained))
	e.waitZKOffsets(t, g, e.endOffsets(t))
	t.Logf("every record consumed and committed %v after the kill", time.Since(killed).Round(time.Millisecond))
	d := stableOn(t, e.b, g, 2)
	final, _ := views.counts()
	t.Logf("after the kill: generation %d (was %d), sessions %v", d.Generation, stable.Generation, final)

	sampler.check(t)
	views.mu.Lock()
	defer views.mu.Unlock()
	for _, o := range views.overlaps {
		t.Error(o)
	}
	e.checkGroupsStayedOffKfake(t)
}
