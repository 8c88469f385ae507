package bridge

// BenchmarkLegacyRebalance measures what issue 4 asks for ("Measure"): the rebalance latency
// (membership change → last StartResponse) and the ZooKeeper operations per rebalance, for 100
// legacy consumers over 1,000 partitions, with real legacy.Clients on loopback and a real
// ZooKeeper.
//
//	go test -run '^$' -bench LegacyRebalance -benchtime 10x ./bridge/
//
// Each iteration is two membership changes of a 100-consumer group: a 101st consumer joins,
// then leaves. With the range assignor over 10 topics × 100 partitions and one thread per
// consumer and topic, either change moves almost every partition (the string order of the
// thread ids shifts under the newcomer), which is the worst case for the owner Multi.
//
// Reported per rebalance:
//
//	ms/rebalance        the coordinator's own measure: first trigger → last StartResponse
//	ms-check, -stop,    where the time went: steps 1-3 (read the group, plan), Stops and final
//	-claim, -start      Pings, the claim (read the group again, the Multi), Starts
//	ms-client/rebalance from starting (or stopping) the 101st client to the last StartResponse,
//	                    connect and register (or the socket close) included
//	zk-reads            znodes the rebalance read (two Snapshots of the group, owners and offsets)
//	zk-read-requests    the requests that carried them (zkstate batches a Snapshot's reads with
//	                    ZooKeeper 3.6's multiRead)
//	zk-writes           write ops of the rebalance (one per owner created or deleted, per offset)
//	zk-multis           multi requests that carried them
//	zk-requests         requests the ZooKeeper server received meanwhile (its `srvr`
//	                    "Received" count: every client of the server, pings and the
//	                    Multi's parent checks included, so an upper bound)

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

func BenchmarkLegacyRebalance(b *testing.B) {
	const (
		consumers  = 100
		topics     = 10
		partitions = 100 // per topic: 1,000 in all
	)
	store := legacyOpenStore(b, legacyConnect(b))
	b.Cleanup(func() { store.Close() })
	sub := map[string]int{}
	parts := map[string][]int32{}
	for i := range topics {
		topic := fmt.Sprintf("topic-%02d", i)
		legacySetTopic(b, store, topic, partitions)
		sub[topic] = 1
		for p := range partitions {
			parts[topic] = append(parts[topic], int32(p))
		}
	}
	env := legacyStart(b, store, "", func(c *LegacyConfig) { c.Logger = c.Logger.Level(zerolog.WarnLevel) })
	// Every consumer "consumes" (commits) every 50 ms and is pinged every second, so the
	// final offsets collected after the Stops differ from the committed ones and are written in
	// the rebalance's Multi, as with real traffic.
	opts := legacyConsumerOpts{autoCommit: true, step: 1, tick: 50 * time.Millisecond, interval: time.Second, quiet: true}
	var group []*legacyTestConsumer
	for i := range consumers {
		group = append(group, legacyRunConsumer(b, env.addr, "bench", fmt.Sprintf("bench_host-%03d", i), sub, opts))
	}
	legacyWaitStable(b, store, "bench", group, parts)

	var n int
	var coordDur, clientDur, checking, stopping, claiming, starting time.Duration
	var reads, readRequests, writes, multis, requests int
	// change runs one membership change and waits for the rebalance it causes.
	change := func(do func(), members int) {
		before := env.coord.Stats().Rebalances
		recv := legacyZKReceived(b)
		start := time.Now()
		do()
		var last LegacyRebalanceStats
		legacyEventually(b, "the rebalance completes", func() (bool, string) {
			st := env.coord.Stats()
			last = st.LastRebalance
			return st.Rebalances > before && last.Members == members, fmt.Sprintf("%+v", last)
		})
		clientDur += last.Completed.Sub(start)
		requests += legacyZKReceived(b) - recv
		n++
		coordDur += last.Duration
		checking += last.Checking
		stopping += last.Stopping
		claiming += last.Claiming
		starting += last.Starting
		reads += last.ZKReads
		readRequests += last.ZKReadRequests
		writes += last.ZKWrites
		multis += last.ZKMultis
	}
	joinLeave := func(id string) {
		var extra *legacyTestConsumer
		change(func() { extra = legacyRunConsumer(b, env.addr, "bench", id, sub, opts) }, consumers+1)
		change(extra.stop, consumers)
	}
	// Warm up first: ZooKeeper's JVM runs a freshly started server several times slower until
	// its JIT has compiled the request path.
	for i := range 3 {
		joinLeave(fmt.Sprintf("bench_a-warmup-%d", i))
	}
	n, reads, readRequests, writes, multis, requests = 0, 0, 0, 0, 0, 0
	coordDur, clientDur, checking, stopping, claiming, starting = 0, 0, 0, 0, 0, 0
	b.ResetTimer()
	for i := range b.N {
		// "bench_a" sorts before every other consumer id: its thread shifts the whole range.
		joinLeave(fmt.Sprintf("bench_a%03d", i))
	}
	b.StopTimer()
	per := func(v int) float64 { return float64(v) / float64(n) }
	b.ReportMetric(float64(coordDur.Milliseconds())/float64(n), "ms/rebalance")
	b.ReportMetric(float64(clientDur.Milliseconds())/float64(n), "ms-client/rebalance")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(ms(checking), "ms-check/rebalance")
	b.ReportMetric(ms(stopping), "ms-stop/rebalance")
	b.ReportMetric(ms(claiming), "ms-claim/rebalance")
	b.ReportMetric(ms(starting), "ms-start/rebalance")
	b.ReportMetric(per(reads), "zk-reads/rebalance")
	b.ReportMetric(per(readRequests), "zk-read-requests/rebalance")
	b.ReportMetric(per(writes), "zk-writes/rebalance")
	b.ReportMetric(per(multis), "zk-multis/rebalance")
	b.ReportMetric(per(requests), "zk-requests/rebalance")
	b.ReportMetric(0, "ns/op") // an iteration is two rebalances; the figures above are per rebalance
}

// legacyZKReceived is the ZooKeeper server's count of requests received (four-letter word
// srvr, "Received: N"); -1 when the server does not answer it.
func legacyZKReceived(tb testing.TB) int {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", zktest.Addr(tb), 5*time.Second)
	if err != nil {
		return -1
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return -1
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Received: "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// TestIntegration_LegacyZKReceived keeps the benchmark's server-side count honest: it must move when
// requests are sent.
func TestIntegration_LegacyZKReceived(t *testing.T) {
	t.Parallel()
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	before := legacyZKReceived(t)
	if before < 0 {
		t.Skip("the ZooKeeper server does not answer srvr")
	}
	for range 10 {
		if _, _, err := store.Exists(context.Background(), "/x"); err != nil {
			t.Fatal(err)
		}
	}
	if after := legacyZKReceived(t); after-before < 10 {
		t.Errorf("srvr Received moved by %d over 10 requests", after-before)
	}
}
