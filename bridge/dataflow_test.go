package bridge_test

// The data path end to end (issue 7): a franz-go kfake cluster of three brokers is the upstream,
// a real ZooKeeper holds the bridge's state, and unmodified clients (kgo, sarama, kafka-go,
// librdkafka through kcat) are given the bridge's address and nothing else. They produce
// through the bridge's relay and consume in groups coordinated by the bridge: the records
// arrive, the group's offsets and owners land in ZooKeeper's 0.8 layout, and kfake's own group
// coordinator never hears of the group.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/rs/zerolog"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// dfNode is the bridge's node id, apart from kfake's 0-2.
const dfNode int32 = 9000

// dfTopic is the topic every data-path test uses; its partition p is led by kfake broker p%3.
const dfTopic = "orders"

// dfEnv is a kfake cluster, ZooKeeper and a bridge relaying to the cluster.
type dfEnv struct {
	*env
	kfAddrs []string // by broker id
	addr    string   // the bridge's bootstrap listener: all a client is given
	parts   int32
	// groupReqs counts the group API requests that reached kfake: with the bridge as every
	// group's coordinator there must be none.
	groupReqs atomic.Int64

	mu       sync.Mutex
	producer *kgo.Client // produceTo's, created at first use
}

type dfOpts struct {
	partitions int32 // of dfTopic; default 6
	// fromZK registers the kfake brokers in /brokers/ids (as 0.8 registrations, at the
	// address regAddr gives, default kfake's own) and dfTopic in /brokers/topics, and runs the
	// bridge with UpstreamFromZK; otherwise the bridge is given kfake's first broker as its
	// --upstream seed.
	fromZK  bool
	regAddr func(id int32, kfAddr string) string
	// auto runs the bridge with UpstreamAuto (the serve command's default) instead of
	// UpstreamFromZK (with fromZK).
	auto bool
}

func dfStart(t *testing.T, o dfOpts) *dfEnv {
	t.Helper()
	if o.partitions == 0 {
		o.partitions = 6
	}
	e := &dfEnv{parts: o.partitions}
	e.env = startEnv(t, envOpts{
		node:  dfNode,
		kfake: []kfake.Opt{kfake.NumBrokers(3), kfake.ClusterID("df-upstream"), kfake.SeedTopics(o.partitions, dfTopic)},
		setup: func(base *env) {
			kf := base.kf
			e.kfAddrs = kf.ListenAddrs()
			for _, key := range []kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup,
				kmsg.OffsetCommit, kmsg.OffsetFetch, kmsg.DescribeGroups, kmsg.ListGroups} {
				kf.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
					e.groupReqs.Add(1)
					return nil, nil, false // observe only: kfake answers as usual
				})
			}
			for p := range o.partitions {
				if err := kf.MoveTopicPartition(dfTopic, p, p%3); err != nil {
					t.Fatal(err)
				}
			}
			if o.fromZK {
				if o.regAddr == nil {
					o.regAddr = func(_ int32, kfAddr string) string { return kfAddr }
				}
				loadDfLayout(t, base.zk, e.kfAddrs, o.partitions, o.regAddr)
			}
		},
		bridge: func(_ *env, c *bridge.Config) {
			c.Logger = c.Logger.Level(zerolog.InfoLevel) // the relay's debug lines slow -race runs
			c.ProxyListen = "127.0.0.1:0"
			c.MetadataMaxAge = time.Second
			switch {
			case o.fromZK && o.auto:
				c.UpstreamAuto = true
			case o.fromZK:
				c.UpstreamFromZK = true
			default:
				c.Upstream = []string{e.kfAddrs[0]}
			}
		},
	})
	e.addr = e.b.Addr().String()
	e.waitProxies(t, 3)
	return e
}

