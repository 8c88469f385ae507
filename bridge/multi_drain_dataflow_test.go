package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A bridge that shuts down with the data path sends the clients fetching through its proxy
// listeners to the bridges that serve their brokers now before it closes them
// (relay/drain.go): their Fetches are answered NOT_LEADER_OR_FOLLOWER, on which kgo refreshes
// its metadata at once, instead of meeting a closed connection, after which kgo refreshes no
// sooner than its metadata min age after the last refresh and fetches nothing meanwhile (the
// 3-7 s commit stalls of BenchmarkRollingRestartDataPath). The consumer here has a min age of a
// minute, so that only the first way lets it carry on within seconds.
func TestIntegration_SeveralBridgesDrainMovesFetchers(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{fromZK: true, partitions: 6})
	// The bridge that stops must serve at least one upstream broker.
	var second int32
	for id := dfNode + 1; second == 0; id++ {
		for k := range int32(3) {
			if dfServedBy(dfNode, id)[k] == id {
				second = id
			}
		}
	}
	b, seeds, view := dfSecondBridge(t, e, second)
	t.Logf("Metadata: %s", view)

	seen := newDfSeen()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(dfTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.MetadataMinAge(time.Minute), kgo.RetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				seen.add(string(r.Value), fmt.Sprintf("%d@%d", r.Partition, r.Offset))
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-polled; cl.Close() })

	// Produced to the brokers themselves: only the consumer goes through the bridges.
	producer, err := kgo.NewClient(kgo.SeedBrokers(e.kfAddrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	all := make([]int32, e.parts)
	for p := range all {
		all[p] = int32(p)
	}
	seen.waitAll(t, dfProduce(t, producer, "before", 60, all), true)

	began := time.Now()
	if err := b.stop(); err != nil {
		t.Fatalf("bridge %d: %v", second, err)
	}
	t.Logf("bridge %d stopped %v after the drain began", second, time.Since(began).Round(time.Millisecond))
	after := dfProduce(t, producer, "after", 60, all)
	zktest.Eventually(t, 10*time.Second, "the records produced after the bridge stopped consumed through the other", func() (bool, string) {
		missing := seen.missing(after)
		return missing == 0, fmt.Sprintf("%d of %d missing", missing, len(after))
	})
	t.Logf("every record consumed %v after the drain began", time.Since(began).Round(time.Millisecond))
}

// missing counts the values not consumed yet.
func (s *dfSeen) missing(values []string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range values {
		if s.count[v] == 0 {
			n++
		}
	}
	return n
}

// dfSecondBridge starts bridge second beside e's, with the data path from ZooKeeper, and waits
// until both give the same Metadata; it returns the bridge, both bridges' addresses (e's first)
// and that Metadata.
func dfSecondBridge(t *testing.T, e *dfEnv, second int32) (*running, []string, string) {
	t.Helper()
	b := startBridge(t, e.connect, second, func(c *bridge.Config) {
		c.UpstreamFromZK, c.ProxyListen, c.MetadataMaxAge = true, "127.0.0.1:0", time.Second
	})
	seeds := []string{e.addr, b.Addr().String()}
	addrs := append([]string(nil), seeds...)
	for _, r := range []*running{e.b, b} {
		for _, p := range r.ProxyAddrs() {
			addrs = append(addrs, p.String())
		}
	}
	view := sameMetadataEverywhere(t, addrs, map[int32]string{dfNode: e.addr, second: seeds[1]})
	return b, seeds, view
}
