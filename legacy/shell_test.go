package legacy

// Helpers shared by the shell tests (server_test.go, client_test.go). Everything runs over
// real loopback sockets; nothing here needs ZooKeeper.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// waitLong bounds every wait for something that should happen "soon": generous, so that a
// loaded 2-core machine under -race does not make the tests flaky; a passing run never waits
// for it.
const waitLong = 10 * time.Second

// checkGoroutines fails the test if it leaves goroutines behind. Call it first in a test: its
// cleanup then runs last, after the server and client cleanups have stopped them. It settles
// for a while because exiting goroutines are still counted for a moment after they are done.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d goroutines before the test, %d after:\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func testLogger(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

// fakeCoord is a Coordinator that answers consults with a fixed broker list and queues every
// accepted session for the test to drive.
type fakeCoord struct {
	mu      sync.Mutex
	consult ConsultResponse
	// refuse, when set, decides each registration (nil error: accept).
	refuse func(s *Session) error

	consults  atomic.Int32
	registers atomic.Int32
	sessions  chan *Session
}

func newFakeCoord() *fakeCoord {
	return &fakeCoord{sessions: make(chan *Session, 64)}
}

func (f *fakeCoord) Consult(context.Context) ConsultResponse {
	f.consults.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.consult
}

func (f *fakeCoord) Register(_ context.Context, s *Session) error {
	f.registers.Add(1)
	f.mu.Lock()
	refuse := f.refuse
	f.mu.Unlock()
	if refuse != nil {
		if err := refuse(s); err != nil {
			return err
		}
	}
	f.sessions <- s
	return nil
}

func (f *fakeCoord) setConsult(resp ConsultResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.consult = resp
}

func (f *fakeCoord) setRefuse(refuse func(s *Session) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
}

// session waits for the next accepted session.
func (f *fakeCoord) session(t *testing.T) *Session {
	t.Helper()
	select {
	case s := <-f.sessions:
		return s
	case <-time.After(waitLong):
		t.Fatal("no consumer registered")
		return nil
	}
}

// startServer serves coord on a loopback port until the test ends and returns the address. It
// points coord's consult answer at itself (broker id 1) unless the test changes it.
func startServer(t *testing.T, coord *fakeCoord, mod func(*Config)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Logger: testLogger(t), Coordinator: coord}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(waitLong):
			t.Errorf("Serve did not return after its context ended")
		}
	})
	addr := ln.Addr().String()
	coord.setConsult(ConsultResponse{CoordinatorID: 1, Brokers: []Broker{brokerAt(t, "b1", 1, addr)}})
	return addr
}

func brokerAt(t *testing.T, creator string, id int32, addr string) Broker {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return Broker{CreatorID: creator, ID: id, Host: host, Port: int32(p)}
}

// recorder is a Handler that reports every call on a channel.
type recorder struct {
	events chan event
}

type event struct {
	stop  bool
	parts []PartitionOffset
}

func newRecorder() *recorder { return &recorder{events: make(chan event, 64)} }

func (r *recorder) OnStop() { r.events <- event{stop: true} }

func (r *recorder) OnStart(parts []PartitionOffset) error {
	r.events <- event{parts: parts}
	return nil
}

func (r *recorder) next(t *testing.T) event {
	t.Helper()
	select {
	case e := <-r.events:
		return e
	case <-time.After(waitLong):
		t.Fatal("handler was not called")
		return event{}
	}
}

// none checks that the handler was not called (within a short grace period: calls happen
// before the response is written, so a test that got the response needs no long wait).
func (r *recorder) none(t *testing.T) {
	t.Helper()
	select {
	case e := <-r.events:
		t.Fatalf("unexpected handler call %+v", e)
	case <-time.After(20 * time.Millisecond):
	}
}

