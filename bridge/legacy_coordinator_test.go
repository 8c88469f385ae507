package bridge

// Integration tests of the legacy coordinator: a real ZooKeeper (zkstate/zktest, one chroot per
// test), a real legacy.Server on loopback, and real legacy.Client instances — or, where a test
// needs a consumer that misbehaves, a raw socket speaking the codec. Ping intervals are 100-150
// ms so the whole file runs in well under a minute.
//
// The package's TestMain (zktest.Main) is in helpers_test.go.
//
// Every helper of this file starts with "legacy" (or "lt"): package bridge's tests are shared
// with the Kafka-protocol shell's.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

const (
	legacyTestInterval = 100 * time.Millisecond
	legacyTestRetries  = 3
	legacyWait         = 15 * time.Second // bound on "soon"; a passing run never waits it out
)

// legacyTestLog writes into t.Log until the test ends, then drops lines, so that a late line
// from a goroutine cannot fail the run.
type legacyTestLog struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (l *legacyTestLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func legacyTestLogger(t testing.TB) zerolog.Logger {
	l := &legacyTestLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return zerolog.New(zerolog.ConsoleWriter{Out: l, NoColor: true, TimeFormat: "15:04:05.000"}).
		Level(zerolog.InfoLevel).With().Timestamp().Logger()
}

// legacyCheckLeaks fails the test if goroutines of the legacy coordinator, server, sessions or
// clients outlive it. Call it first in a test: its cleanup then runs after every other.
//
// Only the test's own goroutines are looked at, so that tests running in parallel do not count
// each other's: a goroutine inherits the profiler labels of the goroutine that starts it, so
// everything the test starts, directly or through what it started, carries the label set here.
func legacyCheckLeaks(t testing.TB) {
	t.Helper()
	label := strconv.Quote("legacy_leak_check") + ":" + strconv.Quote(t.Name())
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("legacy_leak_check", t.Name())))
	t.Cleanup(func() {
		zktest.Eventually(t, 5*time.Second, "no goroutine of the test's coordinator, server, sessions or clients left", func() (bool, string) {
			var buf strings.Builder
			if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
				t.Fatal(err)
			}
			var leaked []string
			for _, g := range strings.Split(buf.String(), "\n\n") {
				if !strings.Contains(g, label) {
					continue
				}
				if strings.Contains(g, "zkbridge/bridge.(*legacyGroup)") || strings.Contains(g, "zkbridge/bridge.(*LegacyCoordinator)") ||
					strings.Contains(g, "zkbridge/legacy.") || strings.Contains(g, "zkbridge/zkstate.") {
					leaked = append(leaked, g)
				}
			}
			return len(leaked) == 0, fmt.Sprintf("%d goroutine stacks leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		})
	})
}

func legacyEventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	zktest.Eventually(t, legacyWait, what, cond)
}

// legacyConnect is zktest.Connect with a random suffix: with ZKBRIDGE_TEST_ZK the server outlives
// the test binary, and zktest's chroot names repeat from one run to the next.
func legacyConnect(t testing.TB) string {
	return fmt.Sprintf("%s-%08x", zktest.Connect(t), rand.Uint32())
}

