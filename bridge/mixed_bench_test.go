package bridge_test

// BenchmarkMixedStabilize measures what issue 5 asks for ("Measure"): the same 30 consumers over
// 300 partitions (3 topics × 100, one thread per topic and consumer), three ways, on the same
// ZooKeeper in the same run:
//
//	herd    30 zk members (zkconsumer, Kafka 0.8.2's rebalance): the 0.8 herd
//	mixed   10 zk, 10 kafka (kgo through the bridge), 10 legacy (legacy.Client, seed 001)
//	bridge  15 kafka + 15 legacy: every member driven by the bridge
//
// Each sub-benchmark (variant/joining kind) starts 29 members, waits until the group converged
// (not timed), then each iteration lets ONE member of the joining kind join, waits until the
// group is stable, lets it leave and waits again:
//
//	go test -run '^$' -bench MixedStabilize -benchtime 3x -timeout 30m ./bridge/
//
// "Stable" is what mixedCluster.converged checks, for legacy members too: the owners in
// ZooKeeper are complete and equal to the 0.8.2 range assignment over every registration in
// /consumers/<g>/ids, and every member's own view (its callbacks: zk OnAssign/OnRevoke, kafka
// OnPartitionsAssigned/Revoked, legacy Start/Stop) is exactly its share. It is polled every
// stabPoll: first in memory (every member consumes something, the views are disjoint and cover
// the 300 partitions: no ZooKeeper request), and only when that holds in ZooKeeper (a Snapshot
// of the group, and the hosted-member znode of each new Kafka member, read once). The time to
// stable is taken when the first check that passes has completed, so it includes up to one
// stabPoll and one Snapshot too much. The group must then stay stable for stabHold (checked in
// memory every stabPoll and in ZooKeeper every stabHoldCheck), else the wait goes on: a
// rebalance still running elsewhere in the group cannot pass for the end.
//
// Reported per join (and per leave, "leave-"):
//
//	ms-to-stable        member started (or stopped) → group stable
//	zk-ops              requests the ZooKeeper server received from the start until the end of
//	                    the hold (its srvr "Received" count: every session's requests, pings and
//	                    the sessions' connects included), minus the benchmark's own requests (its
//	                    Snapshot requests, its hosted-member reads, its srvr query)
//	zk-ops-net          zk-ops minus what the group costs at rest over the same time (its
//	                    background rate, measured once before the iterations: mostly pings, one
//	                    per session every third of its session timeout)
//	zk-txns             write transactions (the server's zxid moved by them: creates, deletes,
//	                    sets, each multi as one, session creations and closes)
//	zk-attempts         rebalance attempts of the zk members, and zk-conflicts those that failed
//	                    on an owner znode someone else still held (then the member backs off
//	                    stabZKBackoff and retries)
//	ms-kafka-claim      the bridge's time from the Kafka members' join barrier to their owner
//	                    znodes claimed (zkbridge_mixed_claim_seconds), summed over the claims
//	ms-legacy-rebalance the legacy coordinator's rebalance time, trigger → last StartResponse
//	                    (zkbridge_legacy_rebalance_duration_seconds), summed
//
// The members consume nothing (there is no broker): no offset is committed, so the ZooKeeper
// operations are the rebalances' own, for every kind. The zk members use rebalance.backoff.ms 200
// and 100 retries (0.8.2's defaults, 2 s and 4, would make the herd slower still and could give
// up); the kgo members the range balancer and a 200 ms heartbeat, as mixed_test.go; the legacy
// members a 1 s ping interval. ZKBRIDGE_STAB_ZK_BACKOFF and ZKBRIDGE_STAB_HEARTBEAT change the
// zk members' backoff and the kgo members' heartbeat (Go durations): a Kafka member hears of a
// rebalance only at its next heartbeat, as a zk member retries a conflict only after its
// backoff, so the two bound each variant's time (docs/benchmarks.md).
//
// ZKBRIDGE_STAB_HOLD sets the bridge's heartbeat hold (--heartbeat-hold; off by default),
// ZKBRIDGE_STAB_SESSION the kgo members' session timeout (6 s by default), and
// ZKBRIDGE_STAB_UPSTREAM=1 gives the Kafka members a data path through the bridge to a kfake
// cluster, as deployed (newStabEnv).
//
// ZKBRIDGE_BENCH_LOG=<file> writes every member's and the bridge's logs there (info, or
// ZKBRIDGE_BENCH_LOG_LEVEL); without it nothing is logged.
//
// b.Loop runs the function once (the 29 members are started once per sub-benchmark, not again
// for the probe run that -benchtime Nx otherwise adds).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

