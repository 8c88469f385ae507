package bridge_test

// The measurements of issue 3 ("Measure"); the numbers and the exact commands are in
// docs/benchmarks.md, section "Kafka group coordinator (issue 3)":
//
//	go test -run '^$' -bench 'JoinToStable/members=(10|100)$' -benchtime 5x -v -timeout 30m ./bridge/
//	go test -run '^$' -bench 'JoinToStable/members=1000$' -benchtime 3x -v -timeout 30m ./bridge/
//	go test -run '^$' -bench 'Heartbeat' -benchtime 3s -count 3 -v ./bridge/
//	go test -run '^$' -bench 'OffsetCommit' -benchtime 3s -v ./bridge/
//
// (a) BenchmarkJoinToStable: N kgo consumer-group clients, each its own kgo.Client, in process;
// from creating the first client until every member has its partition (OnPartitionsAssigned)
// and DescribeGroups says Stable with N members. (b) BenchmarkHeartbeat: Heartbeat requests
// with kmsg over a few pipelined connections at a Stable group, per wall second and per CPU
// second. Both run the same clients against franz-go's in-process kfake cluster in the same
// run and log (-v) zkbridge/kfake. (c) BenchmarkOffsetCommit: OffsetCommit requests of P
// partitions each, each acknowledged only once persisted to ZooKeeper (the 0.8 offset znodes
// and the bridge's own offset records, in one fenced write per group, sent as multis of at most
// a few hundred ops; commits that queue behind a write are folded into the next one).
//
// None of this runs in a normal `go test` (Benchmark* only). ZKBRIDGE_BENCH_LOG=debug logs every
// line of the bridge, ZKBRIDGE_BENCH_KGO_LOG=1 the group lifecycle of two kgo members,
// ZKBRIDGE_BENCH_KEYS=1 the requests (a) sent, by api key, ZKBRIDGE_BENCH_ZK_KINDS=1 each bridge's
// ZooKeeper requests of each join of (a), by kind.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// wireConn is one Kafka connection speaking kmsg directly, with pipelining: send writes a
// request, recv reads the next response (Kafka answers a connection's requests in order).
type wireConn struct {
	c    net.Conn
	br   *bufio.Reader
	f    *kmsg.RequestFormatter
	out  []byte
	in   []byte
	corr int32
	next int32 // correlation id of the next response
}

func dialWire(tb testing.TB, addr string) *wireConn {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { c.Close() })
	return &wireConn{c: c, br: bufio.NewReaderSize(c, 64<<10), f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench"))}
}

// send writes one request.
func (w *wireConn) send(req kmsg.Request) error {
	w.out = w.f.AppendRequest(w.out[:0], req, w.corr)
	w.corr++
	_, err := w.c.Write(w.out)
	return err
}

