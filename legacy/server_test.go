package legacy

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Reference: docs/legacy-protocol.md §8 "Connection phases": before registering, a consumer may
// send any number of ConsultRequests on one connection, each answered in order; §5: a
// ConsultRequest of an unknown version is answered UNSUPPORTED_VERSION and the connection
// stays usable.
func TestServerConsultAnswersEveryRequest(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	want := ConsultResponse{CoordinatorID: 1, Brokers: []Broker{brokerAt(t, "b1", 1, addr)}}

	r := dialRaw(t, addr)
	for i := range 2 {
		r.send(&ConsultRequest{})
		got, ok := r.recv().(*ConsultResponse)
		if !ok || got.ErrorCode != CodeNone || got.CoordinatorID != 1 || !slices.Equal(got.Brokers, want.Brokers) {
			t.Fatalf("consult %d: got %+v, want %+v", i, got, want)
		}
	}
	r.sendVersion(&ConsultRequest{}, 7)
	if got, ok := r.recv().(*ConsultResponse); !ok || got.ErrorCode != CodeUnsupportedVersion || got.CoordinatorID != -1 || len(got.Brokers) != 0 {
		t.Fatalf("consult v7: got %+v, want UNSUPPORTED_VERSION, coordinator -1, no brokers", got)
	}
	r.send(&ConsultRequest{})
	if got, ok := r.recv().(*ConsultResponse); !ok || got.ErrorCode != CodeNone {
		t.Fatalf("consult after the unsupported one: got %+v", got)
	}
	if n := coord.consults.Load(); n != 3 {
		t.Errorf("coordinator consulted %d times, want 3 (not for the unsupported version)", n)
	}
}

// Reference: docs §6 RegisterRequest (what the coordinator validates) and RegisterResponse
// (a refusal is answered, then the connection closes).
func TestServerRefusesInvalidRegister(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, func(c *Config) {
		c.PingIntervalMin = 10 * time.Millisecond
		c.PingIntervalMax = time.Minute
		c.PingRetriesMax = 10
	})
	for _, tc := range []struct {
		name string
		mod  func(*RegisterRequest)
		want ErrorCode
	}{
		{"empty group", func(r *RegisterRequest) { r.GroupID = "" }, CodeInvalidRequest},
		{"slash in consumer id", func(r *RegisterRequest) { r.ConsumerID = "a/b" }, CodeInvalidRequest},
		{"unknown auto_offset_reset", func(r *RegisterRequest) { r.AutoOffsetReset = "earliest" }, CodeInvalidRequest},
		{"no subscription", func(r *RegisterRequest) { r.Subscription = nil }, CodeInvalidRequest},
		{"zero threads", func(r *RegisterRequest) { r.Subscription[0].Threads = 0 }, CodeInvalidRequest},
		{"ping interval 0", func(r *RegisterRequest) { r.PingIntervalMs = 0 }, CodeInvalidPingSettings},
		{"ping interval below min", func(r *RegisterRequest) { r.PingIntervalMs = 5 }, CodeInvalidPingSettings},
		{"ping interval above max", func(r *RegisterRequest) { r.PingIntervalMs = 61_000 }, CodeInvalidPingSettings},
		{"zero retries", func(r *RegisterRequest) { r.MaxPingRetries = 0 }, CodeInvalidPingSettings},
		{"too many retries", func(r *RegisterRequest) { r.MaxPingRetries = 11 }, CodeInvalidPingSettings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := validRegister("c1", time.Second, 3)
			tc.mod(req)
			r := dialRaw(t, addr)
			r.send(req)
			if got, ok := r.recv().(*RegisterResponse); !ok || got.ErrorCode != tc.want {
				t.Fatalf("got %+v, want RegisterResponse %v", got, tc.want)
			}
			r.expectClosed()
		})
	}
	if n := coord.registers.Load(); n != 0 {
		t.Errorf("coordinator saw %d invalid registrations", n)
	}

	t.Run("unsupported version", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.sendVersion(validRegister("c1", time.Second, 3), 1)
		if got, ok := r.recv().(*RegisterResponse); !ok || got.ErrorCode != CodeUnsupportedVersion {
			t.Fatalf("got %+v, want RegisterResponse UNSUPPORTED_VERSION", got)
		}
		r.expectClosed()
	})
}