const (
	stabTopics      = 3
	stabPartitions  = 100 // per topic
	stabMembers     = 30
	stabPoll        = 5 * time.Millisecond
	stabHold        = time.Second
	stabHoldCheck   = 250 * time.Millisecond
	stabTimeout     = 3 * time.Minute
	stabZKBackoff   = 200 * time.Millisecond
	stabHeartbeat   = 200 * time.Millisecond
	stabZKRetries   = 100
	stabLegacyPing  = time.Second
	stabBackground  = 3 * time.Second
	stabKindZK      = zkstate.KindZK
	stabKindKafka   = zkstate.KindKafka
	stabKindLegacy  = zkstate.KindLegacy
	stabMetricClaim = "zkbridge_mixed_claim_seconds_sum"
	stabMetricLeg   = "zkbridge_legacy_rebalance_duration_seconds_sum"
)

func BenchmarkMixedStabilize(b *testing.B) {
	variants := []struct {
		name              string
		zk, kafka, legacy int
		joins             []string
	}{
		{"herd", 30, 0, 0, []string{stabKindZK}},
		{"mixed", 10, 10, 10, []string{stabKindKafka, stabKindZK, stabKindLegacy}},
		{"bridge", 0, 15, 15, []string{stabKindKafka, stabKindLegacy}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			for _, kind := range v.joins {
				b.Run(kind, func(b *testing.B) {
					base := map[string]int{stabKindZK: v.zk, stabKindKafka: v.kafka, stabKindLegacy: v.legacy}
					base[kind]-- // the one that joins
					benchStabilize(b, v.name+"_"+kind, base, kind)
				})
			}
		})
	}
}

func benchStabilize(b *testing.B, name string, base map[string]int, joining string) {
	e := newStabEnv(b, name)
	// The base members, all at once (not timed).
	for _, kind := range []string{stabKindZK, stabKindLegacy, stabKindKafka} {
		for i := range base[kind] {
			e.add(kind, fmt.Sprintf("%s%02d", kind[:1], i))
		}
	}
	if _, _, err := e.waitStable(stabTimeout); err != nil {
		b.Fatalf("the %d base members: %v", len(e.members), err)
	}
	b.Logf("%s: %d members converged (%d zk, %d kafka, %d legacy), zk attempts so far %d",
		name, len(e.members), base[stabKindZK], base[stabKindKafka], base[stabKindLegacy], e.zkStats().Attempts)

	e.findMultiReadSession()
	// What the group costs at rest: mostly pings.
	const beats = `zkbridge_groups_requests_total{event="heartbeat"}`
	s0 := stabZKSessions(b)
	r0, _ := stabZKCounters(b)
	h0 := e.metrics()[beats]
	time.Sleep(stabBackground)
	h1 := e.metrics()[beats]
	r1, _ := stabZKCounters(b)
	s1 := stabZKSessions(b)
	zm, mine, br := e.stabByKind(s0, s1)
	per := func(n int64) float64 { return float64(n) / stabBackground.Seconds() }
	background := per(r1 - r0 - 1 - mine)
	heartbeats := (h1 - h0) / stabBackground.Seconds()
	b.Logf("%s at rest: %.1f requests/s (zk members %.1f, bridge %.1f; the benchmark's own %.1f not counted); %.1f Kafka heartbeats/s",
		name, background, per(zm), per(br), per(mine), heartbeats)

	var join, leave stabTotals
	i := 0
	for b.Loop() {
		var m *stabMember
		join.add(e.change(background, func() { m = e.add(joining, fmt.Sprintf("%sj%02d", joining[:1], i)) }))
		leave.add(e.change(background, func() { e.remove(m) }))
		i++
	}
	join.report(b, "")
	leave.report(b, "leave-")
	b.ReportMetric(background, "zk-background-req/s")
	// At rest: one per heartbeat interval per member, or one per hold with held heartbeats.
	b.ReportMetric(heartbeats, "kafka-heartbeats/s")
	b.ReportMetric(0, "ns/op") // an iteration is a join and a leave, with their holds; see above
	if v := e.views.violations; len(v) > 0 {
		b.Errorf("%d partitions handed to a member while another consumed them, first: %s", len(v), v[0])
	}
	for _, s := range e.errors() {
		b.Error(s)
	}
}

