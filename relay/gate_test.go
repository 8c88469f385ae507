package relay_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
)

// Config.FetchGate: while it refuses, relayed Fetch responses are
// withheld and their connections closed; everything else is relayed as
// usual, and once it opens again clients fetch again.

// testGate is a FetchGate the test opens and closes. Lapsing, it
// answers open for 5 ms and then stalls for 50 ms before it returns, as
// a process paused between the gate's answer and the write.
type testGate struct {
	closed, lapsing atomic.Bool
	calls           atomic.Int64
}

var errGateClosed = errors.New("test gate closed")

func (g *testGate) check(now time.Time) (time.Time, error) {
	g.calls.Add(1)
	if now.IsZero() {
		return time.Time{}, errors.New("FetchGate called without a time")
	}
	if g.closed.Load() {
		return time.Time{}, errGateClosed
	}
	if g.lapsing.Load() {
		until := time.Now().Add(5 * time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		return until, nil
	}
	return time.Time{}, nil
}

// logBuffer collects log lines written from any goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

// startGatedRelay is startRelay (three kfake brokers, topic orders with
// three partitions) with gate as the FetchGate and the log also to logs;
// each partition of orders is led by its own broker.
func startGatedRelay(t *testing.T, gate func(time.Time) (time.Time, error), logs io.Writer) *relayEnv {
	t.Helper()
	e := startRelay(t, relayOpts{fetchGate: gate, logs: logs})
	e.pinLeaders(t, "orders", 3)
	return e
}

// fetchRequest asks for partition of orders from offset 0.
func fetchRequest(partition int32) *kmsg.FetchRequest {
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(11)
	fetch.ReplicaID, fetch.MaxWaitMillis, fetch.MaxBytes = -1, 100, 4<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "orders"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = partition, 0, 4<<20, -1, -1
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	return fetch
}

// readRest reads what the server writes until it closes the connection.
func readRest(t *testing.T, c *kafkatest.Client) []byte {
	t.Helper()
	_ = c.NC.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c.NC)
	if err != nil && !kafkatest.IsReset(err) {
		t.Fatalf("want the connection closed, got %v after %d bytes", err, len(b))
	}
	return b
}