func TestValidateRegister(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*RegisterRequest)
		want ErrorCode
	}{
		{"valid", func(*RegisterRequest) {}, CodeNone},
		{"unicode names", func(r *RegisterRequest) { r.GroupID, r.ConsumerID = "grüppe", "c_host-1700000000000-0a1b2c3d" }, CodeNone},
		{"dot group", func(r *RegisterRequest) { r.GroupID = "." }, CodeInvalidRequest},
		{"dotdot consumer", func(r *RegisterRequest) { r.ConsumerID = ".." }, CodeInvalidRequest},
		{"control char", func(r *RegisterRequest) { r.ConsumerID = "c\x01" }, CodeInvalidRequest},
		{"private use", func(r *RegisterRequest) { r.GroupID = "g\ue000" }, CodeInvalidRequest},
		{"empty topic", func(r *RegisterRequest) { r.Subscription[0].Topic = "" }, CodeInvalidRequest},
		{"duplicate topic", func(r *RegisterRequest) {
			r.Subscription = append(r.Subscription, TopicThreads{Topic: "t", Threads: 1})
		}, CodeInvalidRequest},
		{"negative threads", func(r *RegisterRequest) { r.Subscription[0].Threads = -1 }, CodeInvalidRequest},
		{"negative interval", func(r *RegisterRequest) { r.PingIntervalMs = -1 }, CodeInvalidPingSettings},
		{"negative retries", func(r *RegisterRequest) { r.MaxPingRetries = -1 }, CodeInvalidPingSettings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := validRegister("c1", time.Second, 3)
			tc.mod(req)
			code, err := validateRegister(req, 0, 0, 0)
			if code != tc.want || (err == nil) != (tc.want == CodeNone) {
				t.Fatalf("got %v (%v), want %v", code, err, tc.want)
			}
		})
	}
}

// Reference: docs §6 RegisterResponse: the coordinator's refusal is answered with its code
// (an error without a code is UNKNOWN), then the connection closes and the session with it.
func TestServerRegisterRefusedByCoordinator(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	refused := make(chan *Session, 2)
	for _, tc := range []struct {
		err  error
		want ErrorCode
	}{
		{CodeConsumerIDInUse.Err(), CodeConsumerIDInUse},
		{errors.New("zookeeper is down"), CodeUnknown},
	} {
		coord.setRefuse(func(s *Session) error {
			refused <- s
			return tc.err
		})
		r := dialRaw(t, addr)
		r.send(validRegister("c1", time.Second, 3))
		if got, ok := r.recv().(*RegisterResponse); !ok || got.ErrorCode != tc.want {
			t.Fatalf("refused with %v: got %+v, want RegisterResponse %v", tc.err, got, tc.want)
		}
		r.expectClosed()
		s := <-refused
		waitDone(t, s, "refused session")
		if !errors.Is(s.Err(), tc.err) {
			t.Errorf("refused session's Err = %v, want it to wrap %v", s.Err(), tc.err)
		}
	}
}

// Reference: docs §8 "Connection phases": after registering the consumer sends only responses;
// a second RegisterRequest is refused with ILLEGAL_STATE (docs §6 RegisterResponse).
func TestServerSecondRegisterIsIllegalState(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	r, s := registerRaw(t, addr, coord, "c1", time.Second, 3)
	if got := s.Register(); got.ConsumerID != "c1" || got.PingIntervalMs != 1000 || got.MaxPingRetries != 3 {
		t.Fatalf("session's registration %+v", got)
	}
	r.send(validRegister("c1", time.Second, 3))
	if got, ok := r.recv().(*RegisterResponse); !ok || got.ErrorCode != CodeIllegalState {
		t.Fatalf("got %+v, want RegisterResponse ILLEGAL_STATE", got)
	}
	r.expectClosed()
	waitDone(t, s, "after a second RegisterRequest")
	if !errors.Is(s.Err(), ErrProtocol) {
		t.Errorf("Err = %v, want ErrProtocol", s.Err())
	}
}

// Reference: docs §8 "Liveness": an unanswered request is a missed ping after ping_interval_ms;
// pings go on with num_retries = misses so far; at max_ping_retries misses the consumer is
// dead — max_ping_retries × interval after the first unanswered request.
func TestSessionSilentConsumerIsDetected(t *testing.T) {
	checkGoroutines(t)
	const interval = 50 * time.Millisecond
	const retries = 3
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	r, s := registerRaw(t, addr, coord, "mute", interval, retries)

	// The consumer reads every request and answers none.
	var mu sync.Mutex
	var seen []int16
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			m, err := r.tryRecv()
			if err != nil {
				return
			}
			if p, ok := m.(*PingRequest); ok {
				mu.Lock()
				seen = append(seen, p.NumRetries)
				mu.Unlock()
			}
		}
	}()

	start := time.Now()
	_, err := s.Ping(context.Background(), 0)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Ping of a mute consumer: %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el < interval-5*time.Millisecond || el > interval+2*time.Second {
		t.Errorf("Ping timed out after %v, want about the ping interval %v", el, interval)
	}
	// ctx may shorten the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_, err = s.Stop(ctx)
	cancel()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Stop with a short ctx: %v, want ErrTimeout", err)
	}
	select {
	case <-s.Done():
		t.Fatal("a timeout closed the session")
	default:
	}

	start = time.Now()
	err = Keepalive(context.Background(), s, func(PingResponse) { t.Error("a mute consumer answered") })
	elapsed := time.Since(start)
	if !errors.Is(err, ErrDead) {
		t.Fatalf("Keepalive: %v, want ErrDead", err)
	}
	if elapsed < retries*interval-5*time.Millisecond || elapsed > (retries+1)*interval+2*time.Second {
		t.Errorf("declared dead after %v, want about %v", elapsed, retries*interval)
	}
	waitDone(t, s, "dead consumer")
	if !errors.Is(s.Err(), ErrDead) {
		t.Errorf("Err = %v, want ErrDead", s.Err())
	}
	<-readerDone // the socket was closed
	mu.Lock()
	defer mu.Unlock()
	// The first Ping, the Stop's request aside, then Keepalive's 0, 1, 2.
	if want := []int16{0, 0, 1, 2}; !slices.Equal(seen, want) {
		t.Errorf("num_retries seen by the consumer: %v, want %v", seen, want)
	}
}