func legacyOpenStore(t testing.TB, connect string) *zkstate.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := zkstate.Open(ctx, zkstate.Config{Connect: connect, Logger: legacyTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// legacyProxiedStore opens a store of a fresh chroot (legacyConnect) whose way to ZooKeeper goes
// through a test proxy, with session timeout sessionTimeout, closed at the test's cleanup; it
// returns the proxy (to cut or mute that way) and the chroot's direct connect string.
func legacyProxiedStore(t testing.TB, sessionTimeout time.Duration) (*zkstate.Store, *zktest.Proxy, string) {
	t.Helper()
	connect := legacyConnect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := zkstate.Open(ctx, zkstate.Config{Connect: proxy.Addr() + connect[i:], SessionTimeout: sessionTimeout, Logger: legacyTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, proxy, connect
}

// legacySetTopic writes /brokers/topics/<topic> with n partitions (creating or rewriting it), as
// Kafka's admin tools do when a topic is created or partitions are added.
func legacySetTopic(t testing.TB, s *zkstate.Store, topic string, n int) {
	t.Helper()
	a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
	for p := range n {
		a.Partitions[int32(p)] = []int32{1}
	}
	ctx := context.Background()
	err := s.Create(ctx, zkstate.TopicPath(topic), a.Encode(), zkstate.CreateOptions{Parents: true})
	if errors.Is(err, zkstate.ErrNodeExists) {
		_, err = s.Set(ctx, zkstate.TopicPath(topic), a.Encode(), -1)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// legacyEnv is one coordinator with its legacy.Server on a loopback port.
type legacyEnv struct {
	store *zkstate.Store
	coord *LegacyCoordinator
	addr  string
	stop  func() // stops server and coordinator, waits for both; idempotent
}

// legacyStart runs a coordinator and a server on store, listening on addr ("" for any port).
func legacyStart(t testing.TB, store *zkstate.Store, addr string, mod func(*LegacyConfig)) *legacyEnv {
	t.Helper()
	return legacyStartIn(t, store, addr, mod, nil)
}

// legacyStartIn is legacyStart for a coordinator inside a bridge: claimers is the bridge's
// registry of claimers (claimer.go), shared with its Kafka members.
func legacyStartIn(t testing.TB, store *zkstate.Store, addr string, mod func(*LegacyConfig), claimers *claimers) *legacyEnv {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	zktest.Eventually(t, 5*time.Second, "listening on "+addr, func() (bool, string) { // the old listener's port may take a moment
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil, fmt.Sprint(err)
	})
	tcp := ln.Addr().(*net.TCPAddr)
	log := legacyTestLogger(t)
	cfg := LegacyConfig{
		Store:           store,
		Logger:          log,
		NodeID:          1,
		AdvertisedHost:  "127.0.0.1",
		AdvertisedPort:  int32(tcp.Port),
		RetryBackoff:    50 * time.Millisecond,
		RetryBackoffMax: 500 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	coord, err := NewLegacyCoordinator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	coord.claimers = claimers
	srv, err := legacy.NewServer(legacy.Config{Logger: cfg.Logger, Coordinator: coord})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := coord.Run(ctx); err != nil {
			t.Errorf("coordinator Run: %v", err)
		}
	}()
	legacyEventually(t, "coordinator running", func() (bool, string) {
		return coord.Consult(ctx).ErrorCode == legacy.CodeNone, ""
	})
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx, ln); err != nil {
			t.Errorf("server Serve: %v", err)
		}
	}()
	var once sync.Once
	env := &legacyEnv{store: store, coord: coord, addr: ln.Addr().String(), stop: func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}}
	t.Cleanup(env.stop)
	return env
}

// legacyTestConsumer is a real legacy.Client with a handler that records what it is told and,
// while started, "consumes": every tick (20 ms by default) it commits offset+step for each of its
// partitions.
type legacyTestConsumer struct {
	id     string
	sub    map[string]int
	client *legacy.Client
	step   int64
	tick   time.Duration // commit period
	opts   legacyConsumerOpts
	frozen atomic.Bool // every write is swallowed: the consumer stops answering
	paused atomic.Bool // no more commits

	mu       sync.Mutex
	starts   [][]legacy.PartitionOffset
	fetching bool
	offsets  map[legacy.TopicPartition]int64 // what it committed, per partition of its part
	stopC    chan struct{}                   // ends the committer of the current Start

	cancel context.CancelFunc
	done   chan struct{}
}

func (c *legacyTestConsumer) OnStart(parts []legacy.PartitionOffset) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.onStart != nil {
		c.opts.onStart(c.id, parts)
	}
	c.starts = append(c.starts, slices.Clone(parts))
	c.fetching = true
	c.offsets = map[legacy.TopicPartition]int64{}
	next := map[legacy.TopicPartition]int64{}
	for _, p := range parts {
		off := p.Offset
		if off < 0 {
			off = 0 // a pretend log starts at 0 for smallest and largest alike
		}
		next[legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = off
	}
	if c.step > 0 {
		stop := make(chan struct{})
		c.stopC = stop
		go c.commitLoop(stop, next)
	}
	return nil
}

func (c *legacyTestConsumer) commitLoop(stop chan struct{}, next map[legacy.TopicPartition]int64) {
	tick := time.NewTicker(c.tick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if c.paused.Load() {
			continue
		}
		c.mu.Lock()
		select {
		case <-stop: // OnStop ran while we waited for the lock: consume nothing more
			c.mu.Unlock()
			return
		default:
		}
		for tp := range next {
			next[tp] += c.step
			c.client.Commit(tp, next[tp])
			c.offsets[tp] = next[tp]
		}
		c.mu.Unlock()
	}
}

func (c *legacyTestConsumer) OnStop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opts.onStop != nil && c.fetching {
		c.opts.onStop(c.id)
	}
	c.fetching = false
	if c.stopC != nil {
		close(c.stopC)
		c.stopC = nil
	}
}

// lastStart returns the consumer's current assignment: its last Start's parts, and whether it
// is fetching them.
func (c *legacyTestConsumer) lastStart() ([]legacy.PartitionOffset, bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.starts) == 0 {
		return nil, false, 0
	}
	return c.starts[len(c.starts)-1], c.fetching, len(c.starts)
}

func (c *legacyTestConsumer) committed() map[legacy.TopicPartition]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.offsets)
}

// legacyFreezable swallows writes once frozen: the consumer reads requests but its answers never
// reach the coordinator, as if it hung with its socket open.
type legacyFreezable struct {
	net.Conn
	frozen *atomic.Bool
}

func (f *legacyFreezable) Write(b []byte) (int, error) {
	if f.frozen.Load() {
		return len(b), nil
	}
	return f.Conn.Write(b)
}

type legacyConsumerOpts struct {
	step       int64 // commit step; 0: no commits
	autoCommit bool
	reset      string
	interval   time.Duration
	tick       time.Duration // commit period, 20 ms by default
	quiet      bool          // log warnings only
	// onStart and onStop, when set, see every StartRequest and every StopRequest of a
	// fetching consumer, under the consumer's lock (legacy_mixed_test.go's tracker).
	onStart func(id string, parts []legacy.PartitionOffset)
	onStop  func(id string)
}

