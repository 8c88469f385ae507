package bridge_test

// A bridge killed with SIGKILL in front of a mixed group (issue 5, the crash window noted in
// its closing notes). The bridge runs in a child process, this test binary started again with
// childEnv set, so that the kill is a real one: the kernel closes every socket of the process,
// and ZooKeeper expires its session after the session timeout, which hands the Kafka members'
// partitions to the zk members. The Kafka members are not told: with their own session timeout
// (45 s, kgo's and librdkafka's default) they keep their assignment for that long. What they
// can still consume decides whether two members consume one partition at once.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// childEnv carries a childSpec (JSON) to a child process of the test binary; TestMain then
// runs a bridge instead of the tests.
const childEnv = "ZKBRIDGE_TEST_CHILD_BRIDGE"

// childSpec is what a test sets of the child's bridge.Config; the rest is testBridgeConfig's.
type childSpec struct {
	ZKConnect        string
	NodeID           int32
	ZKSessionTimeout time.Duration
	HeartbeatHold    time.Duration
	UpstreamFromZK   bool // the data path, with proxy listeners on system-chosen ports
	// Group, when set, is the group config (testBridgeConfig's otherwise).
	Group *group.Config
	// LogLevel is the lowest level the child logs (zerolog's names): "" logs every line, down
	// to each request's trace (zerolog's global level is trace), for a crash test's diagnosis;
	// a benchmark logs "info", as a deployment does: at 300 groups a survivor's log was 5.4 MB
	// a run at every level (two thirds of its lines a request's trace), 0.25 MB at info.
	LogLevel string
}

// runChildBridge runs the bridge spec describes until the process is killed; it prints
// "ready <kafka listener> <legacy listener> <admin listener>" on stdout once the bridge is ready
// and logs JSON lines on stderr.
func runChildBridge(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childEnv, err)
		return 2
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Logger()
	if s.LogLevel != "" {
		l, err := zerolog.ParseLevel(s.LogLevel)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", childEnv, err)
			return 2
		}
		log = log.Level(l)
	}
	cfg := testBridgeConfig(s.ZKConnect, s.NodeID, log)
	cfg.ZKSessionTimeout, cfg.HeartbeatHold, cfg.UpstreamFromZK = s.ZKSessionTimeout, s.HeartbeatHold, s.UpstreamFromZK
	cfg.LegacyListen = "127.0.0.1:0"
	if s.Group != nil {
		cfg.Group = *s.Group
	}
	if s.UpstreamFromZK {
		cfg.ProxyListen = "127.0.0.1:0"
		cfg.MetadataMaxAge = time.Second
	}
	b, err := bridge.New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bridge.New: %v\n", err)
		return 2
	}
	if dir := os.Getenv(childProfileEnv); dir != "" {
		go profileWindows(dir, s.NodeID, b.Registry())
	}
	done := make(chan error, 1)
	go func() { done <- b.Run(context.Background()) }()
	select {
	case <-b.Ready():
		fmt.Printf("ready %s %s %s\n", b.Addr(), b.LegacyAddr(), b.AdminAddr())
	case err := <-done:
		fmt.Fprintf(os.Stderr, "Run: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "Run: %v\n", <-done) // only if Run fails: the parent kills us
	return 1
}

// childProfileEnv, set to a directory (diagnosis, e.g. of a benchmark's child bridges), makes a
// child bridge write its CPU profile there in windows of childProfileWindow, one file per window
// named cpu-<node id>-<window start, unix ms>.pprof, and its counters and gauges at each
// window's start (metrics-<node id>-<unix ms>.txt, one "name label=value... value" a line: the
// ZooKeeper requests by kind, among others, to count a window's requests). The child is killed
// with SIGKILL, which loses only the window under way; a window's start places it before or
// after a kill. `go tool pprof -top <binary> <files>` merges the windows of a span.
const childProfileEnv = "ZKBRIDGE_TEST_CHILD_CPUPROFILE_DIR"

const childProfileWindow = 2 * time.Second

// profileWindows writes the windows of childProfileEnv until the process ends.
func profileWindows(dir string, node int32, reg prometheus.Gatherer) {
	for {
		at := time.Now().UnixMilli()
		if mfs, err := reg.Gather(); err == nil {
			var sb strings.Builder
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					sb.WriteString(mf.GetName())
					for _, l := range m.GetLabel() {
						fmt.Fprintf(&sb, " %s=%s", l.GetName(), l.GetValue())
					}
					// One of the three is set (histograms and summaries are left out).
					fmt.Fprintf(&sb, " %g\n", m.GetCounter().GetValue()+m.GetGauge().GetValue()+m.GetUntyped().GetValue())
				}
			}
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("metrics-%d-%d.txt", node, at)), []byte(sb.String()), 0o644)
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%d-%d.pprof", node, at)))
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", childProfileEnv, err)
			return
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", childProfileEnv, err)
			return
		}
		time.Sleep(childProfileWindow)
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// childBridge is a bridge in a child process.
type childBridge struct {
	cmd    *exec.Cmd
	addr   string // its Kafka listener
	legacy string // its legacy listener
	admin  string // its admin listener (/metrics)
	log    string // its stderr, a file
}

