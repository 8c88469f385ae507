package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/legacy"
)

// legacyConsumerCommand runs one legacy consumer (seed 001's consumer side, the legacy.Client
// library) from the shell: to try a bridge's --legacy-listen, to watch a group's assignments
// move, or as a stand-in member during a migration rehearsal. It consumes nothing: on every
// StartRequest it prints its assignment, and while started it "consumes" by committing
// offset + --commit-step for each of its partitions once per ping interval, so the offsets the
// coordinator writes to /consumers/<group>/offsets move as a real consumer's would.
func legacyConsumerCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "legacy-consumer",
		Usage: "run a legacy (seed 001 protocol) consumer that prints its assignments and pretends to consume",
		Description: "Consults one of --brokers (bridges' legacy listeners), connects to the coordinator and\n" +
			"registers, then answers Ping, Stop and Start until interrupted, re-discovering the\n" +
			"coordinator when the connection is lost. Every assignment is printed as\n" +
			"`start <topic>-<partition>@<offset> ...` (smallest/largest when nothing is committed) and\n" +
			"every StopRequest as `stop`.\n\n" +
			"Example: zkbridge legacy-consumer --brokers 127.0.0.1:9190 --group billing --topics orders:2,payments:1 --auto-offset-reset smallest",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "brokers", Required: true, EnvVars: []string{"ZKBRIDGE_LEGACY_BROKERS"},
				Usage: "legacy listeners of the bridges, host:port[,host:port...] (seed 001's initBrokers)"},
			&cli.StringFlag{Name: "group", Required: true, Usage: "consumer group"},
			&cli.StringFlag{Name: "consumer-id",
				Usage: "consumer id in the group (default: made up as Kafka 0.8 does, <group>_<host>-<ms>-<8 hex>)"},
			&cli.StringFlag{Name: "topics", Required: true,
				Usage: "subscription, topic[:threads][,topic[:threads]...]; threads default to 1"},
			// On by default, as Kafka 0.8's auto.commit.enable. Written --auto-commit=false to
			// turn off: a bare boolean flag followed by another flag is misread by interspersed
			// (app.go), which takes every flag but --help to have a value.
			&cli.BoolFlag{Name: "auto-commit", Value: true,
				Usage: "report offsets in every PingResponse, for the coordinator to commit to ZooKeeper; --auto-commit=false to turn off"},
			&cli.StringFlag{Name: "auto-offset-reset", Value: legacy.ResetLargest,
				Usage: "where to start a partition with no committed offset: smallest or largest"},
			&cli.DurationFlag{Name: "ping-interval", Value: time.Second,
				Usage: "how often the coordinator pings, and how long it gives the consumer to answer (whole milliseconds)"},
			&cli.IntFlag{Name: "max-ping-retries", Value: legacy.DefaultMaxPingRetries,
				Usage: "consecutive missed pings after which the coordinator drops the consumer"},
			&cli.Int64Flag{Name: "commit-step", Value: 10,
				Usage: "offsets \"consumed\" per partition and ping interval while started; 0 commits nothing"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usagef("legacy-consumer takes no arguments (got %q)", c.Args().Slice())
			}
			sub, err := parseLegacyTopics(c.String("topics"))
			if err != nil {
				return err
			}
			retries := c.Int("max-ping-retries")
			if retries < 1 || retries > 1<<15-1 {
				return usagef("--max-ping-retries %d: want 1 to 32767", retries)
			}
			step := c.Int64("commit-step")
			if step < 0 {
				return usagef("--commit-step %d is negative", step)
			}
			h := &legacyConsumerHandler{out: e.stdout, step: step, every: c.Duration("ping-interval")}
			client, err := legacy.NewClient(legacy.ClientConfig{
				Brokers:         splitList(c.String("brokers")),
				GroupID:         c.String("group"),
				ConsumerID:      c.String("consumer-id"),
				Subscription:    sub,
				AutoCommit:      c.Bool("auto-commit"),
				AutoOffsetReset: c.String("auto-offset-reset"),
				PingInterval:    c.Duration("ping-interval"),
				MaxPingRetries:  int16(retries),
				Handler:         h,
				Logger:          e.log,
			})
			if err != nil {
				return usageError{err.Error()}
			}
			h.client = client
			fmt.Fprintf(e.stdout, "consumer %s of group %s: consulting %s\n", client.ConsumerID(), c.String("group"), c.String("brokers"))
			// Run calls OnStop before it returns, which ends the pretend consumption.
			// It returns early only for what retrying cannot fix: no known broker answered the
			// first consult, or a refusal such as GROUP_MODE_REFUSED, whose error says what to do.
			if err := client.Run(c.Context); err != nil {
				return fmt.Errorf("legacy-consumer: %w", err)
			}
			return nil
		},
	}
}

// parseLegacyTopics reads --topics: "orders:2,payments" → orders 2 threads, payments 1.
func parseLegacyTopics(s string) (map[string]int, error) {
	sub := map[string]int{}
	for _, item := range splitList(s) {
		topic, n, hasN := strings.Cut(item, ":")
		threads := 1
		if hasN {
			v, err := strconv.Atoi(n)
			if err != nil || v < 1 {
				return nil, usagef("--topics %q: threads of %q must be a positive number", s, topic)
			}
			threads = v
		}
		if topic == "" {
			return nil, usagef("--topics %q: empty topic name", s)
		}
		if _, dup := sub[topic]; dup {
			return nil, usagef("--topics %q: topic %q listed twice", s, topic)
		}
		sub[topic] = threads
	}
	if len(sub) == 0 {
		return nil, usagef("--topics is empty")
	}
	return sub, nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// legacyConsumerHandler prints what the coordinator says and pretends to consume. The Client
// calls OnStart and OnStop on its Run goroutine, one at a time (legacy.Handler).
type legacyConsumerHandler struct {
	out    io.Writer
	client *legacy.Client
	step   int64
	every  time.Duration

	stop chan struct{}
	wg   sync.WaitGroup
}

func (h *legacyConsumerHandler) OnStart(parts []legacy.PartitionOffset) error {
	names := make([]string, len(parts))
	next := make(map[legacy.TopicPartition]int64, len(parts))
	for i, p := range parts {
		at := strconv.FormatInt(p.Offset, 10)
		off := p.Offset
		switch p.Offset {
		case legacy.OffsetSmallest:
			at, off = legacy.ResetSmallest, 0
		case legacy.OffsetLargest:
			// Nothing to ask for the log end: the pretend log starts at 0 either way.
			at, off = legacy.ResetLargest, 0
		}
		tp := legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		names[i] = tp.String() + "@" + at
		next[tp] = off
	}
	fmt.Fprintf(h.out, "%s start %s\n", time.Now().Format(time.TimeOnly), strings.Join(names, " "))
	if h.step == 0 || len(parts) == 0 {
		return nil
	}
	h.stop = make(chan struct{})
	h.wg.Add(1)
	go h.consume(h.stop, next)
	return nil
}

// consume commits offset+step for every partition once per ping interval: the coordinator
// collects the offsets at its next ping.
func (h *legacyConsumerHandler) consume(stop chan struct{}, next map[legacy.TopicPartition]int64) {
	defer h.wg.Done()
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for tp := range next {
			next[tp] += h.step
			h.client.Commit(tp, next[tp])
		}
	}
}

func (h *legacyConsumerHandler) OnStop() {
	if h.stop != nil {
		close(h.stop)
		h.wg.Wait()
		h.stop = nil
	}
	fmt.Fprintf(h.out, "%s stop\n", time.Now().Format(time.TimeOnly))
}
