package zkconsumer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }

const group = "g"

type tp = zkstate.TopicPartition

// testLogger logs at warn level, or at the level named by ZKCONSUMER_TEST_LOG (e.g. "debug").
func testLogger(t *testing.T) zerolog.Logger {
	level := zerolog.WarnLevel
	if l, err := zerolog.ParseLevel(os.Getenv("ZKCONSUMER_TEST_LOG")); err == nil && l != zerolog.NoLevel {
		level = l
	}
	return zerolog.New(zerolog.NewTestWriter(t)).Level(level).With().Timestamp().Logger()
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// cluster is a chroot with 0.8.2 brokers and topics, and an admin session.
type cluster struct {
	t       *testing.T
	connect string
	admin   *zkstate.Store
	topics  map[string]int
}

func newCluster(t *testing.T, brokers int, topics map[string]int) *cluster {
	t.Helper()
	connect := zktest.Connect(t)
	cl := &cluster{t: t, connect: connect, admin: zktest.OpenStore(t, connect, withLogger(testLogger(t))), topics: maps.Clone(topics)}
	var l zkstate.Layout
	for id := int32(1); id <= int32(brokers); id++ {
		l.Brokers = append(l.Brokers, broker(id))
	}
	l.Topics = map[string]zkstate.TopicAssignment{}
	for name, n := range topics {
		l.Topics[name] = topicAssignment(n)
	}
	if err := zkstate.LoadLayout(timeout(t, 10*time.Second), cl.admin, l); err != nil {
		t.Fatalf("LoadLayout: %v", err)
	}
	return cl
}

func broker(id int32) zkstate.BrokerRegistration {
	// Version 1 as a 0.8.2 broker writes it: host and port, which Broker.createBroker needs.
	return zkstate.BrokerRegistration{ID: id, Version: 1, Host: "broker" + strconv.Itoa(int(id)), Port: 9092, JMXPort: -1,
		Timestamp: "1700000000000"}
}

func topicAssignment(partitions int) zkstate.TopicAssignment {
	a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
	for p := range partitions {
		a.Partitions[int32(p)] = []int32{1}
	}
	return a
}

// setPartitions rewrites /brokers/topics/<topic>, as kafka-topics --alter does.
func (cl *cluster) setPartitions(topic string, n int) {
	cl.t.Helper()
	cl.topics[topic] = n
	if _, err := cl.admin.Set(timeout(cl.t, 5*time.Second), zkstate.TopicPath(topic), topicAssignment(n).Encode(), -1); err != nil {
		cl.t.Fatalf("set partitions of %s: %v", topic, err)
	}
}

// member is a started consumer.
type member struct {
	name string
	c    *zkconsumer.Consumer
	sub  map[string]int
}

var defaultSub = map[string]int{"orders": 2, "payments": 2}

// start creates a consumer named name (consumer id "g_<name>"), runs it, and closes it at
// cleanup.
func (cl *cluster) start(tr *tracker, name string, mods ...func(*zkconsumer.Config)) *member {
	t := cl.t
	t.Helper()
	cfg := zkconsumer.Config{
		Connect:             cl.connect,
		GroupID:             group,
		ConsumerID:          name,
		Subscription:        defaultSub,
		RebalanceBackoff:    100 * time.Millisecond,
		RebalanceMaxRetries: 20,
		Logger:              testLogger(t).With().Str("member", name).Logger(),
	}
	if tr != nil {
		cfg.Handler = tr.handler(group + "_" + name)
	}
	for _, m := range mods {
		m(&cfg)
	}
	c, err := zkconsumer.New(timeout(t, 15*time.Second), cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		// Ending Run first cuts a rebalance in progress short; Close alone would wait for all
		// its remaining attempts (see TestIntegration_CloseWaitsForRebalance).
		cancel()
		ctx, c2 := context.WithTimeout(context.Background(), 20*time.Second)
		defer c2()
		_ = c.Close(ctx)
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, zkconsumer.ErrClosed) {
			t.Errorf("Run(%s) = %v", name, err)
		}
	})
	return &member{name: name, c: c, sub: cfg.Subscription}
}

// tracker plays the application of every member: it records what each consumes, between
// OnAssign and OnRevoke, and flags a partition handed to a member while another still
// consumes it.
type tracker struct {
	mu         sync.Mutex
	consuming  map[string]map[tp]int64 // consumer id -> partitions being consumed, from offset
	lastAssign map[string]map[tp]int64
	assigns    map[string]int
	revokes    map[string]int
	errs       map[string][]error
	violations []string
}

func newTracker() *tracker {
	return &tracker{
		consuming:  map[string]map[tp]int64{},
		lastAssign: map[string]map[tp]int64{},
		assigns:    map[string]int{},
		revokes:    map[string]int{},
		errs:       map[string][]error{},
	}
}