// stabResult is what one membership change cost.
type stabResult struct {
	toStable, toLastView    time.Duration
	ops, net, txns          float64
	attempts, conflicts     int64
	claimSecs, legacySecs   float64
	pollRequests, pollCount int
	// By session (cons): the zk members', the bridge's, and the benchmark's own requests
	// besides its counted polling (its pings).
	zkMemberOps, bridgeOps, ownOther int64
}

type stabTotals struct {
	n        int
	sum      stabResult
	toStable []time.Duration
}

func (t *stabTotals) add(r stabResult) {
	t.n++
	t.toStable = append(t.toStable, r.toStable)
	t.sum.toStable += r.toStable
	t.sum.toLastView += r.toLastView
	t.sum.ops += r.ops
	t.sum.net += r.net
	t.sum.txns += r.txns
	t.sum.attempts += r.attempts
	t.sum.conflicts += r.conflicts
	t.sum.claimSecs += r.claimSecs
	t.sum.legacySecs += r.legacySecs
	t.sum.pollRequests += r.pollRequests
	t.sum.pollCount += r.pollCount
	t.sum.zkMemberOps += r.zkMemberOps
	t.sum.bridgeOps += r.bridgeOps
	t.sum.ownOther += r.ownOther
}

func (t *stabTotals) report(b *testing.B, prefix string) {
	if t.n == 0 {
		return
	}
	n, s := float64(t.n), t.sum
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(s.toStable)/n, prefix+"ms-to-stable")
	b.ReportMetric(ms(slices.Max(t.toStable)), prefix+"ms-to-stable-max")
	sorted := slices.Sorted(slices.Values(t.toStable))
	b.ReportMetric(ms((sorted[(t.n-1)/2]+sorted[t.n/2])/2), prefix+"ms-to-stable-p50")
	b.ReportMetric(ms(s.toLastView)/n, prefix+"ms-to-last-view")
	b.ReportMetric(s.ops/n, prefix+"zk-ops")
	b.ReportMetric(s.net/n, prefix+"zk-ops-net")
	b.ReportMetric(s.txns/n, prefix+"zk-txns")
	b.ReportMetric(float64(s.attempts)/n, prefix+"zk-attempts")
	b.ReportMetric(float64(s.conflicts)/n, prefix+"zk-conflicts")
	b.ReportMetric(1000*s.claimSecs/n, prefix+"ms-kafka-claim")
	b.ReportMetric(1000*s.legacySecs/n, prefix+"ms-legacy-rebalance")
	b.ReportMetric(float64(s.pollRequests)/n, prefix+"zk-poll-requests")
	b.ReportMetric(float64(s.pollCount)/n, prefix+"zk-poll-checks")
	b.ReportMetric(float64(s.zkMemberOps)/n, prefix+"zk-ops-zkmembers")
	b.ReportMetric(float64(s.bridgeOps)/n, prefix+"zk-ops-bridge")
	b.ReportMetric(float64(s.ownOther)/n, prefix+"zk-own-unpolled")
}

