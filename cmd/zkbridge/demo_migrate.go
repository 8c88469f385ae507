package main

// The migration story of `zkbridge demo --with-kafka`: one group goes from
// ZooKeeper-era consumers to a Kafka consumer and back, on the demo's bridge and stand-in
// cluster, without losing an offset. Each step prints the group as ZooKeeper holds it: who owns
// which partition, and the committed offsets.
//
//	1 legacy mode: a 0.8 consumer (zk member, the in-project double of Kafka 0.8.2's
//	  ZookeeperConsumerConnector) and a legacy consumer (seed-001 protocol) share the topic and
//	  commit what they consumed;
//	2 migrate to mixed: a Kafka consumer (franz-go, through the bridge) joins; the bridge assigns
//	  with the 0.8.2 algorithm over all three, and the Kafka consumer reads the records after the
//	  offsets the old consumers committed;
//	3 the old consumers stop; migrate to kafka: the Kafka consumer owns everything;
//	4 roll back to mixed, then to legacy (forced: the Kafka consumer is still there, and is
//	  rebalanced out and refused); the 0.8 consumer comes back and resumes at the Kafka
//	  consumer's commits.
//
// The 0.8 and legacy consumers of the demo do not fetch (kfake speaks only the modern protocol):
// they "consume" by committing, one record per partition, what they would have read.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
)

const demoMigrateGroup = "demo-migrate"

// demoStory is the state of the story: the ZooKeeper session, the bridge, where to print.
type demoStory struct {
	s      *zkstate.Store
	zk     string // connect string
	bridge *bridge.Bridge
	out    io.Writer
	show   func(snap *zkstate.GroupSnapshot) error
	log    zerolog.Logger
	table  bool
	// produce is the bridge's address for the producer of the story's records.
	produce string
}

func (d *demoStory) say(format string, args ...any) {
	if d.table {
		fmt.Fprintf(d.out, "\n"+format+"\n", args...)
	}
	d.log.Info().Msg(fmt.Sprintf(format, args...))
}

// demoMigrate runs the story (see the file comment).
func demoMigrate(ctx context.Context, d *demoStory) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	g := demoMigrateGroup
	if err := d.resetMigrateGroup(ctx); err != nil {
		return err
	}
	if err := d.produceRecords(ctx); err != nil {
		return err
	}

	// Step 1: legacy mode, a 0.8 consumer and a legacy consumer.
	d.say("== 1. group %s in legacy mode: a 0.8 consumer (zk) and a legacy consumer, each committing what it consumed", g)
	zk1, err := demoZKMember(ctx, d, "zk1")
	if err != nil {
		return err
	}
	defer zk1.close()
	leg, err := demoLegacyMember(ctx, d, "legacy1")
	if err != nil {
		return err
	}
	defer leg.close()
	if err := d.settle(ctx, 2); err != nil {
		return err
	}
	zk1.consumeOne()
	leg.consumeOne()
	if err := d.waitOffsets(ctx, 6, 1); err != nil {
		return err
	}
	if err := d.print(ctx); err != nil {
		return err
	}

	// Step 2: mixed, and a Kafka consumer joins.
	if err := d.transition(ctx, zkstate.ModeLegacy, zkstate.ModeMixed, false, ""); err != nil {
		return err
	}
	d.say("== 2. migrated to mixed: a Kafka consumer joins through the bridge; one 0.8.2 assignment over all three")
	k1, err := demoKafkaMember(ctx, d)
	if err != nil {
		return err
	}
	defer k1.close()
	if err := d.settle(ctx, 3); err != nil {
		return err
	}
	read := k1.consume(ctx)
	if err := d.print(ctx); err != nil {
		return err
	}
	d.say("the Kafka consumer read %s: it started after the offsets the old consumers committed", strings.Join(read, ", "))

	// Step 3: the old consumers go, kafka mode.
	zk1.close()
	leg.close()
	if err := d.settle(ctx, 1); err != nil {
		return err
	}
	if err := d.transition(ctx, zkstate.ModeMixed, zkstate.ModeKafka, false, ""); err != nil {
		return err
	}
	d.say("== 3. the old consumers stopped; migrated to kafka: the Kafka consumer owns every partition")
	read = k1.consume(ctx)
	d.say("the Kafka consumer read %s", strings.Join(read, ", "))
	if err := d.print(ctx); err != nil {
		return err
	}

	// Step 4: roll back.
	if err := d.transition(ctx, zkstate.ModeKafka, zkstate.ModeMixed, false, ""); err != nil {
		return err
	}
	if err := d.transition(ctx, zkstate.ModeMixed, zkstate.ModeLegacy, true, "forced by the demo: the Kafka consumer is rebalanced out and refused"); err != nil {
		return err
	}
	k1.close()
	d.say("== 4. rolled back to mixed, then to legacy (forced past the Kafka consumer, which is refused now); the 0.8 consumer comes back")
	zk2, err := demoZKMember(ctx, d, "zk2")
	if err != nil {
		return err
	}
	defer zk2.close()
	if err := d.settle(ctx, 1); err != nil {
		return err
	}
	starts := zk2.starts()
	if err := d.print(ctx); err != nil {
		return err
	}
	d.say("the 0.8 consumer resumed at %s: the Kafka consumer's commits, nothing lost", starts)
	return nil
}

