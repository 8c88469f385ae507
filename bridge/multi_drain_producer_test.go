package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// ackGaps notes, per partition, when each record was acknowledged.
type ackGaps struct {
	mu sync.Mutex
	at map[int32][]time.Time
}

func (a *ackGaps) acked(p int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[p] = append(a.at[p], time.Now())
}

// longest returns the longest time between two acknowledgements of one partition from since
// on (the first counted from since), and the partition.
func (a *ackGaps) longest(since time.Time) (time.Duration, int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var gap time.Duration
	var part int32
	for p, ats := range a.at {
		last := since
		for _, at := range ats {
			if at.Before(since) {
				continue
			}
			if at.Sub(last) > gap {
				gap, part = at.Sub(last), p
			}
			last = at
		}
	}
	return gap, part
}

func (a *ackGaps) countSince(since time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, ats := range a.at {
		for _, at := range ats {
			if at.After(since) {
				n++
			}
		}
	}
	return n
}

// A bridge that shuts down with the data path keeps relaying for the clients producing through
// its proxy listeners until kgo's metadata.min.age (5 s) has passed since its drain began
// (handover_linger.go, relay/drain.go: Producers). kgo refreshes a producer's metadata no
// sooner than that after its previous refresh, whatever the error, so a producer whose listener
// closes within 5 s of its last refresh produces nothing until the 5 s pass. Here the
// producer's last refresh is just before the drain, as when the previous bridge of a rolling
// restart left: closing 3 s after the handover (the members' and fetchers' linger) left it
// without an acknowledgement for about 2 s (5 s less the 3 s); relaying until 5.5 s after the
// drain began, its refresh runs at once, and refused once then rather than closed under, it
// asks listeners that still answer.
func TestIntegration_SeveralBridgesDrainKeepsProducers(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{fromZK: true, partitions: 6})
	// The bridge that stops serves at least one upstream broker: the producer writes to the
	// partitions it leads (k and k+3 for broker k, dfStart).
	var second int32
	var theirs []int32
	for id := dfNode + 1; second == 0; id++ {
		for k := range int32(3) {
			if dfServedBy(dfNode, id)[k] == id {
				second, theirs = id, append(theirs, k, k+3)
			}
		}
	}
	b, seeds, _ := dfSecondBridge(t, e, second)

	// kgo's defaults (metadata.min.age 5 s, retry backoff 250 ms doubling) but the partitioner.
	reads, broken := &metadataReads{}, &brokenConns{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.WithHooks(reads, broken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	gaps := &ackGaps{at: map[int32][]time.Time{}}
	ctx, cancel := context.WithCancel(t.Context())
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, p := range theirs {
				cl.Produce(ctx, &kgo.Record{Topic: dfTopic, Partition: p, Value: []byte("v")}, func(r *kgo.Record, err error) {
					if err == nil {
						gaps.acked(r.Partition)
					}
				})
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-produced })
	warm := time.Now()
	zktest.Eventually(t, 10*time.Second, "records acknowledged", func() (bool, string) {
		return gaps.countSince(warm) > 100, "too few yet"
	})

	// The producer's last refresh: just before the drain.
	before := time.Now()
	cl.ForceMetadataRefresh()
	zktest.Eventually(t, 10*time.Second, "the producer's metadata refreshed", func() (bool, string) {
		return reads.since(before) > 0, "no Metadata response read yet"
	})
	began := time.Now()
	if err := b.stop(); err != nil {
		t.Fatalf("bridge %d: %v", second, err)
	}
	stopped := time.Now()
	zktest.Eventually(t, 10*time.Second, "records acknowledged after the bridge stopped", func() (bool, string) {
		return gaps.countSince(stopped.Add(time.Second)) > 100, "too few yet"
	})
	gap, p := gaps.longest(began)
	t.Logf("bridge %d (partitions %v) stopped %v after the drain began; the producer's longest wait for an acknowledgement: %v (partition %d)",
		second, theirs, stopped.Sub(began).Round(time.Millisecond), gap.Round(time.Millisecond), p)
	if gap >= time.Second {
		t.Errorf("the producer waited %v for an acknowledgement on partition %d, want under 1s", gap.Round(time.Millisecond), p)
	}
	// Refused once at the end of the linger (relay RefuseProducers), the producer refreshes and
	// leaves the stopping bridge's connections itself: it never reads a connection the bridge
	// closed nor dials one of its closed addresses (where its Metadata retries went, 250 ms
	// then 500 ms apart, when the listeners closed under it).
	if n := broken.since(began); len(n) > 0 {
		t.Errorf("the producer met %d connections closed under it or refused after the drain began: %v", len(n), n)
	}
}

// brokenConns notes the reads of connections the other end closed (EOF, reset) and the dials
// refused, with what they were.
type brokenConns struct {
	mu   sync.Mutex
	at   []time.Time
	what []string
}

func (c *brokenConns) note(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.what = append(c.at, time.Now()), append(c.what, what)
}

func (c *brokenConns) OnBrokerRead(m kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		c.note(fmt.Sprintf("%s read from %s:%d: %v", kmsg.NameForKey(key), m.Host, m.Port, err))
	}
}

func (c *brokenConns) OnBrokerConnect(m kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		c.note(fmt.Sprintf("dial %s:%d: %v", m.Host, m.Port, err))
	}
}

// since returns what broke after t.
func (c *brokenConns) since(t time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i, at := range c.at {
		if at.After(t) {
			out = append(out, c.what[i])
		}
	}
	return out
}