// recv reads the response to the oldest request not yet answered, which was req.
func (w *wireConn) recv(req kmsg.Request) (kmsg.Response, error) {
	var size [4]byte
	if _, err := io.ReadFull(w.br, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 64<<20 {
		return nil, fmt.Errorf("response size %d", n)
	}
	if cap(w.in) < int(n) {
		w.in = make([]byte, n)
	}
	body := w.in[:n]
	if _, err := io.ReadFull(w.br, body); err != nil {
		return nil, err
	}
	if corr := int32(binary.BigEndian.Uint32(body)); corr != w.next {
		return nil, fmt.Errorf("correlation id %d, want %d", corr, w.next)
	}
	w.next++
	body = body[4:]
	// Flexible responses have header v1 (tagged fields), except ApiVersions (KIP-511).
	if req.IsFlexible() && req.Key() != 18 {
		tags, k := binary.Uvarint(body)
		if k <= 0 {
			return nil, errors.New("response header: bad tag count")
		}
		body = body[k:]
		for range tags {
			_, k1 := binary.Uvarint(body)
			if k1 <= 0 {
				return nil, errors.New("response header: bad tag")
			}
			sz, k2 := binary.Uvarint(body[k1:])
			if k2 <= 0 || uint64(len(body)) < uint64(k1+k2)+sz {
				return nil, errors.New("response header: bad tag size")
			}
			body = body[uint64(k1+k2)+sz:]
		}
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decode %T: %w", resp, err)
	}
	return resp, nil
}

func (w *wireConn) roundTrip(req kmsg.Request) (kmsg.Response, error) {
	if err := w.send(req); err != nil {
		return nil, err
	}
	return w.recv(req)
}

// pipeline sends n requests from next (called with 0..n-1) with up to window in flight and
// checks each response with check. Requests go out in batches (one write for up to half a
// window), so that the load generator's own syscalls weigh little next to the server's.
func (w *wireConn) pipeline(n, window int, next func(int) kmsg.Request, check func(kmsg.Response) error) error {
	inflight := make([]kmsg.Request, 0, window)
	sent := 0
	for sent < n || len(inflight) > 0 {
		w.out = w.out[:0]
		for sent < n && len(inflight) < window {
			req := next(sent)
			// AppendRequest writes the frame's length at the start of what it is given, so
			// each request is formatted on its own and then batched.
			w.in = w.f.AppendRequest(w.in[:0], req, w.corr)
			w.out = append(w.out, w.in...)
			w.corr++
			inflight = append(inflight, req)
			sent++
		}
		if len(w.out) > 0 {
			if _, err := w.c.Write(w.out); err != nil {
				return err
			}
		}
		// Read until half the window is free (or everything is answered).
		for len(inflight) > 0 && (len(inflight) > window/2 || sent == n) {
			resp, err := w.recv(inflight[0])
			if err != nil {
				return err
			}
			inflight = inflight[1:]
			if err := check(resp); err != nil {
				return err
			}
		}
	}
	return nil
}

// cpuTime is the CPU time (user and system) the test process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// coordinatorTarget is a group coordinator under measurement: the bridge or a kfake cluster,
// both serving a topic whose partitions its own node leads.
type coordinatorTarget struct {
	name   string
	addr   string
	bridge *running // nil for kfake
	// peers are the other bridges of the service when the target is one of several (the
	// group's owner); their counters are added by counterSumAll.
	peers []*running
	// childPeers are peers as peers is, each in a child process: the test process's CPU is
	// then the clients' and the owner's only, as with one bridge.
	childPeers []*childBridge
	// child is the target when it is a bridge in a child process (bridge is nil then): this
	// process's CPU is the clients' alone, and the bridge's is counted apart.
	child *childBridge
}

// childCPU is the CPU time the target's child process has used so far (0 if it has none).
func (t coordinatorTarget) childCPU(b *testing.B) time.Duration {
	if t.child == nil {
		return 0
	}
	return childrenCPU(b, []*childBridge{t.child})
}

// isBridge reports whether the target is a bridge, here or in a child process.
func (t coordinatorTarget) isBridge() bool { return t.bridge != nil || t.child != nil }

// benchTargets starts the bridge (on a real ZooKeeper, group config gcfg) and a one-broker
// kfake cluster, both serving topic with partitions partitions.
func benchTargets(b *testing.B, topic string, partitions int32, gcfg group.Config) []coordinatorTarget {
	b.Helper()
	return []coordinatorTarget{bridgeTarget(b, topic, partitions, gcfg), kfakeTarget(b, topic, partitions)}
}

func bridgeTarget(b *testing.B, topic string, partitions int32, gcfg group.Config) coordinatorTarget {
	b.Helper()
	return bridgeTargetWith(b, topic, partitions, gcfg, loadTopics)
}

// bridgeTargetTopicIDs is bridgeTarget with the topic written with a topic id, as Kafka 2.8+
// in ZooKeeper mode writes it and as kfake's topics have one.
func bridgeTargetTopicIDs(b *testing.B, topic string, partitions int32, gcfg group.Config) coordinatorTarget {
	b.Helper()
	return bridgeTargetWith(b, topic, partitions, gcfg, loadTopicsWithIDs)
}

func bridgeTargetWith(b *testing.B, topic string, partitions int32, gcfg group.Config,
	load func(testing.TB, *zkstate.Store, map[string]int32)) coordinatorTarget {
	b.Helper()
	connect := zktest.Connect(b)
	load(b, zktest.OpenStore(b, connect), map[string]int32{topic: partitions})
	br := startBridgeTB(b, connect, func(c *bridge.Config) { c.Group = gcfg })
	return coordinatorTarget{name: "zkbridge", addr: br.Addr().String(), bridge: br}
}

func kfakeTarget(b *testing.B, topic string, partitions int32) coordinatorTarget {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		b.Fatalf("kfake: %v", err)
	}
	b.Cleanup(c.Close)
	return coordinatorTarget{name: "kfake", addr: c.ListenAddrs()[0]}
}

