package bridge_test

// Legacy consumers (seed 001) across several bridges (issue 15, build item 7): Consult names
// the group's owner, brokers_info lists the live bridges, a clean handover moves the group's
// consumers to the new owner with one Stop/Start round.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// legacyRound is a legacy.Handler that counts its Starts and keeps the last one.
type legacyRound struct {
	inUse  logCounter // CONSUMER_ID_IN_USE refusals
	notCo  logCounter // NOT_COORDINATOR refusals
	mu     sync.Mutex
	starts int
	parts  []legacy.PartitionOffset
}

func (r *legacyRound) OnStop() {}
func (r *legacyRound) OnStart(parts []legacy.PartitionOffset) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	r.parts = slices.Clone(parts)
	return nil
}

func (r *legacyRound) state() (int, []legacy.PartitionOffset) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts, r.parts
}

// legacyExchange sends req on a new connection to addr and returns the answer (nil when the
// bridge answers nothing before closing).
func legacyExchange(t *testing.T, addr string, req legacy.Message) legacy.Message {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(legacy.AppendFrame(nil, req)); err != nil {
		t.Fatal(err)
	}
	frame, err := legacy.ReadFrame(nc, 0)
	if err != nil {
		t.Fatalf("%s: no answer to %v: %v", addr, req.Type(), err)
	}
	m, err := legacy.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func brokersInfo(bs []legacy.Broker) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = fmt.Sprintf("%d@%s", b.ID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	}
	return out
}

// hostedBy returns the node that hosts each of ids in group (hosted-member znodes), -1 for none.
func hostedBy(t *testing.T, zk *zkstate.Store, group string, ids ...string) []int32 {
	t.Helper()
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = -1
		data, _, err := zk.Get(t.Context(), zkstate.HostedMemberPath(bridge.DefaultRoot, group, id))
		if err != nil {
			continue
		}
		if h, err := zkstate.ParseHostedMember(data); err == nil {
			out[i] = h.Node
		}
	}
	return out
}

// runLegacyConsumer runs a legacy.Client of group subscribed to events (500 ms pings, 3
// retries) with cfg's brokers and backoff; it stops at cleanup. Its log lines go to the test's
// log, and those naming CONSUMER_ID_IN_USE or NOT_COORDINATOR are counted in the returned round.
func runLegacyConsumer(t *testing.T, group, id string, cfg legacy.ClientConfig) *legacyRound {
	t.Helper()
	r := &legacyRound{inUse: logCounter{s: "CONSUMER_ID_IN_USE"}, notCo: logCounter{s: "NOT_COORDINATOR"}}
	cfg.GroupID, cfg.ConsumerID = group, id
	cfg.Subscription = map[string]int{"events": 1}
	cfg.AutoOffsetReset = legacy.ResetSmallest
	cfg.PingInterval, cfg.MaxPingRetries = 500*time.Millisecond, 3
	cfg.Handler = r
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(&testLog{t: t}, &r.inUse, &r.notCo)).With().Timestamp().Logger()
	cl, err := legacy.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cl.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// logCounter counts the log lines that contain s.
type logCounter struct {
	s string
	n atomic.Int32
}

func (c *logCounter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.s) {
		c.n.Add(1)
	}
	return len(p), nil
}

// legacySettled waits until consumers are started on disjoint parts covering events' 4
// partitions, hosted by node, with 4 owner znodes, each started more often than in since
// (nil: at least once), and returns their Start counts.
func legacySettled(t *testing.T, zk *zkstate.Store, name string, consumers []string, rounds []*legacyRound, node int32, since []int) []int {
	t.Helper()
	var starts []int
	zktest.Eventually(t, 20*time.Second, fmt.Sprintf("the consumers started, hosted by %d", node), func() (bool, string) {
		starts = starts[:0]
		seen := map[int32]bool{}
		for i, r := range rounds {
			n, parts := r.state()
			starts = append(starts, n)
			if since != nil && n <= since[i] {
				return false, fmt.Sprintf("%s not started again", consumers[i])
			}
			for _, p := range parts {
				if seen[p.Partition] {
					return false, fmt.Sprintf("partition %d started twice", p.Partition)
				}
				seen[p.Partition] = true
			}
		}
		if len(seen) != 4 {
			return false, fmt.Sprintf("partitions started: %v", seen)
		}
		for i, h := range hostedBy(t, zk, name, consumers...) {
			if h != node {
				return false, fmt.Sprintf("%s hosted by %d", consumers[i], h)
			}
		}
		snap, err := zk.Snapshot(t.Context(), name)
		if err != nil || len(snap.Owners) != 4 {
			return false, fmt.Sprintf("owner znodes %v (%v)", snap.Owners, err)
		}
		return true, ""
	})
	return slices.Clone(starts)
}