// startChildBridge starts a bridge in a child process and waits until it is ready; the child
// is killed at cleanup (and by the kernel if this process dies first), and its log is shown
// if the test failed. A child bridge is started only to be killed, paused or cut off: every
// test that starts one is a crash test, which -short skips (CI runs them).
func startChildBridge(t testing.TB, s childSpec) *childBridge {
	t.Helper()
	if testing.Short() {
		t.Skip("crash test of a child bridge: -short skips it, CI runs it")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// ZKBRIDGE_TEST_CHILD_LOG_DIR keeps each child's log there, named for its node id (diagnosis
	// of a benchmark, whose passing runs show nothing).
	dir := cmp.Or(os.Getenv("ZKBRIDGE_TEST_CHILD_LOG_DIR"), t.TempDir())
	c := &childBridge{log: filepath.Join(dir, fmt.Sprintf("bridge-%d-%d.log", s.NodeID, time.Now().UnixMilli()))}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	c.cmd = exec.Command(exe, "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	c.cmd.Stderr = logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting the child bridge: %v", err)
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			if b, err := os.ReadFile(c.log); err == nil {
				t.Logf("the child bridge's log:\n%s", b)
			}
		}
	})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addrs, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
				ready <- addrs
			}
		}
	}()
	select {
	case addrs := <-ready:
		if f := strings.Fields(addrs); len(f) == 3 {
			c.addr, c.legacy, c.admin = f[0], f[1], f[2]
		} else {
			t.Fatalf("the child bridge's ready line: %q", addrs)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child bridge was not ready after 30s")
	}
	return c
}

// kill sends SIGKILL and reaps the child; it may be called more than once.
func (c *childBridge) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		_ = c.cmd.Wait()
	}
}

// receipts records what the Kafka members received and when: one entry per partition and poll.
type receipts struct {
	mu   sync.Mutex
	got  []receipt
	n    map[string]int // records by member
	last time.Time
}

type receipt struct {
	at     time.Time
	member string
	part   mtp
	n      int
}

func (r *receipts) add(name string, fs kgo.Fetches) {
	if fs.NumRecords() == 0 {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			r.got = append(r.got, receipt{at: now, member: name, part: mtp{Topic: p.Topic, Partition: p.Partition}, n: len(p.Records)})
			r.n[name] += len(p.Records)
		}
	})
	r.last = now
}

// lastAt is when the last record was received.
func (r *receipts) lastAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// firstSince is when the first record at or after t was received (zero if none).
func (r *receipts) firstSince(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.got {
		if !g.at.Before(t) {
			return g.at
		}
	}
	return time.Time{}
}

func (r *receipts) of(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name]
}