// counterSum is the sum of a counter family of the bridge's registry (every label), 0 when the
// target is not the bridge.
func (t coordinatorTarget) counterSum(b *testing.B, name string) float64 {
	b.Helper()
	if t.child != nil {
		return t.child.counterSum(b, name)
	}
	if t.bridge == nil {
		return 0
	}
	mfs, err := t.bridge.Registry().Gather()
	if err != nil {
		b.Fatalf("gather metrics: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// counterSumAll is counterSum over the target and its peers: what the whole service did.
func (t coordinatorTarget) counterSumAll(b *testing.B, name string) float64 {
	b.Helper()
	sum := t.counterSum(b, name)
	for _, p := range t.peers {
		sum += coordinatorTarget{bridge: p}.counterSum(b, name)
	}
	for _, c := range t.childPeers {
		sum += c.counterSum(b, name)
	}
	return sum
}

// settle waits, untimed, until the bridges have sent no ZooKeeper request for 150 ms (at most
// 10 s): a group's members leave one by one, each leave is a rebalance whose ownership the
// claimer writes, and its releases went on for tens of milliseconds into the next group's
// join, sharing the session's queue with that join's writes. Without it, a join of 10 members
// measured about a third of its ZooKeeper requests and most of its time on the group before.
func (t coordinatorTarget) settle(b *testing.B) {
	b.Helper()
	if !t.isBridge() {
		return
	}
	last, still := t.counterSumAll(b, "zkbridge_zk_requests_total"), 0
	for deadline := time.Now().Add(10 * time.Second); still < 3 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		n := t.counterSumAll(b, "zkbridge_zk_requests_total")
		if n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
}

// zkKinds is every bridge's (target first, then its peers) ZooKeeper requests by kind so far.
func (t coordinatorTarget) zkKinds(b *testing.B) []map[string]float64 {
	b.Helper()
	var out []map[string]float64
	for _, br := range append([]*running{t.bridge}, t.peers...) {
		mfs, err := br.Registry().Gather()
		if err != nil {
			b.Fatalf("gather metrics: %v", err)
		}
		kinds := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "zkbridge_zk_requests_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" && m.GetCounter().GetValue() > 0 {
						kinds[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
		out = append(out, kinds)
	}
	return out
}

// benchGroup is N kgo consumer-group clients of one group, each with its own kgo.Client, with
// what each currently owns (from its OnPartitions callbacks).
type benchGroup struct {
	name    string
	topic   string
	clients []*kgo.Client
	owning  atomic.Int64 // members that own at least one partition

	mu    sync.Mutex
	owned []map[int32]bool

	sent    requestCounts // requests the clients wrote, by key
	conns   connCount     // connections the clients opened
	lookups lookupTime    // time the clients' Metadata and FindCoordinator took
}

// lookupTime sums how long the clients' Metadata and FindCoordinator requests took, from the
// request's making to its response read: a connection's dial and ApiVersions, when the broker
// picked had none yet, included (kgo holds the request until then: WriteWait).
type lookupTime struct{ atomic.Int64 }

func (l *lookupTime) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key == int16(kmsg.Metadata) || key == int16(kmsg.FindCoordinator) {
		l.Add(int64(e2e.WriteWait + e2e.DurationE2E()))
	}
}

// connCount counts the connections a group's clients open (a kgo hook): a client of several
// bridges spreads its Metadata and FindCoordinator over every broker it knows, and opens a
// connection to each one it picks.
type connCount struct{ atomic.Int64 }

func (c *connCount) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		c.Add(1)
	}
}

// requestCounts counts the requests a group's clients write, by api key (a kgo hook, the same
// for both coordinators): how much protocol work a join took.
type requestCounts [int(kmsg.MaxKey) + 1]atomic.Int64

func (r *requestCounts) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key >= 0 && int(key) < len(r) {
		r[key].Add(1)
	}
}

// benchClientOpts are the kgo options of every measured client, the same for both
// coordinators: kgo's defaults (cooperative-sticky balancer, 3 s heartbeats, 45 s session,
// 60 s rebalance timeout) with no autocommit; startGroup also pauses fetching (the bridge does
// not serve Fetch yet, and fetch traffic to kfake would be load the bridge never sees).
func benchClientOpts() []kgo.Opt {
	return []kgo.Opt{kgo.DisableAutoCommit()}
}

// startGroup creates n clients in a loop, as fast as kgo.NewClient returns.
func startGroup(b *testing.B, addr, name, topic string, n int, extra ...kgo.Opt) *benchGroup {
	b.Helper()
	g := &benchGroup{name: name, topic: topic, owned: make([]map[int32]bool, n)}
	for i := range n {
		g.owned[i] = map[int32]bool{}
		update := func(add bool) func(context.Context, *kgo.Client, map[string][]int32) {
			return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
				g.mu.Lock()
				defer g.mu.Unlock()
				before := len(g.owned[i])
				for _, p := range ps[topic] {
					if add {
						g.owned[i][p] = true
					} else {
						delete(g.owned[i], p)
					}
				}
				switch after := len(g.owned[i]); {
				case before == 0 && after > 0:
					g.owning.Add(1)
				case before > 0 && after == 0:
					g.owning.Add(-1)
				}
			}
		}
		opts := append(benchClientOpts(),
			kgo.SeedBrokers(addr),
			kgo.ClientID(fmt.Sprintf("bench-%d", i)),
			kgo.ConsumerGroup(name),
			kgo.ConsumeTopics(topic),
			kgo.OnPartitionsAssigned(update(true)),
			kgo.OnPartitionsRevoked(update(false)),
			kgo.OnPartitionsLost(update(false)),
			kgo.WithHooks(&g.sent, &g.conns, &g.lookups),
		)
		if os.Getenv("ZKBRIDGE_BENCH_KGO_LOG") != "" && i < 2 {
			// Diagnosis: the group lifecycle of the first two members, on stderr.
			opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string {
				return fmt.Sprintf("%s member %d ", time.Now().Format("15:04:05.000"), i)
			})))
		}
		cl, err := kgo.NewClient(append(opts, extra...)...)
		if err != nil {
			b.Fatalf("kgo.NewClient: %v", err)
		}
		cl.PauseFetchTopics(topic) // group membership only: never fetch
		g.clients = append(g.clients, cl)
	}
	return g
}