// loadDfLayout registers kfake's three brokers in /brokers/ids (at the address regAddr gives)
// and dfTopic's partitions in /brokers/topics, partition p led by broker p%3.
func loadDfLayout(t testing.TB, zk *zkstate.Store, kfAddrs []string, partitions int32, regAddr func(id int32, kfAddr string) string) {
	t.Helper()
	layout := zkstate.Layout{
		Topics: map[string]zkstate.TopicAssignment{dfTopic: {Version: 1, Partitions: map[int32][]int32{}}},
		States: map[zkstate.TopicPartition]zkstate.PartitionState{},
	}
	for id := range int32(3) {
		layout.Brokers = append(layout.Brokers, dfRegistration(t, id, regAddr(id, kfAddrs[id])))
	}
	for p := range partitions {
		layout.Topics[dfTopic].Partitions[p] = []int32{p % 3, (p + 1) % 3}
		layout.States[zkstate.TopicPartition{Topic: dfTopic, Partition: p}] = zkstate.PartitionState{Version: 1, Leader: p % 3, ISR: []int32{p % 3, (p + 1) % 3}}
	}
	if err := zkstate.LoadLayout(context.Background(), zk, layout); err != nil {
		t.Fatalf("LoadLayout: %v", err)
	}
}

// dfRegistration is a Kafka 0.8.2 broker registration (version 1: host and port only).
func dfRegistration(t testing.TB, id int32, addr string) zkstate.BrokerRegistration {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return zkstate.BrokerRegistration{ID: id, Version: 1, Host: host, Port: int32(p), JMXPort: -1, Timestamp: "1700000000000"}
}

// waitProxies waits until the bridge has n proxy listeners and returns them.
func (e *dfEnv) waitProxies(t *testing.T, n int) map[int32]net.Addr {
	t.Helper()
	var addrs map[int32]net.Addr
	zktest.Eventually(t, 10*time.Second, fmt.Sprintf("%d proxy listeners", n), func() (bool, string) {
		addrs = e.b.ProxyAddrs()
		return len(addrs) == n, fmt.Sprint(addrs)
	})
	return addrs
}

// checkGroupsStayedOffKfake fails the test if any group API reached kfake's coordinator.
func (e *dfEnv) checkGroupsStayedOffKfake(t *testing.T) {
	t.Helper()
	if n := e.groupReqs.Load(); n != 0 {
		t.Errorf("kfake's own coordinator received %d group API requests, want 0: the bridge must coordinate every group", n)
	}
}

// dfClientOpts are what every kgo client of these tests shares: the bridge as the only seed,
// and short retries so that a test that goes wrong fails rather than hangs.
func dfClientOpts(addr string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.RecordDeliveryTimeout(20 * time.Second),
		kgo.RetryTimeout(15 * time.Second),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
	}
}

// produce sends n records with values <prefix>-<i>, record i to partition i%parts, through
// the bridge.
func (e *dfEnv) produce(t *testing.T, prefix string, n int) []string {
	t.Helper()
	all := make([]int32, e.parts)
	for p := range all {
		all[p] = int32(p)
	}
	return e.produceTo(t, prefix, n, all)
}