// legacyRunConsumer starts a legacy.Client for group with subscription sub (topic → threads).
func legacyRunConsumer(t testing.TB, addr, group, id string, sub map[string]int, o legacyConsumerOpts) *legacyTestConsumer {
	t.Helper()
	if o.interval == 0 {
		o.interval = legacyTestInterval
	}
	if o.tick == 0 {
		o.tick = 20 * time.Millisecond
	}
	log := legacyTestLogger(t)
	if o.quiet {
		log = log.Level(zerolog.WarnLevel)
	}
	c := &legacyTestConsumer{id: id, sub: sub, step: o.step, tick: o.tick, opts: o, done: make(chan struct{})}
	client, err := legacy.NewClient(legacy.ClientConfig{
		Brokers:         []string{addr},
		GroupID:         group,
		ConsumerID:      id,
		Subscription:    sub,
		AutoCommit:      o.autoCommit,
		AutoOffsetReset: o.reset,
		PingInterval:    o.interval,
		MaxPingRetries:  legacyTestRetries,
		Handler:         c,
		Logger:          log,
		Rand:            rand.New(rand.NewPCG(uint64(len(id)), 7)),
		DialTimeout:     500 * time.Millisecond,
		BackoffMin:      30 * time.Millisecond,
		BackoffMax:      300 * time.Millisecond,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &legacyFreezable{Conn: nc, frozen: &c.frozen}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.client = client
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		if err := client.Run(ctx); err != nil {
			t.Errorf("consumer %s: Run: %v", id, err)
		}
	}()
	t.Cleanup(c.stop)
	return c
}

// stop ends the consumer's Run and waits for it.
func (c *legacyTestConsumer) stop() {
	c.cancel()
	<-c.done
}

// legacyExpected is the 0.8.2 range assignment of consumers over partitions, computed with the
// assignor the zk consumers themselves run (legacy.Range).
func legacyExpected(consumers []*legacyTestConsumer, partitions map[string][]int32) legacy.Assignment {
	in := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: partitions}
	for _, c := range consumers {
		sub := legacy.Subscription{}
		for topic, n := range c.sub {
			sub[topic] = legacy.ThreadIDs(c.id, n)
		}
		in.Consumers[c.id] = sub
	}
	return legacy.Range(in)
}

func legacyOwnersInZK(t testing.TB, s *zkstate.Store, group string) legacy.Assignment {
	t.Helper()
	snap, err := s.Snapshot(context.Background(), group)
	if errors.Is(err, zkstate.ErrNoNode) {
		return legacy.Assignment{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := legacy.Assignment{}
	for tp, th := range snap.Owners {
		out[legacy.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = th
	}
	return out
}

func legacyOffsetsInZK(t testing.TB, s *zkstate.Store, group string) map[legacy.TopicPartition]int64 {
	t.Helper()
	snap, err := s.Snapshot(context.Background(), group)
	if errors.Is(err, zkstate.ErrNoNode) {
		return map[legacy.TopicPartition]int64{}
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[legacy.TopicPartition]int64{}
	for tp, off := range snap.Offsets {
		out[legacy.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = off
	}
	return out
}

// legacyWaitStable waits until the owners in ZooKeeper are exactly the 0.8.2 range assignment of
// consumers, and every consumer fetches exactly its share of it (complete and disjoint).
func legacyWaitStable(t testing.TB, s *zkstate.Store, group string, consumers []*legacyTestConsumer, partitions map[string][]int32) legacy.Assignment {
	t.Helper()
	want := legacyExpected(consumers, partitions)
	legacyEventually(t, "the group settles on the 0.8.2 range assignment", func() (bool, string) {
		if got := legacyOwnersInZK(t, s, group); !maps.Equal(got, want) {
			return false, fmt.Sprintf("owners in ZooKeeper %v, want %v", got, want)
		}
		seen := map[legacy.TopicPartition]string{}
		for _, c := range consumers {
			parts, fetching, _ := c.lastStart()
			if !fetching {
				return false, c.id + " is not fetching"
			}
			var mine []legacy.TopicPartition
			for tp, th := range want {
				if legacy.ConsumerOf(th) == c.id {
					mine = append(mine, tp)
				}
			}
			if len(parts) != len(mine) {
				return false, fmt.Sprintf("%s fetches %v, want %v", c.id, parts, mine)
			}
			for _, p := range parts {
				tp := legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}
				if other, dup := seen[tp]; dup {
					return false, fmt.Sprintf("%v fetched by %s and %s", tp, other, c.id)
				}
				seen[tp] = c.id
				if legacy.ConsumerOf(want[tp]) != c.id {
					return false, fmt.Sprintf("%s fetches %v, assigned to %s", c.id, tp, want[tp])
				}
			}
		}
		if len(seen) != len(want) {
			return false, fmt.Sprintf("%d partitions fetched, %d assigned", len(seen), len(want))
		}
		return true, ""
	})
	return want
}

// TestIntegration_LegacyRangeAssignment: issue 4 "5 clients × 2 threads over 3 topics: complete,
// disjoint assignment equal to the 0.8.2 range result, owners in ZooKeeper match" (seed 001
// "rebalance (group)" steps 2 and 4), and every member registered in /ids in the exact 0.8
// format.
func TestIntegration_LegacyRangeAssignment(t *testing.T) {
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	partitions := map[string][]int32{"alpha": {0, 1, 2, 3, 4, 5, 6}, "beta": {0, 1, 2}, "gamma": {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}
	for topic, ps := range partitions {
		legacySetTopic(t, store, topic, len(ps))
	}
	env := legacyStart(t, store, "", nil)
	var consumers []*legacyTestConsumer
	for i := range 5 {
		// Ids whose string order differs from their numeric one (c10 < c2), as 0.8.2 sorts
		// thread ids as strings.
		id := fmt.Sprintf("g1_host-%d", []int{2, 10, 7, 1, 30}[i])
		consumers = append(consumers, legacyRunConsumer(t, env.addr, "g1", id,
			map[string]int{"alpha": 2, "beta": 2, "gamma": 2}, legacyConsumerOpts{autoCommit: true, reset: legacy.ResetSmallest}))
	}
	want := legacyWaitStable(t, store, "g1", consumers, partitions)
	if len(want) != 7+3+12 {
		t.Fatalf("expected assignment covers %d partitions, want 22", len(want))
	}

	// Nothing committed yet: every Start offset is the smallest sentinel (docs §6).
	for _, c := range consumers {
		parts, _, _ := c.lastStart()
		for _, p := range parts {
			if p.Offset != legacy.OffsetSmallest {
				t.Errorf("%s starts %s-%d at %d, want %d (nothing committed, auto_offset_reset smallest)", c.id, p.Topic, p.Partition, p.Offset, legacy.OffsetSmallest)
			}
		}
	}
	// /consumers/<g>/ids/<id>: exactly what a 0.8.2 consumer writes.
	format := regexp.MustCompile(`^\{"version":1,"subscription":\{"alpha":2,"beta":2,"gamma":2\},"pattern":"static","timestamp":"[0-9]+"\}$`)
	for _, c := range consumers {
		data, st, err := store.Get(context.Background(), zkstate.IDPath("g1", c.id))
		if err != nil {
			t.Fatal(err)
		}
		if !format.Match(data) {
			t.Errorf("ids znode of %s is %s, not the 0.8 registration format", c.id, data)
		}
		if st.EphemeralOwner != store.SessionID() {
			t.Errorf("ids znode of %s is not an ephemeral of the coordinator's session", c.id)
		}
	}
	if got := env.coord.Stats().Members; got != 5 {
		t.Errorf("Stats().Members = %d, want 5", got)
	}
}

// TestIntegration_LegacyDeadMemberRemoved: issue 4 item 4 — a client that stops answering is
// removed within (max_ping_retries + 1) × ping interval (docs §8 "Liveness") and its partitions
// move to the others.
func TestIntegration_LegacyDeadMemberRemoved(t *testing.T) {
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	partitions := map[string][]int32{"t": {0, 1, 2, 3, 4, 5}}
	legacySetTopic(t, store, "t", 6)
	env := legacyStart(t, store, "", nil)
	const interval = 150 * time.Millisecond
	o := legacyConsumerOpts{autoCommit: true, interval: interval}
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, o)
	b := legacyRunConsumer(t, env.addr, "g", "b", map[string]int{"t": 1}, o)
	c := legacyRunConsumer(t, env.addr, "g", "c", map[string]int{"t": 1}, o)
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b, c}, partitions)

	frozeAt := time.Now()
	b.frozen.Store(true)
	limit := time.Duration(legacyTestRetries+1)*interval + 750*time.Millisecond // + slack for -race on 2 CPUs
	zktest.Eventually(t, limit-time.Since(frozeAt), "silent consumer b deregistered after it stopped answering", func() (bool, string) {
		ok, _, err := store.Exists(context.Background(), zkstate.IDPath("g", "b"))
		if err != nil {
			t.Fatal(err)
		}
		return !ok, fmt.Sprintf("still registered %v after it stopped answering", time.Since(frozeAt))
	})
	t.Logf("silent consumer removed %v after it stopped answering ((max_ping_retries+1) × interval = %v)",
		time.Since(frozeAt).Round(time.Millisecond), time.Duration(legacyTestRetries+1)*interval)
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, c}, partitions)
}

