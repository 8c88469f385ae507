package relay_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
)

// The relay's cost: the same kgo client configuration, against the same
// kfake cluster in the same run, straight to the brokers and through the
// bridge. The measurement is in rounds, each a direct phase and a bridged
// phase back to back (which goes first alternates), so that the noise of a
// shared machine (other processes, GC, kfake's growing log) falls on both
// halves of a round alike; the reported ratio is the median of the rounds'
// ratios, next to the aggregate MB/s of each side. Targets (issue 7): at
// least 90% of direct throughput, under 1 ms added p99 latency on
// loopback.
//
// Each side's CPU time (the whole process's, user and system: kfake, the
// client and, on the bridge side, the relay, kernel work on their sockets
// included) is reported per MB moved, and as cores used while its phases
// ran: when the cores used approach what the machine can give the process,
// the throughput ratio is the ratio of CPU per MB, and the difference of
// the two CPU figures is what the relay costs.
//
//	go test -run '^$' -bench Relay -benchtime 3x ./newproto/

const benchTopic = "bench"

func startBenchRelay(b *testing.B, extra ...func(*relayOpts)) (e *relayEnv, direct []string) {
	b.Helper()
	o := relayOpts{
		topics: map[string]int32{benchTopic: 3},
		// kfake keeps segments in memory and grows them by doubling:
		// small segments keep that copying out of the measurement.
		kfakeOpts: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"log.segment.bytes": "4194304"})},
	}
	for _, f := range extra {
		f(&o)
	}
	e = startRelay(b, o)
	e.pinLeaders(b, benchTopic, 3)
	return e, e.kf.ListenAddrs()
}

// benchClient is the one client configuration of both sides. Its versions
// are capped where the bridge caps them (Produce v9, Fetch v15: relay.go),
// so that both sides speak the same requests: kfake serves Fetch v13+
// (topic ids) and Produce v10+ by other paths, and the comparison is to
// measure the relay, not those.
func benchClient(b *testing.B, seeds []string, opts ...kgo.Opt) *kgo.Client {
	b.Helper()
	versions := kversion.Stable()
	versions.SetMaxKeyVersion(int16(kmsg.Produce), 9)
	versions.SetMaxKeyVersion(int16(kmsg.Fetch), 15)
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.MaxVersions(versions),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerLinger(0),
		// Bytes on the wire are what the relay moves: no compression,
		// and random values (benchValue).
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}

// benchValue is incompressible.
func benchValue(n int) []byte {
	v := make([]byte, n)
	_, _ = rand.Read(v)
	return v
}