// produceTo sends n records with values <prefix>-<i>, record i to partitions[i%len], through
// the bridge, with the test's long-lived producer (as an application's: it keeps its producer
// id and connections across the test's upstream changes).
func (e *dfEnv) produceTo(t *testing.T, prefix string, n int, partitions []int32) []string {
	t.Helper()
	e.mu.Lock()
	if e.producer == nil {
		cl, err := kgo.NewClient(append(dfClientOpts(e.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
		if err != nil {
			e.mu.Unlock()
			t.Fatal(err)
		}
		e.producer = cl
		t.Cleanup(cl.Close)
	}
	cl := e.producer
	e.mu.Unlock()
	return dfProduce(t, cl, prefix, n, partitions)
}

// produceFresh is produceTo with a new client, closed after.
func (e *dfEnv) produceFresh(t *testing.T, prefix string, n int, partitions []int32) []string {
	t.Helper()
	cl, err := kgo.NewClient(append(dfClientOpts(e.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return dfProduce(t, cl, prefix, n, partitions)
}

func dfProduce(t *testing.T, cl *kgo.Client, prefix string, n int, partitions []int32) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	values := make([]string, n)
	for i := range recs {
		values[i] = fmt.Sprintf("%s-%d", prefix, i)
		recs[i] = &kgo.Record{Topic: dfTopic, Partition: partitions[i%len(partitions)], Value: []byte(values[i])}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing %s through the bridge: %v", prefix, err)
	}
	return values
}

// endOffsets asks the upstream, through the bridge, for each partition's end offset.
func (e *dfEnv) endOffsets(t *testing.T) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(dfClientOpts(e.addr)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = dfTopic
	for p := range e.parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("ListOffsets through the bridge: %v", err)
	}
	out := map[int32]int64{}
	for _, rt := range resp.(*kmsg.ListOffsetsResponse).Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("ListOffsets %s/%d: error %d", rt.Topic, rp.Partition, rp.ErrorCode)
			}
			out[rp.Partition] = rp.Offset
		}
	}
	return out
}

// waitZKOffsets waits until /consumers/<g>/offsets/<topic>/<p> holds want[p] for every
// partition: the commits went to ZooKeeper's 0.8 layout. An empty partition (want 0) has
// nothing to commit and is skipped.
func (e *dfEnv) waitZKOffsets(t *testing.T, g string, want map[int32]int64) {
	t.Helper()
	want = maps.Clone(want)
	maps.DeleteFunc(want, func(_ int32, off int64) bool { return off == 0 })
	zktest.Eventually(t, 15*time.Second, "group "+g+"'s offsets in /consumers/"+g+"/offsets", func() (bool, string) {
		got := map[int32]int64{}
		for p := range want {
			data, _, err := e.zk.Get(t.Context(), zkstate.OffsetPath(g, dfTopic, p))
			if err != nil {
				return false, fmt.Sprintf("%s/%d: %v", dfTopic, p, err)
			}
			off, err := zkstate.ParseOffset(data)
			if err != nil {
				return false, err.Error()
			}
			got[p] = off
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("got %v, want %v", got, want)
	})
}

// seen counts how often each record value was consumed, across every member of a group.
type dfSeen struct {
	mu    sync.Mutex
	count map[string]int
	where map[string][]string // value → where each delivery came from, for the failure message
	total int
}

func newDfSeen() *dfSeen { return &dfSeen{count: map[string]int{}, where: map[string][]string{}} }

// add counts one delivery of value v; where says which member got it from which offset.
func (s *dfSeen) add(v, where string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count[v]++
	s.where[v] = append(s.where[v], where)
	s.total++
}

func (s *dfSeen) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// onceEach fails t for each of values consumed more than once.
func (s *dfSeen) onceEach(t *testing.T, values []string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if n := s.count[v]; n > 1 {
			t.Errorf("%s consumed %d times although committed before: %v", v, n, s.where[v])
		}
	}
}

// waitAll waits until every value has been consumed; exact also demands each exactly once.
func (s *dfSeen) waitAll(t *testing.T, values []string, exact bool) {
	t.Helper()
	zktest.Eventually(t, 30*time.Second, fmt.Sprintf("%d records consumed", len(values)), func() (bool, string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		missing := 0
		for _, v := range values {
			if s.count[v] == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d missing, %d consumed in all", missing, len(values), s.total)
	})
	if !exact {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var dups []string
	for v, n := range s.count {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d %v", v, n, s.where[v]))
		}
	}
	if len(dups) > 0 {
		slices.Sort(dups)
		t.Errorf("records consumed more than once: %v", dups)
	}
}

// dfMember is a kgo group member that consumes exactly once: rebalances are held while a
// polled batch is processed and its offsets committed (BlockRebalanceOnPoll), so partitions
// only move with everything consumed from them committed.
type dfMember struct {
	*kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (e *dfEnv) startMember(t *testing.T, g string, seen *dfSeen, opts ...kgo.Opt) *dfMember {
	t.Helper()
	cl, err := kgo.NewClient(append(append(dfClientOpts(e.addr),
		kgo.ConsumerGroup(g),
		kgo.ConsumeTopics(dfTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(6*time.Second),
		kgo.RebalanceTimeout(5*time.Second),
		kgo.HeartbeatInterval(200*time.Millisecond),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.WithLogger(kgo.BasicLogger(&testLog{t: t}, kgo.LogLevelInfo, func() string { return "kgo " })),
	), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	m := &dfMember{Client: cl, cancel: cancel, done: make(chan struct{})}
	name := fmt.Sprint(cl.OptValue(kgo.ClientID))
	go func() {
		defer close(m.done)
		defer cl.AllowRebalance()
		for {
			fs := cl.PollFetches(ctx)
			recs := fs.Records()
			for _, r := range recs {
				seen.add(string(r.Value), fmt.Sprintf("%s@%d/%d", name, r.Partition, r.Offset))
			}
			if len(recs) > 0 {
				// Committed even when ctx just ended: the records were counted as consumed.
				cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				if err := cl.CommitRecords(cctx, recs...); err != nil {
					t.Errorf("commit of %d records: %v", len(recs), err)
				}
				ccancel()
			}
			if ctx.Err() != nil {
				return
			}
			cl.AllowRebalance()
		}
	}()
	t.Cleanup(m.stop)
	return m
}

// stop ends the poll loop and closes the client: a dynamic member leaves the group, a static
// one (KIP-345) does not.
func (m *dfMember) stop() {
	m.once.Do(func() {
		m.cancel()
		<-m.done
		m.Close()
	})
}

// waitStable waits until the group is Stable with n members that together own every
// partition of dfTopic once, and returns its description.
func (e *dfEnv) waitStable(t *testing.T, g string, n int) group.Description {
	t.Helper()
	var d group.Description
	zktest.Eventually(t, 30*time.Second, fmt.Sprintf("group %s Stable with %d members covering %s", g, n, dfTopic), func() (bool, string) {
		d = describe(t, e.b, g).Group
		var all []int32
		for _, m := range d.Members {
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.Assignment); err != nil {
				return false, fmt.Sprintf("member %s: %v", m.MemberID, err)
			}
			for _, tp := range a.Topics {
				all = append(all, tp.Partitions...)
			}
		}
		slices.Sort(all)
		want := make([]int32, e.parts)
		for i := range want {
			want[i] = int32(i)
		}
		return d.State == group.Stable && len(d.Members) == n && slices.Equal(all, want),
			fmt.Sprintf("%v generation %d, %d members, partitions %v", d.State, d.Generation, len(d.Members), all)
	})
	return d
}

// checkZKOwners checks /consumers/<g>/owners names an owner for every partition of dfTopic and
// /consumers/<g>/ids has n registrations.
func (e *dfEnv) checkZKOwners(t *testing.T, g string, n int) {
	t.Helper()
	zktest.Eventually(t, 10*time.Second, "group "+g+"'s owners in /consumers/"+g+"/owners", func() (bool, string) {
		snap, err := e.zk.Snapshot(t.Context(), g)
		if err != nil {
			return false, err.Error()
		}
		owned := 0
		for tp := range snap.Owners {
			if tp.Topic == dfTopic {
				owned++
			}
		}
		return owned == int(e.parts) && len(snap.Consumers) == n,
			fmt.Sprintf("%d owners, %d consumers", owned, len(snap.Consumers))
	})
}

// kgo through the bridge only: produce, then consume in a bridge-coordinated group with a
// static and a dynamic member, every record exactly once across the dynamic member leaving and
// the static member restarting (which keeps its generation: KIP-345). Owners and offsets are
// in ZooKeeper, and kfake's coordinator never saw the group.
func TestIntegration_DataflowKgo(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{})
	const g = "df-kgo"
	seen := newDfSeen()
	static := e.startMember(t, g, seen, kgo.InstanceID("static-1"), kgo.ClientID("df-static"))
	dynamic := e.startMember(t, g, seen, kgo.ClientID("df-dynamic"))
	e.waitStable(t, g, 2)
	e.checkZKOwners(t, g, 2)

	all := e.produce(t, "a", 120)
	seen.waitAll(t, all, true)

	// The dynamic member leaves: its partitions go to the static member, from the offsets it
	// committed.
	dynamic.stop()
	before := e.waitStable(t, g, 1)
	all = append(all, e.produce(t, "b", 120)...)
	seen.waitAll(t, all, true)

	// The static member restarts; records produced meanwhile are consumed by its next
	// incarnation, which gets its partitions back without a rebalance.
	static.stop()
	all = append(all, e.produce(t, "c", 120)...)
	e.startMember(t, g, seen, kgo.InstanceID("static-1"), kgo.ClientID("df-static"))
	seen.waitAll(t, all, true)
	after := e.waitStable(t, g, 1)
	if after.Members[0].MemberID == before.Members[0].MemberID {
		t.Errorf("the static member kept member id %s across its restart; want the new incarnation's", after.Members[0].MemberID)
	}
	if after.Generation != before.Generation {
		t.Errorf("static member's restart moved the generation from %d to %d, want no rebalance", before.Generation, after.Generation)
	}
	if n := seen.n(); n != len(all) {
		t.Errorf("consumed %d records, want exactly %d", n, len(all))
	}

	e.waitZKOffsets(t, g, e.endOffsets(t))
	e.checkZKOwners(t, g, 1)
	e.checkGroupsStayedOffKfake(t)
}

// Partition leaders moving between upstream brokers: the producer and the group's fetcher get
// NOT_LEADER_OR_FOLLOWER relayed from the old leader, refresh Metadata through the bridge and
// follow to the new leader's proxy listener; everything is consumed and committed.
//
// At least once, not exactly once: kfake answers OffsetForLeaderEpoch for the epoch before a
// move with "unknown" until a batch is written in the new epoch (it derives epochs from
// batches), and kgo then resets the partition to its start as on data loss. The same happens
// with kgo straight on kfake, without the bridge; a real broker's leader epoch cache knows.
func TestIntegration_DataflowLeaderMove(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{})
	const g = "df-move"
	seen := newDfSeen()
	e.startMember(t, g, seen, kgo.ClientID("df-move"))
	e.waitStable(t, g, 1)
	all := e.produce(t, "a", 60)
	seen.waitAll(t, all, false)

	for p := range e.parts {
		if err := e.kf.MoveTopicPartition(dfTopic, p, (p+1)%3); err != nil {
			t.Fatal(err)
		}
	}
	all = append(all, e.produce(t, "b", 60)...)
	for p := range e.parts {
		if err := e.kf.MoveTopicPartition(dfTopic, p, (p+2)%3); err != nil {
			t.Fatal(err)
		}
	}
	all = append(all, e.produce(t, "c", 60)...)
	seen.waitAll(t, all, false)
	e.waitZKOffsets(t, g, e.endOffsets(t))
	e.checkGroupsStayedOffKfake(t)
}

// sarama through the bridge only: a SyncProducer, then a ConsumerGroup member with a static
// instance id (Consumer.Group.InstanceId, JoinGroup v5+).
func TestIntegration_DataflowSarama(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{})
	const g = "df-sarama"
	cfg := kafkatest.SaramaConfig("df-sarama")
	cfg.Version = sarama.V2_8_0_0 // static membership needs 2.3+
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.InstanceId = "sarama-static-1"
	cfg.Consumer.Group.Session.Timeout = 6 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 5 * time.Second

	client := kafkatest.SaramaClient(t, cfg, e.addr)
	const n = 60
	var values []string
	for i := range n {
		values = append(values, fmt.Sprintf("s-%d", i))
	}
	kafkatest.SaramaProduce(t, client, dfTopic, values, func(i int) int32 { return int32(i) % e.parts })

	cg, err := sarama.NewConsumerGroup([]string{e.addr}, g, cfg)
	if err != nil {
		t.Fatalf("sarama consumer group: %v", err)
	}
	seen := newDfSeen()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{dfTopic}, dfSaramaHandler{seen}); err != nil && ctx.Err() == nil {
				t.Logf("sarama Consume: %v", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	go func() {
		for err := range cg.Errors() {
			t.Logf("sarama group: %v", err)
		}
	}()
	seen.waitAll(t, values, true)
	d := e.waitStable(t, g, 1)
	if d.Members[0].InstanceID != "sarama-static-1" {
		t.Errorf("sarama's member has instance id %q, want sarama-static-1", d.Members[0].InstanceID)
	}
	e.checkZKOwners(t, g, 1)
	e.waitZKOffsets(t, g, e.endOffsets(t))
	cancel()
	<-done
	if err := cg.Close(); err != nil {
		t.Errorf("closing the sarama group: %v", err)
	}
	e.checkGroupsStayedOffKfake(t)
}

// dfSaramaHandler marks every message it consumes; sarama's auto-commit commits the marks.
type dfSaramaHandler struct{ seen *dfSeen }

func (dfSaramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (dfSaramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h dfSaramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.seen.add(string(msg.Value), fmt.Sprintf("sarama@%d/%d", msg.Partition, msg.Offset))
		sess.MarkMessage(msg, "")
	}
	return nil
}

// kafka-go through the bridge only: a Writer, then a Reader in a consumer group (GroupID)
// committing what it read.
func TestIntegration_DataflowKafkaGo(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{})
	const g = "df-kafkago"
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(e.addr),
		Topic:        dfTopic,
		Balancer:     &kafkago.RoundRobin{},
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafkago.RequireAll,
	}
	const n = 60
	var values []string
	var msgs []kafkago.Message
	for i := range n {
		values = append(values, fmt.Sprintf("kg-%d", i))
		msgs = append(msgs, kafkago.Message{Value: []byte(values[i])})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("kafka-go write through the bridge: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	r := kafkago.NewReader(kafkago.ReaderConfig{
		Brokers:           []string{e.addr},
		GroupID:           g,
		Topic:             dfTopic,
		StartOffset:       kafkago.FirstOffset,
		MaxWait:           100 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond,
		SessionTimeout:    6 * time.Second,
		RebalanceTimeout:  5 * time.Second,
		CommitInterval:    0, // CommitMessages commits synchronously
	})
	defer r.Close()
	seen := newDfSeen()
	for seen.n() < n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go FetchMessage after %d records: %v", seen.n(), err)
		}
		seen.add(string(m.Value), fmt.Sprintf("kafka-go@%d/%d", m.Partition, m.Offset))
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("kafka-go CommitMessages: %v", err)
		}
	}
	seen.waitAll(t, values, true)
	e.waitStable(t, g, 1)
	e.checkZKOwners(t, g, 1)
	e.waitZKOffsets(t, g, e.endOffsets(t))
	e.checkGroupsStayedOffKfake(t)
}

