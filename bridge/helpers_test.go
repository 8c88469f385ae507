package bridge_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		if os.Getenv("ZKBRIDGE_BENCH_BRIDGE_LOG") != "" {
			zerolog.TimeFieldFormat = "15:04:05.000" // a benchmark's diagnosis: millisecond timestamps
		}
		os.Exit(runChildBridge(spec)) // crash_test.go: this process is a bridge to be killed
	}
	os.Exit(zktest.Main(m))
}

// groups is the contract newproto consumes (newproto.Groups, implemented by *bridge.Bridge).
type groups = newproto.Groups

// testLog is a zerolog writer into t.Log that goes quiet once the test is over, so that a late
// line from a goroutine cannot fail the run.
type testLog struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func newLogger(t testing.TB) zerolog.Logger {
	l := &testLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return zerolog.New(zerolog.ConsoleWriter{Out: l, NoColor: true, TimeFormat: "15:04:05.000"}).With().Timestamp().Logger()
}

// testGroupConfig keeps the engine's timers short enough for tests.
func testGroupConfig() group.Config {
	c := group.DefaultConfig()
	c.InitialRebalanceDelay = 300 * time.Millisecond
	c.MinSessionTimeout = 100 * time.Millisecond
	return c
}

// running is a Bridge whose Run is in progress.
type running struct {
	*bridge.Bridge
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startBridge runs a bridge on loopback ports against connect and waits until it is ready; it
// is stopped at cleanup.
func startBridge(t testing.TB, connect string, node int32, mod func(*bridge.Config)) *running {
	t.Helper()
	cfg := testBridgeConfig(connect, node, newLogger(t).With().Int32("test_node", node).Logger())
	if d, err := time.ParseDuration(os.Getenv("ZKBRIDGE_TEST_HEARTBEAT_HOLD")); err == nil {
		// A compatibility sweep: every test's clients against held heartbeats.
		cfg.HeartbeatHold = d
	}
	if mod != nil {
		mod(&cfg)
	}
	return runBridge(t, cfg)
}

// startBridgeTB is startBridge for benchmarks and fuzz targets: node clientsNode, logging
// warnings and errors only (a benchmark's debug lines would cost more than what it measures), and
// 10 s session and write timeouts, which a loaded measurement needs.
func startBridgeTB(tb testing.TB, connect string, mod func(*bridge.Config)) *running {
	tb.Helper()
	return startBridge(tb, connect, clientsNode, func(c *bridge.Config) {
		c.ZKSessionTimeout, c.WriteTimeout, c.MirrorRetry = 10*time.Second, 10*time.Second, 0
		c.Logger = newLogger(tb).Level(zerolog.WarnLevel)
		if os.Getenv("ZKBRIDGE_BENCH_LOG") == "debug" { // diagnosis: every line of the bridge
			c.Logger = newLogger(tb)
		}
		if mod != nil {
			mod(c)
		}
	})
}

// testBridgeConfig is a bridge on loopback ports with a 4 s ZooKeeper session and the test
// engine's short timers.
func testBridgeConfig(connect string, node int32, log zerolog.Logger) bridge.Config {
	return bridge.Config{
		ZKConnect:        connect,
		ZKSessionTimeout: 4 * time.Second,
		KafkaListen:      "127.0.0.1:0",
		AdminListen:      "127.0.0.1:0",
		NodeID:           node,
		Group:            testGroupConfig(),
		WriteTimeout:     3 * time.Second,
		MirrorRetry:      200 * time.Millisecond,
		DrainTimeout:     time.Second,
		Logger:           log,
	}
}

// runBridge runs a bridge with cfg, waits until it is ready and stops it at cleanup.
func runBridge(tb testing.TB, cfg bridge.Config) *running {
	tb.Helper()
	b, err := bridge.New(cfg)
	if err != nil {
		tb.Fatalf("bridge.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Bridge: b, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx) }()
	select {
	case <-b.Ready():
	case err := <-r.done:
		cancel()
		tb.Fatalf("Run ended before ready: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		tb.Fatal("bridge not ready after 20s")
	}
	tb.Cleanup(func() {
		if err := r.stop(); err != nil {
			tb.Errorf("Run: %v", err)
		}
	})
	return r
}

// stop cancels Run and waits for it (at most 20s); it may be called more than once.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(20 * time.Second):
			r.err = fmt.Errorf("Run did not return within 20s of cancel")
		}
	})
	return r.err
}