// side is one way to the cluster: straight or through the bridge.
type side struct {
	name string
	cl   *kgo.Client
	d    time.Duration // total over the rounds
	cpu  time.Duration // process CPU time over the rounds, user and system
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportSides reports each side's throughput and CPU use for bytes moved.
func reportSides(b *testing.B, bytes int, sides ...*side) {
	for _, s := range sides {
		b.ReportMetric(mbps(bytes, s.d), s.name+"-MB/s")
		b.ReportMetric(s.cpu.Seconds()*1000/(float64(bytes)/(1<<20)), s.name+"-cpu-ms/MB")
		b.ReportMetric(s.cpu.Seconds()/s.d.Seconds(), s.name+"-cores")
	}
}

// rounds runs phase for both sides, rounds times, alternating which goes
// first, and returns the median ratio bridge/direct of the rounds'
// throughputs (the inverse ratio of their durations).
func rounds(n int, direct, bridge *side, phase func(*side) time.Duration) float64 {
	var ratios []float64
	for i := range n {
		first, second := direct, bridge
		if i%2 == 1 {
			first, second = bridge, direct
		}
		c0 := cpuTime()
		d1 := phase(first)
		c1 := cpuTime()
		d2 := phase(second)
		first.d, first.cpu = first.d+d1, first.cpu+c1-c0
		second.d, second.cpu = second.d+d2, second.cpu+cpuTime()-c1
		dd, db := d1, d2
		if first == bridge {
			dd, db = d2, d1
		}
		ratios = append(ratios, dd.Seconds()/db.Seconds())
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

func mbps(bytes int, d time.Duration) float64 { return float64(bytes) / (1 << 20) / d.Seconds() }

// BenchmarkRelayProduce: produce throughput, 1 KiB records, acks=all
// (idempotent), 4 MiB a phase.
func BenchmarkRelayProduce(b *testing.B) { relayProduce(b, false) }

// BenchmarkRelayProduceTLS: the same with brokers that speak only TLS (issue 16): "direct" is a
// TLS client of the brokers, "bridge" a plaintext client of the relay, which dials the brokers
// over TLS.
func BenchmarkRelayProduceTLS(b *testing.B) { relayProduce(b, true) }

// BenchmarkRelayProduceSASL: the same with brokers that require SASL (SCRAM-SHA-512): "direct"
// authenticates to the brokers, "bridge" through the relay, which forwards its exchange on each
// of its upstream connections (newproto.SASLConfig.Forward) and then relays as usual.
func BenchmarkRelayProduceSASL(b *testing.B) { relayProduce(b, false, withSASL) }

// withSASL makes a benchmark's brokers require SASL and both sides authenticate.
func withSASL(o *relayOpts, opts *[]kgo.Opt) {
	o.sasl = true
	*opts = append(*opts, kgo.SASL(scram.Auth{User: saslUser, Pass: saslPass}.AsSha512Mechanism()))
}

func relayProduce(b *testing.B, upstreamTLS bool, mods ...func(*relayOpts, *[]kgo.Opt)) {
	var directOpts, bothOpts []kgo.Opt
	var extra []func(*relayOpts)
	for _, m := range mods {
		extra = append(extra, func(o *relayOpts) { m(o, &bothOpts) })
	}
	if upstreamTLS {
		ca := tlstest.NewCA(b, "ca")
		srv := ca.Server(b, "broker")
		extra = append(extra, func(o *relayOpts) {
			o.kfakeOpts = append(o.kfakeOpts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS}, MinVersion: tls.VersionTLS12}))
			d := &tls.Dialer{Config: ca.ClientConfig(nil)}
			o.dial = d.DialContext
		})
		directOpts = append(directOpts, kgo.DialTLSConfig(ca.ClientConfig(nil)))
	}
	e, addrs := startBenchRelay(b, extra...)
	const phaseBytes, recSize, perIter = 4 << 20, 1 << 10, 10
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	direct := &side{name: "direct", cl: benchClient(b, addrs, append(directOpts, bothOpts...)...)}
	bridge := &side{name: "bridge", cl: benchClient(b, []string{e.addr}, bothOpts...)}
	for _, s := range []*side{direct, bridge} { // connections, metadata, producer id
		if err := s.cl.ProduceSync(ctx, &kgo.Record{Topic: benchTopic, Value: []byte("warm")}).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	value := benchValue(recSize)
	phase := func(s *side) time.Duration {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		start := time.Now()
		for range phaseBytes / recSize {
			wg.Add(1)
			s.cl.Produce(ctx, &kgo.Record{Topic: benchTopic, Value: value}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		d := time.Since(start)
		if first != nil {
			b.Fatalf("%s: %v", s.name, first)
		}
		return d
	}
	var medians []float64
	for range b.N {
		medians = append(medians, rounds(perIter, direct, bridge, phase))
	}
	slices.Sort(medians)
	reportSides(b, phaseBytes*perIter*b.N, direct, bridge)
	b.ReportMetric(medians[len(medians)/2], "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRelayFetch: fetch throughput, reading a 16 MiB topic from the
// start each phase.
func BenchmarkRelayFetch(b *testing.B) {
	e, addrs := startBenchRelay(b)
	const total, recSize, perIter = 16 << 20, 1 << 10, 10
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prod := benchClient(b, addrs)
	value := benchValue(recSize)
	var recs []*kgo.Record
	for range total / recSize {
		recs = append(recs, &kgo.Record{Topic: benchTopic, Value: value})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	start := map[string]map[int32]kgo.EpochOffset{benchTopic: {}}
	offsets := map[int32]kgo.Offset{}
	for p := range int32(3) {
		start[benchTopic][p] = kgo.EpochOffset{Epoch: -1, Offset: 0}
		offsets[p] = kgo.NewOffset().AtStart()
	}
	consume := kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{benchTopic: offsets})
	direct := &side{name: "direct", cl: benchClient(b, addrs, consume)}
	bridge := &side{name: "bridge", cl: benchClient(b, []string{e.addr}, consume)}
	phase := func(s *side) time.Duration {
		s.cl.SetOffsets(start) // from the start again, dropping what is buffered
		got := 0
		t0 := time.Now()
		for got < total {
			fs := s.cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				b.Fatalf("%s: fetched %d of %d bytes: %v", s.name, got, total, err)
			}
			fs.EachRecord(func(r *kgo.Record) { got += len(r.Value) })
		}
		return time.Since(t0)
	}
	phase(direct) // connections and metadata
	phase(bridge)
	var medians []float64
	for range b.N {
		medians = append(medians, rounds(perIter, direct, bridge, phase))
	}
	slices.Sort(medians)
	reportSides(b, total*perIter*b.N, direct, bridge)
	b.ReportMetric(medians[len(medians)/2], "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRelayLatency: round trips of one 100-byte record produced with
// acks=all and waited for, one at a time, alternating sides; the bridge
// adds a hop each way.
func BenchmarkRelayLatency(b *testing.B) { relayLatency(b) }

// BenchmarkRelayLatencySASL: the same with brokers that require SASL (SCRAM-SHA-512), each
// side authenticated once per connection (the bridge's side by forwarding): what SASL
// forwarding adds to a request once the connection is authenticated.
func BenchmarkRelayLatencySASL(b *testing.B) { relayLatency(b, withSASL) }

func relayLatency(b *testing.B, mods ...func(*relayOpts, *[]kgo.Opt)) {
	var opts []kgo.Opt
	var extra []func(*relayOpts)
	for _, m := range mods {
		extra = append(extra, func(o *relayOpts) { m(o, &opts) })
	}
	e, addrs := startBenchRelay(b, extra...)
	const samples = 2000
	opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner())) // partition 0: broker 0
	clDirect := benchClient(b, addrs, opts...)
	clBridge := benchClient(b, []string{e.addr}, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	value := benchValue(100)
	roundTrip := func(cl *kgo.Client) time.Duration {
		start := time.Now()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: benchTopic, Partition: 0, Value: value}).FirstErr(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for range 50 { // connections, metadata, warm caches
		roundTrip(clDirect)
		roundTrip(clBridge)
	}
	var lDirect, lBridge []time.Duration
	for range b.N {
		for i := range samples {
			if i%2 == 0 {
				lDirect = append(lDirect, roundTrip(clDirect))
				lBridge = append(lBridge, roundTrip(clBridge))
			} else {
				lBridge = append(lBridge, roundTrip(clBridge))
				lDirect = append(lDirect, roundTrip(clDirect))
			}
		}
	}
	slices.Sort(lDirect)
	slices.Sort(lBridge)
	pct := func(l []time.Duration, p float64) float64 {
		return float64(l[int(p*float64(len(l)-1))].Microseconds())
	}
	b.ReportMetric(pct(lDirect, 0.5), "direct-p50-µs")
	b.ReportMetric(pct(lDirect, 0.99), "direct-p99-µs")
	b.ReportMetric(pct(lBridge, 0.5), "bridge-p50-µs")
	b.ReportMetric(pct(lBridge, 0.99), "bridge-p99-µs")
	b.ReportMetric(pct(lBridge, 0.5)-pct(lDirect, 0.5), "added-p50-µs")
	b.ReportMetric(pct(lBridge, 0.99)-pct(lDirect, 0.99), "added-p99-µs")
	b.ReportMetric(0, "ns/op")
	if testing.Verbose() {
		fmt.Printf("latency over %d samples each: direct p50 %s p99 %s, bridge p50 %s p99 %s\n",
			len(lDirect), lDirect[len(lDirect)/2], lDirect[len(lDirect)*99/100], lBridge[len(lBridge)/2], lBridge[len(lBridge)*99/100])
	}
}

// BenchmarkRelaySASLConnect: a new connection authenticated with SCRAM-SHA-512 and its first
// request (a fresh kgo client's Ping: dial, ApiVersions, SaslHandshake, two SaslAuthenticate,
// Metadata), straight to a broker and through the bridge, which forwards the exchange on an
// upstream connection it dials for it; alternating sides.
func BenchmarkRelaySASLConnect(b *testing.B) {
	var opts []kgo.Opt
	e, addrs := startBenchRelay(b, func(o *relayOpts) { withSASL(o, &opts) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	connect := func(seed string) time.Duration {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seed)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		start := time.Now()
		if err := cl.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	const samples = 200
	var lDirect, lBridge []time.Duration
	for range b.N {
		for i := range samples {
			if i%2 == 0 {
				lDirect = append(lDirect, connect(addrs[0]))
				lBridge = append(lBridge, connect(e.addr))
			} else {
				lBridge = append(lBridge, connect(e.addr))
				lDirect = append(lDirect, connect(addrs[0]))
			}
		}
	}
	slices.Sort(lDirect)
	slices.Sort(lBridge)
	pct := func(l []time.Duration, p float64) float64 {
		return float64(l[int(p*float64(len(l)-1))].Microseconds())
	}
	b.ReportMetric(pct(lDirect, 0.5), "direct-p50-µs")
	b.ReportMetric(pct(lDirect, 0.99), "direct-p99-µs")
	b.ReportMetric(pct(lBridge, 0.5), "bridge-p50-µs")
	b.ReportMetric(pct(lBridge, 0.99), "bridge-p99-µs")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRelayReconnect: a client connection through a proxy listener,
// as at a failover, when a dead bridge's clients reconnect to the
// survivors: connect, ApiVersions (answered by the bridge), one relayed
// Metadata (the bridge dials its upstream connection for it), close. The
// process's CPU per connection (kfake's share included) is reported
// beside the wall time.
//
//	go test -run '^$' -bench RelayReconnect -count 8 ./relay/
func BenchmarkRelayReconnect(b *testing.B) {
	e, _ := startBenchRelay(b)
	addr := e.srv.ProxyAddrs()[0].String()
	av := kmsg.NewPtrApiVersionsRequest()
	av.SetVersion(3)
	av.ClientSoftwareName, av.ClientSoftwareVersion = "bench", "1"
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(7)
	md.Topics = []kmsg.MetadataRequestTopic{}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	for range b.N {
		c := kafkatest.Dial(b, addr)
		c.RoundTrip(av)
		c.RoundTrip(md)
		_ = c.NC.Close()
	}
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
}