// overlaps lists the records a Kafka member received for a partition other's own view said
// it consumed at that instant, and counts the records received at or after since.
func (r *receipts) overlaps(v *views, other string, since time.Time) (bad []string, after int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.got {
		if g.at.Before(since) {
			continue
		}
		after += g.n
		if v.ownedAt(other, g.at)[g.part] {
			bad = append(bad, fmt.Sprintf("%d records of %s-%d to %s at %s", g.n, g.part.Topic, g.part.Partition, g.member, g.at.Format("15:04:05.000")))
		}
	}
	return bad, after
}

// Two Kafka members (kgo, 45 s session timeout) and a zk member share a mixed group whose
// Kafka members fetch through the bridge's proxy listeners (the data path, as deployed:
// Metadata names only the bridge); records are produced to every partition all along. Then the
// bridge goes: its ZooKeeper session expires after 4 s and the zk member takes every
// partition. No Kafka member may receive a record of a partition while the zk member consumes
// it, whatever its session timeout:
//
//   - killed (SIGKILL): the kernel resets every connection of the bridge; kgo gives its
//     partitions up within a few seconds anyway;
//   - hung (SIGSTOP, a process or host that stops answering): the connections stay open and
//     silent, and the Kafka members hold their assignment past the takeover (45 s); their
//     fetches wait on the silent bridge;
//   - paused (SIGSTOP, then SIGCONT once the zk member took over: a long GC or VM pause, a
//     healed partition): the bridge comes back with its relay's connections open before it
//     has read that its session expired; the fetch gate (fetchgate.go) withholds the
//     members' fetches until they have rejoined and the partitions are theirs again;
//   - cut (the bridge's connection to ZooKeeper cut, then restored): the bridge runs on and
//     keeps relaying, and the members keep heartbeating; the gate closes when its session
//     lease lapses, before the server expires the session, and opens again once the group
//     has claimed in the new session.
func TestIntegration_MixedBridgeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("crash tests of a child bridge: -short skips them, CI runs them")
	}
	signal := func(sig syscall.Signal) func(*childBridge, *zktest.Proxy) error {
		return func(c *childBridge, _ *zktest.Proxy) error { return c.cmd.Process.Signal(sig) }
	}
	freeze := func(_ *childBridge, p *zktest.Proxy) error { p.Freeze(); return nil }
	thaw := func(_ *childBridge, p *zktest.Proxy) error { p.Thaw(); return nil }
	for _, tc := range []killScenario{
		{name: "killed", stop: signal(syscall.SIGKILL)},
		{name: "hung", stop: signal(syscall.SIGSTOP), holds: true},
		{name: "paused", stop: signal(syscall.SIGSTOP), resume: signal(syscall.SIGCONT), holds: true},
		{name: "cut", stop: freeze, resume: thaw},
	} {
		t.Run(tc.name, func(t *testing.T) { testMixedBridgeKilled(t, tc) })
	}
}

// killScenario is how the bridge goes (stop) and, if it comes back, how (resume).
type killScenario struct {
	name         string
	stop, resume func(*childBridge, *zktest.Proxy) error
	holds        bool // the Kafka members keep their assignment past the takeover
}