// do calls Do with a timeout and fails the test on error.
func do[R group.Reply](t *testing.T, g groups, name string, build func(group.Token) group.Event) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r, err := g.Do(ctx, name, build)
	if err != nil {
		t.Fatalf("Do(%s): %v", name, err)
	}
	out, ok := r.(R)
	if !ok {
		t.Fatalf("Do(%s) = %T, want %T", name, r, *new(R))
	}
	return out
}

// subscription is a consumer-protocol subscription to topics.
func subscription(version int16, topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Version = version
	m.Topics = topics
	return m.AppendTo(nil)
}

// assignment is a consumer-protocol assignment of partitions of one topic.
func assignment(topic string, partitions ...int32) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	t := kmsg.NewConsumerMemberAssignmentTopic()
	t.Topic, t.Partitions = topic, partitions
	a.Topics = append(a.Topics, t)
	return a.AppendTo(nil)
}

// joinEvent is a consumer's JoinGroup (v5-like: known member ids not required).
func joinEvent(id group.MemberID, inst group.InstanceID, host string, topics ...string) func(group.Token) group.Event {
	return func(tok group.Token) group.Event {
		return group.JoinGroup{
			Token:            tok,
			InstanceID:       inst,
			ClientID:         "client-" + string(id),
			ClientHost:       "/" + host,
			SessionTimeout:   30 * time.Second,
			RebalanceTimeout: 2 * time.Second,
			ProtocolType:     "consumer",
			Protocols:        []group.Protocol{{Name: "range", Metadata: subscription(0, topics...)}},
			NewMemberID:      id,
		}
	}
}

// joinAll sends the JoinGroups concurrently (they complete together, after the initial
// rebalance delay) and returns the replies in order.
func joinAll(t *testing.T, g groups, name string, joins ...func(group.Token) group.Event) []group.JoinReply {
	t.Helper()
	out := make([]group.JoinReply, len(joins))
	errs := make([]error, len(joins))
	var wg sync.WaitGroup
	for i, j := range joins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			r, err := g.Do(ctx, name, j)
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = r.(group.JoinReply)
		}()
		if i < len(joins)-1 {
			awaitJoined(t, g, name, j) // keep the join order, so that the first is the leader
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	return out
}

// awaitJoined waits until the group's engine has taken in the JoinGroup join builds: a heartbeat
// of its member is answered as the member's (REBALANCE_IN_PROGRESS while the group rebalances,
// ILLEGAL_GENERATION once the rebalance is over), not UNKNOWN_MEMBER_ID. The group's actor steps
// one request at a time, so a JoinGroup sent after this is stepped after that one. (Describe
// cannot tell: a group with nothing persisted yet is described Dead.)
func awaitJoined(t *testing.T, g groups, name string, join func(group.Token) group.Event) {
	t.Helper()
	ev := join(0).(group.JoinGroup)
	id := ev.MemberID
	if id == "" {
		id = ev.NewMemberID
	}
	gen := describe(t, g, name).Group.Generation
	zktest.Eventually(t, 10*time.Second, fmt.Sprintf("the engine has %s's JoinGroup", id), func() (bool, string) {
		switch r := heartbeat(t, g, name, id, ev.InstanceID, gen); r.Err {
		case group.ErrRebalanceInProgress, group.ErrIllegalGeneration, group.ErrNone:
			return true, ""
		default:
			return false, fmt.Sprintf("heartbeat: %v", r.Err)
		}
	})
}

// syncAll sends the members' SyncGroups concurrently (the leader's carries assignments) and
// returns the replies in order.
func syncAll(t *testing.T, g groups, name string, gen group.Generation, members []group.MemberID, insts []group.InstanceID, assignments map[group.MemberID][]byte) []group.SyncReply {
	t.Helper()
	out := make([]group.SyncReply, len(members))
	var wg sync.WaitGroup
	for i, id := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var as map[group.MemberID][]byte
			if i == 0 {
				as = assignments
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			r, err := g.Do(ctx, name, func(tok group.Token) group.Event {
				return group.SyncGroup{Token: tok, MemberID: id, InstanceID: insts[i], Generation: gen, Assignments: as}
			})
			if err == nil {
				out[i] = r.(group.SyncReply)
			} else {
				out[i] = group.SyncReply{Err: -1}
			}
		}()
	}
	wg.Wait()
	return out
}