// TestIntegration_LegacyOffsetsResume: issue 4 — offsets from pings appear in ZooKeeper
// (/consumers/<g>/offsets, the 0.8 format), and a restarted client resumes from them: its Start
// offsets are the committed ones (seed step 4.2).
func TestIntegration_LegacyOffsetsResume(t *testing.T) {
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	partitions := map[string][]int32{"t": {0, 1, 2, 3}}
	legacySetTopic(t, store, "t", 4)
	env := legacyStart(t, store, "", nil)
	o := legacyConsumerOpts{autoCommit: true, step: 5}
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, o)
	b := legacyRunConsumer(t, env.addr, "g", "b", map[string]int{"t": 1}, o)
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b}, partitions)

	legacyEventually(t, "offsets from pings in ZooKeeper", func() (bool, string) {
		got := legacyOffsetsInZK(t, store, "g")
		for _, p := range partitions["t"] {
			if got[legacy.TopicPartition{Topic: "t", Partition: p}] <= 0 {
				return false, fmt.Sprintf("offsets %v", got)
			}
		}
		return true, ""
	})
	raw, _, err := store.Get(context.Background(), zkstate.OffsetPath("g", "t", 0))
	if err != nil || !regexp.MustCompile(`^[0-9]+$`).Match(raw) {
		t.Fatalf("offset znode holds %q (%v), want decimal text", raw, err)
	}

	// Stop consuming, let the last offsets reach ZooKeeper through the pings, and remember them.
	a.paused.Store(true)
	b.paused.Store(true)
	var committed map[legacy.TopicPartition]int64
	legacyEventually(t, "the consumers' last commits in ZooKeeper", func() (bool, string) {
		committed = legacyOffsetsInZK(t, store, "g")
		for _, c := range []*legacyTestConsumer{a, b} {
			for tp, off := range c.committed() {
				if committed[tp] != off {
					return false, fmt.Sprintf("%s committed %v, ZooKeeper has %v", c.id, c.committed(), committed)
				}
			}
		}
		return true, ""
	})

	// Restart a: a new client with the same consumer id.
	a.stop()
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{b}, partitions)
	a2 := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a2, b}, partitions)
	parts, _, _ := a2.lastStart()
	if len(parts) == 0 {
		t.Fatal("restarted consumer got no partitions")
	}
	for _, p := range parts {
		tp := legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		if p.Offset != committed[tp] {
			t.Errorf("restarted consumer starts %v at %d, want the committed %d", tp, p.Offset, committed[tp])
		}
	}
	if got := legacyOffsetsInZK(t, store, "g"); !maps.Equal(got, committed) {
		t.Errorf("offsets moved while nobody consumed: %v, were %v", got, committed)
	}
	if st := env.coord.Stats(); st.OffsetsCommitted == 0 {
		t.Errorf("Stats().OffsetsCommitted = 0")
	}
}