// stabEnv is a chroot with one broker and the topics, a mixed-mode group, a bridge with a Kafka
// and a legacy listener, and the members.
type stabEnv struct {
	b *testing.B
	*env
	group   string
	topics  []string
	views   *views
	log     zerolog.Logger
	members []*stabMember
	zks     []*zkconsumer.Consumer          // every zk member ever started: their counters outlive them
	zkSids  map[int64]bool                  // their ZooKeeper sessions
	ownSids map[int64]bool                  // the benchmark's: its Store's and its multiRead session
	hosted  map[string]zkstate.HostedMember // consumer id → record, read once per Kafka member

	mu   sync.Mutex
	errs []string
}

type stabMember struct {
	kind string
	name string // in views: the consumer id of zk and legacy members, the client's name for kafka
	cl   *kgo.Client
	zc   *zkconsumer.Consumer
	stop func()
}

func newStabEnv(b *testing.B, name string) *stabEnv {
	b.Helper()
	e := &stabEnv{b: b, group: "g" + name, views: newViews(),
		hosted: map[string]zkstate.HostedMember{}, zkSids: map[int64]bool{}, log: stabLogger(b)}
	topics := map[string]int{}
	for i := range stabTopics {
		t := fmt.Sprintf("t%d", i)
		topics[t] = stabPartitions
		e.topics = append(e.topics, t)
	}
	o := envOpts{layout: topicsLayout(topics), group: e.group, mode: zkstate.ModeMixed,
		bridge: func(base *env, c *bridge.Config) {
			c.LegacyListen = "127.0.0.1:0"
			c.HeartbeatHold = stabKnob(b, "ZKBRIDGE_STAB_HOLD", 0)
			c.Logger = e.log.With().Str("bridge", "1").Logger()
			if base.kf != nil {
				c.Upstream, c.ProxyListen = []string{base.kf.ListenAddrs()[0]}, "127.0.0.1:0"
			}
		}}
	if os.Getenv("ZKBRIDGE_STAB_UPSTREAM") != "" {
		// A data path as deployed: the Kafka members list offsets and fetch from a cluster
		// (kfake, the same topics) through the bridge's proxy listener, on connections of their
		// own; the bridge's listener carries only their group requests and Metadata. Without
		// it the bridge stands in for every broker, and a kgo member retries ListOffsets and
		// Metadata on the connection its heartbeats use, about twice a second.
		o.kfake = []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(stabPartitions, e.topics...)}
	}
	e.env = startEnv(b, o)
	e.ownSids = map[int64]bool{e.zk.SessionID(): true}
	// Members are stopped before the bridge (cleanups run last-in first-out).
	b.Cleanup(func() {
		var wg sync.WaitGroup
		for _, m := range e.members {
			wg.Go(m.stop)
		}
		wg.Wait()
	})
	return e
}

func (e *stabEnv) fail(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

func (e *stabEnv) errors() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

func (e *stabEnv) subscription() map[string]int {
	sub := map[string]int{}
	for _, t := range e.topics {
		sub[t] = 1
	}
	return sub
}

// add starts a member of kind; name is its short name.
func (e *stabEnv) add(kind, name string) *stabMember {
	e.b.Helper()
	var m *stabMember
	switch kind {
	case stabKindZK:
		m = e.zkMember(name)
	case stabKindKafka:
		m = e.kafkaMember(name)
	case stabKindLegacy:
		m = e.legacyMember(name)
	default:
		e.b.Fatalf("unknown kind %q", kind)
	}
	e.members = append(e.members, m)
	return m
}

func (e *stabEnv) remove(m *stabMember) {
	e.members = slices.DeleteFunc(e.members, func(o *stabMember) bool { return o == m })
	m.stop()
}

// zkMember starts a zkconsumer whose application only records what it owns.
func (e *stabEnv) zkMember(name string) *stabMember {
	b := e.b
	m := &stabMember{kind: stabKindZK, name: e.group + "_" + name}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := zkconsumer.New(ctx, zkconsumer.Config{
		Connect: e.connect, GroupID: e.group, ConsumerID: name, Subscription: e.subscription(),
		SessionTimeout: 6 * time.Second, RebalanceBackoff: stabKnob(b, "ZKBRIDGE_STAB_ZK_BACKOFF", stabZKBackoff), RebalanceMaxRetries: stabZKRetries,
		Logger: e.log.With().Str("zk_member", name).Logger(),
		Handler: zkconsumer.Handler{
			OnAssign: func(offsets map[zkstate.TopicPartition]int64) {
				e.views.assign(m.name, slices.Collect(maps.Keys(offsets)))
			},
			OnRevoke: func() { e.views.revoke(m.name, nil) },
			OnError:  func(err error) { e.fail("zk member %s: %v", name, err) },
		},
	})
	if err != nil {
		b.Fatalf("zkconsumer.New(%s): %v", name, err)
	}
	m.zc = c
	e.zks = append(e.zks, c)
	e.zkSids[c.SessionID()] = true
	runCtx, stopRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			stopRun()
			cctx, c2 := context.WithTimeout(context.Background(), 20*time.Second)
			defer c2()
			_ = c.Close(cctx)
			<-done
			e.views.revoke(m.name, nil)
		})
	}
	return m
}

