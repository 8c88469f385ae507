package bridge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// metadataReads notes when a kgo client read a Metadata response.
type metadataReads struct {
	mu sync.Mutex
	at []time.Time
}

func (m *metadataReads) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Metadata) && err == nil {
		m.mu.Lock()
		m.at = append(m.at, time.Now())
		m.mu.Unlock()
	}
}

func (m *metadataReads) since(t time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, at := range m.at {
		if at.After(t) {
			n++
		}
	}
	return n
}

var _ kgo.HookBrokerRead = (*metadataReads)(nil)

// When a bridge leaves the service, every other bridge makes the clients fetching through its
// proxy listeners refresh their metadata once (relay/drain.go: Proxy.Refresh), while the bridge
// that left is out of every bridge's Metadata: kgo drops a broker's connections when a refresh
// no longer lists it, and otherwise finds a connection the bridge closed at shutdown only when
// it sends on it again after the bridge is back (in the data-path rolling restart, 20-45 % of
// the groups' moves back to a restarted bridge: the commit's EOF, then a 500 ms backoff). Here
// a consumer fetches only through the bridge that stays, with kgo's default metadata ages: it
// must have refreshed once the other bridge has stopped.
func TestIntegration_SeveralBridgesLeavingRefreshesClients(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{fromZK: true, partitions: 6})
	// The bridge that stops serves an upstream broker and the one that stays another (kept:
	// partitions k and k+3 are led by broker k, dfStart).
	var second int32
	var kept []int32
	for id := dfNode + 1; second == 0; id++ {
		var mine, theirs []int32
		for k := range int32(3) {
			if dfServedBy(dfNode, id)[k] == id {
				theirs = append(theirs, k)
			} else {
				mine = append(mine, k, k+3)
			}
		}
		if len(mine) > 0 && len(theirs) > 0 {
			second, kept = id, mine
		}
	}
	b, _, _ := dfSecondBridge(t, e, second)

	reads := &metadataReads{}
	parts := map[int32]kgo.Offset{}
	for _, p := range kept {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{dfTopic: parts}),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.WithHooks(reads))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			cl.PollFetches(ctx)
			cancel()
		}
	}()
	t.Cleanup(func() { close(stop); <-polled })
	// Fetching through the proxy listeners of the bridge that stays, for a while.
	zktest.Eventually(t, 10*time.Second, "the consumer's first metadata", func() (bool, string) {
		return reads.since(time.Time{}) > 0, "no Metadata response read yet"
	})
	time.Sleep(time.Second)

	began := time.Now()
	if err := b.stop(); err != nil {
		t.Fatalf("bridge %d: %v", second, err)
	}
	zktest.Eventually(t, 10*time.Second, "the consumer's metadata refreshed since the other bridge left", func() (bool, string) {
		n := reads.since(began)
		return n > 0, fmt.Sprintf("%d Metadata responses read since", n)
	})
	t.Logf("metadata refreshed within %v of the drain's start", time.Since(began).Round(time.Millisecond))
}