// Every bridge names the group's owner in a version 1 Consult and lists every live bridge's
// legacy listener; a Register on another bridge is NOT_COORDINATOR; when the owner drains
// (SIGTERM) its consumers move to the next owner, each started once there (one Stop/Start
// round: the new owner gathers the consumers the old one noted).
func TestIntegration_SeveralBridgesLegacyConsumers(t *testing.T) {
	t.Parallel()
	connect, zk := legacyEventsLayout(t)
	a := startBridge(t, connect, 9001, withLegacy)
	b := startBridge(t, connect, 9002, withLegacy)
	ids := []int32{9001, 9002}
	name := ""
	for i := 0; name == ""; i++ {
		if owner, _ := placement.Owner(fmt.Sprintf("old-app-%d", i), ids); owner == 9001 {
			name = fmt.Sprintf("old-app-%d", i)
		}
	}
	aAddr, bAddr := a.LegacyAddr().String(), b.LegacyAddr().String()
	wantBrokers := []string{"9001@" + aAddr, "9002@" + bAddr}

	// Every bridge names the owner, A, for the group and lists both bridges.
	zktest.Eventually(t, 10*time.Second, "every bridge names A and lists both bridges", func() (bool, string) {
		for _, addr := range []string{aAddr, bAddr} {
			r := legacyExchange(t, addr, &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse)
			if r.ErrorCode != legacy.CodeNone || r.CoordinatorID != 9001 || !slices.Equal(brokersInfo(r.Brokers), wantBrokers) {
				return false, fmt.Sprintf("%s answers %v coordinator %d brokers %v", addr, r.ErrorCode, r.CoordinatorID, brokersInfo(r.Brokers))
			}
		}
		return true, ""
	})
	// A Register on B, which does not coordinate the group, is refused NOT_COORDINATOR.
	reg := &legacy.RegisterRequest{GroupID: name, ConsumerID: "stray", AutoOffsetReset: legacy.ResetSmallest,
		PingIntervalMs: 500, MaxPingRetries: 3, Subscription: []legacy.TopicThreads{{Topic: "events", Threads: 1}}}
	if r, ok := legacyExchange(t, bAddr, reg).(*legacy.RegisterResponse); !ok || r.ErrorCode != legacy.CodeNotCoordinator {
		t.Fatalf("Register on B: %+v, want NOT_COORDINATOR", r)
	}

	// Two consumers that know only B: they consult B, which sends them to A. c2 comes back
	// later than c1 after losing its coordinator (a longer backoff), as consumers do.
	consumers := []string{"c1", "c2"}
	rounds := []*legacyRound{
		runLegacyConsumer(t, name, "c1", legacy.ClientConfig{Brokers: []string{bAddr}}),
		runLegacyConsumer(t, name, "c2", legacy.ClientConfig{Brokers: []string{bAddr}, BackoffMin: 600 * time.Millisecond}),
	}
	settled := func(node int32, since []int) []int {
		return legacySettled(t, zk, name, consumers, rounds, node, since)
	}
	before := settled(9001, nil)

	// A drains (SIGTERM): the group moves to B, and each consumer is started once there.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	after := settled(9002, before)
	time.Sleep(time.Second) // a second round would come now
	for i := range consumers {
		after[i], _ = rounds[i].state()
		if got := after[i] - before[i]; got != 1 {
			t.Errorf("consumer %s was started %d times by the handover, want 1 (one Stop/Start round)", consumers[i], got)
		}
	}
	if r := legacyExchange(t, bAddr, &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse); r.CoordinatorID != 9002 ||
		!slices.Equal(brokersInfo(r.Brokers), wantBrokers[1:]) {
		t.Errorf("after A left, B answers coordinator %d brokers %v", r.CoordinatorID, brokersInfo(r.Brokers))
	}
}

