package newproto_test

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/newproto"
)

// testServer is a Server on 127.0.0.1:0, closed by t.Cleanup.
type testServer struct {
	srv  *newproto.Server
	addr string
	reg  *prometheus.Registry
	stop func() // cancels Serve's ctx and waits for Serve to return
}

// startServer starts a Server logging to t; cfg's Registerer is filled in
// when unset.
func startServer(t testing.TB, cfg newproto.Config) *testServer {
	t.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	srv, err := newproto.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	ts := &testServer{srv: srv, addr: ln.Addr().String(), reg: reg}
	stopped := false
	ts.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) port() int32 {
	_, p, _ := net.SplitHostPort(ts.addr)
	var n int32
	for _, c := range p {
		n = n*10 + int32(c-'0')
	}
	return n
}

// fakeCluster is a fixed Cluster.
type fakeCluster struct {
	brokers []newproto.Broker
	topics  map[string][]newproto.Partition
	err     error
}

func (f *fakeCluster) Brokers(context.Context) ([]newproto.Broker, error) { return f.brokers, f.err }
func (f *fakeCluster) Topics(context.Context) (map[string][]newproto.Partition, error) {
	return f.topics, f.err
}

// serverGoroutines returns the stacks of goroutines running the server's
// connection or accept code. A goroutine that has signalled its WaitGroup
// may not have returned yet, so it retries for a moment (as goleak does).
func serverGoroutines() []string {
	deadline := time.Now().Add(time.Second)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var found []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "zkbridge/newproto.(*conn)") || strings.Contains(g, "zkbridge/newproto.(*Server)") {
				found = append(found, g)
			}
		}
		if len(found) == 0 || time.Now().After(deadline) {
			return found
		}
		time.Sleep(10 * time.Millisecond)
	}
}
