package bridge_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/kafkatest"
)

// A member of a group whose coordinator was killed, fetching only through a survivor, learned
// that the dead bridge left Metadata at its next Fetch (relay.Proxy.Refresh), up to its
// fetch.max.wait after the survivor decided (kgo's default 5 s), while its heartbeat's group
// lookups met the dead bridge's addresses; two refused in a row ended its session (the crash
// benchmark's traced losses, docs/benchmarks.md). So the survivors answer at once the Fetches
// they hold (relay/heldfetch.go). Here a kgo consumer of the partitions the survivors serve, its
// long poll held upstream (fetch.max.wait 30 s, nothing produced), asks for Metadata well before
// its poll would end after the bridge is killed, and goes on fetching.
func TestIntegration_SeveralBridgesKillAnswersTheSurvivorsHeldFetches(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{fromZK: true, partitions: 6})
	ctx := t.Context()

	const a, b = dfNode, dfNode + 1
	var dead int32
	var liveParts []int32 // led by the upstream brokers the survivors serve
	for id := dfNode + 2; dead == 0; id++ {
		liveParts = liveParts[:0]
		for k := range int32(3) {
			if dfServedBy(a, b, id)[k] == id {
				dead = id
			} else {
				liveParts = append(liveParts, k, k+3) // partition p is led by broker p%3
			}
		}
	}
	child := startChildBridge(t, childSpec{ZKConnect: e.connect, NodeID: dead, ZKSessionTimeout: 10 * time.Second, UpstreamFromZK: true})
	second := startBridge(t, e.connect, b, func(c *bridge.Config) {
		c.UpstreamFromZK, c.ProxyListen, c.MetadataMaxAge = true, "127.0.0.1:0", time.Second
	})
	sameMetadataEverywhere(t, []string{child.addr, e.addr, second.Addr().String()},
		map[int32]string{a: e.addr, b: second.Addr().String(), dead: child.addr})

	const maxWait = 30 * time.Second
	offsets := map[int32]kgo.Offset{}
	for _, p := range liveParts {
		offsets[p] = kgo.NewOffset().AtEnd()
	}
	w := &kafkatest.FetchWatch{}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.FetchMaxWait(maxWait), kgo.WithHooks(w),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{dfTopic: offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var mu sync.Mutex
	got := map[string]bool{}
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() {
		for cctx.Err() == nil {
			consumer.PollFetches(cctx).EachRecord(func(r *kgo.Record) {
				mu.Lock()
				got[string(r.Value)] = true
				mu.Unlock()
			})
		}
	})
	waitSeen := func(values []string, within time.Duration) bool {
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := 0
			for _, v := range values {
				if got[v] {
					n++
				}
			}
			mu.Unlock()
			if n == len(values) {
				return true
			}
		}
		return false
	}
	for i := 0; !waitSeen(e.produceTo(t, "before-"+strconv.Itoa(i), 4, liveParts), 2*time.Second); i++ {
		if i == 10 {
			t.Fatal("the consumer fetched nothing before the kill")
		}
	}
	// Its next Fetches are held upstream: nothing more to fetch.
	var before int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var held bool
		if held, before = w.Held(); held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer has no Fetch in flight")
		}
	}
	time.Sleep(300 * time.Millisecond) // relayed by now

	killed := time.Now()
	child.kill()
	for {
		if _, n := w.Held(); n > before {
			t.Logf("the consumer asked for Metadata %v after the kill", time.Since(killed))
			break
		}
		if time.Since(killed) > maxWait/3 {
			t.Fatalf("no Metadata request from the consumer %v after the kill: its Fetch held by a survivor (fetch.max.wait %v) was not answered", time.Since(killed), maxWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after := e.produceTo(t, "after", 12, liveParts); !waitSeen(after, maxWait/3) {
		t.Fatalf("the consumer did not fetch the records produced after the kill within %v", maxWait/3)
	}
}