// close closes every client at once (each dynamic member sends LeaveGroup).
func (g *benchGroup) close() {
	var wg sync.WaitGroup
	for _, cl := range g.clients {
		wg.Go(cl.Close)
	}
	wg.Wait()
}

// covered reports whether every member owns at least one partition and together they own
// each of partitions exactly once.
func (g *benchGroup) covered(partitions int32) bool {
	if g.owning.Load() != int64(len(g.clients)) {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := make([]bool, partitions)
	n := 0
	for _, o := range g.owned {
		for p := range o {
			if p < 0 || p >= partitions || seen[p] {
				return false
			}
			seen[p] = true
			n++
		}
	}
	return n == int(partitions)
}

// describeGroup asks DescribeGroups through adm (kgo finds the coordinator).
func describeGroup(ctx context.Context, adm *kgo.Client, name string) (string, int, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{name}
	resp, err := req.RequestWith(ctx, adm)
	if err != nil {
		return "", 0, err
	}
	if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		return "", 0, fmt.Errorf("DescribeGroups: %+v", resp.Groups)
	}
	return resp.Groups[0].State, len(resp.Groups[0].Members), nil
}

// waitStable polls until g covers partitions and the coordinator says Stable with every member.
func (g *benchGroup) waitStable(b *testing.B, adm *kgo.Client, partitions int32, limit time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		if g.covered(partitions) {
			state, members, err := describeGroup(ctx, adm, g.name)
			if err == nil && state == "Stable" && members == len(g.clients) {
				return
			}
		}
		select {
		case <-ctx.Done():
			state, members, err := describeGroup(context.Background(), adm, g.name)
			b.Fatalf("group %s of %d not Stable within %v: %d members own partitions; coordinator says %s with %d members (%v)",
				g.name, len(g.clients), limit, g.owning.Load(), state, members, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// ratios collects a benchmark's per-coordinator results (the last run of each sub-benchmark)
// so that the parent can log zkbridge/kfake.
type ratios struct {
	mu  sync.Mutex
	got map[string]float64
}

func (r *ratios) set(k string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]float64{}
	}
	r.got[k] = v
}

func (r *ratios) log(b *testing.B, what, a, c string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got[a] > 0 && r.got[c] > 0 {
		b.Logf("%s: %s %.4g, %s %.4g, %s/%s = %.2f", what, a, r.got[a], c, r.got[c], a, c, r.got[a]/r.got[c])
	}
}

// joinBenchSizes are the group sizes of (a).
var joinBenchSizes = []int{10, 100, 1000}

// BenchmarkJoinToStable is (a): join-to-stable time of N kgo members, each member on its own
// kgo.Client, from creating the first client until every member got its partition through
// OnPartitionsAssigned and DescribeGroups says Stable with N members. The topic has N
// partitions, so a complete assignment gives each member one. The bridge runs twice: with
// Kafka's default group.initial.rebalance.delay.ms (3 s), and with the delay off, as kfake has
// none (kfake completes a join phase as soon as every known member has joined, so members
// arriving over time cause several rebalances there).
func BenchmarkJoinToStable(b *testing.B) {
	for _, n := range joinBenchSizes {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var r ratios
			for _, v := range []struct {
				name  string
				delay time.Duration
			}{{"zkbridge-delay=3s", 3 * time.Second}, {"zkbridge-delay=0", 0}, {"kfake", -1}} {
				b.Run(v.name, func(b *testing.B) {
					topic := "join"
					var t coordinatorTarget
					if v.delay < 0 {
						t = kfakeTarget(b, topic, int32(n))
					} else {
						gcfg := group.DefaultConfig()
						gcfg.InitialRebalanceDelay = v.delay
						// Topic ids as Kafka 2.8+ writes them to ZooKeeper: kfake's
						// topics have ids too.
						t = bridgeTargetTopicIDs(b, topic, int32(n), gcfg)
					}
					ms := measureJoins(b, t, n, topic, func(i int) string { return fmt.Sprintf("join-%d-%d", n, i) })
					r.set(v.name, ms)
				})
			}
			r.log(b, fmt.Sprintf("join-to-stable of %d members (ms)", n), "zkbridge-delay=3s", "kfake")
			r.log(b, fmt.Sprintf("join-to-stable of %d members (ms)", n), "zkbridge-delay=0", "kfake")
		})
	}
}