// TestIntegration_LegacyPartitionsAdded: issue 4 — adding partitions to a subscribed topic
// (Kafka rewrites /brokers/topics/<t>) triggers exactly one rebalance (seed step 3.2).
func TestIntegration_LegacyPartitionsAdded(t *testing.T) {
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 2)
	legacySetTopic(t, store, "other", 1)
	env := legacyStart(t, store, "", nil)
	o := legacyConsumerOpts{autoCommit: true}
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, o)
	b := legacyRunConsumer(t, env.addr, "g", "b", map[string]int{"t": 1}, o)
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b}, map[string][]int32{"t": {0, 1}})
	time.Sleep(3 * legacyTestInterval) // let any straggling check settle
	before := env.coord.Stats().Rebalances
	_, _, startsA := a.lastStart()
	_, _, startsB := b.lastStart()

	legacySetTopic(t, store, "other", 3) // not subscribed: no rebalance
	legacySetTopic(t, store, "t", 5)
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b}, map[string][]int32{"t": {0, 1, 2, 3, 4}})
	time.Sleep(5 * legacyTestInterval)
	if got := env.coord.Stats().Rebalances - before; got != 1 {
		t.Errorf("%d rebalances after the partition change, want exactly 1", got)
	}
	_, _, a2 := a.lastStart()
	_, _, b2 := b.lastStart()
	if a2-startsA != 1 || b2-startsB != 1 {
		t.Errorf("consumers were started %d and %d more times, want 1 each", a2-startsA, b2-startsB)
	}
}

// TestIntegration_LegacyCoordinatorRestart: issue 4 — restarting the bridge (a new
// LegacyCoordinator and legacy.Server on the same ZooKeeper chroot and address, a new ZooKeeper
// session): the clients re-discover it, re-register and resume at their committed offsets.
func TestIntegration_LegacyCoordinatorRestart(t *testing.T) {
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	partitions := map[string][]int32{"t": {0, 1, 2, 3, 4, 5}}
	legacySetTopic(t, store, "t", 6)
	env := legacyStart(t, store, "", nil)
	var consumers []*legacyTestConsumer
	for _, id := range []string{"a", "b", "c"} {
		consumers = append(consumers, legacyRunConsumer(t, env.addr, "g", id, map[string]int{"t": 1},
			legacyConsumerOpts{autoCommit: true, step: 3, reset: legacy.ResetLargest}))
	}
	legacyWaitStable(t, store, "g", consumers, partitions)
	var committed map[legacy.TopicPartition]int64
	legacyEventually(t, "offsets of every partition committed", func() (bool, string) {
		committed = legacyOffsetsInZK(t, store, "g")
		return len(committed) == 6, fmt.Sprintf("%v", committed)
	})
	for _, c := range consumers {
		c.paused.Store(true)
	}
	legacyEventually(t, "the consumers' last commits in ZooKeeper", func() (bool, string) {
		committed = legacyOffsetsInZK(t, store, "g")
		for _, c := range consumers {
			for tp, off := range c.committed() {
				if committed[tp] != off {
					return false, fmt.Sprintf("%s committed %v, ZooKeeper has %v", c.id, c.committed(), committed)
				}
			}
		}
		return true, ""
	})
	startsBefore := map[string]int{}
	for _, c := range consumers {
		_, _, startsBefore[c.id] = c.lastStart()
	}

	// The restart: coordinator and server stop, the process's ZooKeeper session ends.
	addr := env.addr
	env.stop()
	store.Close()
	store2 := legacyOpenStore(t, connect)
	t.Cleanup(func() { store2.Close() })
	if got := legacyOffsetsInZK(t, store2, "g"); !maps.Equal(got, committed) {
		t.Fatalf("offsets changed across the shutdown: %v, were %v", got, committed)
	}
	if got := legacyOwnersInZK(t, store2, "g"); len(got) != 0 {
		t.Fatalf("owners left after the coordinator stopped: %v", got)
	}
	env2 := legacyStart(t, store2, addr, nil)
	legacyWaitStable(t, store2, "g", consumers, partitions)
	for _, c := range consumers {
		parts, _, n := c.lastStart()
		if n <= startsBefore[c.id] {
			t.Errorf("%s was not started again after the restart", c.id)
		}
		for _, p := range parts {
			tp := legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}
			if p.Offset != committed[tp] {
				t.Errorf("%s resumes %v at %d, want the committed %d", c.id, tp, p.Offset, committed[tp])
			}
		}
	}
	if st := env2.coord.Stats(); st.Members != 3 {
		t.Errorf("new coordinator has %d members, want 3", st.Members)
	}
}

// legacyRaw is a consumer on a raw socket, speaking the codec directly: for the misbehaving
// consumers the real client cannot play.
type legacyRaw struct {
	conn net.Conn
}