// Reference: docs §8 "Coordinator" 3: responses are matched to the oldest unanswered request,
// so a late answer to a timed-out request is consumed in its place, and requests may be
// pipelined.
func TestSessionPipelinesAndMatchesInOrder(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	r, s := registerRaw(t, addr, coord, "slow", 2*time.Second, 3)

	// A request answered too late (here: after the caller's ctx gave up): the caller gets
	// ErrTimeout, and the answer is consumed in its place when it comes.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err := s.Ping(ctx, 0)
	cancel()
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("unanswered Ping: %v", err)
	}
	if _, ok := r.recv().(*PingRequest); !ok {
		t.Fatal("consumer did not get the PingRequest")
	}
	r.send(&PingResponse{HasOffsets: true, Offsets: []PartitionOffset{{Topic: "t", Partition: 0, Offset: 1}}})
	// The request went out, so its answer may still come: LateError.Wait returns it (a
	// consumer's last offsets, when it hangs up right after).
	var late *LateError
	if !errors.As(err, &late) {
		t.Fatalf("unanswered Ping: %T %v, want a *LateError", err, err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	m, err := late.Wait(wctx)
	wcancel()
	if p, ok := m.(*PingResponse); err != nil || !ok || len(p.Offsets) != 1 || p.Offsets[0].Offset != 1 {
		t.Fatalf("late answer: %v, %v; want the PingResponse at offset 1", m, err)
	}

	// Two requests in flight at once.
	type result struct {
		what string
		err  error
		val  any
	}
	results := make(chan result, 2)
	go func() {
		resp, err := s.Stop(context.Background())
		results <- result{"stop", err, resp}
	}()
	if _, ok := r.recv().(*StopRequest); !ok {
		t.Fatal("consumer did not get the StopRequest")
	}
	go func() {
		resp, err := s.Ping(context.Background(), 0)
		results <- result{"ping", err, resp}
	}()
	if _, ok := r.recv().(*PingRequest); !ok {
		t.Fatal("consumer did not get the second PingRequest")
	}
	r.send(&StopResponse{})
	r.send(&PingResponse{HasOffsets: true, Offsets: []PartitionOffset{{Topic: "t", Partition: 0, Offset: 2}}})
	for range 2 {
		res := <-results
		if res.err != nil {
			t.Fatalf("%s: %v", res.what, res.err)
		}
		if p, ok := res.val.(PingResponse); ok && p.Offsets[0].Offset != 2 {
			t.Errorf("Ping got the late answer of the earlier ping: %+v", p)
		}
	}
}

// Reference: seed 001 / docs §8 "Coordinator" 3: "a consumer that answers with the wrong
// message type is dropped" — and only that consumer.
func TestSessionWrongResponseTypeDropsOnlyThatConsumer(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	good := startClient(t, clientConfig(t, "good", addr))
	goodSess := coord.session(t)
	if goodSess.Register().ConsumerID != "good" {
		t.Fatalf("unexpected session %q", goodSess.Register().ConsumerID)
	}
	_ = good

	bad, badSess := registerRaw(t, addr, coord, "bad", time.Second, 3)
	errc := make(chan error, 1)
	go func() {
		_, err := badSess.Ping(context.Background(), 0)
		errc <- err
	}()
	if _, ok := bad.recv().(*PingRequest); !ok {
		t.Fatal("bad consumer did not get the PingRequest")
	}
	bad.send(&StopResponse{})
	if err := <-errc; !errors.Is(err, ErrProtocol) {
		t.Fatalf("Ping answered with a StopResponse: %v, want ErrProtocol", err)
	}
	waitDone(t, badSess, "consumer that answered with the wrong type")
	bad.expectClosed()

	mustPing(t, goodSess)
	select {
	case <-goodSess.Done():
		t.Fatalf("the other consumer's session closed: %v", goodSess.Err())
	default:
	}
}

// Reference: DESIGN §5 and docs §2 "Size limit": an oversize or garbled frame closes only the
// offending connection, before or after registration.
func TestServerBadFramesCloseOnlyThatConnection(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, func(c *Config) { c.MaxFrameBytes = 4096 })
	startClient(t, clientConfig(t, "good", addr))
	goodSess := coord.session(t)

	oversize := []byte{0x7f, 0xff, 0xff, 0xff, 0x00, 0x64, 0x00, 0x00}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"oversize before registration", oversize},
		{"just over the limit", []byte{0x00, 0x00, 0x10, 0x01}},
		{"unknown type", []byte{0x00, 0x00, 0x00, 0x04, 0x00, 0x03, 0x00, 0x00}},
		{"size below header", []byte{0x00, 0x00, 0x00, 0x02, 0x00, 0x64}},
		{"trailing bytes", []byte{0x00, 0x00, 0x00, 0x05, 0x00, 0x64, 0x00, 0x00, 0xff}},
		{"response before registration", AppendFrame(nil, &PingResponse{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			r.sendBytes(tc.frame)
			r.expectClosed()
		})
	}

	t.Run("oversize after registration", func(t *testing.T) {
		r, s := registerRaw(t, addr, coord, "big", time.Second, 3)
		r.sendBytes(oversize)
		waitDone(t, s, "oversize frame")
		if !errors.Is(s.Err(), ErrFrameTooLarge) || !errors.Is(s.Err(), ErrProtocol) {
			t.Errorf("Err = %v, want ErrProtocol and ErrFrameTooLarge", s.Err())
		}
		r.expectClosed()
	})
	t.Run("request after registration", func(t *testing.T) {
		r, s := registerRaw(t, addr, coord, "asker", time.Second, 3)
		r.send(&PingRequest{})
		waitDone(t, s, "request from a consumer")
		if !errors.Is(s.Err(), ErrProtocol) {
			t.Errorf("Err = %v, want ErrProtocol", s.Err())
		}
	})
	t.Run("unsolicited response", func(t *testing.T) {
		r, s := registerRaw(t, addr, coord, "eager", time.Second, 3)
		r.send(&StopResponse{})
		waitDone(t, s, "unsolicited response")
		if !errors.Is(s.Err(), ErrProtocol) {
			t.Errorf("Err = %v, want ErrProtocol", s.Err())
		}
	})

	mustPing(t, goodSess)
}