// measureJoins is (a) against one target: b.N groups of n members (group i named groupName(i))
// formed one after another, each timed from its first client to Stable; it returns ms/stable.
func measureJoins(b *testing.B, t coordinatorTarget, n int, topic string, groupName func(int) string) float64 {
	b.Helper()
	adm, err := kgo.NewClient(kgo.SeedBrokers(t.addr))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	var total, cpu, peersCPU, ownerCPU time.Duration
	var gens, metadata, joins, finds, conns, lookups int64
	var zkReqs, zkAll float64
	b.ResetTimer()
	for i := range b.N {
		name := groupName(i)
		zk0, zkAll0 := t.counterSum(b, "zkbridge_zk_requests_total"), t.counterSumAll(b, "zkbridge_zk_requests_total")
		var kinds0 []map[string]float64
		if t.bridge != nil && os.Getenv("ZKBRIDGE_BENCH_ZK_KINDS") != "" {
			kinds0 = t.zkKinds(b)
		}
		peersCPU0, ownerCPU0 := childrenCPU(b, t.childPeers), t.childCPU(b)
		start, cpu0 := time.Now(), cpuTime()
		g := startGroup(b, t.addr, name, topic, n)
		g.waitStable(b, adm, int32(n), 10*time.Minute)
		total += time.Since(start)
		cpu += cpuTime() - cpu0
		b.StopTimer()
		peersCPU += childrenCPU(b, t.childPeers) - peersCPU0
		ownerCPU += t.childCPU(b) - ownerCPU0
		zkReqs += t.counterSum(b, "zkbridge_zk_requests_total") - zk0
		zkAll += t.counterSumAll(b, "zkbridge_zk_requests_total") - zkAll0
		if kinds0 != nil {
			// Diagnosis: each bridge's ZooKeeper requests of this join, by kind.
			for j, k1 := range t.zkKinds(b) {
				d := map[string]float64{}
				for k, v := range k1 {
					if v > kinds0[j][k] {
						d[k] = v - kinds0[j][k]
					}
				}
				b.Logf("%s: bridge %d of %d: ZooKeeper requests by kind: %v", name, j, 1+len(t.peers), d)
			}
		}
		_, gen := g.clients[0].GroupMetadata()
		gens += int64(gen)
		if os.Getenv("ZKBRIDGE_BENCH_KEYS") != "" {
			var keys []string
			for k := range g.sent {
				if n := g.sent[k].Load(); n > 0 {
					keys = append(keys, fmt.Sprintf("%s=%d", kmsg.NameForKey(int16(k)), n))
				}
			}
			b.Logf("%s: requests by key: %v", t.name, keys)
		}
		metadata += g.sent[kmsg.Metadata].Load()
		joins += g.sent[kmsg.JoinGroup].Load()
		finds += g.sent[kmsg.FindCoordinator].Load()
		conns += g.conns.Load()
		lookups += g.lookups.Load()
		g.close()
		t.settle(b)
		b.StartTimer()
	}
	ms := float64(total.Milliseconds()) / float64(b.N)
	b.ReportMetric(ms, "ms/stable")
	// How many join phases it took: the generation of the Stable group.
	b.ReportMetric(float64(gens)/float64(b.N), "generations")
	// CPU of the whole process (clients and coordinator) meanwhile.
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/stable")
	if t.child != nil {
		// The coordinating bridge's own CPU, in its process (cpu-s/stable is the clients').
		b.ReportMetric(ownerCPU.Seconds()/float64(b.N), "owner-cpu-s/stable")
	}
	if t.isBridge() {
		// The bridge's ZooKeeper requests from the first client to Stable.
		b.ReportMetric(zkReqs/float64(b.N), "zk-reqs/stable")
	}
	if len(t.peers)+len(t.childPeers) > 0 {
		// Every bridge's, the owner's included: what being several adds beside the join.
		b.ReportMetric(zkAll/float64(b.N), "zk-reqs-all/stable")
	}
	if len(t.childPeers) > 0 {
		// The other bridges' CPU meanwhile (their processes; 10 ms ticks): what being several
		// costs beside the owner. cpu-s/stable is then the clients' and the owner's alone.
		b.ReportMetric(peersCPU.Seconds()/float64(b.N), "peers-cpu-s/stable")
	}
	// The protocol work it took: Metadata requests (each a topic of N
	// partitions, which the clients decode and index) and JoinGroups.
	b.ReportMetric(float64(metadata)/float64(b.N), "metadata-reqs")
	b.ReportMetric(float64(joins)/float64(b.N), "join-reqs")
	b.ReportMetric(float64(finds)/float64(b.N), "findcoord-reqs")
	b.ReportMetric(float64(conns)/float64(b.N)/float64(n), "conns/member")
	b.ReportMetric(float64(lookups)/1e6/float64(b.N)/float64(n), "lookup-ms/member")
	return ms
}

