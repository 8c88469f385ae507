package relay_test

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/relay"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// The relay (relay.go) in front of a franz-go kfake cluster of three
// brokers: real clients (kgo, sarama, kafka-go, kcat) are given the
// bridge's bootstrap address only, produce and fetch through it, and must
// never see a kfake address. Group APIs are not exercised here (the
// Coordinator is nil): consumers assign partitions directly.

const bridgeNode = 100 // apart from kfake's node ids 0, 1, 2

// relayEnv is a kfake cluster, an Upstream for it, and a Server with its
// proxy listeners, all stopped by t.Cleanup.
type relayEnv struct {
	t       *testing.T
	kf      *kfake.Cluster
	up      *relay.Upstream
	srv     *newproto.Server
	proxy   *relay.Proxy
	addr    string // the bridge's bootstrap listener
	reg     *prometheus.Registry
	gates   map[int32]*tcpGate // broker id → the gate in front of it (relayOpts.gated)
	kfAddrs map[int32]string   // broker id → kfake's own address
}

type relayOpts struct {
	topics         map[string]int32 // name → partitions; default orders:3
	gated          []int32          // brokers reached through a tcpGate the test can cut
	requestTimeout time.Duration
	idleTimeout    time.Duration
	logLevel       zerolog.Level
	kfakeOpts      []kfake.Opt
	coord          newproto.Coordinator
	fetchGate      func(time.Time) (time.Time, error) // Config.FetchGate
	peers          relay.Peers                        // Config.Peers
	logs           io.Writer                          // also gets the log, when set
	// dial, when set, is the upstream's dialer (UpstreamConfig.Dial): TLS to brokers.
	dial func(ctx context.Context, network, address string) (net.Conn, error)
	// sasl: the brokers require SASL (SCRAM-SHA-512 user saslUser), and the server
	// forwards each client's exchange to them (newproto.SASLConfig.Forward).
	sasl bool
}

// The SCRAM-SHA-512 user of relayOpts.sasl.
const saslUser, saslPass = "bench", "bench-secret"

func startRelay(t testing.TB, o relayOpts) *relayEnv {
	t.Helper()
	if o.topics == nil {
		o.topics = map[string]int32{"orders": 3}
	}
	kopts := []kfake.Opt{kfake.NumBrokers(3), kfake.ClusterID("kfake-upstream")}
	for name, n := range o.topics {
		kopts = append(kopts, kfake.SeedTopics(n, name))
	}
	if o.sasl {
		kopts = append(kopts, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", saslUser, saslPass))
	}
	kf, err := kfake.NewCluster(append(kopts, o.kfakeOpts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kf.Close)

	var log zerolog.Logger
	if tt, ok := t.(*testing.T); ok && o.logLevel != zerolog.Disabled {
		level := o.logLevel
		if level == zerolog.DebugLevel-1 || level == 0 {
			level = zerolog.InfoLevel
		}
		var w io.Writer = zerolog.NewTestWriter(tt)
		if o.logs != nil {
			w = zerolog.MultiLevelWriter(w, o.logs)
		}
		log = zerolog.New(w).Level(level)
	} else {
		log = zerolog.Nop()
	}
	up, err := relay.NewUpstream(relay.UpstreamConfig{Logger: log, RequestTimeout: o.requestTimeout, DialTimeout: 2 * time.Second, Dial: o.dial})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o.sasl {
		// The bridge cannot ask brokers that require SASL for Metadata: the
		// brokers as /brokers/ids would list them (kfake's node k listens
		// at its k-th address).
		var brokers []newproto.Broker
		for i, a := range kf.ListenAddrs() {
			host, port, _ := net.SplitHostPort(a)
			p, _ := strconv.Atoi(port)
			brokers = append(brokers, newproto.Broker{NodeID: int32(i), Host: host, Port: int32(p)})
		}
		if err := up.SetBrokers(brokers); err != nil {
			t.Fatal(err)
		}
	} else if err := up.Discover(ctx, kf.ListenAddrs()[:1]); err != nil {
		// The --upstream bootstrap mode: the brokers come from a seed's
		// Metadata.
		t.Fatalf("Discover: %v", err)
	}
	env := &relayEnv{kf: kf, up: up, gates: map[int32]*tcpGate{}, kfAddrs: map[int32]string{}}
	brokers := up.Brokers()
	if len(brokers) != 3 {
		t.Fatalf("discovered %v, want 3 brokers", brokers)
	}
	for i, b := range brokers {
		env.kfAddrs[b.NodeID] = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		if slices.Contains(o.gated, b.NodeID) {
			g := startTCPGate(t, env.kfAddrs[b.NodeID])
			env.gates[b.NodeID] = g
			host, port, _ := net.SplitHostPort(g.addr)
			p, _ := strconv.Atoi(port)
			brokers[i].Host, brokers[i].Port = host, int32(p)
		}
	}
	if err := up.SetBrokers(brokers); err != nil {
		t.Fatal(err)
	}
	if err := up.Probe(ctx); err != nil {
		t.Fatalf("Probe: %v", err)
	}

	env.reg = prometheus.NewRegistry()
	proxy, err := relay.New(relay.Config{Upstream: up, Listen: "127.0.0.1:0", FetchGate: o.fetchGate, Peers: o.peers, Logger: log, Registerer: env.reg})
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	var saslCfg *newproto.SASLConfig
	if o.sasl {
		saslCfg = &newproto.SASLConfig{Forward: true}
	}
	srv, err := newproto.New(newproto.Config{
		Logger:      log,
		Registerer:  env.reg,
		NodeID:      bridgeNode,
		IdleTimeout: o.idleTimeout,
		Coordinator: o.coord,
		Relay:       proxy,
		SASL:        saslCfg,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env.srv, env.proxy, env.addr = srv, proxy, ln.Addr().String()
	sctx, scancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- srv.Serve(sctx, ln) }()
	go func() { done <- proxy.Serve(sctx, srv) }()
	t.Cleanup(func() {
		scancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("Serve/proxy.Serve: %v", err)
			}
		}
	})
	env.waitProxies(t, 3)
	return env
}

// waitProxies waits until n proxy listeners are open.
func (e *relayEnv) waitProxies(t testing.TB, n int) map[int32]net.Addr {
	t.Helper()
	var addrs map[int32]net.Addr
	zktest.Eventually(t, 5*time.Second, fmt.Sprintf("%d proxy listeners", n), func() (bool, string) {
		addrs = e.srv.ProxyAddrs()
		return len(addrs) == n, fmt.Sprint(addrs)
	})
	return addrs
}

// bridgeAddrs is every address the bridge listens on.
func (e *relayEnv) bridgeAddrs() map[string]bool {
	out := map[string]bool{e.addr: true}
	for _, a := range e.srv.ProxyAddrs() {
		out[a.String()] = true
	}
	return out
}

// pinLeaders makes broker p%3 the leader of partition p of topic.
func (e *relayEnv) pinLeaders(t testing.TB, topic string, partitions int32) {
	t.Helper()
	for p := range partitions {
		if err := e.kf.MoveTopicPartition(topic, p, p%3); err != nil {
			t.Fatal(err)
		}
	}
}

func newRelayClient(t testing.TB, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.ClientID("relay-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// kgo retries records without end by default: a test that
		// goes wrong fails instead of hanging.
		kgo.RecordDeliveryTimeout(15 * time.Second),
		kgo.RetryTimeout(10 * time.Second),
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
	}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce sends n records of value prefix-i to topic/partition through cl
// and fails the test on any error.
func produce(t testing.TB, cl *kgo.Client, topic string, partition int32, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, partition, err)
	}
}