// clientConfig is a valid configuration for a consumer of group g on brokers, with a ping
// interval long enough that a loaded machine never misses one by accident.
func clientConfig(t *testing.T, id string, brokers ...string) ClientConfig {
	return ClientConfig{
		Brokers:         brokers,
		GroupID:         "g",
		ConsumerID:      id,
		Subscription:    map[string]int{"t": 2},
		AutoCommit:      true,
		AutoOffsetReset: ResetSmallest,
		PingInterval:    time.Second,
		MaxPingRetries:  2,
		Logger:          testLogger(t).With().Str("side", "client").Logger(),
		Rand:            rand.New(rand.NewPCG(1, 2)),
		BackoffMin:      5 * time.Millisecond,
		BackoffMax:      50 * time.Millisecond,
	}
}

// runningClient is a Client whose Run goroutine the test owns.
type runningClient struct {
	*Client
	cancel context.CancelFunc
	done   chan error

	mu  sync.Mutex
	got bool
	err error
}

// startClient runs a Client until the test ends.
func startClient(t *testing.T, cfg ClientConfig) *runningClient {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningClient{Client: c, cancel: cancel, done: make(chan error, 1)}
	go func() { rc.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		rc.mu.Lock()
		already := rc.got
		rc.mu.Unlock()
		cancel()
		if err := rc.wait(t); !already && err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return rc
}

// wait returns Run's result, waiting for it if needed.
func (rc *runningClient) wait(t *testing.T) error {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if !rc.got {
		select {
		case rc.err = <-rc.done:
			rc.got = true
		case <-time.After(waitLong):
			t.Fatal("Run did not return")
		}
	}
	return rc.err
}

// rawConn is a hand-driven peer: it writes and reads frames directly.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitLong)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc}
}

func (r *rawConn) send(m Message) {
	r.t.Helper()
	r.sendBytes(AppendFrame(nil, m))
}

// sendVersion sends m with the given version in its header.
func (r *rawConn) sendVersion(m Message, version int16) {
	r.t.Helper()
	b := AppendFrame(nil, m)
	b[6], b[7] = byte(uint16(version)>>8), byte(version)
	r.sendBytes(b)
}

func (r *rawConn) sendBytes(b []byte) {
	r.t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(waitLong))
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// recv reads one message, or fails the test.
func (r *rawConn) recv() Message {
	r.t.Helper()
	m, err := r.tryRecv()
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return m
}

func (r *rawConn) tryRecv() (Message, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(waitLong))
	frame, err := ReadFrame(r.nc, 0)
	if err != nil {
		return nil, err
	}
	return Decode(frame)
}

// expectClosed checks that the peer closes the connection (without sending anything more).
func (r *rawConn) expectClosed() {
	r.t.Helper()
	m, err := r.tryRecv()
	switch {
	case err == nil:
		r.t.Fatalf("expected the connection to close, got %v %+v", m.Type(), m)
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), isConnReset(err):
	default:
		r.t.Fatalf("expected the connection to close, got %v", err)
	}
}

func isConnReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// registerRaw connects and registers consumer id by hand; the session the coordinator gets is
// returned with the connection.
func registerRaw(t *testing.T, addr string, coord *fakeCoord, id string, interval time.Duration, retries int16) (*rawConn, *Session) {
	t.Helper()
	r := dialRaw(t, addr)
	r.send(validRegister(id, interval, retries))
	return r, coord.session(t)
}

func validRegister(id string, interval time.Duration, retries int16) *RegisterRequest {
	return &RegisterRequest{
		GroupID:         "g",
		ConsumerID:      id,
		AutoCommit:      true,
		AutoOffsetReset: ResetLargest,
		PingIntervalMs:  int32(interval / time.Millisecond),
		MaxPingRetries:  retries,
		Subscription:    []TopicThreads{{Topic: "t", Threads: 1}},
	}
}

// closedAddrs returns n loopback addresses nobody listens on (listened on, then closed).
func closedAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		_ = ln.Close()
	}
	return addrs
}

func mustPing(t *testing.T, s *Session) PingResponse {
	t.Helper()
	resp, err := s.Ping(context.Background(), 0)
	if err != nil {
		t.Fatalf("Ping: %v", err)
	}
	return resp
}

func waitDone(t *testing.T, s *Session, what string) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(waitLong):
		t.Fatalf("%s: session still open", what)
	}
}

func fmtParts(ps []PartitionOffset) string { return fmt.Sprintf("%+v", ps) }