// librdkafka through the bridge only: kcat -P produces, kcat -G consumes in a group and
// commits on exit.
func TestIntegration_DataflowKcat(t *testing.T) {
	t.Parallel()
	kcat := kafkatest.KcatPath(t)
	e := dfStart(t, dfOpts{})
	const g = "df-kcat"
	const n = 60
	var values []string
	for i := range n {
		values = append(values, fmt.Sprintf("kc-%d", i))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	prod := exec.CommandContext(ctx, kcat, "-b", e.addr, "-P", "-t", dfTopic, "-X", "linger.ms=5")
	prod.Stdin = strings.NewReader(strings.Join(values, "\n") + "\n")
	if out, err := prod.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P through the bridge: %v\n%s", err, out)
	}
	end := e.endOffsets(t)
	var produced int64
	for _, o := range end {
		produced += o
	}
	if produced != n {
		t.Fatalf("partitions hold %d records after kcat -P, want %d (end offsets %v)", produced, n, end)
	}

	cons := exec.CommandContext(ctx, kcat, "-b", e.addr, "-G", g, "-q", "-c", strconv.Itoa(n), "-f", "%s\n",
		"-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100",
		"-X", "heartbeat.interval.ms=200", "-X", "session.timeout.ms=6000", dfTopic)
	var stderr strings.Builder
	cons.Stderr = &stderr
	out, err := cons.Output()
	if err != nil {
		t.Fatalf("kcat -G through the bridge: %v\n%s", err, stderr.String())
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	want := slices.Clone(values)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kcat -G consumed %d records %v, want %d", len(got), got, len(want))
	}
	// kcat's exit closes the consumer, which commits what it consumed.
	e.waitZKOffsets(t, g, end)
	e.checkGroupsStayedOffKfake(t)
}

