package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// demoCommand loads a small 0.8-era layout (brokers, topics, one group with two ZooKeeper
// consumers, their owners and offsets) into ZooKeeper and describes it. With --with-kafka it
// then shows the data path (records produced and fetched through the bridge): see demoWithKafka.
func demoCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "load a small Kafka 0.8 example layout into ZooKeeper and describe it",
		Description: "Writes 3 brokers, topics orders (6 partitions) and payments (4 partitions), and group\n" +
			"billing with two 0.8 consumers, their owners and offsets, under --zk (use a chroot such as\n" +
			"127.0.0.1:2181/zkbridge-demo to keep it apart). An existing demo layout is replaced, and\n" +
			"group " + demoGroup + " of an earlier --with-kafka run is removed.\n" +
			"With --with-kafka it then starts an in-process stand-in Kafka cluster (franz-go's kfake,\n" +
			"3 brokers) and a bridge in front of it, produces records through the bridge, consumes them\n" +
			"in group " + demoGroup + " coordinated by the bridge, and shows that group as ZooKeeper holds it.\n" +
			"No real Kafka is needed.",
		Flags: append(zkFlags(), outputFlag(),
			&cli.BoolFlag{Name: "with-kafka",
				Usage: "also run an in-process stand-in Kafka cluster behind a bridge and show records produced and consumed through it, with the group's offsets in ZooKeeper"},
			&cli.BoolFlag{Name: "migrate", Value: true,
				Usage: "with --with-kafka, then migrate group " + demoMigrateGroup + " from a 0.8 and a legacy consumer to a Kafka consumer (legacy → mixed → kafka) and roll it back, printing owners and offsets after each step"},
		),
		Action: func(c *cli.Context) error {
			p, err := newPrinter(c.String("output"))
			if err != nil {
				return err
			}
			s, err := openStore(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			layout := zkstate.ExampleLayout()
			if err := zkstate.LoadLayout(c.Context, s, layout); err != nil {
				return fmt.Errorf("load example layout: %w", err)
			}
			// The --with-kafka group is part of the demo layout too: each run's stand-in
			// cluster starts empty, and offsets committed by an earlier run would point past
			// its records.
			if err := s.DeleteRecursive(c.Context, zkstate.GroupPath(demoGroup)); err != nil && !errors.Is(err, zkstate.ErrNoNode) {
				return fmt.Errorf("reset group %s: %w", demoGroup, err)
			}
			e.log.Info().Str("zk", c.String("zk")).Msg("example 0.8 layout loaded")
			rows, err := listGroups(c, s)
			if err != nil {
				return err
			}
			if err := p.groups(e.stdout, rows); err != nil {
				return err
			}
			for _, r := range rows {
				snap, err := s.Snapshot(c.Context, r.Group)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout)
				if err := p.group(e.stdout, buildGroupView(snap, bridgeSessions(c, s))); err != nil {
					return err
				}
			}
			if c.Bool("with-kafka") {
				return demoWithKafka(c.Context, c, e, s, p)
			}
			return nil
		},
	}
}

// The --with-kafka part of the demo.
const (
	demoGroup   = "demo-kafka"
	demoTopic   = "orders"
	demoRecords = 12
)

