package relay

// The relay's frame buffers and metrics.

import (
	"fmt"
	"math/bits"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// bufPool recycles the buffers of relayed frames, by power-of-two size
// class: Produce requests and Fetch responses are up to megabytes each,
// and a fresh buffer per frame costs its zeroing and the collector's
// work, which on a busy relay is most of what it spends. A buffer is put
// back only once nothing refers to it (written to the broker or the
// client); frames the Handler decodes are never put back, since decoded
// requests alias their frame.
type bufPool struct {
	classes [bufClasses]sync.Pool // class c holds *[]byte of capacity 1<<(c+bufMinShift)
}

const (
	bufMinShift = 12 // 4 KiB: smaller frames are cheap to make
	bufClasses  = 15 // up to 64 MiB
)

func bufClass(n int) (int, bool) {
	c := bits.Len(uint(n-1)) - bufMinShift
	return max(c, 0), n > 0 && c < bufClasses
}

// get returns a buffer of length n (contents undefined: the caller fills
// it all).
func (p *bufPool) get(n int) []byte {
	c, ok := bufClass(n)
	if !ok || n < 1<<bufMinShift {
		return make([]byte, n)
	}
	if b, _ := p.classes[c].Get().(*[]byte); b != nil {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<(c+bufMinShift))
}

// put recycles b, whose contents nobody may use afterwards.
func (p *bufPool) put(b []byte) {
	c, ok := bufClass(cap(b))
	if !ok || cap(b) != 1<<(c+bufMinShift) {
		return // not one of ours
	}
	b = b[:0]
	p.classes[c].Put(&b)
}

// relayMetrics are the relay's Prometheus metrics.
type relayMetrics struct {
	requests     *prometheus.CounterVec // api_key, api
	byKey        []prometheus.Counter   // requests, cached per key (hot path)
	failures     *prometheus.CounterVec // reason
	upstreamOpen prometheus.Gauge
	brokersDown  prometheus.Gauge
}

func newRelayMetrics(reg prometheus.Registerer) (*relayMetrics, error) {
	m := &relayMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "relayed_requests_total",
			Help: "Kafka requests relayed to an upstream broker, by api key.",
		}, []string{"api_key", "api"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "relay_failures_total",
			Help: "Requests the relay did not relay through, by reason; all but draining and refresh closed their client connection (dial: no broker reachable; " +
				"lost: the broker went away or did not answer in time with requests in flight; " +
				"fetch_gated: a Fetch response withheld because the bridge could not vouch for its groups' " +
				"partition ownership, Config.FetchGate; draining: a Fetch answered NOT_LEADER_OR_FOLLOWER, not relayed, " +
				"because the bridge is shutting down and another bridge serves the broker now, Proxy.Drain; " +
				"refresh: a Fetch answered so, once per connection, to make its client refresh its metadata after another bridge left, Proxy.Refresh).",
		}, []string{"reason"}),
		upstreamOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "upstream_connections_open",
			Help: "Connections from the bridge to upstream brokers currently open.",
		}),
		brokersDown: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "upstream_brokers_down",
			Help: "Upstream brokers whose last dial failed; their proxy listeners refuse connections until one succeeds.",
		}),
	}
	for _, reason := range []string{"dial", "lost", "fetch_gated", "draining", "refresh"} {
		m.failures.WithLabelValues(reason)
	}
	for k := range int16(128) {
		if kmsg.RequestForKey(k) != nil {
			m.byKey = append(m.byKey, m.requests.WithLabelValues(strconv.Itoa(int(k)), kmsg.NameForKey(k)))
		} else {
			m.byKey = append(m.byKey, nil)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.failures, m.upstreamOpen, m.brokersDown} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("relay: registering metrics: %w", err)
		}
	}
	return m, nil
}

func (m *relayMetrics) relayed(key int16) {
	if key >= 0 && int(key) < len(m.byKey) && m.byKey[key] != nil {
		m.byKey[key].Inc()
		return
	}
	m.requests.WithLabelValues(strconv.Itoa(int(key)), kmsg.NameForKey(key)).Inc()
}

func (m *relayMetrics) failure(reason string) { m.failures.WithLabelValues(reason).Inc() }