// The consumer hanging up closes the session; Err says so.
func TestSessionConsumerHangsUp(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	r, s := registerRaw(t, addr, coord, "c1", time.Second, 3)
	_ = r.nc.Close()
	waitDone(t, s, "consumer hung up")
	if !errors.Is(s.Err(), io.EOF) || !errors.Is(s.Err(), ErrSessionClosed) {
		t.Errorf("Err = %v, want ErrSessionClosed and io.EOF", s.Err())
	}
	if _, err := s.Ping(context.Background(), 0); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Ping on a closed session: %v, want ErrSessionClosed", err)
	}
	if err := Keepalive(context.Background(), s, nil); !errors.Is(err, ErrSessionClosed) {
		t.Errorf("Keepalive on a closed session: %v, want ErrSessionClosed", err)
	}
}

// Serve returns nil once its context ends, after closing every connection: sessions see Done
// with ErrServerClosed, unregistered connections are closed.
func TestServerShutdown(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{Logger: testLogger(t), Coordinator: coord})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Addr() != nil {
		t.Errorf("Addr before Serve = %v", srv.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	addr := ln.Addr().String()

	_, s := registerRaw(t, addr, coord, "c1", time.Second, 3)
	idle := dialRaw(t, addr)
	idle.send(&ConsultRequest{})
	idle.recv()
	if got := srv.Addr(); got == nil || got.String() != addr {
		t.Errorf("Addr = %v, want %v", got, addr)
	}
	if err := srv.Serve(context.Background(), ln); err == nil {
		t.Error("second Serve succeeded")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Serve did not return")
	}
	waitDone(t, s, "server shut down")
	if !errors.Is(s.Err(), ErrServerClosed) {
		t.Errorf("Err = %v, want ErrServerClosed", s.Err())
	}
	idle.expectClosed()
}

func TestNewServerValidates(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Coordinator: newFakeCoord(), MaxFrameBytes: -1},
		{Coordinator: newFakeCoord(), PingIntervalMin: time.Second, PingIntervalMax: time.Millisecond},
		{Coordinator: newFakeCoord(), PingRetriesMax: -1},
	} {
		if _, err := NewServer(cfg); err == nil || !strings.HasPrefix(err.Error(), "legacy:") {
			t.Errorf("NewServer(%+v) = %v, want an error", cfg, err)
		}
	}
}
