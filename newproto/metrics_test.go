package newproto_test

import (
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

func dialErr(addr string) (net.Conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err == nil {
		nc.Close()
	}
	return nc, err
}

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func TestMetrics(t *testing.T) {
	ts := startServer(t, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	kafkatest.CheckAlive(t, c) // ApiVersions v2
	hb := heartbeat()
	c.RoundTrip(hb) // no coordinator: COORDINATOR_NOT_AVAILABLE

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"zkbridge_kafka_requests_total", map[string]string{"api_key": "18", "api": "ApiVersions", "api_version": "2"}, 1},
		{"zkbridge_kafka_requests_total", map[string]string{"api_key": "12", "api": "Heartbeat", "api_version": "4"}, 1},
		{"zkbridge_kafka_request_errors_total", map[string]string{"api": "Heartbeat", "error": "COORDINATOR_NOT_AVAILABLE"}, 1},
		{"zkbridge_kafka_request_errors_total", map[string]string{"api": "ApiVersions"}, 0},
		{"zkbridge_kafka_connections_open", nil, 1},
		{"zkbridge_kafka_connections_accepted_total", nil, 1},
	} {
		if got := kafkatest.CounterValue(t, ts.reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	// A request that closes its connection counts as CONNECTION_CLOSED.
	r := kmsg.NewPtrProduceRequest()
	r.SetVersion(3)
	c.Send(r) // acks=0
	c.ExpectClosed()
	if got := kafkatest.CounterValue(t, ts.reg, "zkbridge_kafka_request_errors_total", map[string]string{"api": "Produce", "error": "CONNECTION_CLOSED"}); got != 1 {
		t.Errorf("Produce CONNECTION_CLOSED errors = %v, want 1", got)
	}
}

// Metrics go to the Registerer passed in; a second Server on the same
// registry is refused rather than silently sharing counters.
func TestMetricsRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newproto.New(newproto.Config{Registerer: reg}); err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := newproto.New(newproto.Config{Registerer: reg}); err == nil {
		t.Fatal("second New on the same registry succeeded")
	}
	if _, err := newproto.New(newproto.Config{}); err != nil {
		t.Fatalf("New without a registry: %v", err)
	}
}