func legacyDialRaw(t testing.TB, addr string, reg legacy.RegisterRequest) *legacyRaw {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r := &legacyRaw{conn: conn}
	r.write(t, &reg)
	return r
}

func (r *legacyRaw) write(t testing.TB, m legacy.Message) {
	if _, err := r.conn.Write(legacy.AppendFrame(nil, m)); err != nil {
		t.Errorf("raw consumer: write %v: %v", m.Type(), err)
	}
}

func (r *legacyRaw) read(timeout time.Duration) (legacy.Message, error) {
	_ = r.conn.SetReadDeadline(time.Now().Add(timeout))
	frame, err := legacy.ReadFrame(r.conn, legacy.DefaultMaxFrame)
	if err != nil {
		return nil, err
	}
	return legacy.Decode(frame)
}

// serve answers the coordinator's requests with answer (nil: no answer) until the connection
// closes; it returns the error that ended it.
func (r *legacyRaw) serve(t testing.TB, answer func(legacy.Message) legacy.Message) error {
	for {
		m, err := r.read(legacyWait)
		if err != nil {
			return err
		}
		if resp := answer(m); resp != nil {
			if _, err := r.conn.Write(legacy.AppendFrame(nil, resp)); err != nil {
				return err
			}
		}
	}
}

func legacyRawRegister(group, id string, autoCommit bool, topics ...string) legacy.RegisterRequest {
	reg := legacy.RegisterRequest{GroupID: group, ConsumerID: id, AutoCommit: autoCommit, AutoOffsetReset: legacy.ResetSmallest,
		PingIntervalMs: int32(legacyTestInterval.Milliseconds()), MaxPingRetries: legacyTestRetries}
	for _, tp := range topics {
		reg.Subscription = append(reg.Subscription, legacy.TopicThreads{Topic: tp, Threads: 1})
	}
	return reg
}

// TestIntegration_LegacyWrongMessageType: issue 4 — a client that answers with the wrong message
// type is dropped (docs §8 "Coordinator" 3) and the others carry on.
func TestIntegration_LegacyWrongMessageType(t *testing.T) {
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	partitions := map[string][]int32{"t": {0, 1, 2, 3}}
	legacySetTopic(t, store, "t", 4)
	env := legacyStart(t, store, "", nil)
	o := legacyConsumerOpts{autoCommit: true}
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, o)
	b := legacyRunConsumer(t, env.addr, "g", "b", map[string]int{"t": 1}, o)
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b}, partitions)
	_, _, startsA := a.lastStart()

	raw := legacyDialRaw(t, env.addr, legacyRawRegister("g", "confused", true, "t"))
	var got []legacy.Type
	err := raw.serve(t, func(m legacy.Message) legacy.Message {
		got = append(got, m.Type())
		switch m.(type) {
		case *legacy.StopRequest:
			return &legacy.StartResponse{} // the wrong type
		case *legacy.PingRequest:
			return &legacy.PingResponse{HasOffsets: true}
		}
		return nil
	})
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Fatalf("raw consumer's connection ended with %v, want the coordinator to close it", err)
	}
	if !slices.Contains(got, legacy.TypeStopRequest) {
		t.Fatalf("raw consumer got %v, want a StopRequest", got)
	}
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b}, partitions)
	if ok, _, _ := store.Exists(context.Background(), zkstate.IDPath("g", "confused")); ok {
		t.Error("the dropped consumer is still registered in /ids")
	}
	if _, _, n := a.lastStart(); n <= startsA {
		t.Error("the rebalance for the new member did not reach the others")
	}
}

// TestIntegration_LegacyPingOffsetsRefused: issue 4 item 4 — ping offsets are written only for
// partitions the member owns in the current assignment; the others are refused and counted, and
// no offset moves because of a member that does not own the partition.
func TestIntegration_LegacyPingOffsetsRefused(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 2)
	legacySetTopic(t, store, "u", 1)
	env := legacyStart(t, store, "", nil)
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true, step: 5})

	// The raw member subscribes to u only, and reports offsets for u-0 (its own), t-0 (a's,
	// lower than anything a commits: a stale report would move it backwards) and x-3 (nobody's).
	raw := legacyDialRaw(t, env.addr, legacyRawRegister("g", "r", true, "u"))
	var pings atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- raw.serve(t, func(m legacy.Message) legacy.Message {
			switch m.(type) {
			case *legacy.StopRequest:
				return &legacy.StopResponse{}
			case *legacy.StartRequest:
				return &legacy.StartResponse{}
			case *legacy.PingRequest:
				pings.Add(1)
				return &legacy.PingResponse{HasOffsets: true, Offsets: []legacy.PartitionOffset{
					{Topic: "u", Partition: 0, Offset: 5}, {Topic: "t", Partition: 0, Offset: 1}, {Topic: "x", Partition: 3, Offset: 9},
				}}
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		raw.conn.Close()
		<-done
	})
	wantOwners := legacy.Assignment{{Topic: "t", Partition: 0}: "a-0", {Topic: "t", Partition: 1}: "a-0", {Topic: "u", Partition: 0}: "r-0"}
	legacyEventually(t, "a owns t, r owns u", func() (bool, string) {
		got := legacyOwnersInZK(t, store, "g")
		parts, fetching, _ := a.lastStart()
		return maps.Equal(got, wantOwners) && fetching && len(parts) == 2, fmt.Sprintf("owners %v, a fetches %v", got, parts)
	})

	before := env.coord.Stats().OffsetsRefused
	p0 := pings.Load()
	legacyEventually(t, "raw member's offsets refused over several pings", func() (bool, string) {
		return pings.Load() >= p0+4, fmt.Sprintf("%d pings", pings.Load()-p0)
	})
	refused := env.coord.Stats().OffsetsRefused - before
	if refused < 2*3 { // at least 3 pings × 2 refused offsets
		t.Errorf("%d offsets refused over %d pings, want 2 per ping", refused, pings.Load()-p0)
	}
	legacyEventually(t, "the raw member's own offset committed, a's untouched", func() (bool, string) {
		got := legacyOffsetsInZK(t, store, "g")
		u0, t0 := got[legacy.TopicPartition{Topic: "u", Partition: 0}], got[legacy.TopicPartition{Topic: "t", Partition: 0}]
		_, x3 := got[legacy.TopicPartition{Topic: "x", Partition: 3}]
		return u0 == 5 && t0 >= 5 && t0%5 == 0 && !x3, fmt.Sprintf("offsets %v", got)
	})
}

