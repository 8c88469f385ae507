package relay_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// roundTrips notes, in order, a kgo client's Fetch responses read and Metadata requests written
// (kgo.HookBrokerWrite, HookBrokerRead), and whether a Fetch written has no response yet.
type roundTrips struct {
	mu             sync.Mutex
	events         []kmsg.Key
	wrote, fetched int
}

func (r *roundTrips) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch kmsg.Key(key) {
	case kmsg.Metadata:
		r.events = append(r.events, kmsg.Metadata)
	case kmsg.Fetch:
		if err == nil {
			r.wrote++
		}
	}
}

func (r *roundTrips) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if kmsg.Key(key) == kmsg.Fetch {
		r.mu.Lock()
		r.events = append(r.events, kmsg.Fetch)
		r.fetched++
		r.mu.Unlock()
	}
}

// state returns the events so far, and whether a Fetch written has no response yet.
func (r *roundTrips) state() ([]kmsg.Key, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events), r.wrote > r.fetched
}

var _ kgo.HookBrokerWrite = (*roundTrips)(nil)
var _ kgo.HookBrokerRead = (*roundTrips)(nil)

// The Fetch a Refresh refuses (relay/drain.go refuseFetch) makes kgo ask for Metadata in one round
// trip when it is an incremental fetch of a session (KIP-227) at v13 or later: it is answered
// FETCH_SESSION_TOPIC_ID_ERROR, on which kgo resets its session and refreshes its metadata at
// once. Before, it was answered FETCH_SESSION_ID_NOT_FOUND, on which kgo only resets its session:
// its full fetch was then refused NOT_LEADER_OR_FOLLOWER, and only then did it refresh (two round
// trips, 0.3-0.7 s each in the traced crash benchmark under load, while the member's heartbeat
// met the dead bridge's addresses). The consumer then fetches the same offsets again: nothing is
// lost or skipped.
func TestRefreshRefusesTheNextFetchInOneRoundTrip(t *testing.T) {
	e := startRelay(t, relayOpts{peers: &movedPeers{}})
	e.pinLeaders(t, "orders", 3)
	producer := newRelayClient(t, e.addr)
	produce(t, producer, "orders", 0, "before", 5)

	w := &roundTrips{}
	consumer := newRelayClient(t, e.addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(30*time.Second), kgo.WithHooks(w))
	var got []string
	poll := func(want int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		for len(got) < want {
			fs := consumer.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d records: %v", len(got), want, got)
			}
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
	}
	poll(5)
	// Its next Fetch, incremental, is held upstream until the records produced now come: kgo
	// buffers them and sends no Fetch until they are polled, so that none is held at the Refresh
	// (heldfetch.go would answer it) and the next one meets refuseFetch.
	produce(t, producer, "orders", 0, "mid", 5)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if consumer.BufferedFetchRecords() > 0 {
			if _, held := w.state(); !held {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer buffered no records with no Fetch in flight")
		}
	}
	before, _ := w.state()
	e.proxy.Refresh()
	poll(10)

	var trips int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		events, _ := w.state()
		if i := slices.Index(events[len(before):], kmsg.Metadata); i >= 0 {
			for _, k := range events[len(before) : len(before)+i] {
				if k == kmsg.Fetch {
					trips++
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Metadata request from the consumer 10 s after the Refresh (events since: %v)", events[len(before):])
		}
	}
	if trips != 1 {
		t.Fatalf("%d Fetch round trips from the Refresh to the consumer's Metadata request, want 1", trips)
	}

	produce(t, producer, "orders", 0, "after", 5)
	poll(15)
	want := slices.Concat(wantValues("before", 5), wantValues("mid", 5), wantValues("after", 5))
	if !slices.Equal(got[:15], want) {
		t.Fatalf("consumed %v, want %v", got, want)
	}
}