// The upstream brokers come from /brokers/ids (0.8 registrations) and the bridge follows the
// registry: a broker leaving closes its proxy listener and drops out of Metadata, one coming
// back gets its listener (and port) again, one re-registering at another address is dialed
// there, and a broker that is stopped and restarted stops only its own partitions, its proxy
// listener refusing connections meanwhile as the broker's own port does. One kgo group member
// consumes every record exactly once throughout.
func TestIntegration_DataflowUpstreamFromZK(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{fromZK: true})
	ctx := t.Context()
	const g = "df-fromzk"
	seen := newDfSeen()
	e.startMember(t, g, seen, kgo.ClientID("df-fromzk"))
	e.waitStable(t, g, 1)
	all := e.produce(t, "a", 60)
	seen.waitAll(t, all, true)

	// Broker 2 leaves the registry, as when it stops: its proxy listener closes and Metadata
	// no longer lists it (its partitions have no leader), while the other partitions carry on.
	// (No leader moves here: see TestIntegration_DataflowLeaderMove for why they would cost
	// exactly-once on kfake.)
	before := e.b.ProxyAddrs()
	if err := e.zk.Delete(ctx, zkstate.BrokerPath(2), -1); err != nil {
		t.Fatal(err)
	}
	e.waitProxies(t, 2)
	if c, err := net.DialTimeout("tcp", before[2].String(), time.Second); err == nil {
		c.Close()
		t.Errorf("broker 2's proxy listener %s still accepts after it left", before[2])
	}
	if ids := e.metadataBrokers(t); !slices.Equal(ids, []int32{0, 1, dfNode}) {
		t.Errorf("Metadata brokers after broker 2 left: %v, want [0 1 %d]", ids, dfNode)
	}
	of := func(pred func(int32) bool) []int32 {
		var out []int32
		for p := range e.parts {
			if pred(p) {
				out = append(out, p)
			}
		}
		return out
	}
	all = append(all, e.produceTo(t, "b", 40, of(func(p int32) bool { return p%3 != 2 }))...)
	seen.waitAll(t, all, true)

	// Broker 2 comes back: same proxy port, and its partitions work again through it.
	if err := e.zk.Create(ctx, zkstate.BrokerPath(2), dfRegistration(t, 2, e.kfAddrs[2]).Encode(), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if after := e.waitProxies(t, 3); after[2].String() != before[2].String() {
		t.Errorf("broker 2's proxy listener came back at %s, want its old %s", after[2], before[2])
	}
	all = append(all, e.produceTo(t, "c", 20, of(func(p int32) bool { return p%3 == 2 }))...)
	seen.waitAll(t, all, true)

	// Broker 1 re-registers at another address (a gate in front of it): new upstream
	// connections go there.
	gate := startDfGate(t, e.kfAddrs[1])
	if _, err := e.zk.Set(ctx, zkstate.BrokerPath(1), dfRegistration(t, 1, gate.addr).Encode(), -1); err != nil {
		t.Fatal(err)
	}
	attempt := 0
	zktest.Eventually(t, 10*time.Second, "broker 1 dialed at its new address", func() (bool, string) {
		attempt++ // a new client each time: new upstream connections
		all = append(all, e.produceFresh(t, fmt.Sprintf("probe%d", attempt), 1, []int32{1})...)
		return gate.accepted.Load() > 0, "the gate accepted nothing"
	})

	// Broker 1 stops: the partitions of brokers 0 and 2 carry on, and broker 1's proxy
	// listener refuses connections, the broker still registered, still in Metadata. The bridge
	// learns that broker 1 is down from its next dial there, which is refused: a request on a
	// new connection to the listener makes one. (The connections opened before broker 1 moved
	// to the gate still reach kfake directly, so the cut does not close them.) Then it
	// restarts: its listener listens again on its port, and its partitions are produced to and
	// consumed again.
	gate.cut()
	all = append(all, e.produceTo(t, "d", 40, of(func(p int32) bool { return p%3 != 1 }))...)
	seen.waitAll(t, all, true)
	zktest.Eventually(t, 10*time.Second, "broker 1's proxy listener refusing connections while it is down", func() (bool, string) {
		c, err := net.DialTimeout("tcp", before[1].String(), time.Second)
		if err == nil {
			// Accepted: the Metadata request makes the bridge dial broker 1, and the
			// refused dial closes this connection.
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(7)
			_, _ = c.Write(kmsg.NewRequestFormatter().AppendRequest(nil, req, 1))
			_, _ = io.Copy(io.Discard, c)
			return false, "accepted"
		}
		return errors.Is(err, syscall.ECONNREFUSED), err.Error()
	})
	if ids := e.metadataBrokers(t); !slices.Equal(ids, []int32{0, 1, 2, dfNode}) {
		t.Errorf("Metadata brokers while broker 1 is down but registered: %v, want [0 1 2 %d]", ids, dfNode)
	}
	gate.restore(t)
	zktest.Eventually(t, 10*time.Second, "broker 1's proxy listener listening again on its port", func() (bool, string) {
		addrs := e.b.ProxyAddrs()
		return addrs[1] != nil && addrs[1].String() == before[1].String(), fmt.Sprint(addrs)
	})
	all = append(all, e.produceTo(t, "e", 20, of(func(p int32) bool { return p%3 == 1 }))...)
	seen.waitAll(t, all, true)
	if n := seen.n(); n != len(all) {
		t.Errorf("consumed %d records, want exactly %d", n, len(all))
	}

	e.waitZKOffsets(t, g, e.endOffsets(t))
	e.checkZKOwners(t, g, 1)
	e.checkGroupsStayedOffKfake(t)
}