func testMixedBridgeKilled(t *testing.T, sc killScenario) {
	const g = "killed"
	topics := []string{"ta", "tb"}
	const perTopic = 6
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID("killed-upstream"), kfake.SeedTopics(perTopic, topics...))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kf.Close)
	kfAddr := kf.ListenAddrs()[0]
	host, port, err := net.SplitHostPort(kfAddr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)

	// ZooKeeper holds the same cluster, 0.8 style: the zk member reads its topics there, and the
	// bridge its upstream brokers.
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	layout := zkstate.Layout{
		Brokers: []zkstate.BrokerRegistration{{ID: 0, Version: 1, Host: host, Port: int32(p), JMXPort: -1, Timestamp: "1700000000000"}},
		Topics:  map[string]zkstate.TopicAssignment{},
		States:  map[zkstate.TopicPartition]zkstate.PartitionState{},
	}
	for _, tp := range topics {
		a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
		for p := range int32(perTopic) {
			a.Partitions[p] = []int32{0}
			layout.States[mtp{Topic: tp, Partition: p}] = zkstate.PartitionState{Version: 1, Leader: 0, ISR: []int32{0}}
		}
		layout.Topics[tp] = a
	}
	if err := zkstate.LoadLayout(t.Context(), zk, layout); err != nil {
		t.Fatalf("LoadLayout: %v", err)
	}
	if _, _, err := zkstate.InitMode(t.Context(), zk, bridge.DefaultRoot, g, zkstate.ModeMixed, "test", "kill test"); err != nil {
		t.Fatalf("InitMode: %v", err)
	}
	i := strings.IndexByte(connect, '/')
	zkProxy := zktest.StartProxy(t, connect[:i]) // the bridge's way to ZooKeeper (cut)
	child := startChildBridge(t, childSpec{
		ZKConnect: zkProxy.Addr() + connect[i:], NodeID: dfNode, ZKSessionTimeout: 4 * time.Second,
		HeartbeatHold: mixedHeartbeatHold, UpstreamFromZK: true,
	})

	// Records to every partition, straight to the cluster, all along.
	producer, err := kgo.NewClient(kgo.SeedBrokers(kfAddr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	var produced atomic.Int64 // when the last record was acknowledged, Unix ns
	pctx, stopProducing := context.WithCancel(context.Background())
	t.Cleanup(stopProducing)
	go func() {
		for i := 0; pctx.Err() == nil; i++ {
			for _, tp := range topics {
				for p := range int32(perTopic) {
					producer.Produce(pctx, &kgo.Record{Topic: tp, Partition: p, Value: []byte(strconv.Itoa(i))}, func(_ *kgo.Record, err error) {
						if err == nil {
							produced.Store(time.Now().UnixNano())
						}
					})
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	got := &receipts{n: map[string]int{}}
	mc := &mixedCluster{t: t, env: &env{connect: connect, zk: zk}, views: newViews(), ledger: newLedger(), group: g,
		topics: topics, seed: child.addr, legacyAddr: child.legacy, lostOK: true, records: got.add}
	if sc.resume == nil {
		// Killed or hung for good: l1's last offsets have nobody to go to, and its stop at
		// cleanup would wait 20 s for them.
		mc.reportWait = 2 * time.Second
	}
	mc.zkMember("z1")
	// A legacy member that stops in time: it gives its coordinator up after 6 pings of 100 ms,
	// well inside the 4 s session (LegacyCoordinator.checkCrashSafety).
	mc.legacyMember("l1")
	// The clients' context ends before they are closed at cleanup (cleanups run last first), so
	// that Close does not retry its LeaveGroup against the dead bridge for the retry timeout.
	cctx, cancelClients := context.WithCancel(context.Background())
	long := []kgo.Opt{kgo.WithContext(cctx), kgo.SessionTimeout(45 * time.Second), kgo.RetryTimeout(45 * time.Second)}
	k1, _ := mc.kafkaMember("k1", long...)
	k2, _ := mc.kafkaMember("k2", long...)
	t.Cleanup(cancelClients)
	mc.waitConverged(30*time.Second, 4, map[string]*kgo.Client{"k1": k1, "k2": k2})
	zktest.Eventually(t, 10*time.Second, "both Kafka members receive records", func() (bool, string) {
		return got.of("k1") > 0 && got.of("k2") > 0, fmt.Sprintf("k1 %d, k2 %d records", got.of("k1"), got.of("k2"))
	})
	z1 := mc.group + "_z1"
	kafkaParts := map[mtp]bool{}
	for _, k := range []string{"k1", "k2"} {
		for p := range mc.views.of(k) {
			kafkaParts[p] = true
		}
	}

	killed := time.Now()
	if err := sc.stop(child, zkProxy); err != nil {
		t.Fatal(err)
	}
	var took time.Time // when z1 first consumed a partition of a Kafka member
	gaveUp := map[string]time.Duration{}
	zktest.Eventually(t, 30*time.Second, "z1 consumes every partition", func() (bool, string) {
		for _, k := range []string{"k1", "k2"} {
			if _, ok := gaveUp[k]; !ok && len(mc.views.of(k)) == 0 {
				gaveUp[k] = time.Since(killed)
			}
		}
		mine := mc.views.of(z1)
		if took.IsZero() {
			for p := range mine {
				if kafkaParts[p] {
					took = time.Now()
					break
				}
			}
		}
		return len(mine) == 2*perTopic, fmt.Sprintf("z1 consumes %d of %d", len(mine), 2*perTopic)
	})
	time.Sleep(time.Second) // what the Kafka members receive meanwhile counts too
	if sc.holds {
		for _, k := range []string{"k1", "k2"} {
			if len(mc.views.of(k)) == 0 {
				t.Errorf("%s gave its partitions up (%v after the bridge hung): the test needs members that hold them past the takeover", k, gaveUp[k])
			}
		}
	}
	var resumed time.Time
	if sc.resume != nil {
		resumed = time.Now()
		if err := sc.resume(child, zkProxy); err != nil {
			t.Fatal(err)
		}
		// The bridge finds its session expired, registers its members again in a new one, and
		// they share the partitions with z1 once more.
		// (Not waitConverged: its view check flags the takeover, which held assignments make
		// look like a double hand-out; what counts here is what was received.)
		zktest.Eventually(t, 30*time.Second, "the mixed group converged again", func() (bool, string) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			return mc.converged(ctx, 4, map[string]*kgo.Client{"k1": k1, "k2": k2})
		})
		time.Sleep(time.Second)
	}
	bad, after := got.overlaps(mc.views, z1, took)
	t.Logf("%s at 0; z1 took a Kafka member's partition at %v; the Kafka members gave up at %v; records to Kafka members since the takeover: %d, the last at %v",
		sc.name, took.Sub(killed).Round(time.Millisecond), gaveUp, after, got.lastAt().Sub(killed).Round(time.Millisecond))
	if sc.resume != nil {
		log, _ := os.ReadFile(child.log)
		t.Logf("resumed at %v; the bridge withheld %d Fetch responses; the Kafka members' first record after it at %v",
			resumed.Sub(killed).Round(time.Millisecond), strings.Count(string(log), "relayed Fetch response withheld"),
			got.firstSince(resumed).Sub(killed).Round(time.Millisecond))
	}
	if last := time.Unix(0, produced.Load()); !last.After(took) {
		t.Errorf("no record was produced after z1 took the Kafka members' partitions (last at %v): nothing to consume, the test proves nothing", last.Sub(killed))
	}
	if sc.resume != nil && after == 0 {
		t.Errorf("the Kafka members received nothing after the bridge resumed and the group converged")
	}
	// The legacy member's view is what it consumes (it stops on its Stop handler, or when its
	// coordinator goes quiet): no partition may be handed to another member before it did.
	// (The Kafka members' views are their assignments, held past the takeover: the receipts
	// above are what they consumed.)
	for _, v := range mc.views.violationsOf("l1") {
		t.Errorf("consumed by two members at once: %s", v)
	}
	for i, b := range bad {
		if i == 10 {
			t.Errorf("... and %d more", len(bad)-i)
			break
		}
		t.Errorf("consumed by two members at once: %s, while z1 consumed it", b)
	}
}

// counterSum is the sum of the child's counter name over its labels, read from its /metrics.
func (c *childBridge) counterSum(tb testing.TB, name string) float64 {
	tb.Helper()
	code, body := httpGet(tb, "http://"+c.admin+"/metrics")
	if code != http.StatusOK {
		tb.Fatalf("the child bridge's metrics: status %d", code)
	}
	sum := 0.0
	for k, v := range parseMetrics(body) {
		if k == name || strings.HasPrefix(k, name+"{") {
			sum += v
		}
	}
	return sum
}
