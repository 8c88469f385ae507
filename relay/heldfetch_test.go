package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/kafkatest"
)

// Refresh answers at once the Fetches relayed and not answered yet (relay/heldfetch.go): a
// consumer's long poll held upstream (its fetch.max.wait here 30 s, with nothing to fetch) is
// answered FETCH_SESSION_TOPIC_ID_ERROR, and kgo refreshes its metadata at once, not at its next
// Fetch after the long poll ends. The broker's answer to that Fetch, when it comes, is dropped;
// the consumer goes on fetching on the same connection and misses nothing produced after. Before,
// the consumer asked for Metadata only when its long poll ended, 30 s later.
func TestRefreshAnswersTheHeldFetchAtOnce(t *testing.T) {
	e := startRelay(t, relayOpts{peers: &movedPeers{}})
	e.pinLeaders(t, "orders", 3)
	producer := newRelayClient(t, e.addr)
	produce(t, producer, "orders", 0, "before", 5)

	const maxWait = 30 * time.Second
	w := &kafkatest.FetchWatch{}
	consumer := newRelayClient(t, e.addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(maxWait), kgo.WithHooks(w))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for ctx.Err() == nil {
			consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				mu.Lock()
				got = append(got, string(r.Value))
				mu.Unlock()
			})
		}
	})
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	for deadline := time.Now().Add(10 * time.Second); count() < 5; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of the 5 records before", count())
		}
	}
	// Its next Fetch is held upstream: nothing more to fetch.
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
	time.Sleep(300 * time.Millisecond) // relayed by now (the broker holds it for maxWait)

	refreshed := time.Now()
	e.proxy.Refresh()
	for {
		if _, n := w.Held(); n > before {
			t.Logf("the consumer asked for Metadata %v after the Refresh", time.Since(refreshed))
			break
		}
		if time.Since(refreshed) > maxWait/3 {
			t.Fatalf("no Metadata request from the consumer %v after the Refresh: its Fetch held upstream (fetch.max.wait %v) was not answered", time.Since(refreshed), maxWait)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The consumer fetches on: the records produced now arrive, none missing.
	produce(t, producer, "orders", 0, "after", 5)
	for deadline := time.Now().Add(maxWait / 3); count() < 10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of the 10 records: %v", count(), got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := append(wantValues("before", 5), wantValues("after", 5)...)
	for i, v := range want {
		if got[i] != v {
			t.Fatalf("consumed %v, want %v", got, want)
		}
	}
}
