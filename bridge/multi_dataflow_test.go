package bridge_test

// Several bridges as one service with the data path (issue 15, build item 3): three bridges
// relay to one kfake cluster. Each upstream broker is served by one bridge's proxy listener
// (placement of "broker/<id>" over the live bridges), so Metadata from any bridge, on any of its
// listeners, lists the same brokers at the same addresses: every bridge as itself, every
// upstream broker at its serving bridge. A bridge killed with SIGKILL takes its listeners with
// it; once ZooKeeper expires its session the survivors re-point its brokers, take its groups
// over, and the clients carry on through them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// metadataView asks addr for Metadata v7 (every topic) and returns what every bridge must
// answer alike: the brokers as id@host:port, the controller, and each partition's leader.
func metadataView(t *testing.T, addr string) (string, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	c := kafkatest.NewClient(t, nc, "metadata-view")
	defer c.NC.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(7)
	md := c.RoundTrip(req).(*kmsg.MetadataResponse)
	var brokers, parts []string
	for _, b := range md.Brokers {
		brokers = append(brokers, fmt.Sprintf("%d@%s", b.NodeID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))))
	}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			parts = append(parts, fmt.Sprintf("%s/%d:leader %d error %d", *tp.Topic, p.Partition, p.Leader, p.ErrorCode))
		}
	}
	slices.Sort(brokers)
	slices.Sort(parts)
	return fmt.Sprintf("brokers %v controller %d partitions %v", brokers, md.ControllerID, parts), nil
}

// dfServedBy is the bridge serving each of dfStart's upstream brokers (0-2) among the bridges
// ids, as they compute it (placement.Servers: every bridge of the tests runs this build).
func dfServedBy(ids ...int32) map[int32]int32 {
	return placement.Servers([]int32{0, 1, 2}, ids, func(int32, int32) bool { return true })
}

// listenersIn returns the addresses a Metadata view names (the bridges' and the proxy listeners
// clients are sent to).
func listenersIn(view string) []string {
	inner, _, _ := strings.Cut(strings.TrimPrefix(view, "brokers ["), "]")
	var out []string
	for _, b := range strings.Fields(inner) {
		_, addr, _ := strings.Cut(b, "@")
		out = append(out, addr)
	}
	return out
}

// sameMetadataEverywhere waits until Metadata asked on every address in addrs, and on every
// address those answers name, is one and the same answer listing exactly the bridges of want
// (as themselves) and the upstream brokers 0-2; it returns that answer.
func sameMetadataEverywhere(t *testing.T, addrs []string, want map[int32]string) string {
	t.Helper()
	var view string
	zktest.Eventually(t, 20*time.Second, "the same Metadata from every bridge and listener", func() (bool, string) {
		views := map[string]string{}
		ask := slices.Clone(addrs)
		for len(ask) > 0 {
			a := ask[0]
			ask = ask[1:]
			if _, done := views[a]; done {
				continue
			}
			v, err := metadataView(t, a)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", a, err)
			}
			views[a] = v
			ask = append(ask, listenersIn(v)...)
		}
		distinct := map[string][]string{}
		for a, v := range views {
			distinct[v] = append(distinct[v], a)
		}
		if len(distinct) != 1 {
			return false, fmt.Sprintf("%d different answers: %v", len(distinct), distinct)
		}
		for v := range distinct {
			view = v
		}
		for id, addr := range want {
			if !strings.Contains(view, fmt.Sprintf("%d@%s", id, addr)) {
				return false, fmt.Sprintf("bridge %d@%s not listed: %s", id, addr, view)
			}
		}
		if n := len(listenersIn(view)); n != len(want)+3 {
			return false, fmt.Sprintf("%d brokers listed, want %d bridges and 3 upstream brokers: %s", n, len(want), view)
		}
		return true, ""
	})
	return view
}