// kafkaMember starts a kgo group member (range balancer, eager) that does not fetch: there is
// no broker behind the bridge, so its topics are paused.
func (e *stabEnv) kafkaMember(name string) *stabMember {
	b := e.b
	m := &stabMember{kind: stabKindKafka, name: name}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.env.b.Addr().String()),
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(e.topics...),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(stabKnob(b, "ZKBRIDGE_STAB_SESSION", 6*time.Second)),
		kgo.RebalanceTimeout(5*time.Second),
		kgo.HeartbeatInterval(stabKnob(b, "ZKBRIDGE_STAB_HEARTBEAT", stabHeartbeat)),
		kgo.RetryTimeout(5*time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			e.views.assign(name, kgoParts(a))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
			e.views.revoke(name, kgoParts(r))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			e.fail("kafka member %s lost partitions %v (session or generation lost)", name, l)
			e.views.revoke(name, kgoParts(l))
		}),
	)
	if err != nil {
		b.Fatalf("kgo.NewClient: %v", err)
	}
	cl.PauseFetchTopics(e.topics...)
	m.cl = cl
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			cl.Close() // revokes, then LeaveGroup
			e.views.revoke(name, nil)
		})
	}
	return m
}

// legacyMember starts a legacy.Client against the bridge's legacy listener.
func (e *stabEnv) legacyMember(name string) *stabMember {
	b := e.b
	m := &stabMember{kind: stabKindLegacy, name: e.group + "_" + name}
	cl, err := legacy.NewClient(legacy.ClientConfig{
		Brokers: []string{e.env.b.LegacyAddr().String()}, GroupID: e.group, ConsumerID: m.name,
		Subscription: e.subscription(), PingInterval: stabLegacyPing, MaxPingRetries: 3,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Logger: e.log.With().Str("legacy_member", name).Logger(),
		Handler: legacy.HandlerFuncs{
			Start: func(parts []legacy.PartitionOffset) error {
				tps := make([]mtp, len(parts))
				for i, p := range parts {
					tps[i] = mtp{Topic: p.Topic, Partition: p.Partition}
				}
				e.views.assign(m.name, tps)
				return nil
			},
			Stop: func() { e.views.revoke(m.name, nil) },
		},
	})
	if err != nil {
		b.Fatalf("legacy.NewClient: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cl.Run(ctx) }()
	var once sync.Once
	m.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && ctx.Err() == nil {
				e.fail("legacy member %s: Run: %v", name, err)
			}
			e.views.revoke(m.name, nil)
		})
	}
	return m
}

func (e *stabEnv) zkStats() zkconsumer.Stats {
	var s zkconsumer.Stats
	for _, c := range e.zks {
		st := c.Stats()
		s.Attempts += st.Attempts
		s.Conflicts += st.Conflicts
		s.Failures += st.Failures
	}
	return s
}