// consume reads partitions of topic from the start through the bridge
// until want values have arrived, and returns them per partition.
func consume(t testing.TB, addr, topic string, partitions []int32, want int) map[int32][]string {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for _, p := range partitions {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl := newRelayClient(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchMaxWait(200*time.Millisecond))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[int32][]string{}
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", n, want, ctx.Err())
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.Logf("fetch %s/%d: %v", tp, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	return got
}

func wantValues(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// kgo produces and fetches through the bridge; every record arrives in
// order, and the Metadata kgo sees names bridge listeners only.
func TestRelayKgoProduceFetch(t *testing.T) {
	e := startRelay(t, relayOpts{})
	e.pinLeaders(t, "orders", 3)
	cl := newRelayClient(t, e.addr)
	for p := range int32(3) {
		produce(t, cl, "orders", p, fmt.Sprintf("p%d", p), 100)
	}
	got := consume(t, e.addr, "orders", []int32{0, 1, 2}, 300)
	for p := range int32(3) {
		if want := wantValues(fmt.Sprintf("p%d", p), 100); !slices.Equal(got[p], want) {
			t.Errorf("partition %d: got %d records %v..., want %d", p, len(got[p]), got[p][:min(3, len(got[p]))], len(want))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest())
	if err != nil {
		t.Fatal(err)
	}
	md := resp.(*kmsg.MetadataResponse)
	bridge := e.bridgeAddrs()
	var ids []int32
	for _, b := range md.Brokers {
		addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		if !bridge[addr] {
			t.Errorf("Metadata v%d lists broker %d at %s, not a bridge listener (%v)", md.Version, b.NodeID, addr, bridge)
		}
		ids = append(ids, b.NodeID)
	}
	if !slices.Equal(ids, []int32{0, 1, 2, bridgeNode}) {
		t.Errorf("Metadata brokers %v, want kfake's 0-2 and the bridge's %d", ids, bridgeNode)
	}
	if proxies := e.srv.ProxyAddrs(); md.Brokers[3].Port != int32(mustPort(t, e.addr)) || len(proxies) != 3 {
		t.Errorf("bridge node at port %d, want bootstrap %s", md.Brokers[3].Port, e.addr)
	}
	if md.ClusterID == nil || *md.ClusterID != "kfake-upstream" {
		t.Errorf("cluster id %v, want the upstream's", md.ClusterID)
	}
	if got := kafkatest.CounterValue(t, e.reg, "zkbridge_kafka_relayed_requests_total", map[string]string{"api": "Produce"}); got < 3 {
		t.Errorf("relayed Produce requests = %v, want >= 3", got)
	}
}

func mustPort(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Metadata at every version, on the bootstrap listener and on a proxy
// listener: each broker at its proxy listener, the bridge's node at the
// bootstrap port, topics as the upstream has them. Every response
// re-encodes to its bytes (recv checks), so the rewrite kept the framing.
func TestRelayMetadataEveryVersion(t *testing.T) {
	e := startRelay(t, relayOpts{})
	proxies := e.srv.ProxyAddrs()
	for _, addr := range []string{e.addr, proxies[1].String()} {
		c := kafkatest.Dial(t, addr)
		for _, v := range kafkatest.Versions(0, 12) {
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(v)
			req.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("orders")}}
			md := c.RoundTrip(req).(*kmsg.MetadataResponse)
			for _, b := range md.Brokers {
				want := e.addr
				if b.NodeID != bridgeNode {
					want = proxies[b.NodeID].String()
				}
				if got := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); got != want {
					t.Errorf("via %s, v%d: broker %d at %s, want %s", addr, v, b.NodeID, got, want)
				}
			}
			if len(md.Brokers) != 4 {
				t.Errorf("v%d: %d brokers, want 4", v, len(md.Brokers))
			}
			if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 3 {
				t.Errorf("v%d: topics %+v", v, md.Topics)
				continue
			}
			for _, p := range md.Topics[0].Partitions {
				if p.ErrorCode != 0 || p.Leader < 0 || p.Leader > 2 {
					t.Errorf("v%d: partition %d leader %d error %d", v, p.Partition, p.Leader, p.ErrorCode)
				}
			}
		}
	}
}

// DescribeCluster (admin clients' broker list) is rewritten like Metadata.
func TestRelayDescribeCluster(t *testing.T) {
	e := startRelay(t, relayOpts{})
	proxies := e.srv.ProxyAddrs()
	c := kafkatest.Dial(t, e.addr)
	for _, v := range kafkatest.Versions(0, 2) {
		req := kmsg.NewPtrDescribeClusterRequest()
		req.SetVersion(v)
		req.EndpointType = 1 // brokers
		dc := c.RoundTrip(req).(*kmsg.DescribeClusterResponse)
		if dc.ErrorCode != 0 || len(dc.Brokers) != 3 {
			t.Fatalf("v%d: error %d, brokers %+v", v, dc.ErrorCode, dc.Brokers)
		}
		for _, b := range dc.Brokers {
			if got, want := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), proxies[b.NodeID].String(); got != want {
				t.Errorf("v%d: broker %d at %s, want %s", v, b.NodeID, got, want)
			}
		}
	}
}

// ApiVersions on a proxy listener: our ranges for the group APIs, the
// upstream's (within kmsg's and the KIP-951 caps) for relayed keys, and no
// group API that would reach the upstream's coordinator.
func TestRelayApiVersions(t *testing.T) {
	e := startRelay(t, relayOpts{})
	for _, addr := range []string{e.addr, e.srv.ProxyAddrs()[0].String()} {
		c := kafkatest.Dial(t, addr)
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(3)
		req.ClientSoftwareName, req.ClientSoftwareVersion = "relay-test", "1"
		av := c.RoundTrip(req).(*kmsg.ApiVersionsResponse)
		got := map[int16][2]int16{}
		for _, k := range av.ApiKeys {
			got[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
		}
		want := map[kmsg.Key][2]int16{
			kmsg.Produce:         {3, 9},  // kfake 3-13, capped below KIP-951
			kmsg.Fetch:           {4, 15}, // kfake 4-18, capped below KIP-951
			kmsg.ListOffsets:     {0, 10}, // kfake's
			kmsg.Metadata:        {0, 13}, // kfake 0-13 within kmsg's 0-13
			kmsg.FindCoordinator: {0, 4},  // ours within kfake's 0-6
			kmsg.JoinGroup:       {0, 9},  // ours, not kfake's
			kmsg.OffsetDelete:    {0, 0},  // ours (newproto/47_offset_delete.go)
			kmsg.ApiVersions:     {0, 4},  // ours
		}
		for k, w := range want {
			if got[int16(k)] != w {
				t.Errorf("via %s: %s v%d-v%d, want v%d-v%d", addr, kmsg.NameForKey(int16(k)), got[int16(k)][0], got[int16(k)][1], w[0], w[1])
			}
		}
		for _, k := range []kmsg.Key{kmsg.ConsumerGroupHeartbeat, kmsg.TxnOffsetCommit, kmsg.ShareFetch} {
			if r, ok := got[int16(k)]; ok {
				t.Errorf("via %s: %s listed (v%d-v%d); it must not reach the upstream's coordinator", addr, kmsg.NameForKey(int16(k)), r[0], r[1])
			}
		}

		// KIP-511: a version above ours is answered at v0 with
		// UNSUPPORTED_VERSION and the whole table, which kgo uses as
		// it is: it must be the merged one too.
		raw := kmsg.NewPtrApiVersionsRequest()
		raw.SetVersion(5)
		corr := c.Send(raw)
		gotCorr, resp := c.Recv(int16(kmsg.ApiVersions), 0)
		old := resp.(*kmsg.ApiVersionsResponse)
		if gotCorr != corr || old.ErrorCode != int16(newproto.ErrUnsupportedVersion) {
			t.Fatalf("via %s: ApiVersions v5: corr %d error %d", addr, gotCorr, old.ErrorCode)
		}
		var produceMax int16 = -1
		for _, k := range old.ApiKeys {
			if k.ApiKey == int16(kmsg.Produce) {
				produceMax = k.MaxVersion
			}
		}
		if produceMax != 9 {
			t.Errorf("via %s: KIP-511 answer lists Produce up to v%d, want the merged v9", addr, produceMax)
		}
	}
}

// FindCoordinator: groups name the bridge; transactions are relayed and
// name the proxy listener of the upstream's transaction coordinator.
func TestRelayFindCoordinator(t *testing.T) {
	e := startRelay(t, relayOpts{})
	proxies := e.srv.ProxyAddrs()
	c := kafkatest.Dial(t, proxies[2].String())
	for _, v := range kafkatest.Versions(0, 4) {
		for _, typ := range []int8{0, 1} {
			if v == 0 && typ == 1 {
				continue // v0 has no key type
			}
			req := kmsg.NewPtrFindCoordinatorRequest()
			req.SetVersion(v)
			req.CoordinatorType = typ
			req.CoordinatorKey = "k"
			req.CoordinatorKeys = []string{"k", "k2"}
			fc := c.RoundTrip(req).(*kmsg.FindCoordinatorResponse)
			type answer struct {
				node int32
				addr string
				code int16
			}
			var answers []answer
			if v < 4 {
				answers = append(answers, answer{fc.NodeID, net.JoinHostPort(fc.Host, strconv.Itoa(int(fc.Port))), fc.ErrorCode})
			} else {
				for _, co := range fc.Coordinators {
					answers = append(answers, answer{co.NodeID, net.JoinHostPort(co.Host, strconv.Itoa(int(co.Port))), co.ErrorCode})
				}
				if len(answers) != 2 {
					t.Errorf("v%d type %d: %d coordinators, want 2", v, typ, len(answers))
				}
			}
			for _, a := range answers {
				want := e.addr
				if typ == 1 {
					if a.node < 0 || a.node > 2 {
						t.Errorf("v%d txn: coordinator node %d, want a kfake broker", v, a.node)
						continue
					}
					want = proxies[a.node].String()
				} else if a.node != bridgeNode {
					t.Errorf("v%d group: node %d, want the bridge", v, a.node)
				}
				if a.code != 0 || a.addr != want {
					t.Errorf("v%d type %d: node %d at %s error %d, want %s", v, typ, a.node, a.addr, a.code, want)
				}
			}
		}
	}
}

// A transactional producer finds its transaction coordinator through the
// bridge (FindCoordinator key type 1, relayed and rewritten) and commits;
// a read_committed consumer sees the records.
func TestRelayTransactions(t *testing.T) {
	e := startRelay(t, relayOpts{})
	cl := newRelayClient(t, e.addr, kgo.TransactionalID("relay-txn"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		cl.Produce(ctx, &kgo.Record{Topic: "orders", Partition: int32(i % 3), Value: fmt.Appendf(nil, "tx-%d", i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	got := consume(t, e.addr, "orders", []int32{0, 1, 2}, 10)
	if n := len(got[0]) + len(got[1]) + len(got[2]); n != 10 {
		t.Errorf("read %d committed records, want 10", n)
	}
}

// kcat (librdkafka) lists the cluster through the bridge: bridge addresses
// only.
func TestRelayKcatMetadata(t *testing.T) {
	kcat := kafkatest.KcatPath(t)
	e := startRelay(t, relayOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcat, "-b", e.addr, "-L", "-J", "-m", "10").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("kcat -L: %v", err)
	}
	var md struct {
		Brokers []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Topic string `json:"topic"`
		} `json:"topics"`
	}
	if err := json.Unmarshal(out, &md); err != nil {
		t.Fatalf("kcat output: %v\n%s", err, out)
	}
	bridge := e.bridgeAddrs()
	if len(md.Brokers) != 4 {
		t.Errorf("kcat lists %d brokers, want 4: %s", len(md.Brokers), out)
	}
	for _, b := range md.Brokers {
		if !bridge[b.Name] {
			t.Errorf("kcat lists broker %d at %s, not a bridge listener", b.ID, b.Name)
		}
	}
	if len(md.Topics) != 1 || md.Topics[0].Topic != "orders" {
		t.Errorf("topics %+v, want orders", md.Topics)
	}
}

// sarama needs Metadata, Produce, ListOffsets and Fetch: all relayed.
func TestRelaySarama(t *testing.T) {
	e := startRelay(t, relayOpts{})
	e.pinLeaders(t, "orders", 3)
	client := kafkatest.SaramaClient(t, kafkatest.SaramaConfig("relay-sarama"), e.addr)
	for _, b := range client.Brokers() {
		if !e.bridgeAddrs()[b.Addr()] {
			t.Errorf("sarama knows broker %d at %s, not a bridge listener", b.ID(), b.Addr())
		}
	}
	const n = 30
	values := make([]string, n)
	for i := range values {
		values[i] = fmt.Sprintf("s-%d", i)
	}
	kafkatest.SaramaProduce(t, client, "orders", values, func(i int) int32 { return int32(i % 3) })
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got []string
	for p := range int32(3) {
		pc, err := cons.ConsumePartition("orders", p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("ConsumePartition %d: %v", p, err)
		}
		for range n / 3 {
			select {
			case m := <-pc.Messages():
				got = append(got, string(m.Value))
			case err := <-pc.Errors():
				t.Fatalf("partition %d: %v", p, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("partition %d: timed out after %d records", p, len(got))
			}
		}
		pc.Close()
	}
	slices.Sort(got)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("s-%d", i)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("sarama consumed %v, want %v", got, want)
	}
}

// kafka-go's Writer and partition Reader through the bridge.
func TestRelayKafkaGo(t *testing.T) {
	e := startRelay(t, relayOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := &kafkago.Writer{
		Addr:         kafkago.TCP(e.addr),
		Topic:        "orders",
		Balancer:     &kafkago.RoundRobin{},
		BatchTimeout: time.Millisecond,
		RequiredAcks: kafkago.RequireAll,
	}
	defer w.Close()
	var msgs []kafkago.Message
	for i := range 30 {
		msgs = append(msgs, kafkago.Message{Value: fmt.Appendf(nil, "kg-%d", i)})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("kafka-go write: %v", err)
	}
	var got []string
	readers := make([]*kafkago.Reader, 3)
	for p := range readers {
		readers[p] = kafkago.NewReader(kafkago.ReaderConfig{Brokers: []string{e.addr}, Topic: "orders", Partition: p, MaxWait: 100 * time.Millisecond})
		defer readers[p].Close()
	}
	// A read that times out may only be slow (a loaded machine), not the partition's end: pass
	// over the partitions again, each reader going on from its offset, until all 30 came or
	// the test's deadline passed; a record read twice would still show.
	for len(got) < 30 && ctx.Err() == nil {
		for _, r := range readers {
			for {
				rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				m, err := r.ReadMessage(rctx)
				rcancel()
				if err != nil {
					break // drained, or slow: the next pass reads on
				}
				got = append(got, string(m.Value))
			}
		}
	}
	want := make([]string, 0, len(msgs))
	for _, m := range msgs {
		want = append(want, string(m.Value))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kafka-go read %d records, want each of the 30 once: %v", len(got), got)
	}
}

// A broker that goes away takes down only the connections to its proxy
// listener: producers and consumers of the partitions the other brokers
// lead carry on, and once the broker is back its partitions work again.
func TestRelayUpstreamDownAndBack(t *testing.T) {
	e := startRelay(t, relayOpts{gated: []int32{2}, requestTimeout: 2 * time.Second})
	e.pinLeaders(t, "orders", 3)
	cl := newRelayClient(t, e.addr)
	for p := range int32(3) {
		produce(t, cl, "orders", p, fmt.Sprintf("before%d", p), 10)
	}

	down := e.srv.ProxyAddrs()[2].String()
	e.gates[2].cut()
	// A client of broker 2's listener is closed at its first relayed
	// request (the dial is refused); ApiVersions may still be answered
	// from what the bridge knows of the broker. Unless the bridge knew
	// already (TestRelayDownBrokerRefused): then it is refused.
	if nc, err := net.DialTimeout("tcp", down, time.Second); err == nil {
		c := kafkatest.NewClient(t, nc, "newproto-test")
		av := c.Send(kmsg.NewPtrApiVersionsRequest())
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(7)
		c.Send(md)
		if frame, err := c.ReadFrame(); err == nil {
			if corr := int32(binary.BigEndian.Uint32(frame)); corr != av {
				t.Fatalf("got the response to %d from a broker that is down", corr)
			}
		}
		c.ExpectClosed()
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("connecting to broker 2's proxy listener: %v, want accepted and closed, or refused", err)
	}

	// The other partitions carry on, on the same client.
	for p := range int32(2) {
		produce(t, cl, "orders", p, fmt.Sprintf("during%d", p), 10)
	}
	got := consume(t, e.addr, "orders", []int32{0, 1}, 40)
	for p := range int32(2) {
		want := append(wantValues(fmt.Sprintf("before%d", p), 10), wantValues(fmt.Sprintf("during%d", p), 10)...)
		if !slices.Equal(got[p], want) {
			t.Errorf("partition %d while broker 2 is away: %v, want %v", p, got[p], want)
		}
	}

	e.gates[2].restore()
	produce(t, cl, "orders", 2, "after2", 10)
	got = consume(t, e.addr, "orders", []int32{2}, 20)
	if want := append(wantValues("before2", 10), wantValues("after2", 10)...); !slices.Equal(got[2], want) {
		t.Errorf("partition 2 after broker 2 came back: %v, want %v", got[2], want)
	}
}

// A broker the bridge knows to be down is refused, as a real cluster's
// down broker is: once a dial to it fails, its proxy listener stops
// listening (connect: ECONNREFUSED, not a connection accepted and then
// closed), while Metadata keeps naming it at its port as the cluster
// does; once the broker answers again the listener listens again, on the
// same port. Connections through the other listeners are not disturbed.
func TestRelayDownBrokerRefused(t *testing.T) {
	e := startRelay(t, relayOpts{gated: []int32{2}, requestTimeout: 2 * time.Second})
	e.pinLeaders(t, "orders", 3)
	addrs := e.srv.ProxyAddrs()
	down := addrs[2].String()
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(7)
	other := kafkatest.Dial(t, addrs[0].String())
	other.RoundTrip(md) // its upstream connection stays open throughout
	held := kafkatest.Dial(t, down)
	held.RoundTrip(md) // accepted while broker 2 was up

	e.gates[2].cut()
	// The bridge learns it at its next dial of broker 2: here a
	// client's first relayed request, which closes that client.
	refusedIn(t, down, 5*time.Second, true)
	held.Send(md)
	held.ExpectClosed()
	other.RoundTrip(md)
	boot := kafkatest.Dial(t, e.addr)
	resp := boot.RoundTrip(md).(*kmsg.MetadataResponse)
	listed := false
	for _, b := range resp.Brokers {
		if b.NodeID == 2 {
			listed = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))) == down
		}
	}
	if !listed {
		t.Errorf("Metadata while broker 2 is down: %+v, want broker 2 at its proxy listener %s (refusing)", resp.Brokers, down)
	}
	if got := kafkatest.CounterValue(t, e.reg, "zkbridge_kafka_upstream_brokers_down", nil); got != 1 {
		t.Errorf("upstream_brokers_down %v while broker 2 is down, want 1", got)
	}

	e.gates[2].restore()
	refusedIn(t, down, 5*time.Second, false)
	kafkatest.Dial(t, down).RoundTrip(md)
	other.RoundTrip(md)
	if got := e.srv.ProxyAddrs()[2].String(); got != down {
		t.Errorf("broker 2's proxy listener came back at %s, want %s", got, down)
	}
	if got := kafkatest.CounterValue(t, e.reg, "zkbridge_kafka_upstream_brokers_down", nil); got != 0 {
		t.Errorf("upstream_brokers_down %v once broker 2 is back, want 0", got)
	}
	cl := newRelayClient(t, e.addr)
	produce(t, cl, "orders", 2, "back", 5)
}

// refusedIn waits until connecting to addr is refused (refused) or
// accepted and relayed (!refused). An attempt that is accepted while
// refusal is awaited sends a Metadata request: the bridge dials the
// broker for it and, the broker being down, closes the connection.
func refusedIn(t *testing.T, addr string, d time.Duration, refused bool) {
	t.Helper()
	accepted := 0
	deadline := time.Now().Add(d)
	for {
		nc, err := net.DialTimeout("tcp", addr, time.Second)
		switch {
		case err == nil && refused:
			accepted++
			c := kafkatest.NewClient(t, nc, "refused-test")
			md := kmsg.NewPtrMetadataRequest()
			md.SetVersion(7)
			c.Send(md)
			_, _ = c.ReadFrame()
			nc.Close()
		case err == nil:
			nc.Close()
			return
		case refused && errors.Is(err, syscall.ECONNREFUSED):
			return
		case refused:
			t.Fatalf("connecting to %s: %v, want ECONNREFUSED", addr, err)
		}
		if time.Now().After(deadline) {
			if refused {
				t.Fatalf("%s still accepts connections %v after its broker went down (%d accepted and closed)", addr, d, accepted)
			}
			t.Fatalf("%s still refuses connections %v after its broker came back: %v", addr, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A broker that accepts and then never answers: the relayed request times
// out and the client's connection closes; the bootstrap listener and the
// other proxy listeners answer meanwhile.
func TestRelayUpstreamTimeout(t *testing.T) {
	e := startRelay(t, relayOpts{gated: []int32{1}, requestTimeout: 300 * time.Millisecond})
	c := kafkatest.Dial(t, e.srv.ProxyAddrs()[1].String())
	warm := kmsg.NewPtrMetadataRequest()
	warm.SetVersion(7)
	c.RoundTrip(warm) // the upstream connection is open
	e.gates[1].stall()

	start := time.Now()
	c.Send(kmsg.NewPtrListOffsetsRequest())
	other := kafkatest.Dial(t, e.srv.ProxyAddrs()[0].String())
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(7)
	other.RoundTrip(md)
	kafkatest.CheckAlive(t, kafkatest.Dial(t, e.addr))
	c.ExpectClosed()
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("closed after %s, want about the 300ms request timeout", d)
	}
}

// A partition leader moving between upstream brokers: the producer gets
// NOT_LEADER_OR_FOLLOWER from the old leader (relayed as is), refreshes
// Metadata through the bridge and follows to the new leader's listener.
func TestRelayLeaderMove(t *testing.T) {
	e := startRelay(t, relayOpts{})
	e.pinLeaders(t, "orders", 3)
	cl := newRelayClient(t, e.addr)
	produce(t, cl, "orders", 0, "a", 20)
	if err := e.kf.MoveTopicPartition("orders", 0, 2); err != nil {
		t.Fatal(err)
	}
	produce(t, cl, "orders", 0, "b", 20)
	if err := e.kf.MoveTopicPartition("orders", 0, 1); err != nil {
		t.Fatal(err)
	}
	produce(t, cl, "orders", 0, "c", 20)
	got := consume(t, e.addr, "orders", []int32{0}, 60)
	want := slices.Concat(wantValues("a", 20), wantValues("b", 20), wantValues("c", 20))
	if !slices.Equal(got[0], want) {
		t.Errorf("partition 0 across leader moves: %v, want %v", got[0], want)
	}
}

// Large frames are streamed through the relay (requests past their head,
// responses over 64 KiB): records of random bytes arrive intact (kgo
// checks every batch's CRC), and a streamed response waits for its turn
// behind a request the bridge holds.
func TestRelayLargeFrames(t *testing.T) {
	release := make(chan struct{})
	coord := kafkatest.FuncCoordinator{Fn: func(ctx context.Context, req *newproto.Request) (kmsg.Response, error) {
		select { // a JoinGroup held as in a rebalance
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		resp := kmsg.NewPtrJoinGroupResponse()
		resp.MemberID = "m"
		return resp, nil
	}}
	e := startRelay(t, relayOpts{coord: coord})
	e.pinLeaders(t, "orders", 3)
	cl := newRelayClient(t, e.addr, kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var want [][]byte
	var recs []*kgo.Record
	for range 64 {
		v := make([]byte, 16<<10)
		_, _ = crand.Read(v)
		want = append(want, v)
		recs = append(recs, &kgo.Record{Topic: "orders", Partition: 0, Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	got := consume(t, e.addr, "orders", []int32{0}, len(want))
	for i := range want {
		if got[0][i] != string(want[i]) {
			t.Fatalf("record %d differs after the relay", i)
		}
	}

	c := kafkatest.Dial(t, e.srv.ProxyAddrs()[0].String())
	join := kmsg.NewPtrJoinGroupRequest()
	join.SetVersion(5)
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = "g", 10000, 10000, "consumer"
	joinCorr := c.Send(join)
	fetch := fetchRequest(0) // relay_gate_test.go
	fetchCorr := c.Send(fetch)
	time.Sleep(100 * time.Millisecond) // the fetch response is ready upstream
	close(release)
	if corr, _ := c.Recv(int16(kmsg.JoinGroup), 5); corr != joinCorr {
		t.Fatalf("first response corr %d, want the JoinGroup's %d", corr, joinCorr)
	}
	corr, resp := c.Recv(int16(kmsg.Fetch), 11)
	fr := resp.(*kmsg.FetchResponse)
	if corr != fetchCorr || len(fr.Topics) != 1 || len(fr.Topics[0].Partitions[0].RecordBatches) < 64<<10 {
		t.Fatalf("fetch: corr %d (want %d), %+v", corr, fetchCorr, fr.Topics)
	}
}

// Produce with acks=0 has no response: the relay forwards it and writes
// nothing, and the next response on the connection is the next request's.
func TestRelayAcksZero(t *testing.T) {
	e := startRelay(t, relayOpts{})
	e.pinLeaders(t, "orders", 3)

	t.Run("raw", func(t *testing.T) {
		c := kafkatest.Dial(t, e.srv.ProxyAddrs()[1].String())
		for _, v := range []int16{3, 8, 9} { // v3 transactional id, v9 flexible
			prod := kmsg.NewPtrProduceRequest()
			prod.SetVersion(v)
			prod.Acks = 0
			pt := kmsg.NewProduceRequestTopic()
			pt.Topic = "orders"
			pp := kmsg.NewProduceRequestTopicPartition()
			pp.Partition = 1
			pp.Records = recordBatch(fmt.Sprintf("raw-v%d", v))
			pt.Partitions = append(pt.Partitions, pp)
			prod.Topics = append(prod.Topics, pt)
			c.Send(prod)
			// The next responses are the next requests', answered
			// locally and relayed: neither side waits for a
			// Produce answer.
			kafkatest.CheckAlive(t, c)
			md := kmsg.NewPtrMetadataRequest()
			md.SetVersion(9)
			c.RoundTrip(md)
		}
		got := consume(t, e.addr, "orders", []int32{1}, 3)
		if want := []string{"raw-v3", "raw-v8", "raw-v9"}; !slices.Equal(got[1], want) {
			t.Errorf("acks=0 records %v, want %v", got[1], want)
		}
	})

	t.Run("kgo", func(t *testing.T) {
		cl := newRelayClient(t, e.addr, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
		produce(t, cl, "orders", 2, "noack", 50)
		got := consume(t, e.addr, "orders", []int32{2}, 50)
		if want := wantValues("noack", 50); !slices.Equal(got[2], want) {
			t.Errorf("acks=0 records %v, want %v", got[2], want)
		}
	})
}

// recordBatch encodes one uncompressed v2 record batch holding value
// (https://kafka.apache.org/documentation/#recordbatch).
func recordBatch(value string) []byte {
	rec := kmsg.NewRecord()
	rec.Value = []byte(value)
	rec.Length = int32(len(rec.AppendTo(nil)) - 1) // all but the length varint (0: one byte)
	b := kmsg.NewRecordBatch()
	b.Magic = 2
	b.NumRecords = 1
	b.ProducerID, b.ProducerEpoch, b.FirstSequence = -1, -1, -1
	b.Records = rec.AppendTo(nil)
	b.Length = int32(len(b.AppendTo(nil)) - 12) // after FirstOffset and Length
	raw := b.AppendTo(nil)
	b.CRC = int32(crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli))) // from Attributes on
	return b.AppendTo(nil)
}

// A garbled frame on a proxy listener closes that connection only: a
// relayed request in flight on another connection completes.
func TestRelayGarbledFrameClosesOnlyThatConnection(t *testing.T) {
	e := startRelay(t, relayOpts{})
	proxy := e.srv.ProxyAddrs()[0].String()
	good := kafkatest.Dial(t, proxy)
	kafkatest.CheckAlive(t, good)

	for name, frame := range map[string][]byte{
		"negative size":   {0xff, 0xff, 0xff, 0xff},
		"short header":    {0, 0, 0, 3, 0, 1, 0},
		"unknown api key": {0, 0, 0, 10, 0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0, 0},
		"produce no acks": {0, 0, 0, 10, 0, 0, 0, 3, 0, 0, 0, 1, 0xff, 0xff},
	} {
		t.Run(name, func(t *testing.T) {
			bad := kafkatest.Dial(t, proxy)
			bad.Write(frame)
			bad.ExpectClosed()
		})
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	good.RoundTrip(md)
}

// A relayed request whose rest arrives after the idle deadline its
// connection began with is relayed whole (TestIdleTimeoutSparesFrameInProgress
// for the requests the bridge answers itself).
func TestRelayIdleTimeoutSparesFrameInProgress(t *testing.T) {
	const idle = 2 * time.Second
	e := startRelay(t, relayOpts{idleTimeout: idle})
	c := kafkatest.Dial(t, e.addr)
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(9)
	corr := c.SendStraddling(md, idle)
	got, resp := c.Recv(md.Key(), md.GetVersion())
	if got != corr {
		t.Fatalf("correlation id %d, want %d", got, corr)
	}
	brokers := resp.(*kmsg.MetadataResponse).Brokers
	if len(brokers) == 0 {
		t.Fatal("no brokers in the relayed Metadata")
	}
	for _, b := range brokers {
		if addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))); !e.bridgeAddrs()[addr] {
			t.Errorf("broker %d at %s, not one of the bridge's addresses", b.NodeID, addr)
		}
	}
}

// Responses leave in request order when relayed requests and locally
// answered ones interleave on one connection.
func TestRelayInterleavedOrder(t *testing.T) {
	e := startRelay(t, relayOpts{})
	c := kafkatest.Dial(t, e.addr)
	type sent struct {
		corr         int32
		key, version int16
	}
	var order []sent
	for i := range 20 {
		var req kmsg.Request
		switch i % 4 {
		case 0:
			m := kmsg.NewPtrMetadataRequest()
			m.SetVersion(9)
			req = m
		case 1:
			h := kmsg.NewPtrHeartbeatRequest() // local: no coordinator
			h.SetVersion(3)
			h.Group = "g"
			req = h
		case 2:
			l := kmsg.NewPtrListOffsetsRequest()
			l.SetVersion(4)
			lt := kmsg.NewListOffsetsRequestTopic()
			lt.Topic = "orders"
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Timestamp = -1
			lt.Partitions = append(lt.Partitions, lp)
			l.Topics = append(l.Topics, lt)
			req = l
		case 3:
			a := kmsg.NewPtrApiVersionsRequest()
			a.SetVersion(2)
			req = a
		}
		order = append(order, sent{c.Send(req), req.Key(), req.GetVersion()})
	}
	for _, s := range order {
		corr, _ := c.Recv(s.key, s.version)
		if corr != s.corr {
			t.Fatalf("response correlation id %d, want %d (%s)", corr, s.corr, kmsg.NameForKey(s.key))
		}
	}
}

// Brokers leaving and joining the Upstream's set: the proxy listener of a
// broker that left is closed and Metadata leaves it out, its partitions
// LEADER_NOT_AVAILABLE; back in the set it listens on its old port.
func TestRelayBrokerSetChanges(t *testing.T) {
	e := startRelay(t, relayOpts{})
	e.pinLeaders(t, "orders", 3)
	all := e.up.Brokers()
	before := e.srv.ProxyAddrs()
	ports, changed := e.proxy.Ports() // what the bridge advertises to the other bridges
	if len(ports) != 3 || ports[2] != int32(before[2].(*net.TCPAddr).Port) {
		t.Fatalf("Ports() = %v, want the 3 listeners %v", ports, before)
	}

	if err := e.up.SetBrokers(all[:2]); err != nil {
		t.Fatal(err)
	}
	e.waitProxies(t, 2)
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("Ports' channel not closed when broker 2 left")
	}
	if ports, _ := e.proxy.Ports(); len(ports) != 2 || ports[2] != 0 {
		t.Errorf("Ports() after broker 2 left = %v", ports)
	}
	if _, err := net.DialTimeout("tcp", before[2].String(), time.Second); err == nil {
		t.Errorf("broker 2's proxy listener still accepts")
	}
	c := kafkatest.Dial(t, e.addr)
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(7)
	md := c.RoundTrip(req).(*kmsg.MetadataResponse)
	for _, b := range md.Brokers {
		if b.NodeID == 2 {
			t.Errorf("Metadata lists broker 2, which has no proxy listener")
		}
	}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			if p.Partition == 2 && (p.Leader != -1 || p.ErrorCode != 5) {
				t.Errorf("partition 2 leader %d error %d, want -1 LEADER_NOT_AVAILABLE", p.Leader, p.ErrorCode)
			}
		}
	}

	if err := e.up.SetBrokers(all); err != nil {
		t.Fatal(err)
	}
	after := e.waitProxies(t, 3)
	if after[2].String() != before[2].String() {
		t.Errorf("broker 2 came back at %s, want its old %s", after[2], before[2])
	}
	cl := newRelayClient(t, e.addr)
	produce(t, cl, "orders", 2, "back", 5)
}

func TestConfigValidate(t *testing.T) {
	up, err := relay.NewUpstream(relay.UpstreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  relay.Config
		ok   bool
	}{
		{"base port", relay.Config{Upstream: up, Listen: "0.0.0.0:9100"}, true},
		{"explicit", relay.Config{Upstream: up, Listeners: map[int32]string{1: ":9101"}}, true},
		{"no upstream", relay.Config{Listen: ":9100"}, false},
		{"no listeners", relay.Config{Upstream: up}, false},
		{"bad base", relay.Config{Upstream: up, Listen: "9100"}, false},
		{"bad explicit", relay.Config{Upstream: up, Listeners: map[int32]string{1: "x"}}, false},
		{"probe interval", relay.Config{Upstream: up, Listen: ":9100", ProbeInterval: time.Minute}, true},
		{"negative probe interval", relay.Config{Upstream: up, Listen: ":9100", ProbeInterval: -time.Second}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v", tc.name, err)
		}
	}
	for _, bad := range [][]newproto.Broker{
		{{NodeID: -1, Host: "h", Port: 1}},
		{{NodeID: 1, Port: 1}},
		{{NodeID: 1, Host: "h", Port: 70000}},
		{{NodeID: 1, Host: "h", Port: 1}, {NodeID: 1, Host: "g", Port: 2}},
	} {
		if err := up.SetBrokers(bad); err == nil {
			t.Errorf("SetBrokers(%v) accepted", bad)
		}
	}
}

// tcpGate forwards TCP connections to a broker and lets a test cut them
// (the broker is down), stall them (the broker hangs) or restore them.
type tcpGate struct {
	t      testing.TB
	target string
	addr   string

	mu      sync.Mutex
	ln      net.Listener
	conns   map[net.Conn]bool
	stalled bool
	wg      sync.WaitGroup
}

func startTCPGate(t testing.TB, target string) *tcpGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &tcpGate{t: t, target: target, addr: ln.Addr().String(), conns: map[net.Conn]bool{}}
	g.serve(ln)
	t.Cleanup(func() { g.cut(); g.wg.Wait() })
	return g
}

func (g *tcpGate) serve(ln net.Listener) {
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	g.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", g.target)
			if err != nil {
				in.Close()
				continue
			}
			g.mu.Lock()
			g.conns[in], g.conns[out] = true, true
			g.mu.Unlock()
			g.wg.Go(func() { g.pipe(out, in, false) })
			g.wg.Go(func() { g.pipe(in, out, true) })
		}
	})
}

// pipe copies src to dst; responses (fromBroker) are swallowed while
// stalled.
func (g *tcpGate) pipe(dst, src net.Conn, fromBroker bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.mu.Lock()
			stalled := g.stalled && fromBroker
			g.mu.Unlock()
			if !stalled {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes the listener and every connection: the broker is down.
func (g *tcpGate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		c.Close()
	}
	clear(g.conns)
}

// restore listens again on the same address: the broker is back.
func (g *tcpGate) restore() {
	g.t.Helper()
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatalf("gate: relisten on %s: %v", g.addr, err)
	}
	g.serve(ln)
}

// stall keeps connections open but drops everything the broker sends.
func (g *tcpGate) stall() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stalled = true
}