// commit commits offsets of one member.
func commit(t *testing.T, g groups, name string, id group.MemberID, inst group.InstanceID, gen group.Generation, offs ...group.OffsetCommitPartition) group.OffsetCommitReply {
	t.Helper()
	return do[group.OffsetCommitReply](t, g, name, func(tok group.Token) group.Event {
		return group.OffsetCommit{Token: tok, MemberID: id, InstanceID: inst, Generation: gen, Offsets: offs}
	})
}

func heartbeat(t *testing.T, g groups, name string, id group.MemberID, inst group.InstanceID, gen group.Generation) group.HeartbeatReply {
	t.Helper()
	return do[group.HeartbeatReply](t, g, name, func(tok group.Token) group.Event {
		return group.Heartbeat{Token: tok, MemberID: id, InstanceID: inst, Generation: gen}
	})
}

func describe(t *testing.T, g groups, name string) group.DescribeReply {
	t.Helper()
	return do[group.DescribeReply](t, g, name, func(tok group.Token) group.Event { return group.Describe{Token: tok} })
}

// stableGroup brings a two-member group to Stable (generation 1): a (the leader) gets
// partitions 0-2 of orders, b 3-5.
func stableGroup(t *testing.T, g groups, name string, insts [2]group.InstanceID) {
	t.Helper()
	joins := joinAll(t, g, name,
		joinEvent("a", insts[0], "10.0.0.1", "orders"),
		joinEvent("b", insts[1], "10.0.0.2", "orders"))
	for i, j := range joins {
		if j.Err != group.ErrNone || j.Generation != 1 {
			t.Fatalf("join %d = %+v, want generation 1 and no error", i, j)
		}
	}
	if joins[0].Leader != "a" || len(joins[0].Members) != 2 {
		t.Fatalf("leader's join = %+v, want leader a with 2 members", joins[0])
	}
	syncs := syncAll(t, g, name, 1, []group.MemberID{"a", "b"}, insts[:], map[group.MemberID][]byte{
		"a": assignment("orders", 0, 1, 2),
		"b": assignment("orders", 3, 4, 5),
	})
	for i, s := range syncs {
		if s.Err != group.ErrNone || len(s.Assignment) == 0 {
			t.Fatalf("sync %d = %+v, want an assignment", i, s)
		}
	}
}