// resetMigrateGroup starts the demo's migrating group afresh in legacy mode: no registrations,
// no hosted members, no bridge records left from an earlier run.
func (d *demoStory) resetMigrateGroup(ctx context.Context) error {
	g := demoMigrateGroup
	for _, p := range []string{zkstate.GroupPath(g), zkstate.HostedPath(bridge.DefaultRoot, g)} {
		if err := d.s.DeleteRecursive(ctx, p); err != nil && !errors.Is(err, zkstate.ErrNoNode) {
			return fmt.Errorf("demo: reset group %s: %w", g, err)
		}
	}
	if err := d.s.DeleteRecursive(ctx, zkstate.BridgeGroupsPath(bridge.DefaultRoot)+"/"+g); err != nil && !errors.Is(err, zkstate.ErrNoNode) {
		return fmt.Errorf("demo: reset group %s: %w", g, err)
	}
	if _, _, err := zkstate.InitMode(ctx, d.s, bridge.DefaultRoot, g, zkstate.ModeLegacy, "zkbridge demo", "the demo's group starts with ZooKeeper-era consumers"); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// produceRecords writes the records the demo's consumers read, through the bridge's proxy: one
// batch each, so that a consumer can take them one at a time.
func (d *demoStory) produceRecords(ctx context.Context) error {
	prod, err := kgo.NewClient(kgo.SeedBrokers(d.produce), kgo.ClientID("zkbridge-demo-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return fmt.Errorf("demo: producer: %w", err)
	}
	for i := range 24 {
		r := &kgo.Record{Topic: demoTopic, Partition: int32(i % 6), Value: fmt.Appendf(nil, "payment-%d", i)}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			prod.Close()
			return fmt.Errorf("demo: producing through the bridge: %w", err)
		}
	}
	prod.Close()
	return nil
}

// transition takes the group from one mode to the next with migrate.Apply, as `zkbridge migrate
// apply` and `zkbridge rollback` do: the step's preconditions are checked against the group's
// members, and the step is one compare-and-set. force is a forced rollback to legacy past Kafka
// members (why says so in the recorded transition).
func (d *demoStory) transition(ctx context.Context, from, to zkstate.Mode, force bool, why string) error {
	res, err := migrate.Apply(ctx, d.s, bridge.DefaultRoot, []string{demoMigrateGroup}, migrate.ApplyOptions{
		Request: migrate.Request{Target: to, Rollback: modeIndex(to) < modeIndex(from), Force: force},
		Who:     "zkbridge demo", Reason: why, Wait: 10 * time.Second, Poll: 100 * time.Millisecond,
	})
	switch {
	case err != nil:
		return fmt.Errorf("demo: %s → %s: %w", from, to, err)
	case len(res) != 1 || res[0].Mode != to:
		return fmt.Errorf("demo: %s → %s: %s %s", from, to, res[0].Status, res[0].Reason)
	}
	time.Sleep(300 * time.Millisecond) // every bridge follows within a watch round trip
	return nil
}

func modeIndex(m zkstate.Mode) int { return slices.Index(zkstate.Modes, m) }

// settle waits until the group has n registrations and every partition of the topic is owned,
// and stays so for a moment.
func (d *demoStory) settle(ctx context.Context, n int) error {
	var since time.Time
	for {
		snap, err := d.s.Snapshot(ctx, demoMigrateGroup)
		if errors.Is(err, zkstate.ErrNoNode) {
			snap, err = &zkstate.GroupSnapshot{}, nil // nobody registered yet
		}
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		ok := len(snap.Consumers) == n && len(snap.Owners) == len(snap.Partitions[demoTopic])
		switch {
		case ok && since.IsZero():
			since = time.Now()
		case ok && time.Since(since) > 700*time.Millisecond:
			return nil
		case !ok:
			since = time.Time{}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: group %s did not settle with %d members (last: %d registrations, %d owners): %w",
				demoMigrateGroup, n, len(snap.Consumers), len(snap.Owners), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitOffsets waits until n partitions have an offset of at least min in ZooKeeper.
func (d *demoStory) waitOffsets(ctx context.Context, n int, least int64) error {
	for {
		snap, err := d.s.Snapshot(ctx, demoMigrateGroup)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		got := 0
		for _, o := range snap.Offsets {
			if o >= least {
				got++
			}
		}
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: offsets not committed (%d of %d partitions): %w", got, n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (d *demoStory) print(ctx context.Context) error {
	snap, err := d.s.Snapshot(ctx, demoMigrateGroup)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return d.show(snap)
}

// demoConsumer is what the story needs of its old consumers: their partitions with the position
// they consume from, and a way to consume one more record of each.
type demoConsumer struct {
	mu     sync.Mutex
	owned  map[zkstate.TopicPartition]int64
	commit func(tp zkstate.TopicPartition, next int64)
	stop   func()
	once   sync.Once
}

func (c *demoConsumer) assign(parts map[zkstate.TopicPartition]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.owned = maps.Clone(parts)
}

func (c *demoConsumer) consumeOne() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for tp, off := range c.owned {
		if off < 0 {
			off = 0 // nothing committed yet: the demo reads from the start
		}
		c.owned[tp] = off + 1
		c.commit(tp, off+1)
	}
}

func (c *demoConsumer) starts() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for tp, off := range c.owned {
		out = append(out, fmt.Sprintf("%s/%d@%d", tp.Topic, tp.Partition, off))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func (c *demoConsumer) close() { c.once.Do(c.stop) }

func demoZKMember(ctx context.Context, d *demoStory, name string) (*demoConsumer, error) {
	dc := &demoConsumer{}
	cfg := zkconsumer.Config{
		Connect: d.zk, GroupID: demoMigrateGroup, ConsumerID: name, Subscription: map[string]int{demoTopic: 1},
		RebalanceBackoff: 200 * time.Millisecond, RebalanceMaxRetries: 50, AutoCommitInterval: 200 * time.Millisecond,
		AutoOffsetReset: zkconsumer.OffsetResetSmallest,
		Logger:          d.log.With().Str("zk_member", name).Logger(),
		Handler: zkconsumer.Handler{
			OnAssign: dc.assign,
			OnRevoke: func() { dc.assign(nil) },
		},
	}
	c, err := zkconsumer.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("demo: 0.8 consumer %s: %w", name, err)
	}
	dc.commit = func(tp zkstate.TopicPartition, next int64) { c.Commit(tp, next) }
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	dc.stop = func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(cctx) // commits, releases its owners, deregisters
		stop()
		<-done
	}
	return dc, nil
}

func demoLegacyMember(ctx context.Context, d *demoStory, name string) (*demoConsumer, error) {
	dc := &demoConsumer{}
	cl, err := legacy.NewClient(legacy.ClientConfig{
		Brokers: []string{d.bridge.LegacyAddr().String()}, GroupID: demoMigrateGroup, ConsumerID: name,
		Subscription: map[string]int{demoTopic: 1}, AutoCommit: true, AutoOffsetReset: legacy.ResetSmallest,
		PingInterval: 200 * time.Millisecond,
		Logger:       d.log.With().Str("legacy_member", name).Logger(),
		Handler: legacy.HandlerFuncs{
			Stop: func() { dc.assign(nil) },
			Start: func(parts []legacy.PartitionOffset) error {
				m := map[zkstate.TopicPartition]int64{}
				for _, p := range parts {
					m[zkstate.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = p.Offset
				}
				dc.assign(m)
				return nil
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("demo: legacy consumer %s: %w", name, err)
	}
	dc.commit = func(tp zkstate.TopicPartition, next int64) {
		cl.Commit(legacy.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}, next)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.Run(runCtx) }()
	dc.stop = func() {
		// The protocol has no leave: a ping reports the last commits before we go.
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := cl.Reported(rctx); err != nil {
			d.log.Warn().Err(err).Msg("the 0.8 consumer leaves with commits not reported")
		}
		cancel()
		stop()
		<-done
	}
	return dc, nil
}

// demoKafka is the story's Kafka consumer: franz-go in a group coordinated by the bridge.
type demoKafka struct {
	cl       *kgo.Client
	mu       sync.Mutex
	assigned map[int32]bool
	once     sync.Once
}

func demoKafkaMember(ctx context.Context, d *demoStory) (*demoKafka, error) {
	k := &demoKafka{assigned: map[int32]bool{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(d.bridge.Addr().String()), kgo.ClientID("zkbridge-demo-migrate"),
		kgo.ConsumerGroup(demoMigrateGroup), kgo.ConsumeTopics(demoTopic),
		kgo.Balancers(kgo.RangeBalancer()), // mixed groups need an eager assignor
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.HeartbeatInterval(300*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			k.mu.Lock()
			defer k.mu.Unlock()
			for _, p := range m[demoTopic] {
				k.assigned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			_ = cl.CommitUncommittedOffsets(ctx)
			k.mu.Lock()
			defer k.mu.Unlock()
			for _, p := range m[demoTopic] {
				delete(k.assigned, p)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("demo: Kafka consumer: %w", err)
	}
	k.cl = cl
	return k, nil
}

// consume reads one record from each partition the consumer owns and commits them, and returns
// what it read as topic/partition@offset.
func (k *demoKafka) consume(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := map[int32]int64{} // partition → the offset consumed in this step
	var out []string
	for ctx.Err() == nil {
		fs := k.cl.PollRecords(ctx, 100)
		var batch []*kgo.Record
		rewind := map[int32]kgo.EpochOffset{}
		fs.EachRecord(func(r *kgo.Record) {
			if at, ok := got[r.Partition]; ok {
				// Fetched along but not consumed in this step: read it again next time.
				rewind[r.Partition] = kgo.EpochOffset{Epoch: -1, Offset: at + 1}
				return
			}
			got[r.Partition] = r.Offset
			batch = append(batch, r)
			out = append(out, fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))
		})
		if len(batch) > 0 {
			_ = k.cl.CommitRecords(ctx, batch...)
		}
		if len(rewind) > 0 {
			k.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{demoTopic: rewind})
		}
		k.mu.Lock()
		all := len(k.assigned) > 0
		for p := range k.assigned {
			_, ok := got[p]
			all = all && ok
		}
		k.mu.Unlock()
		if all {
			break
		}
	}
	slices.Sort(out)
	return out
}

func (k *demoKafka) close() { k.once.Do(k.cl.Close) }