func (tr *tracker) handler(id string) zkconsumer.Handler {
	return zkconsumer.Handler{
		OnAssign: func(offsets map[tp]int64) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			for other, parts := range tr.consuming {
				if other == id {
					continue
				}
				for p := range offsets {
					if _, ok := parts[p]; ok {
						tr.violations = append(tr.violations, fmt.Sprintf("%s-%d handed to %s while %s consumes it", p.Topic, p.Partition, id, other))
					}
				}
			}
			tr.consuming[id] = maps.Clone(offsets)
			tr.lastAssign[id] = maps.Clone(offsets)
			tr.assigns[id]++
		},
		OnRevoke: func() {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			delete(tr.consuming, id)
			tr.revokes[id]++
		},
		OnError: func(err error) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			tr.errs[id] = append(tr.errs[id], err)
		},
	}
}

func (tr *tracker) checkNoViolations(t *testing.T) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, v := range tr.violations {
		t.Errorf("double consumption: %s", v)
	}
}

func (tr *tracker) lastAssigned(id string) map[tp]int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return maps.Clone(tr.lastAssign[id])
}

func (tr *tracker) errors(id string) []error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.errs[id])
}

// ownerNode is one owner znode.
type ownerNode struct {
	thread  string
	session int64
}

// owners reads /consumers/g/owners.
func owners(ctx context.Context, s *zkstate.Store) (map[tp]ownerNode, error) {
	out := map[tp]ownerNode{}
	topics, _, err := s.Children(ctx, zkstate.OwnersPath(group))
	if errors.Is(err, zkstate.ErrNoNode) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for _, topic := range topics {
		parts, _, err := s.Children(ctx, zkstate.OwnersTopicPath(group, topic))
		if errors.Is(err, zkstate.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, name := range parts {
			p, err := strconv.ParseInt(name, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("owner znode %s/%s: %w", topic, name, err)
			}
			data, st, err := s.Get(ctx, zkstate.OwnerPath(group, topic, int32(p)))
			if errors.Is(err, zkstate.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[tp{Topic: topic, Partition: int32(p)}] = ownerNode{string(data), st.EphemeralOwner}
		}
	}
	return out, nil
}

// expected computes the 0.8.2 assignment of the members over the cluster's topics with the
// project's assignor.
func (cl *cluster) expected(strategy legacy.Strategy, members ...*member) legacy.Assignment {
	cl.t.Helper()
	in := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: map[string][]int32{}}
	for _, m := range members {
		sub := legacy.Subscription{}
		for topic, n := range m.sub {
			sub[topic] = zkstate.ThreadIDs(m.c.ConsumerID(), n)
		}
		in.Consumers[m.c.ConsumerID()] = sub
	}
	for topic, n := range cl.topics {
		for p := range n {
			in.Partitions[topic] = append(in.Partitions[topic], int32(p))
		}
	}
	a, err := legacy.Assign(strategy, in)
	if err != nil {
		cl.t.Fatalf("legacy.Assign: %v", err)
	}
	return a
}

// converged reports whether every member holds exactly its part of want and the owner znodes
// are exactly want, each held by its member's session.
func (cl *cluster) converged(ctx context.Context, want legacy.Assignment, members ...*member) (bool, string) {
	got := map[tp]string{}
	for _, m := range members {
		for p, thread := range m.c.Assignment() {
			if prev, dup := got[p]; dup {
				return false, fmt.Sprintf("%s-%d held by %s and %s", p.Topic, p.Partition, prev, thread)
			}
			got[p] = thread
		}
	}
	if d := diff(want, got); d != "" {
		return false, "in-memory assignments: " + d
	}
	zk, err := owners(ctx, cl.admin)
	if err != nil {
		return false, err.Error()
	}
	zkThreads := map[tp]string{}
	sessions := map[string]int64{}
	for _, m := range members {
		sessions[m.c.ConsumerID()] = m.c.SessionID()
	}
	for p, o := range zk {
		zkThreads[p] = o.thread
		consumer, _, err := zkstate.ParseThreadID(o.thread)
		if err != nil {
			return false, err.Error()
		}
		if s, ok := sessions[consumer]; !ok || s != o.session {
			return false, fmt.Sprintf("owner %s-%d (%s) is held by session 0x%x, not its consumer's", p.Topic, p.Partition, o.thread, o.session)
		}
	}
	if d := diff(want, zkThreads); d != "" {
		return false, "owners in ZooKeeper: " + d
	}
	return true, ""
}

func diff(want legacy.Assignment, got map[tp]string) string {
	var out []string
	for p, thread := range want {
		k := tp{Topic: p.Topic, Partition: p.Partition}
		if got[k] != thread {
			out = append(out, fmt.Sprintf("%s-%d: got %q, want %q", p.Topic, p.Partition, got[k], thread))
		}
	}
	for p, thread := range got {
		if _, ok := want[legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}]; !ok {
			out = append(out, fmt.Sprintf("%s-%d: got %q, want unowned", p.Topic, p.Partition, thread))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// waitConverged waits until converged holds and the group is quiet: it still holds 300 ms
// later, with no rebalance attempt started in between. Events coalesce, so a member may run
// one more rebalance after reaching the right answer (for an event it had already seen).
func (cl *cluster) waitConverged(d time.Duration, want legacy.Assignment, members ...*member) {
	cl.t.Helper()
	ctx := timeout(cl.t, d+5*time.Second)
	deadline := time.Now().Add(d)
	attempts := func() []int64 {
		var out []int64
		for _, m := range members {
			out = append(out, m.c.Stats().Attempts)
		}
		return out
	}
	var why string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = cl.converged(ctx, want, members...); ok {
			before := attempts()
			time.Sleep(300 * time.Millisecond)
			if ok, why = cl.converged(ctx, want, members...); ok && slices.Equal(before, attempts()) {
				return
			}
			continue
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl.t.Fatalf("not converged after %v: %s", d, why)
}

// readOffset reads /consumers/g/offsets/<t>/<p>; ok false when missing.
func readOffset(t *testing.T, s *zkstate.Store, p tp) (int64, bool) {
	t.Helper()
	data, _, err := s.Get(timeout(t, 5*time.Second), zkstate.OffsetPath(group, p.Topic, p.Partition))
	if errors.Is(err, zkstate.ErrNoNode) {
		return 0, false
	}
	if err != nil {
		t.Fatalf("read offset %v: %v", p, err)
	}
	off, err := zkstate.ParseOffset(data)
	if err != nil {
		t.Fatalf("offset %v: %v", p, err)
	}
	return off, true
}

// ownerSampler watches the owner directories and, at every change, checks — with the tracker
// locked, so that no member starts or stops consuming meanwhile — that every partition a member
// consumes has an owner znode naming one of that member's threads. One znode per partition
// then means no partition is consumed by two members at the observed moment.
type ownerSampler struct {
	mu       sync.Mutex
	samples  int
	problems []string
	wg       sync.WaitGroup
}

func (cl *cluster) sampleOwners(ctx context.Context, tr *tracker) *ownerSampler {
	cl.t.Helper()
	smp := &ownerSampler{}
	for _, topic := range slices.Sorted(maps.Keys(cl.topics)) {
		ch, err := cl.admin.WatchChildren(ctx, zkstate.OwnersTopicPath(group, topic))
		if err != nil {
			cl.t.Fatalf("watch owners of %s: %v", topic, err)
		}
		smp.wg.Add(1)
		go func() {
			defer smp.wg.Done()
			for range ch {
				smp.check(ctx, cl.admin, tr)
			}
		}()
	}
	cl.t.Cleanup(smp.wg.Wait)
	return smp
}

func (smp *ownerSampler) check(ctx context.Context, s *zkstate.Store, tr *tracker) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	zk, err := owners(ctx, s)
	if err != nil {
		if ctx.Err() == nil {
			smp.add(err.Error())
		}
		return
	}
	for id, parts := range tr.consuming {
		for p := range parts {
			o, ok := zk[p]
			if !ok {
				smp.add(fmt.Sprintf("%s consumes %s-%d, which has no owner znode", id, p.Topic, p.Partition))
				continue
			}
			if consumer, _, _ := zkstate.ParseThreadID(o.thread); consumer != id {
				smp.add(fmt.Sprintf("%s consumes %s-%d, owned by %s", id, p.Topic, p.Partition, o.thread))
			}
		}
	}
	smp.mu.Lock()
	smp.samples++
	smp.mu.Unlock()
}

func (smp *ownerSampler) add(problem string) {
	smp.mu.Lock()
	defer smp.mu.Unlock()
	smp.problems = append(smp.problems, problem)
}

func (smp *ownerSampler) result() (int, []string) {
	smp.mu.Lock()
	defer smp.mu.Unlock()
	return smp.samples, slices.Clone(smp.problems)
}

// waitStartOffset waits until the last OnAssign of member id handed p at want. OnAssign comes
// right after the registry is updated (ZCC:696-697), so a converged Assignment may briefly
// precede it.
func (tr *tracker) waitStartOffset(t *testing.T, id string, p tp, want int64) {
	t.Helper()
	zktest.Eventually(t, 5*time.Second, fmt.Sprintf("%s handed %s-%d at %d", id, p.Topic, p.Partition, want), func() (bool, string) {
		got, ok := tr.lastAssigned(id)[p]
		return ok && got == want, fmt.Sprintf("last handed at %d (assigned: %v)", got, ok)
	})
}

// withLogger makes zktest.OpenStore's Store log to l.
func withLogger(l zerolog.Logger) func(*zkstate.Config) {
	return func(c *zkstate.Config) { c.Logger = l }
}