// TestIntegration_LegacyConsumerIDInUse: a second registration of a consumer id whose first
// connection is alive is refused with CONSUMER_ID_IN_USE (docs §7) and closed.
func TestIntegration_LegacyConsumerIDInUse(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 1)
	env := legacyStart(t, store, "", nil)
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a}, map[string][]int32{"t": {0}})

	raw := legacyDialRaw(t, env.addr, legacyRawRegister("g", "a", true, "t"))
	m, err := raw.read(legacyWait)
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := m.(*legacy.RegisterResponse)
	if !ok || resp.ErrorCode != legacy.CodeConsumerIDInUse {
		t.Fatalf("got %#v, want RegisterResponse CONSUMER_ID_IN_USE", m)
	}
	if _, err := raw.read(legacyWait); !errors.Is(err, io.EOF) {
		t.Errorf("after the refusal: %v, want the connection closed", err)
	}
	// The first registration is untouched.
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a}, map[string][]int32{"t": {0}})
	if st := env.coord.Stats(); st.Members != 1 {
		t.Errorf("%d members, want 1", st.Members)
	}
}

// TestIntegration_LegacyForeignOwnerBlocksClaim: before claiming, the coordinator checks that no
// owner znode it must claim is held by another ZooKeeper session (a 0.8 consumer of the group,
// or a previous coordinator whose session lives on) and waits, with backoff, until it is
// released (seed step 4; DESIGN §4 "never trust that an owner znode is ours").
func TestIntegration_LegacyForeignOwnerBlocksClaim(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 2)
	// A 0.8 consumer's session owns t-1.
	other := legacyOpenStore(t, connect)
	t.Cleanup(func() { other.Close() })
	if err := other.Create(context.Background(), zkstate.OwnerPath("g", "t", 1), []byte("zk-consumer-0"),
		zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	env := legacyStart(t, store, "", nil)
	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})

	// The claim waits: a is stopped, pinged, and not started; the foreign owner is untouched.
	legacyClaimWaited(t, env.coord, 0)
	if _, _, n := a.lastStart(); n != 0 {
		t.Fatalf("a was started %d times while another session owned t-1", n)
	}
	if got := legacyOwnersInZK(t, store, "g"); got[legacy.TopicPartition{Topic: "t", Partition: 1}] != "zk-consumer-0" || len(got) != 1 {
		t.Fatalf("owners %v while waiting, want only the foreign t-1", got)
	}
	if _, _, err := store.Get(context.Background(), zkstate.IDPath("g", "a")); err != nil {
		t.Fatalf("a is not registered while waiting (it must stay a live member): %v", err)
	}

	// The 0.8 consumer releases t-1: the claim goes through.
	if err := other.Delete(context.Background(), zkstate.OwnerPath("g", "t", 1), -1); err != nil {
		t.Fatal(err)
	}
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a}, map[string][]int32{"t": {0, 1}})
}