// BenchmarkHeartbeat is (b): Heartbeat v4 requests (kgo's version) with kmsg, from conns
// connections with window requests in flight each, round robin over the members of a Stable
// group of 10 kgo members (whose own 3 s heartbeats go on meanwhile). Reported: heartbeats per
// wall second, and per CPU second of the whole test process (coordinator and load generator:
// both sides run in process, identically for both coordinators; the bridge writes nothing to
// ZooKeeper for a heartbeat).
func BenchmarkHeartbeat(b *testing.B) {
	const (
		members = 10
		topic   = "hb"
	)
	var r ratios
	for _, name := range []string{"zkbridge", "kfake"} {
		b.Run(name, func(b *testing.B) {
			var t coordinatorTarget
			if name == "kfake" {
				t = kfakeTarget(b, topic, members)
			} else {
				t = bridgeTarget(b, topic, members, testGroupConfig())
			}
			perSec, perCPU := measureHeartbeats(b, t, "heartbeats", topic, members, 1)
			r.set(name+" hb/s", perSec)
			r.set(name+" hb/cpu-s", perCPU)
		})
	}
	r.log(b, "heartbeats per second", "zkbridge hb/s", "kfake hb/s")
	r.log(b, "heartbeats per CPU second", "zkbridge hb/cpu-s", "kfake hb/cpu-s")
}