// metadataBrokers asks the bridge for Metadata and returns the broker ids, sorted.
func (e *dfEnv) metadataBrokers(t *testing.T) []int32 {
	t.Helper()
	cl, err := kgo.NewClient(dfClientOpts(e.addr)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest())
	if err != nil {
		t.Fatalf("Metadata through the bridge: %v", err)
	}
	var ids []int32
	for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
		ids = append(ids, b.NodeID)
	}
	slices.Sort(ids)
	return ids
}

// dfGate is a TCP forwarder standing for a broker that the test can stop (cut: its
// connections closed and its port refusing new ones, as a stopped broker's) and restart
// (restore: listening again on the same port).
type dfGate struct {
	addr     string
	target   string
	accepted atomic.Int64 // connections forwarded

	mu    sync.Mutex
	ln    net.Listener // nil while cut
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startDfGate(t *testing.T, target string) *dfGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &dfGate{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	g.wg.Go(func() { g.serve(ln) })
	t.Cleanup(func() {
		g.cut()
		g.wg.Wait()
	})
	return g
}

func (g *dfGate) serve(ln net.Listener) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", g.target, 5*time.Second)
		if err != nil {
			nc.Close()
			continue
		}
		g.mu.Lock()
		if g.ln != ln {
			g.mu.Unlock()
			nc.Close()
			up.Close()
			continue
		}
		g.conns[nc], g.conns[up] = struct{}{}, struct{}{}
		g.mu.Unlock()
		g.accepted.Add(1)
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			g.mu.Lock()
			delete(g.conns, dst)
			delete(g.conns, src)
			g.mu.Unlock()
		}
		g.wg.Go(func() { pipe(up, nc) })
		g.wg.Go(func() { pipe(nc, up) })
	}
}

// cut stops the "broker": its port refuses connections and open ones are closed.
func (g *dfGate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		c.Close()
	}
}

// restore restarts the "broker" on its port.
func (g *dfGate) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		t.Fatalf("gate: listening again on %s: %v", g.addr, err)
	}
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	g.wg.Go(func() { g.serve(ln) })
}