// demoWithKafka runs a kfake cluster as the upstream of an in-process bridge, produces
// demoRecords records to demoTopic through the bridge, consumes them with a kgo group that the
// bridge coordinates and commits them, then prints the group as ZooKeeper holds it: its owners
// and the committed offsets in /consumers/<group>. Progress goes to the log; the table output
// also says what was consumed.
func demoWithKafka(ctx context.Context, c *cli.Context, e *env, s *zkstate.Store, p printer) error {
	table := c.String("output") != "json"
	kf, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.ClusterID("zkbridge-demo"),
		kfake.SeedTopics(6, "orders"), kfake.SeedTopics(4, "payments"))
	if err != nil {
		return fmt.Errorf("demo: starting the stand-in Kafka cluster: %w", err)
	}
	defer kf.Close()

	zt, err := zkTLS(c) // app.go
	if err != nil {
		return err
	}
	b, err := bridge.New(bridge.Config{
		ZKConnect:        c.String("zk"),
		ZKDigest:         c.String("zk-digest"),
		ZKTLS:            zt,
		ZKConnectTimeout: c.Duration("zk-timeout"),
		KafkaListen:      "127.0.0.1:0",
		AdminListen:      "127.0.0.1:0",
		LegacyListen:     "127.0.0.1:0",
		Group:            demoGroupConfig(),
		Upstream:         kf.ListenAddrs(),
		ProxyListen:      "127.0.0.1:0",
		Logger:           e.log,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	stopBridge := func() error {
		stop()
		if err := <-done; err != nil {
			return fmt.Errorf("demo: bridge: %w", err)
		}
		return nil
	}
	select {
	case <-b.Ready():
	case err := <-done:
		stop()
		return fmt.Errorf("demo: bridge: %w", err)
	case <-ctx.Done():
		_ = stopBridge()
		return ctx.Err()
	}
	addr := b.Addr().String()
	e.log.Info().Str("bridge", addr).Strs("kfake", kf.ListenAddrs()).Msg("bridge relaying to the stand-in cluster")

	consumed, snap, err := demoProduceConsume(ctx, addr, s)
	if err == nil && table {
		fmt.Fprintf(e.stdout, "\n%d records produced through the bridge at %s and consumed in group %s:\n", len(consumed), addr, demoGroup)
		for _, line := range consumed {
			fmt.Fprintln(e.stdout, "  "+line)
		}
		fmt.Fprintln(e.stdout)
	}
	if err == nil {
		err = p.group(e.stdout, buildGroupView(snap, bridgeSessions(c, s)))
	}
	if err == nil && c.Bool("migrate") {
		err = demoMigrate(ctx, &demoStory{
			s: s, zk: c.String("zk"), bridge: b, out: e.stdout, log: e.log, table: table, produce: addr,
			show: func(snap *zkstate.GroupSnapshot) error {
				return p.group(e.stdout, buildGroupView(snap, bridgeSessions(c, s)))
			},
		})
	}
	return errors.Join(err, stopBridge())
}

// demoGroupConfig is Kafka's group defaults with a short initial rebalance delay, so that the
// demo's groups form in a fraction of a second.
func demoGroupConfig() group.Config {
	cfg := group.DefaultConfig()
	cfg.InitialRebalanceDelay = 200 * time.Millisecond
	return cfg
}

// demoProduceConsume produces the demo records through the bridge at addr, consumes them in
// demoGroup and commits them, and returns what was consumed, one line per record, and the
// group as ZooKeeper holds it, read while the consumer is still in the group (after the bridge
// mirrored its ownership), so that it shows owners as well as offsets.
func demoProduceConsume(ctx context.Context, addr string, s *zkstate.Store) ([]string, *zkstate.GroupSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("zkbridge-demo-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, nil, fmt.Errorf("demo: producer: %w", err)
	}
	defer prod.Close()
	recs := make([]*kgo.Record, demoRecords)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: demoTopic, Partition: int32(i % 6), Value: fmt.Appendf(nil, "order-%d", i)}
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, nil, fmt.Errorf("demo: producing through the bridge: %w", err)
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("zkbridge-demo-consumer"),
		kgo.ConsumerGroup(demoGroup), kgo.ConsumeTopics(demoTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("demo: consumer: %w", err)
	}
	defer cons.Close() // leaves the group: the bridge removes its owners, the offsets stay
	var out []string
	for len(out) < demoRecords {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("demo: consumed %d of %d records: %w", len(out), demoRecords, err)
		}
		var batch []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			batch = append(batch, r)
			out = append(out, fmt.Sprintf("%s/%d@%d  %s", r.Topic, r.Partition, r.Offset, r.Value))
		})
		if len(batch) > 0 {
			if err := cons.CommitRecords(ctx, batch...); err != nil {
				return nil, nil, fmt.Errorf("demo: committing offsets: %w", err)
			}
		}
	}
	slices.Sort(out)
	deadline := time.Now().Add(5 * time.Second)
	// The ownership mirror follows the group's Stable state asynchronously: wait for it, a
	// little, so that the snapshot shows who owns what.
	for {
		snap, err := s.Snapshot(ctx, demoGroup)
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("demo: reading group %s from ZooKeeper: %w", demoGroup, err)
		case len(snap.Owners) == 6 || time.Until(deadline) < 0:
			return out, snap, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}