// measureHeartbeats is (b) against one target: a Stable group gname of members kgo members,
// then b.N × perOp Heartbeat requests from conns pipelined connections; it returns heartbeats
// per wall second and per CPU second of the process.
func measureHeartbeats(b *testing.B, t coordinatorTarget, gname, topic string, members, perOp int) (perSec, perCPU float64) {
	b.Helper()
	const (
		conns  = 4
		window = 32
	)
	adm, err := kgo.NewClient(kgo.SeedBrokers(t.addr))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	g := startGroup(b, t.addr, gname, topic, members)
	defer g.close()
	g.waitStable(b, adm, int32(members), time.Minute)
	type identity struct {
		id  string
		gen int32
	}
	var ids []identity
	for _, cl := range g.clients {
		id, gen := cl.GroupMetadata()
		ids = append(ids, identity{id, gen})
	}
	// t.addr is the group's coordinator (the only node, or the owner among several bridges).
	wires := make([]*wireConn, conns)
	for i := range wires {
		wires[i] = dialWire(b, t.addr)
	}
	hb := func(i int) kmsg.Request {
		m := ids[i%len(ids)]
		req := kmsg.NewPtrHeartbeatRequest()
		req.SetVersion(4)
		req.Group, req.MemberID, req.Generation = gname, m.id, m.gen
		return req
	}
	check := func(resp kmsg.Response) error {
		if code := resp.(*kmsg.HeartbeatResponse).ErrorCode; code != 0 {
			return fmt.Errorf("heartbeat error %d", code)
		}
		return nil
	}
	writes0 := t.counterSum(b, "zkbridge_groups_writes_total")
	total := b.N * perOp
	b.ResetTimer()
	cpu0, wall0, ownerCPU0 := cpuTime(), time.Now(), t.childCPU(b)
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for i, w := range wires {
		n := total / conns
		if i < total%conns {
			n++
		}
		wg.Go(func() { errs[i] = w.pipeline(n, window, hb, check) })
	}
	wg.Wait()
	wall, cpu, ownerCPU := time.Since(wall0), cpuTime()-cpu0, t.childCPU(b)-ownerCPU0
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	perSec = float64(total) / wall.Seconds()
	perCPU = float64(total) / cpu.Seconds()
	b.ReportMetric(perSec, "hb/s")
	b.ReportMetric(perCPU, "hb/cpu-s")
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
	if t.child != nil {
		// The coordinating bridge's own CPU, in its process (hb/cpu-s is the load generator's).
		b.ReportMetric(float64(total)/ownerCPU.Seconds(), "hb/owner-cpu-s")
	}
	if t.isBridge() {
		// A heartbeat changes nothing that is persisted: no ZooKeeper write.
		b.ReportMetric(t.counterSum(b, "zkbridge_groups_writes_total")-writes0, "zk-writes")
	}
	return perSec, perCPU
}