// change runs do (a join or a leave) and measures it until the group is stable again.
func (e *stabEnv) change(background float64, do func()) stabResult {
	b := e.b
	zkBefore := e.zkStats()
	metricsBefore := e.metrics()
	sess0 := stabZKSessions(b)
	recv0, zxid0 := stabZKCounters(b)
	start := time.Now()
	e.log.Info().Str("phase", "start").Msg("benchmark: membership change")
	do()
	toStable, poll, err := e.waitStable(stabTimeout)
	if err != nil {
		b.Fatal(err)
	}
	// The polling finds the group stable a check after it became so: the last change of a
	// member's view is when it did (every kind writes its owners before its members start).
	lastView := e.views.lastChange()
	e.log.Info().Str("phase", "stable").Dur("to_stable", toStable.Sub(start)).Dur("to_last_view", lastView.Sub(start)).
		Msg("benchmark: membership change")
	recv1, zxid1 := stabZKCounters(b)
	sess1 := stabZKSessions(b)
	window := time.Since(start)
	zkAfter := e.zkStats()
	metricsAfter := e.metrics()
	r := stabResult{toStable: toStable.Sub(start), toLastView: lastView.Sub(start), pollRequests: poll.requests, pollCount: poll.checks}
	var mine int64
	r.zkMemberOps, mine, r.bridgeOps = e.stabByKind(sess0, sess1)
	r.ownOther = mine - int64(poll.requests)  // the benchmark's pings: its count of its polling checked
	r.ops = float64(recv1 - recv0 - 1 - mine) // the after-srvr counts itself
	r.net = r.ops - background*window.Seconds()
	r.txns = float64(zxid1 - zxid0)
	r.attempts = zkAfter.Attempts - zkBefore.Attempts
	r.conflicts = zkAfter.Conflicts - zkBefore.Conflicts
	r.claimSecs = metricsAfter[stabMetricClaim] - metricsBefore[stabMetricClaim]
	r.legacySecs = metricsAfter[stabMetricLeg] - metricsBefore[stabMetricLeg]
	return r
}

// stabByKind splits the requests received on each session between two ZooKeeper session
// snapshots (stabZKSessions) into the zk members', the benchmark's own and the rest, which is
// the bridge's. A session gone by the second snapshot (a zk member that left) is not counted.
func (e *stabEnv) stabByKind(before, after map[int64]int64) (zkMembers, mine, others int64) {
	for sid, n := range after {
		d := n - before[sid]
		switch {
		case e.ownSids[sid]:
			mine += d
		case e.zkSids[sid]:
			zkMembers += d
		default:
			others += d
		}
	}
	return zkMembers, mine, others
}

// findMultiReadSession finds the session the benchmark's Snapshots use (zkstate sends multiReads
// on connections and sessions of their own; one after the other, Snapshots reuse one): the one that received about as many requests as five
// Snapshots made, while the group is at rest.
func (e *stabEnv) findMultiReadSession() {
	b := e.b
	before := stabZKSessions(b)
	want := 0
	for range 5 {
		snap, err := e.zk.Snapshot(context.Background(), e.group)
		if err != nil {
			b.Fatalf("Snapshot: %v", err)
		}
		want += snap.Stats.Requests
	}
	after := stabZKSessions(b)
	best, diff := int64(0), int64(-1)
	for sid, n := range after {
		d := n - before[sid]
		if e.ownSids[sid] || e.zkSids[sid] || d < int64(want) {
			continue
		}
		if diff < 0 || d-int64(want) < diff {
			best, diff = sid, d-int64(want)
		}
	}
	if best == 0 {
		b.Fatalf("no session received the %d requests of five Snapshots", want)
	}
	e.ownSids[best] = true
}

type stabPollCost struct{ requests, checks int }