func TestRelayFetchGate(t *testing.T) {
	gate := &testGate{}
	logs := &logBuffer{}
	e := startGatedRelay(t, gate.check, logs)
	const withheld = "relayed Fetch response withheld"
	failures := func() float64 {
		return kafkatest.CounterValue(t, e.reg, "zkbridge_kafka_relay_failures_total", map[string]string{"reason": "fetch_gated"})
	}

	// Partition 0 holds a few small records: its Fetch response is
	// buffered whole (raw). Partition 1 holds 128 KiB: its response is
	// over relayStreamBytes (64 KiB) and streamed.
	cl := newRelayClient(t, e.addr, kgo.ProducerBatchCompression(kgo.NoCompression()))
	produce(t, cl, "orders", 0, "small", 10)
	var large []*kgo.Record
	for range 8 {
		v := make([]byte, 16<<10)
		_, _ = crand.Read(v)
		large = append(large, &kgo.Record{Topic: "orders", Partition: 1, Value: v})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, large...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		partition int32
		streamed  bool
	}{
		{"raw", 0, false},
		{"streamed", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := e.srv.ProxyAddrs()[tc.partition%3].String() // the leader's (pinLeaders)
			fetchOK := func(t *testing.T) {
				t.Helper()
				calls := gate.calls.Load()
				resp := kafkatest.Dial(t, proxy).RoundTrip(fetchRequest(tc.partition)).(*kmsg.FetchResponse)
				if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
					t.Fatalf("fetch answered %+v", resp.Topics)
				}
				fp := resp.Topics[0].Partitions[0]
				if fp.ErrorCode != 0 || len(fp.RecordBatches) == 0 {
					t.Fatalf("fetch: error %d, %d bytes of records", fp.ErrorCode, len(fp.RecordBatches))
				}
				if streamed := len(fp.RecordBatches) > 64<<10; streamed != tc.streamed {
					t.Fatalf("%d bytes of records: streamed %v, want %v", len(fp.RecordBatches), streamed, tc.streamed)
				}
				if got := gate.calls.Load() - calls; got != 1 {
					t.Errorf("FetchGate asked %d times for one Fetch, want 1", got)
				}
			}

			t.Run("open", func(t *testing.T) {
				gate.closed.Store(false)
				fetchOK(t)
			})

			// withheldFetch sends a Metadata and a Fetch request: the
			// response before the Fetch is written, the Fetch's is not.
			// Both requests go in one write: the server has read
			// everything when it closes, so the close is a FIN, not a
			// reset that could drop bytes.
			withheldFetch := func(t *testing.T, counted float64) {
				t.Helper()
				before, logged := failures(), logs.count(withheld)
				c := kafkatest.Dial(t, proxy)
				kafkatest.CheckAlive(t, c)
				md := kmsg.NewPtrMetadataRequest()
				md.SetVersion(9)
				mdCorr, fetchCorr := c.Corr+1, c.Corr+2
				// (AppendRequest frames from the start of its buffer.)
				c.Write(append(c.Frame(md, mdCorr), c.Frame(fetchRequest(tc.partition), fetchCorr)...))
				c.Corr = fetchCorr
				if corr, _ := c.Recv(md.Key(), md.GetVersion()); corr != mdCorr {
					t.Fatalf("Metadata answered with corr %d, want %d", corr, mdCorr)
				}
				if rest := readRest(t, c); len(rest) != 0 {
					t.Fatalf("%d bytes written after the withheld Fetch response, want none", len(rest))
				}
				if got := failures() - before; got != counted {
					t.Errorf("fetch_gated failures went up by %v, want %v", got, counted)
				}
				if got := logs.count(withheld) - logged; got != 1 {
					t.Errorf("%q logged %d times, want once", withheld, got)
				}
			}

			t.Run("closed", func(t *testing.T) {
				gate.closed.Store(true)
				withheldFetch(t, 1)
				md := kmsg.NewPtrMetadataRequest()
				md.SetVersion(9)

				// Other requests, on a fresh connection, are relayed
				// without asking the gate.
				calls := gate.calls.Load()
				other := kafkatest.Dial(t, proxy)
				if resp := other.RoundTrip(md).(*kmsg.MetadataResponse); len(resp.Brokers) == 0 {
					t.Error("Metadata while gated: no brokers")
				}
				lo := kmsg.NewPtrListOffsetsRequest()
				lo.SetVersion(4)
				lt := kmsg.NewListOffsetsRequestTopic()
				lt.Topic = "orders"
				lp := kmsg.NewListOffsetsRequestTopicPartition()
				lp.Partition, lp.Timestamp, lp.CurrentLeaderEpoch = tc.partition, -1, -1
				lt.Partitions = append(lt.Partitions, lp)
				lo.Topics = append(lo.Topics, lt)
				if p := other.RoundTrip(lo).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset <= 0 {
					t.Errorf("ListOffsets while gated: error %d, offset %d", p.ErrorCode, p.Offset)
				}
				prod := kmsg.NewPtrProduceRequest()
				prod.SetVersion(8)
				prod.Acks, prod.TimeoutMillis = 1, 5000
				pt := kmsg.NewProduceRequestTopic()
				pt.Topic = "orders"
				pp := kmsg.NewProduceRequestTopicPartition()
				pp.Partition = tc.partition
				pp.Records = recordBatch("while-gated")
				pt.Partitions = append(pt.Partitions, pp)
				prod.Topics = append(prod.Topics, pt)
				if p := other.RoundTrip(prod).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != 0 {
					t.Errorf("Produce while gated: error %d", p.ErrorCode)
				}
				if got := gate.calls.Load() - calls; got != 0 {
					t.Errorf("FetchGate asked %d times for non-Fetch requests, want 0", got)
				}
			})

			// The gate answered open, but its answer lapsed before the
			// response could be written (the process was paused in
			// between): the response is withheld all the same. (Not
			// counted in fetch_gated: the gate did not refuse.)
			t.Run("lapsed", func(t *testing.T) {
				gate.closed.Store(false)
				gate.lapsing.Store(true)
				defer gate.lapsing.Store(false)
				withheldFetch(t, 0)
			})

			t.Run("reopened", func(t *testing.T) {
				gate.closed.Store(false)
				fetchOK(t)
			})
		})
	}
}

// A consumer whose fetches are withheld retries, as after any broken
// connection, and gets its records once the gate opens.
func TestRelayFetchGateConsumerRetries(t *testing.T) {
	gate := &testGate{}
	gate.closed.Store(true)
	e := startGatedRelay(t, gate.check, io.Discard)
	produce(t, newRelayClient(t, e.addr), "orders", 2, "r", 20)

	cl := newRelayClient(t, e.addr, kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {2: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	polled := make(chan error, 1)
	go func() {
		for len(got) < 20 && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		polled <- ctx.Err()
	}()
	// Two withheld responses: the consumer came back after the first.
	for gate.calls.Load() < 2 {
		if ctx.Err() != nil {
			t.Fatalf("FetchGate asked %d times, want 2", gate.calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := kafkatest.CounterValue(t, e.reg, "zkbridge_kafka_relay_failures_total", map[string]string{"reason": "fetch_gated"}); n < 2 {
		t.Errorf("fetch_gated failures %v, want >= 2", n)
	}
	gate.closed.Store(false)
	if err := <-polled; err != nil {
		t.Fatalf("consumed %d of 20 records: %v", len(got), err)
	}
	for i, v := range got {
		if want := "r-" + strconv.Itoa(i); v != want {
			t.Fatalf("record %d = %q, want %q (all: %v)", i, v, want, fmt.Sprint(got))
		}
	}
}