// Relayed requests are the upstream broker's to judge (the relay reads
// their header only and forwards the frame byte for byte): a relayed frame
// with trailing bytes is forwarded and answered, while a request the bridge
// decodes itself, on the same listener, closes its connection.
func TestRelayedFrameWithTrailingBytesIsForwarded(t *testing.T) {
	e := startRelay(t, relayOpts{})
	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(4)
	lo.ReplicaID = -1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "orders"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = 0, -1, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	withTrailing := func(r kmsg.Request, corr int32) []byte {
		f := kmsg.NewRequestFormatter().AppendRequest(nil, r, corr)
		f = append(f, 0, 0, 0)
		binary.BigEndian.PutUint32(f, uint32(len(f)-4))
		return f
	}

	c := kafkatest.Dial(t, e.addr)
	c.Write(withTrailing(lo, 1))
	corr, resp := c.Recv(int16(kmsg.ListOffsets), 4)
	if corr != 1 || len(resp.(*kmsg.ListOffsetsResponse).Topics) != 1 {
		t.Fatalf("relayed ListOffsets: correlation id %d, %+v", corr, resp)
	}
	c.Corr = 1
	kafkatest.CheckAlive(t, c) // still open

	local := kafkatest.Dial(t, e.addr)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.MemberID = "g", "m"
	local.Write(withTrailing(hb, 1))
	local.ExpectClosed()
	if got := kafkatest.CounterValue(t, e.reg, "zkbridge_kafka_frames_rejected_total", map[string]string{"reason": "trailing_bytes"}); got != 1 {
		t.Errorf("frames_rejected_total{reason=trailing_bytes} = %v, want 1", got)
	}
}