// dpMember is a kgo group member that consumes exactly once and commits what it polled before
// polling again (BlockRebalanceOnPoll), retrying a commit that fails as an application would
// (kgo may first send one on its connection to a coordinator that was just killed).
type dpMember struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startDpMember(t *testing.T, seeds []string, g string, seen *dfSeen, opts ...kgo.Opt) *dpMember {
	t.Helper()
	cl, err := kgo.NewClient(append(append(dfClientOpts(seeds[0]),
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(g),
		kgo.ConsumeTopics(dfTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(12*time.Second),
		kgo.RebalanceTimeout(5*time.Second),
		kgo.HeartbeatInterval(200*time.Millisecond),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.RetryTimeout(20*time.Second),
	), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	m := &dpMember{cl: cl, cancel: cancel, done: make(chan struct{})}
	name := fmt.Sprint(cl.OptValue(kgo.ClientID))
	go func() {
		defer close(m.done)
		defer cl.AllowRebalance()
		for ctx.Err() == nil {
			recs := cl.PollFetches(ctx).Records()
			for _, r := range recs {
				seen.add(string(r.Value), fmt.Sprintf("%s %s@%d/%d", g, name, r.Partition, r.Offset))
			}
			// Until the dead bridge's session expires and a survivor takes the group over,
			// kgo may dial the coordinator it knew and fail at once: retry for longer than
			// the failover takes, not a number of times.
			giveUp := time.Now().Add(30 * time.Second)
			for len(recs) > 0 {
				cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err := cl.CommitRecords(cctx, recs...)
				ccancel()
				if err == nil {
					break
				}
				if time.Now().After(giveUp) {
					t.Errorf("group %s: commit of %d records failed for 30 s: %v", g, len(recs), err)
					break
				}
				t.Logf("group %s: commit of %d records: %v; retrying", g, len(recs), err)
				time.Sleep(200 * time.Millisecond)
			}
			cl.AllowRebalance()
		}
	}()
	t.Cleanup(func() { m.cancel(); <-m.done; cl.Close() })
	return m
}

// offsetWatch polls the groups' committed 0.8 offsets (/consumers/<g>/offsets) and records any
// that went backwards.
type offsetWatch struct {
	mu        sync.Mutex
	last      map[string]int64
	regressed []string
	stop      func()
}

// watchOffsets polls, every d, the offsets of the topics' partitions (topic → partition count)
// in each group until check.
func watchOffsets(t *testing.T, zk *zkstate.Store, d time.Duration, topics map[string]int, groups ...string) *offsetWatch {
	w := &offsetWatch{last: map[string]int64{}}
	w.stop = pollEvery(t, d, func(ctx context.Context) {
		for _, g := range groups {
			for tp, n := range topics {
				for p := range int32(n) {
					data, _, err := zk.Get(ctx, zkstate.OffsetPath(g, tp, p))
					if err != nil {
						continue
					}
					off, err := zkstate.ParseOffset(data)
					if err != nil {
						continue
					}
					key := fmt.Sprintf("%s/%s-%d", g, tp, p)
					w.mu.Lock()
					if prev, ok := w.last[key]; ok && off < prev {
						w.regressed = append(w.regressed, fmt.Sprintf("%s: %d after %d", key, off, prev))
					}
					w.last[key] = off
					w.mu.Unlock()
				}
			}
		}
	})
	return w
}

// check stops the polling and fails t if any offset went backwards.
func (w *offsetWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.regressed) > 0 {
		t.Errorf("%d committed offsets went backwards: %v", len(w.regressed), w.regressed)
	}
}

// kcatBrokers lists the brokers librdkafka learns from addr (kcat -L -J) as id@host:port.
func kcatBrokers(t *testing.T, kcat, addr string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcat, "-b", addr, "-L", "-J", "-m", "10").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("kcat -L -b %s: %v", addr, err)
	}
	var md struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
	}
	if err := json.Unmarshal(out, &md); err != nil {
		t.Fatalf("kcat output: %v\n%s", err, out)
	}
	var got []string
	for _, b := range md.Brokers {
		got = append(got, fmt.Sprintf("%d@%s", b.ID, b.Name))
	}
	slices.Sort(got)
	return got
}