// A legacy group's owner killed with SIGKILL (a child process): its consumers take it for dead
// after (max_ping_retries + 1) × ping_interval and consult again; once ZooKeeper expires the
// dead bridge's session (its registration, hosted-member and /ids znodes go together) the
// survivor coordinates the group and registers them, with no CONSUMER_ID_IN_USE refusal.
func TestIntegration_SeveralBridgesLegacyCrash(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	if err := zkstate.LoadLayout(t.Context(), zk, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}, 2: {1}, 3: {1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	const dead, survivor int32 = 9001, 9002
	name := ""
	for i := 0; name == ""; i++ {
		if o, _ := placement.Owner(fmt.Sprintf("old-crash-%d", i), []int32{dead, survivor}); o == dead {
			name = fmt.Sprintf("old-crash-%d", i)
		}
	}
	const session = 4 * time.Second
	child := startChildBridge(t, childSpec{ZKConnect: connect, NodeID: dead, ZKSessionTimeout: session})
	surv := startBridge(t, connect, survivor, func(c *bridge.Config) { c.LegacyListen = "127.0.0.1:0" })
	brokers := []string{child.legacy, surv.LegacyAddr().String()}
	zktest.Eventually(t, 10*time.Second, "the survivor names the child for the group", func() (bool, string) {
		r := legacyExchange(t, brokers[1], &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse)
		return r.CoordinatorID == dead && len(r.Brokers) == 2, fmt.Sprintf("coordinator %d, brokers %v", r.CoordinatorID, brokersInfo(r.Brokers))
	})
	consumers := []string{"c1", "c2"}
	var rounds []*legacyRound
	for _, id := range consumers {
		rounds = append(rounds, runLegacyConsumer(t, name, id, legacy.ClientConfig{Brokers: brokers, BackoffMax: 500 * time.Millisecond}))
	}
	before := legacySettled(t, zk, name, consumers, rounds, dead, nil)

	killed := time.Now()
	child.kill()
	zktest.Eventually(t, session+2*time.Second, "the dead bridge's registration is gone", func() bool {
		ok, _, err := zk.Exists(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, dead))
		return err == nil && !ok
	})
	expired := time.Since(killed)
	legacySettled(t, zk, name, consumers, rounds, survivor, before)
	t.Logf("kill -9: session expired after %v, consumers started on the survivor after %v", expired, time.Since(killed))
	for i, r := range rounds {
		if n := r.inUse.n.Load(); n != 0 {
			t.Errorf("consumer %s was refused CONSUMER_ID_IN_USE %d times", consumers[i], n)
		}
	}
}

// Consumers that consult at version 0 (they cannot name their group, so every bridge names
// itself: docs/legacy-protocol.md §5) and know only a bridge that does not coordinate their
// group: that bridge relays each one's connection to the group's owner (legacy.Forwarder)
// instead of refusing its Register NOT_COORDINATOR, after which the consumer could only consult
// bridges at random until it happened upon the owner (seed 001 "consumerStartup" step 1).
// When the owner drains, the consumers' relayed connections close with the group's handover,
// and they come back through a bridge again, to the group's next owner.
func TestIntegration_SeveralBridgesLegacyV0Consult(t *testing.T) {
	connect, zk := legacyEventsLayout(t)
	ids := []int32{9001, 9002, 9003}
	bridges := map[int32]*running{}
	for _, id := range ids {
		bridges[id] = startBridge(t, connect, id, withLegacy)
	}
	name := ""
	for i := 0; name == ""; i++ {
		if owner, _ := placement.Owner(fmt.Sprintf("v0-app-%d", i), ids); owner == 9001 {
			name = fmt.Sprintf("v0-app-%d", i)
		}
	}
	next, _ := placement.Owner(name, ids[1:])
	asked := bridges[9002].LegacyAddr().String()
	zktest.Eventually(t, 10*time.Second, "every bridge lists the three", func() (bool, string) {
		for _, b := range bridges {
			r := legacyExchange(t, b.LegacyAddr().String(), &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse)
			if r.CoordinatorID != 9001 || len(r.Brokers) != 3 {
				return false, fmt.Sprintf("%v: coordinator %d, brokers %v", b.LegacyAddr(), r.CoordinatorID, brokersInfo(r.Brokers))
			}
		}
		return true, ""
	})
	// A version 0 Consult on 9002 names 9002.
	if r := legacyExchange(t, asked, &legacy.ConsultRequest{}).(*legacy.ConsultResponse); r.CoordinatorID != 9002 {
		t.Fatalf("version 0 Consult on 9002 names %d", r.CoordinatorID)
	}

	consumers := []string{"c1", "c2"}
	var rounds []*legacyRound
	for _, id := range consumers {
		rounds = append(rounds, runLegacyConsumer(t, name, id, legacy.ClientConfig{Brokers: []string{asked},
			GrouplessConsult: true, BackoffMin: 200 * time.Millisecond, BackoffMax: 500 * time.Millisecond}))
	}
	before := legacySettled(t, zk, name, consumers, rounds, 9001, nil)
	for i, r := range rounds {
		if n := r.notCo.n.Load(); n != 0 {
			t.Errorf("consumer %s was refused NOT_COORDINATOR %d times before it was hosted by the owner", consumers[i], n)
		}
	}

	// The owner drains: the group moves to the next owner, and the consumers with it.
	if err := bridges[9001].stop(); err != nil {
		t.Fatal(err)
	}
	legacySettled(t, zk, name, consumers, rounds, next, before)
	for i, r := range rounds {
		t.Logf("consumer %s: %d NOT_COORDINATOR refusals across the drain", consumers[i], r.notCo.n.Load())
	}
}

// legacyEventsLayout is the several-bridges legacy tests' world: a chroot and its store with topic
// "events" of 4 partitions.
func legacyEventsLayout(t *testing.T) (string, *zkstate.Store) {
	t.Helper()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	if err := zkstate.LoadLayout(t.Context(), zk, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}, 2: {1}, 3: {1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	return connect, zk
}

// withLegacy gives a bridge a legacy listener on a free port.
func withLegacy(c *bridge.Config) { c.LegacyListen = "127.0.0.1:0" }