// A claim that waited for a foreign owner reads that partition again when it is released, owner
// and offset: the member starts where the previous owner committed before letting go (issue 5
// item 5).
func TestIntegration_LegacyClaimAfterWaitReadsTheOffset(t *testing.T) {
	t.Parallel()
	w := legacyStartWaiting(t)
	if err := w.other.Create(w.ctx, zkstate.OffsetPath("g", "t", 1), []byte("42"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := w.other.Delete(w.ctx, w.owner(1), -1); err != nil {
		t.Fatal(err)
	}
	legacyWaitStable(t, w.store, "g", []*legacyTestConsumer{w.a}, map[string][]int32{"t": {0, 1, 2}})
	parts, _, _ := w.a.lastStart()
	for _, p := range parts {
		if p.Partition == 1 && p.Offset != 42 {
			t.Errorf("a starts t-1 at %d, want 42, the offset its previous owner committed", p.Offset)
		}
	}
}

// A partition someone else took while a claim waited, which the claim had seen free, makes the
// claim's Multi fail; the group is read again in full, and that partition is waited for too.
func TestIntegration_LegacyClaimAfterWaitFindsANewOwner(t *testing.T) {
	t.Parallel()
	w := legacyStartWaiting(t)
	third := legacyOpenStore(t, w.connect)
	t.Cleanup(func() { third.Close() })
	if err := third.Create(w.ctx, w.owner(2), []byte("zk-consumer-1"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	waited := w.coord.Stats().ClaimWaits
	if err := w.other.Delete(w.ctx, w.owner(1), -1); err != nil {
		t.Fatal(err)
	}
	legacyClaimWaited(t, w.coord, waited+1) // +1: a round blocked on t-1 may have been under way at its release
	if _, _, n := w.a.lastStart(); n != 0 {
		t.Fatalf("a was started %d times while another session owned t-2", n)
	}
	if got := legacyOwnersInZK(t, w.store, "g"); got[legacy.TopicPartition{Topic: "t", Partition: 2}] != "zk-consumer-1" {
		t.Fatalf("owners %v while waiting, want t-2 still the third session's", got)
	}
	if err := third.Delete(w.ctx, w.owner(2), -1); err != nil {
		t.Fatal(err)
	}
	legacyWaitStable(t, w.store, "g", []*legacyTestConsumer{w.a}, map[string][]int32{"t": {0, 1, 2}})
}

// legacyWaiting is a coordinator whose only member, a, waits to claim t-1 of topic t (three
// partitions), which another session (other) owns.
type legacyWaiting struct {
	ctx     context.Context
	connect string
	store   *zkstate.Store
	other   *zkstate.Store
	coord   *LegacyCoordinator
	a       *legacyTestConsumer
}

func (w *legacyWaiting) owner(p int32) string { return zkstate.OwnerPath("g", "t", p) }

func legacyStartWaiting(t *testing.T) *legacyWaiting {
	t.Helper()
	legacyCheckLeaks(t)
	w := &legacyWaiting{ctx: t.Context(), connect: legacyConnect(t)}
	w.store = legacyOpenStore(t, w.connect)
	t.Cleanup(func() { w.store.Close() })
	legacySetTopic(t, w.store, "t", 3)
	w.other = legacyOpenStore(t, w.connect)
	t.Cleanup(func() { w.other.Close() })
	if err := w.other.Create(w.ctx, w.owner(1), []byte("zk-consumer-0"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	env := legacyStart(t, w.store, "", nil)
	w.coord = env.coord
	w.a = legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	legacyClaimWaited(t, w.coord, 0)
	if _, _, n := w.a.lastStart(); n != 0 {
		t.Fatalf("a was started %d times while another session owned t-1", n)
	}
	return w
}

// legacyClaimWaited waits until the coordinator's claims have been blocked by a foreign owner
// in two more rounds than after: the claim has met the owner, backed off, read it again and is
// still waiting, so a member started by then was started past a foreign owner.
func legacyClaimWaited(t testing.TB, c *LegacyCoordinator, after uint64) {
	t.Helper()
	legacyEventually(t, "two rounds of the claim blocked by the foreign owner", func() (bool, string) {
		st := c.Stats()
		return st.ClaimWaits >= after+2, fmt.Sprintf("%d blocked rounds, %d before", st.ClaimWaits, after)
	})
}

// TestLegacyConsult: seed 001 "ConsultResponse" — this bridge names itself coordinator and lists
// the bridges serving the legacy port by node id (itself added when the list lacks it); before Run and
// after it, COORDINATOR_NOT_AVAILABLE (docs §6 ConsultResponse).
func TestLegacyConsult(t *testing.T) {
	others := []legacy.Broker{{CreatorID: "zkbridge-7", ID: 7, Host: "10.0.0.7", Port: 9190}}
	c, err := NewLegacyCoordinator(LegacyConfig{
		Store: &zkstate.Store{}, NodeID: 3, AdvertisedHost: "10.0.0.3", AdvertisedPort: 9190,
		Bridges: func(context.Context) []legacy.Broker { return others },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if got := c.Consult(ctx); got.ErrorCode != legacy.CodeCoordinatorNotAvailable || got.CoordinatorID != -1 {
		t.Errorf("before Run: %+v, want COORDINATOR_NOT_AVAILABLE", got)
	}
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	legacyEventually(t, "Run started", func() (bool, string) { return c.Consult(ctx).ErrorCode == legacy.CodeNone, "" })
	got := c.Consult(ctx)
	// By node id: the same list from every bridge.
	want := append([]legacy.Broker{{CreatorID: "zkbridge-3", ID: 3, Host: "10.0.0.3", Port: 9190}}, others...)
	if got.CoordinatorID != 3 || !slices.Equal(got.Brokers, want) {
		t.Errorf("Consult = %+v, want coordinator 3 and brokers %v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("ConsultResponse does not encode: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := c.Consult(context.Background()); got.ErrorCode != legacy.CodeCoordinatorNotAvailable {
		t.Errorf("after Run: %+v, want COORDINATOR_NOT_AVAILABLE", got)
	}
	if err := c.Run(context.Background()); err == nil {
		t.Error("a second Run did not fail")
	}
}

func TestLegacyConfigValidate(t *testing.T) {
	ok := LegacyConfig{Store: &zkstate.Store{}, AdvertisedHost: "h", AdvertisedPort: 9190}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for name, mod := range map[string]func(*LegacyConfig){
		"no store":         func(c *LegacyConfig) { c.Store = nil },
		"no host":          func(c *LegacyConfig) { c.AdvertisedHost = "" },
		"port 0":           func(c *LegacyConfig) { c.AdvertisedPort = 0 },
		"port 70000":       func(c *LegacyConfig) { c.AdvertisedPort = 70000 },
		"negative node":    func(c *LegacyConfig) { c.NodeID = -1 },
		"unknown strategy": func(c *LegacyConfig) { c.Strategy = "sticky" },
		"negative backoff": func(c *LegacyConfig) { c.RetryBackoff = -time.Second },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