// httpGet fetches an admin URL and returns status and body.
func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// parseMetrics reads a /metrics body (Prometheus' text format): every sample line's value, by
// its name and labels as written (`name{labels}` or `name`).
func parseMetrics(body string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// wireCommit is an OffsetCommit of one partition (member "" and generation -1: a simple
// commit, outside the group's generations).
func wireCommit(g, member string, gen int32, topic string, p int32, off int64) *kmsg.OffsetCommitRequest {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.MemberID, req.Generation = g, member, gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = topic
	pp := kmsg.NewOffsetCommitRequestTopicPartition()
	pp.Partition, pp.Offset = p, off
	t.Partitions = append(t.Partitions, pp)
	req.Topics = append(req.Topics, t)
	return req
}

// kafkaRoundTrip sends one non-flexible request on a new connection and reads its response.
func kafkaRoundTrip(t *testing.T, addr string, req kmsg.Request) kmsg.Response {
	t.Helper()
	resp, err := kafkaExchange(addr, req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// kafkaExchange is kafkaRoundTrip's exchange, returning its failure; it may run on any goroutine.
func kafkaExchange(addr string, req kmsg.Request, timeout time.Duration) (kmsg.Response, error) {
	if req.IsFlexible() {
		return nil, fmt.Errorf("kafkaRoundTrip handles non-flexible versions only")
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var msg []byte
	msg = binary.BigEndian.AppendUint16(msg, uint16(req.Key()))
	msg = binary.BigEndian.AppendUint16(msg, uint16(req.GetVersion()))
	msg = binary.BigEndian.AppendUint32(msg, 7) // correlation id
	msg = binary.BigEndian.AppendUint16(msg, 4)
	msg = append(msg, "test"...)
	msg = req.AppendTo(msg)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(msg)))
	if _, err := c.Write(append(frame, msg...)); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, fmt.Errorf("read size: %w", err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, body); err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if corr := binary.BigEndian.Uint32(body); corr != 7 {
		return nil, fmt.Errorf("correlation id %d, want 7", corr)
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body[4:]); err != nil {
		return nil, fmt.Errorf("decode %T: %w", resp, err)
	}
	return resp, nil
}

// wireJoin is a new member's JoinGroup v5 to group g subscribing to topic (range).
func wireJoin(g, topic string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(5)
	req.Group = g
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 2000
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", subscription(0, topic)
	req.Protocols = append(req.Protocols, p)
	return req
}

// checkNoLeaks fails the test if goroutines running project code outlive what started them
// (etcd's CheckLeakedGoroutine idea): after every bridge and store of the test is closed, none
// may remain. Goroutines of the test itself (with _test.go frames) do not count.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	var leaked []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			s := string(g)
			if strings.Contains(s, "github.com/zkbridge/zkbridge/") && !strings.Contains(s, "_test.go") {
				leaked = append(leaked, s)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(leaked) > 0 {
		t.Errorf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// env is the one setup of the package's integration tests and benchmarks: a ZooKeeper chroot
// of the test's own with a store open on it, what Kafka has registered there (envOpts.layout),
// a group's mode record, an upstream cluster (kfake) if asked for, and a bridge on loopback
// ports. Test-specific environments (dfEnv, stabEnv, mixedCluster) embed it and add their own
// members and checks.
type env struct {
	connect string
	zk      *zkstate.Store
	kf      *kfake.Cluster // nil unless envOpts.kfake
	b       *running       // nil with envOpts.noBridge
}

type envOpts struct {
	node   int32          // the bridge's node id; default 1
	layout zkstate.Layout // brokers and topics to register before the bridge starts (if any)
	// group and mode, when mode is set, write the group's mode record (zkstate.InitMode)
	// before the bridge starts.
	group string
	mode  zkstate.Mode
	kfake []kfake.Opt // non-nil: start a kfake cluster with these options (closed at cleanup)
	// setup runs after the store (and kfake) and before the layout and the bridge: for what
	// depends on kfake (its addresses, its request hooks).
	setup func(*env)
	// zkVia is the bridge's way to the chroot (for instance a zktest.Proxy), given its
	// connect string; nil: directly.
	zkVia func(connect string) string
	// bridge adjusts the bridge's configuration: startBridge's, or startBridgeTB's with tb.
	bridge   func(*env, *bridge.Config)
	tb       bool // the benchmark profile (startBridgeTB)
	noBridge bool
}

// startEnv sets up an env (everything is stopped at cleanup).
func startEnv(tb testing.TB, o envOpts) *env {
	tb.Helper()
	connect := zktest.Connect(tb)
	e := &env{connect: connect, zk: zktest.OpenStore(tb, connect)}
	if o.kfake != nil {
		e.kf = startKfake(tb, o.kfake...)
	}
	if o.setup != nil {
		o.setup(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(o.layout.Brokers) > 0 || len(o.layout.Topics) > 0 {
		if err := zkstate.LoadLayout(ctx, e.zk, o.layout); err != nil {
			tb.Fatalf("LoadLayout: %v", err)
		}
	}
	if o.mode != "" {
		if _, _, err := zkstate.InitMode(ctx, e.zk, bridge.DefaultRoot, o.group, o.mode, "test", "test group"); err != nil {
			tb.Fatalf("InitMode: %v", err)
		}
	}
	if o.noBridge {
		return e
	}
	if o.node == 0 {
		o.node = 1
	}
	zk := connect
	if o.zkVia != nil {
		zk = o.zkVia(connect)
	}
	mod := func(c *bridge.Config) {
		if o.bridge != nil {
			o.bridge(e, c)
		}
	}
	if o.tb {
		e.b = startBridgeTB(tb, zk, mod) // node clientsNode
	} else {
		e.b = startBridge(tb, zk, o.node, mod)
	}
	return e
}

// startKfake starts an in-process Kafka cluster (kfake) and closes it at cleanup.
func startKfake(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	kf, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatalf("kfake: %v", err)
	}
	tb.Cleanup(kf.Close)
	return kf
}

// topicsLayout is a cluster of one broker (id 1, at 127.0.0.1:1, nobody listening: the
// bridge answers for the brokers) leading every partition of topics (name → partitions).
func topicsLayout(topics map[string]int) zkstate.Layout {
	l := zkstate.Layout{
		Brokers: []zkstate.BrokerRegistration{{ID: 1, Version: 1, Host: "127.0.0.1", Port: 1, JMXPort: -1, Timestamp: "1700000000000"}},
		Topics:  map[string]zkstate.TopicAssignment{},
	}
	for name, n := range topics {
		a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
		for p := range n {
			a.Partitions[int32(p)] = []int32{1}
		}
		l.Topics[name] = a
	}
	return l
}