// waitStable polls until the group converged and stayed so for stabHold; it returns when the
// first check of that stable run completed.
func (e *stabEnv) waitStable(timeout time.Duration) (time.Time, stabPollCost, error) {
	var cost stabPollCost
	deadline := time.Now().Add(timeout)
	var since, lastZK time.Time
	detail := ""
	for {
		now := time.Now()
		if now.After(deadline) {
			return time.Time{}, cost, fmt.Errorf("the group did not converge within %v (last: %s)", timeout, detail)
		}
		var ok bool
		ok, detail = e.inMemory()
		if ok && (since.IsZero() || now.Sub(lastZK) >= stabHoldCheck) {
			var reqs int
			ok, detail, reqs = e.inZK()
			cost.requests += reqs
			cost.checks++
			lastZK = time.Now()
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= stabHold:
			return since, cost, nil
		}
		time.Sleep(stabPoll)
	}
}

// inMemory is the free part of the check: every member consumes something, and the views are
// disjoint and cover every partition.
func (e *stabEnv) inMemory() (bool, string) {
	seen := map[mtp]string{}
	for _, m := range e.members {
		v := e.views.of(m.name)
		if len(v) == 0 {
			return false, m.name + " consumes nothing"
		}
		for p := range v {
			if o, dup := seen[p]; dup {
				return false, fmt.Sprintf("%s-%d consumed by %s and %s", p.Topic, p.Partition, o, m.name)
			}
			seen[p] = m.name
		}
	}
	if len(seen) != stabTopics*stabPartitions {
		return false, fmt.Sprintf("%d partitions consumed", len(seen))
	}
	return true, ""
}

// inZK is mixedCluster.converged for every kind: owners in ZooKeeper equal to the 0.8.2 range
// assignment over the registrations, and every member's view its share. It returns the
// ZooKeeper requests it made.
func (e *stabEnv) inZK() (bool, string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, err := e.zk.Snapshot(ctx, e.group)
	if err != nil {
		return false, err.Error(), 0
	}
	reqs := snap.Stats.Requests
	if len(snap.Consumers) != len(e.members) {
		return false, fmt.Sprintf("%d registrations, want %d", len(snap.Consumers), len(e.members)), reqs
	}
	in := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: snap.Partitions}
	for cid, c := range snap.Consumers {
		in.Consumers[cid] = legacy.Subscription(zkstate.ConsumerThreads(cid, c.Registration))
	}
	want := map[mtp]string{}
	share := map[string]map[mtp]bool{} // consumer id → partitions
	for tp, th := range legacy.Range(in) {
		p := mtp{Topic: tp.Topic, Partition: tp.Partition}
		want[p] = th
		cid, _, _ := zkstate.ParseThreadID(th)
		if share[cid] == nil {
			share[cid] = map[mtp]bool{}
		}
		share[cid][p] = true
	}
	if len(want) != stabTopics*stabPartitions {
		return false, fmt.Sprintf("0.8.2 assigns %d partitions", len(want)), reqs
	}
	if !maps.Equal(want, snap.Owners) {
		return false, fmt.Sprintf("%d owners, %d as assigned", len(snap.Owners), stabSame(want, snap.Owners)), reqs
	}
	names := map[string]bool{}
	byMember := map[string]string{} // Kafka member id → client name
	for _, m := range e.members {
		names[m.name] = true
		if m.cl != nil {
			if id, _ := m.cl.GroupMetadata(); id != "" {
				byMember[id] = m.name
			}
		}
	}
	for cid := range snap.Consumers {
		name := cid
		if !names[cid] { // a Kafka member's registration, made by the bridge
			h, ok := e.hosted[cid]
			if !ok {
				data, _, err := e.zk.Get(ctx, zkstate.HostedMemberPath(bridge.DefaultRoot, e.group, cid))
				reqs++
				if err != nil {
					return false, fmt.Sprintf("hosted member %s: %v", cid, err), reqs
				}
				if h, err = zkstate.ParseHostedMember(data); err != nil {
					return false, err.Error(), reqs
				}
				e.hosted[cid] = h
			}
			if name, ok = byMember[h.Member]; !ok {
				return false, "no client for hosted member " + h.Member, reqs
			}
		}
		if got := e.views.of(name); !maps.Equal(got, share[cid]) {
			return false, fmt.Sprintf("%s consumes %d partitions, its share is %d", name, len(got), len(share[cid])), reqs
		}
	}
	return true, "", reqs
}

