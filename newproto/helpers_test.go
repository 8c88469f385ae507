package newproto_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

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
func startServer(t *testing.T, cfg newproto.Config) *testServer {
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

// client speaks the Kafka framing over a raw TCP connection, so tests see
// exactly the bytes the server writes.
type client struct {
	t    *testing.T
	nc   net.Conn
	corr int32
	fmtr *kmsg.RequestFormatter
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, fmtr: kmsg.NewRequestFormatter(kmsg.FormatterClientID("newproto-test"))}
}

// send writes req with the next correlation id and returns that id.
func (c *client) send(req kmsg.Request) int32 {
	c.t.Helper()
	c.corr++
	c.write(c.fmtr.AppendRequest(nil, req, c.corr))
	return c.corr
}

func (c *client) write(b []byte) {
	c.t.Helper()
	_ = c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// sendStraddling writes req in two parts that straddle the idle deadline
// a connection begins with: its size and the start of its header half an
// idle period after the call, the rest three quarters of one later. It
// returns the correlation id.
func (c *client) sendStraddling(req kmsg.Request, idle time.Duration) int32 {
	c.t.Helper()
	c.corr++
	b := c.fmtr.AppendRequest(nil, req, c.corr)
	time.Sleep(idle / 2)
	c.write(b[:6])
	time.Sleep(idle * 3 / 4)
	c.write(b[6:])
	return c.corr
}

// recv reads one response and decodes it as key at version. It checks the
// response header version and that the body re-encodes to the same bytes,
// which catches a wrong version or a missing tagged-field section.
func (c *client) recv(key, version int16) (int32, kmsg.Response) {
	c.t.Helper()
	frame, err := c.readFrame()
	if err != nil {
		c.t.Fatalf("reading response to %s v%d: %v", kmsg.NameForKey(key), version, err)
	}
	resp := kmsg.ResponseForKey(key)
	resp.SetVersion(version)
	if len(frame) < 4 {
		c.t.Fatalf("response frame of %d bytes", len(frame))
	}
	corr := int32(binary.BigEndian.Uint32(frame))
	body := frame[4:]
	if resp.IsFlexible() && key != int16(kmsg.ApiVersions) {
		if len(body) == 0 || body[0] != 0 {
			c.t.Fatalf("%s v%d: response header v1 must end with an empty tag section, got % x", kmsg.NameForKey(key), version, body[:min(len(body), 4)])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decoding %s v%d response: %v", kmsg.NameForKey(key), version, err)
	}
	if again := resp.AppendTo(nil); !bytes.Equal(again, body) {
		c.t.Fatalf("%s v%d response does not re-encode to its bytes:\n got % x\nwant % x", kmsg.NameForKey(key), version, body, again)
	}
	return corr, resp
}

func (c *client) readFrame() ([]byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.nc, size[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.nc, frame)
	return frame, err
}

// roundTrip sends req and decodes its response at req's version.
func (c *client) roundTrip(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	corr := c.send(req)
	got, resp := c.recv(req.Key(), req.GetVersion())
	if got != corr {
		c.t.Fatalf("correlation id %d, want %d", got, corr)
	}
	return resp
}

// expectClosed checks that the server closes the connection without
// writing anything.
func (c *client) expectClosed() {
	c.t.Helper()
	frame, err := c.readFrame()
	if err == nil {
		c.t.Fatalf("connection still open: got a %d-byte response", len(frame))
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
		c.t.Fatalf("want the connection closed, got %v", err)
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

// checkAlive proves a connection still works with an ApiVersions round trip.
func checkAlive(t *testing.T, c *client) {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(2)
	resp := c.roundTrip(req).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions error %d", resp.ErrorCode)
	}
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

// versions lists min..max.
func versions(minV, maxV int16) []int16 {
	var vs []int16
	for v := minV; v <= maxV; v++ {
		vs = append(vs, v)
	}
	return vs
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