// BenchmarkOffsetCommit is (c): OffsetCommit requests (v8, kgo's version) of P partitions each
// to one group (generation -1, no member: commits to an Empty group are accepted, rule 4), from
// 4 connections with 4 requests in flight each, with increasing offsets. Each request is
// answered once a fenced group write to ZooKeeper holds it (the /consumers/<g>/offsets/<t>/<p>
// znodes and the bridge's own offset records). One op is one request; partitions/s is what
// clients were told is persisted, writes/s × partitions/write what ZooKeeper received.
// groups=8 spreads the same load over 8 groups (8 actors writing at once). kfake (in memory,
// nothing persisted) is the reference of what the wire and the clients cost.
func BenchmarkOffsetCommit(b *testing.B) {
	const (
		topic      = "commits"
		partitions = 1000
		conns      = 4
		window     = 4
	)
	for _, name := range []string{"zkbridge", "kfake"} {
		for _, groups := range []int{1, 8} {
			for _, per := range []int{1, 10, 100, 1000} {
				if name == "kfake" && groups > 1 {
					continue
				}
				b.Run(fmt.Sprintf("%s/groups=%d/partitions=%d", name, groups, per), func(b *testing.B) {
					// A 1,000-partition commit is ~2,000 ops: zkstate sends it as multis of at
					// most a few hundred, because ZooKeeper keeps its last 500 transactions in
					// memory and 500 transactions of ~300 KB each drove the test server into
					// full GCs (docs/benchmarks.md).
					var t coordinatorTarget
					if name == "kfake" {
						t = kfakeTarget(b, topic, partitions)
					} else {
						t = bridgeTarget(b, topic, partitions, testGroupConfig())
					}
					wires := make([]*wireConn, conns)
					for i := range wires {
						wires[i] = dialWire(b, t.addr)
					}
					var offset atomic.Int64
					commit := func(i int) kmsg.Request {
						req := kmsg.NewPtrOffsetCommitRequest()
						req.SetVersion(8)
						req.Group = fmt.Sprintf("commits-%d", i%groups)
						req.Generation = -1
						rt := kmsg.NewOffsetCommitRequestTopic()
						rt.Topic = topic
						first := (i * per) % partitions
						off := offset.Add(1)
						for p := range per {
							rp := kmsg.NewOffsetCommitRequestTopicPartition()
							rp.Partition = int32((first + p) % partitions)
							rp.Offset = off
							rp.LeaderEpoch = -1
							rt.Partitions = append(rt.Partitions, rp)
						}
						req.Topics = append(req.Topics, rt)
						return req
					}
					check := func(resp kmsg.Response) error {
						for _, rt := range resp.(*kmsg.OffsetCommitResponse).Topics {
							for _, rp := range rt.Partitions {
								if rp.ErrorCode != 0 {
									return fmt.Errorf("commit %s/%d: error %d", rt.Topic, rp.Partition, rp.ErrorCode)
								}
							}
						}
						return nil
					}
					// A warm-up round over one period of commit's sequence creates every znode
					// the measured commits touch: they overwrite them, as a running consumer's
					// commits do.
					if err := wires[0].pipeline(groups*partitions/per, window, commit, check); err != nil {
						b.Fatal(err)
					}
					writes0 := t.counterSum(b, "zkbridge_groups_writes_total")
					offsets0 := t.counterSum(b, "zkbridge_groups_offsets_committed_total")
					b.ResetTimer()
					wall0 := time.Now()
					var wg sync.WaitGroup
					var next atomic.Int64
					errs := make([]error, conns)
					for i, w := range wires {
						n := b.N / conns
						if i < b.N%conns {
							n++
						}
						wg.Go(func() {
							errs[i] = w.pipeline(n, window, func(int) kmsg.Request { return commit(int(next.Add(1) - 1)) }, check)
						})
					}
					wg.Wait()
					wall := time.Since(wall0)
					b.StopTimer()
					if err := errors.Join(errs...); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(b.N*per)/wall.Seconds(), "partitions/s")
					b.ReportMetric(float64(b.N)/wall.Seconds(), "commits/s")
					if t.bridge != nil {
						// The group actor runs one write at a time and folds the commits that
						// queued meanwhile into the next one (a later offset of a partition
						// replacing an earlier one): how many writes it took, and how many
						// partitions each wrote. A write is one ZooKeeper multi of up to ~250
						// ops (zkstate splits larger ones: 9 multis for 1,000 partitions).
						writes := t.counterSum(b, "zkbridge_groups_writes_total") - writes0
						offsets := t.counterSum(b, "zkbridge_groups_offsets_committed_total") - offsets0
						b.ReportMetric(writes/wall.Seconds(), "writes/s")
						if writes > 0 {
							b.ReportMetric(offsets/writes, "partitions/write")
						}
					}
				})
			}
		}
	}
}