func stabSame(a, b map[mtp]string) int {
	n := 0
	for k, v := range a {
		if b[k] == v {
			n++
		}
	}
	return n
}

// metrics reads the bridge's /metrics: every sample line, by its name and labels.
func (e *stabEnv) metrics() map[string]float64 {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + e.env.b.AdminAddr().String() + "/metrics")
	if err != nil {
		e.fail("GET /metrics: %v", err)
		return map[string]float64{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return parseMetrics(string(body))
}

// stabZKCounters asks the ZooKeeper server (four-letter word srvr, whitelisted by
// scripts/zookeeper.sh) for the requests it received and its last zxid. The query itself counts
// as one request received.
func stabZKCounters(tb testing.TB) (received, zxid int64) {
	tb.Helper()
	addr := zktest.Addr(tb)
	if i := strings.IndexByte(addr, ','); i >= 0 {
		addr = addr[:i]
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("srvr: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		tb.Fatalf("srvr: %v", err)
	}
	received, zxid = -1, -1
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Received: "); ok {
			received, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "Zxid: 0x"); ok {
			zxid, _ = strconv.ParseInt(strings.TrimSpace(v), 16, 64)
		}
	}
	if received < 0 || zxid < 0 {
		tb.Fatalf("srvr: no Received or Zxid in the answer (is srvr whitelisted?)")
	}
	return received, zxid
}

// stabZKSessions asks the ZooKeeper server (four-letter word cons) for the requests received
// on each session's connection so far, by session id. The query counts as one request.
func stabZKSessions(tb testing.TB) map[int64]int64 {
	tb.Helper()
	addr := zktest.Addr(tb)
	if i := strings.IndexByte(addr, ','); i >= 0 {
		addr = addr[:i]
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("cons: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("cons")); err != nil {
		tb.Fatalf("cons: %v", err)
	}
	out := map[int64]int64{}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		var sid, recved int64 = -1, -1
		for _, f := range strings.FieldsFunc(sc.Text(), func(r rune) bool { return r == ',' || r == '(' || r == ')' }) {
			if v, ok := strings.CutPrefix(f, "sid=0x"); ok {
				sid, _ = strconv.ParseInt(v, 16, 64)
			}
			if v, ok := strings.CutPrefix(f, "recved="); ok {
				recved, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if sid > 0 && recved >= 0 {
			out[sid] = recved
		}
	}
	return out
}

// stabKnob is a duration of the benchmark's members from the environment (a Go duration), else
// def: the reaction times of both kinds, the zk members' rebalance backoff
// (ZKBRIDGE_STAB_ZK_BACKOFF) and the kgo members' heartbeat (ZKBRIDGE_STAB_HEARTBEAT), bound
// how fast each variant can stabilise, so the comparison is run at several of them.
func stabKnob(tb testing.TB, env string, def time.Duration) time.Duration {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive Go duration", env, v)
	}
	return d
}

// stabLogger writes info logs to $ZKBRIDGE_BENCH_LOG, or nowhere.
func stabLogger(tb testing.TB) zerolog.Logger {
	p := os.Getenv("ZKBRIDGE_BENCH_LOG")
	if p == "" {
		return zerolog.Nop()
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatalf("ZKBRIDGE_BENCH_LOG: %v", err)
	}
	tb.Cleanup(func() { f.Close() })
	ms := zerolog.HookFunc(func(ev *zerolog.Event, _ zerolog.Level, _ string) {
		ev.Str("t", time.Now().Format("15:04:05.000"))
	})
	level := zerolog.InfoLevel
	if l, err := zerolog.ParseLevel(os.Getenv("ZKBRIDGE_BENCH_LOG_LEVEL")); err == nil && l != zerolog.NoLevel {
		level = l
	}
	return zerolog.New(f).Level(level).Hook(ms).With().Str("bench", tb.Name()).Logger()
}