func TestIntegration_SeveralBridgesDataPath(t *testing.T) {
	t.Parallel()
	kcat := kafkatest.KcatPath(t)
	e := dfStart(t, dfOpts{fromZK: true, partitions: 6})
	ctx := t.Context()

	// The killed bridge (a child process) must serve at least one upstream broker and own the
	// static group, so that both the data path and a group move when it dies.
	const a, b = dfNode, dfNode + 1 // in this process
	var dead int32
	for id := dfNode + 2; dead == 0; id++ {
		for k := range int32(3) {
			if dfServedBy(a, b, id)[k] == id {
				dead = id
			}
		}
	}
	ids := []int32{a, b, dead}
	pick := func(prefix string, owner int32) string {
		for i := 0; ; i++ {
			if o, _ := placement.Owner(fmt.Sprintf("%s-%d", prefix, i), ids); o == owner {
				return fmt.Sprintf("%s-%d", prefix, i)
			}
		}
	}
	static, dynamic := pick("dp-static", dead), pick("dp-dynamic", b)

	child := startChildBridge(t, childSpec{ZKConnect: e.connect, NodeID: dead, ZKSessionTimeout: 4 * time.Second, UpstreamFromZK: true})
	second := startBridge(t, e.connect, b, func(c *bridge.Config) {
		c.UpstreamFromZK, c.ProxyListen, c.MetadataMaxAge = true, "127.0.0.1:0", time.Second
	})
	bridges := map[int32]string{a: e.addr, b: second.Addr().String(), dead: child.addr}
	seeds := []string{e.addr, second.Addr().String(), child.addr}
	var addrs []string
	addrs = append(addrs, seeds...)
	for _, r := range []*running{e.b, second} {
		for _, p := range r.ProxyAddrs() {
			addrs = append(addrs, p.String())
		}
	}

	// Every bridge, on its bootstrap and on each proxy listener, answers the same Metadata:
	// the three bridges and the three upstream brokers, each at its serving bridge's listener.
	view := sameMetadataEverywhere(t, addrs, bridges)
	t.Logf("Metadata: %s", view)
	// librdkafka sees the same brokers whichever bridge it bootstraps from.
	first := kcatBrokers(t, kcat, seeds[0])
	for _, s := range seeds[1:] {
		if got := kcatBrokers(t, kcat, s); !slices.Equal(got, first) {
			t.Errorf("kcat -L from %s lists %v, from %s %v", s, got, seeds[0], first)
		}
	}
	// Each group's coordinator is one bridge, named alike by all, and listed in Metadata.
	for _, s := range seeds {
		got := coordinatorsOf(t, s, []string{static, dynamic})
		if want := []string{fmt.Sprintf("%d@%s", dead, child.addr), fmt.Sprintf("%d@%s", b, bridges[b])}; !slices.Equal(got, want) {
			t.Errorf("%s names coordinators %v, want %v", s, got, want)
		}
	}

	offsets := watchOffsets(t, e.zk, 50*time.Millisecond, map[string]int{dfTopic: int(e.parts)}, static, dynamic)
	t.Cleanup(func() { offsets.check(t) })
	seenStatic, seenDynamic := newDfSeen(), newDfSeen()
	for i := range 2 {
		startDpMember(t, seeds, static, seenStatic, kgo.InstanceID(fmt.Sprintf("static-%d", i)))
		startDpMember(t, seeds, dynamic, seenDynamic)
	}
	producer, all := startDfProducer(t, seeds, e.parts)
	before := dfProduce(t, producer, "before", 60, all)
	seenStatic.waitAll(t, before, true)
	seenDynamic.waitAll(t, before, true)
	end := e.endOffsets(t)
	e.waitZKOffsets(t, static, end)
	e.waitZKOffsets(t, dynamic, end)
	gen := generationOf(t, e.zk, static)
	t.Logf("group %s on bridge %d in generation %d", static, dead, gen)

	// Kill -9 the bridge that serves the static group and at least one broker.
	killed := time.Now()
	child.kill()
	after := dfProduce(t, producer, "after", 60, all)
	t.Logf("60 records produced through the survivors %v after the kill", time.Since(killed).Round(time.Millisecond))
	// Records polled after the kill may come again: a commit kgo sent to the bridge being
	// killed is lost with it or refused while the group moves, and a member the rebalance
	// timeout removes meanwhile hands its partitions over at the last committed offset, as a
	// broker's crash does (at least once). The records committed before the kill must not.
	seenStatic.waitAll(t, slices.Concat(before, after), false)
	seenDynamic.waitAll(t, slices.Concat(before, after), false)
	seenStatic.onceEach(t, before)
	seenDynamic.onceEach(t, before)
	t.Logf("every record consumed by both groups %v after the kill", time.Since(killed).Round(time.Millisecond))
	end = e.endOffsets(t)
	e.waitZKOffsets(t, static, end)
	e.waitZKOffsets(t, dynamic, end)

	// The survivors answer alike again, without the dead bridge or any listener of it.
	delete(bridges, dead)
	view = sameMetadataEverywhere(t, addrs[:2], bridges)
	if strings.Contains(view, fmt.Sprintf("%d@", dead)) || strings.Contains(view, child.addr) {
		t.Errorf("survivors' Metadata still names the dead bridge: %s", view)
	}
	// The survivor restored the static group's generation, and its members carry on in it: kgo's
	// members whose heartbeats failed against the dead bridge gave their partitions up and
	// rejoined with their member ids, which Kafka answers with a rebalance; the engine takes each
	// as a restart of its instance (bridge/group/resume.go, testdata/resume.txt).
	next, _ := placement.Owner(static, []int32{a, b})
	d := describe(t, map[int32]*running{a: e.b, b: second}[next], static).Group
	if d.State != group.Stable || int32(d.Generation) != int32(gen) {
		t.Errorf("group %s on bridge %d: %v generation %d after the kill, want Stable generation %d (static members, no rebalance)", static, next, d.State, d.Generation, gen)
	}

	// librdkafka, given every bridge (one dead), consumes everything through the survivors and
	// commits on exit.
	const kg = "dp-kcat"
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cons := exec.CommandContext(cctx, kcat, "-b", strings.Join(seeds, ","), "-G", kg, "-q", "-c", "120", "-f", "%s\n",
		"-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100",
		"-X", "heartbeat.interval.ms=200", "-X", "session.timeout.ms=6000", dfTopic)
	var stderr strings.Builder
	cons.Stderr = &stderr
	out, err := cons.Output()
	if err != nil {
		t.Fatalf("kcat -G through the survivors: %v\n%s", err, stderr.String())
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	want := slices.Concat(before, after)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kcat -G consumed %d records, want %d", len(got), len(want))
	}
	e.waitZKOffsets(t, kg, end)
	e.checkGroupsStayedOffKfake(t)
}

// generationOf reads a group's generation from its record in ZooKeeper.
// startDfProducer is a producer through the bridges at seeds that picks each record's partition,
// with every partition of the data-path topic, for dfProduce.
func startDfProducer(t *testing.T, seeds []string, parts int32) (*kgo.Client, []int32) {
	t.Helper()
	producer, err := kgo.NewClient(append(dfClientOpts(seeds[0]), kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordDeliveryTimeout(40*time.Second), kgo.RetryTimeout(40*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	all := make([]int32, parts)
	for p := range all {
		all[p] = int32(p)
	}
	return producer, all
}

func generationOf(t *testing.T, zk *zkstate.Store, g string) int32 {
	t.Helper()
	data, _, err := zk.Get(t.Context(), zkstate.GroupRecordPath(bridge.DefaultRoot, g))
	if err != nil {
		t.Fatalf("group %s's record: %v", g, err)
	}
	var rec group.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatalf("group %s's record: %v", g, err)
	}
	return int32(rec.Generation)
}
