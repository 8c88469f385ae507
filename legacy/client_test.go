package legacy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Reference: seed 001 consumerStartup and docs §8 "Who sends what, when": consult, register,
// then the coordinator drives Stop → Ping (final offsets) → Start → Ping, and the client's
// handler sees the assignment.
func TestClientLifecycle(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	rec := newRecorder()
	cfg := clientConfig(t, "c1", addr)
	cfg.Handler = rec
	c := startClient(t, cfg)
	s := coord.session(t)
	ctx := context.Background()

	if got, want := s.Register(), (RegisterRequest{
		GroupID: "g", ConsumerID: "c1", AutoCommit: true, AutoOffsetReset: ResetSmallest,
		PingIntervalMs: 1000, MaxPingRetries: 2, Subscription: []TopicThreads{{Topic: "t", Threads: 2}},
	}); !reflect.DeepEqual(got, want) {
		t.Fatalf("registration %+v, want %+v", got, want)
	}
	if n := coord.consults.Load(); n != 1 {
		t.Errorf("%d consults, want 1", n)
	}

	// A new member: rebalance. It has nothing to stop yet ("If fetcherStopped is true then do
	// nothing"), and owns nothing.
	if resp, err := s.Stop(ctx); err != nil || resp.ErrorCode != CodeNone {
		t.Fatalf("Stop: %+v, %v", resp, err)
	}
	rec.none(t)
	if resp := mustPing(t, s); !resp.HasOffsets || len(resp.Offsets) != 0 {
		t.Fatalf("Ping before any Start: %+v, want auto_commit form with no partition", resp)
	}

	parts := []PartitionOffset{{Topic: "t", Partition: 0, Offset: 42}, {Topic: "t", Partition: 1, Offset: OffsetSmallest}}
	if resp, err := s.Start(ctx, parts); err != nil || resp.ErrorCode != CodeNone {
		t.Fatalf("Start: %+v, %v", resp, err)
	}
	if e := rec.next(t); e.stop || !slices.Equal(e.parts, parts) {
		t.Fatalf("handler got %+v, want OnStart(%s)", e, fmtParts(parts))
	}
	// t-0 is known from the Start; t-1 only once the application commits it.
	if resp := mustPing(t, s); !slices.Equal(resp.Offsets, parts[:1]) {
		t.Fatalf("Ping after Start: %s", fmtParts(resp.Offsets))
	}
	c.Commit(TopicPartition{"t", 0}, 50)
	c.Commit(TopicPartition{"t", 1}, 7)
	c.Commit(TopicPartition{"t", 9}, 1) // not ours: ignored
	wantOffsets := []PartitionOffset{{Topic: "t", Partition: 0, Offset: 50}, {Topic: "t", Partition: 1, Offset: 7}}
	if resp := mustPing(t, s); !slices.Equal(resp.Offsets, wantOffsets) {
		t.Fatalf("Ping after Commit: %s, want %s", fmtParts(resp.Offsets), fmtParts(wantOffsets))
	}

	// Rebalance: Stop stops the fetchers once; the partitions are still reported (final
	// offsets, docs §8 "Coordinator" 2) until the next Start replaces them.
	for range 2 {
		if resp, err := s.Stop(ctx); err != nil || resp.ErrorCode != CodeNone {
			t.Fatalf("Stop: %+v, %v", resp, err)
		}
	}
	if e := rec.next(t); !e.stop {
		t.Fatalf("handler got %+v, want OnStop", e)
	}
	rec.none(t)
	if resp := mustPing(t, s); !slices.Equal(resp.Offsets, wantOffsets) {
		t.Fatalf("Ping after Stop: %s, want the final offsets %s", fmtParts(resp.Offsets), fmtParts(wantOffsets))
	}

	parts2 := []PartitionOffset{{Topic: "t", Partition: 1, Offset: 7}}
	if resp, err := s.Start(ctx, parts2); err != nil || resp.ErrorCode != CodeNone {
		t.Fatalf("Start: %+v, %v", resp, err)
	}
	if e := rec.next(t); !slices.Equal(e.parts, parts2) {
		t.Fatalf("handler got %+v, want OnStart(%s)", e, fmtParts(parts2))
	}
	c.Commit(TopicPartition{"t", 0}, 99) // revoked: a late commit must not be reported
	if resp := mustPing(t, s); !slices.Equal(resp.Offsets, parts2) {
		t.Fatalf("Ping after the second Start: %s, want %s", fmtParts(resp.Offsets), fmtParts(parts2))
	}

	// Keepalive hands the offsets over.
	kctx, cancel := context.WithCancel(ctx)
	got := make(chan PingResponse, 1)
	kerr := make(chan error, 1)
	go func() {
		kerr <- Keepalive(kctx, s, func(p PingResponse) {
			select {
			case got <- p:
			default:
			}
		})
	}()
	select {
	case p := <-got:
		if !slices.Equal(p.Offsets, parts2) {
			t.Errorf("Keepalive reported %s", fmtParts(p.Offsets))
		}
	case <-time.After(waitLong):
		t.Fatal("Keepalive reported nothing")
	}
	cancel()
	if err := <-kerr; !errors.Is(err, context.Canceled) {
		t.Errorf("Keepalive after cancel: %v", err)
	}

	// Run's end stops the fetchers.
	c.cancel()
	if err := c.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if e := rec.next(t); !e.stop {
		t.Fatalf("handler got %+v at Run's end, want OnStop", e)
	}
	waitDone(t, s, "client stopped")
}

// Reference: docs §8 "Consumer" 2 and seed 001 "On Consumer Failover": when the connection
// closes the consumer stops its fetchers, then consults and registers again.
func TestClientResumesAfterCoordinatorClosesSocket(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	rec := newRecorder()
	cfg := clientConfig(t, "c1", addr)
	cfg.Handler = rec
	cfg.AutoCommit = false
	startClient(t, cfg)
	ctx := context.Background()

	s1 := coord.session(t)
	if _, err := s1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	parts := []PartitionOffset{{Topic: "t", Partition: 0, Offset: 3}}
	if _, err := s1.Start(ctx, parts); err != nil {
		t.Fatal(err)
	}
	rec.next(t)
	if resp := mustPing(t, s1); resp.HasOffsets || len(resp.Offsets) != 0 {
		t.Fatalf("Ping without auto_commit: %+v, want an empty body", resp)
	}

	s1.Close(errors.New("coordinator moved"))
	if e := rec.next(t); !e.stop {
		t.Fatalf("handler got %+v after the connection closed, want OnStop", e)
	}
	s2 := coord.session(t)
	if s2.Register().ConsumerID != "c1" {
		t.Fatalf("re-registered as %q", s2.Register().ConsumerID)
	}
	if n := coord.consults.Load(); n != 2 {
		t.Errorf("%d consults, want 2 (the client consults again before re-registering)", n)
	}
	mustPing(t, s2)
}

// Reference: docs §8 "Consumer" 2: no request for (max_ping_retries + 1) × ping_interval means
// the coordinator failed.
func TestClientRediscoversSilentCoordinator(t *testing.T) {
	checkGoroutines(t)
	const interval = 50 * time.Millisecond
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	cfg := clientConfig(t, "c1", addr)
	cfg.PingInterval = interval
	cfg.MaxPingRetries = 1
	startClient(t, cfg)

	s1 := coord.session(t)
	start := time.Now()
	s2 := coord.session(t)
	elapsed := time.Since(start)
	// The lower bound is loose: the client's silence clock starts when it sends its
	// RegisterRequest, a little before the test sees the session.
	if elapsed < interval || elapsed > 2*interval+3*time.Second {
		t.Errorf("re-registered %v after registering; want about (1+1) × %v", elapsed, interval)
	}
	waitDone(t, s1, "abandoned session")
	if s2.Register().ConsumerID != "c1" {
		t.Fatalf("re-registered as %q", s2.Register().ConsumerID)
	}
}

// Reference: seed 001 consumerStartup step 1.2: AllKnownBrokersNotAvailable. Both brokers are
// tried (in an order picked by the injected Rand).
func TestClientAllBrokersUnavailable(t *testing.T) {
	checkGoroutines(t)
	addrs := closedAddrs(t, 2)
	cfg := clientConfig(t, "c1", addrs...)
	var mu sync.Mutex
	var dialed []string
	cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	c := startClient(t, cfg)
	err := c.wait(t)
	if !errors.Is(err, ErrAllBrokersUnavailable) {
		t.Fatalf("Run: %v, want ErrAllBrokersUnavailable", err)
	}
	if !strings.Contains(err.Error(), "all known brokers unavailable") {
		t.Errorf("error text %q", err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(dialed)
	want := slices.Clone(addrs)
	slices.Sort(want)
	if !slices.Equal(dialed, want) {
		t.Errorf("dialed %v, want each of %v once", dialed, want)
	}
}

// Reference: docs §8 "Consumer" 3: GROUP_MODE_REFUSED stops the consumer with a clear error.
func TestClientRegisterRefusedGroupMode(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	coord.setRefuse(func(*Session) error { return CodeGroupModeRefused.Err() })
	addr := startServer(t, coord, nil)
	rec := newRecorder()
	cfg := clientConfig(t, "c1", addr)
	cfg.Handler = rec
	c := startClient(t, cfg)
	err := c.wait(t)
	if !errors.Is(err, CodeGroupModeRefused.Err()) {
		t.Fatalf("Run: %v, want GROUP_MODE_REFUSED", err)
	}
	var refused *RegisterRefusedError
	if !errors.As(err, &refused) || !refused.Permanent() {
		t.Fatalf("Run: %v, want a permanent *RegisterRefusedError", err)
	}
	for _, want := range []string{"GROUP_MODE_REFUSED", "kafka", "zkbridge rollback", `"c1"`, `"g"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if n := coord.registers.Load(); n != 1 {
		t.Errorf("registered %d times, want 1 (no retry)", n)
	}
	rec.none(t)
}

// Reference: docs §8 "Consumer" 3: NOT_COORDINATOR and CONSUMER_ID_IN_USE are retried after a
// backoff, consulting again.
func TestClientRetriesTransientRefusals(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	var mu sync.Mutex
	codes := []ErrorCode{CodeNotCoordinator, CodeConsumerIDInUse}
	coord.setRefuse(func(*Session) error {
		mu.Lock()
		defer mu.Unlock()
		if len(codes) == 0 {
			return nil
		}
		code := codes[0]
		codes = codes[1:]
		return code.Err()
	})
	addr := startServer(t, coord, nil)
	startClient(t, clientConfig(t, "c1", addr))
	s := coord.session(t)
	mustPing(t, s)
	if n := coord.registers.Load(); n != 3 {
		t.Errorf("registered %d times, want 3", n)
	}
	if n := coord.consults.Load(); n != 3 {
		t.Errorf("consulted %d times, want 3", n)
	}
}

// Reference: docs §8 diagram: the consumer connects to brokers_info[coordinator_id], which need
// not be the broker it consulted.
func TestClientConnectsToNamedCoordinator(t *testing.T) {
	checkGoroutines(t)
	front, back := newFakeCoord(), newFakeCoord()
	frontAddr := startServer(t, front, nil)
	backAddr := startServer(t, back, nil)
	resp := ConsultResponse{CoordinatorID: 2, Brokers: []Broker{brokerAt(t, "front", 1, frontAddr), brokerAt(t, "back", 2, backAddr)}}
	front.setConsult(resp)
	back.setConsult(resp)
	startClient(t, clientConfig(t, "c1", frontAddr))
	s := back.session(t)
	mustPing(t, s)
	if n := front.consults.Load(); n != 1 {
		t.Errorf("front consulted %d times, want 1", n)
	}
	if n := front.registers.Load(); n != 0 {
		t.Errorf("front got %d registrations, want 0", n)
	}
}

// A hand-driven coordinator checks the client's answers frame by frame: the consult connection
// is reused when the consulted broker coordinates; requests are answered in order even when
// pipelined; Stop/Start of an unknown version get UNSUPPORTED_VERSION (docs §5); a Start with an
// invalid offset is INVALID_REQUEST and a Start without a Stop is ILLEGAL_STATE (docs §6
// StartRequest).
func TestClientAnswersRawCoordinator(t *testing.T) {
	checkGoroutines(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	rec := newRecorder()
	cfg := clientConfig(t, "c1", ln.Addr().String())
	cfg.Handler = rec
	c := startClient(t, cfg)

	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(waitLong))
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	r := &rawConn{t: t, nc: nc}
	if _, ok := r.recv().(*ConsultRequest); !ok {
		t.Fatal("want ConsultRequest")
	}
	r.send(&ConsultResponse{CoordinatorID: 7, Brokers: []Broker{brokerAt(t, "me", 7, ln.Addr().String())}})
	reg, ok := r.recv().(*RegisterRequest)
	if !ok || reg.ConsumerID != "c1" {
		t.Fatalf("want RegisterRequest on the consult connection, got %+v", reg)
	}

	parts := []PartitionOffset{{Topic: "t", Partition: 3, Offset: 10}}
	// All requests at once; the answers must come in the same order.
	var batch []byte
	batch = AppendFrame(batch, &PingRequest{})
	stopV1 := AppendFrame(nil, &StopRequest{})
	stopV1[7] = 1
	batch = append(batch, stopV1...)
	batch = AppendFrame(batch, &StartRequest{Assigned: []PartitionOffset{{Topic: "t", Partition: 0, Offset: -3}}})
	batch = AppendFrame(batch, &StartRequest{Assigned: parts})
	batch = AppendFrame(batch, &StartRequest{Assigned: parts})
	batch = AppendFrame(batch, &StopRequest{})
	batch = AppendFrame(batch, &PingRequest{NumRetries: 1})
	r.sendBytes(batch)

	want := []Message{
		&PingResponse{HasOffsets: true},
		&StopResponse{ErrorCode: CodeUnsupportedVersion},
		&StartResponse{ErrorCode: CodeInvalidRequest},
		&StartResponse{ErrorCode: CodeNone},
		&StartResponse{ErrorCode: CodeIllegalState},
		&StopResponse{ErrorCode: CodeNone},
		&PingResponse{HasOffsets: true, Offsets: parts},
	}
	for i, w := range want {
		if got := r.recv(); !reflect.DeepEqual(got, w) {
			t.Fatalf("answer %d: got %T %+v, want %T %+v", i, got, got, w, w)
		}
	}
	if e := rec.next(t); !slices.Equal(e.parts, parts) {
		t.Fatalf("handler got %+v, want OnStart", e)
	}
	if e := rec.next(t); !e.stop {
		t.Fatalf("handler got %+v, want OnStop", e)
	}

	// A request the client cannot decode ends the connection; it comes back to consult.
	r.sendBytes([]byte{0, 0, 0, 4, 0x12, 0x34, 0, 0})
	r.expectClosed()
	nc2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc2.Close() })
	r2 := &rawConn{t: t, nc: nc2}
	if _, ok := r2.recv().(*ConsultRequest); !ok {
		t.Fatal("want a new ConsultRequest")
	}
	c.cancel()
	if err := c.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestNewClientValidates(t *testing.T) {
	base := func() ClientConfig {
		return ClientConfig{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", ConsumerID: "c", Subscription: map[string]int{"t": 1}}
	}
	for _, tc := range []struct {
		name string
		mod  func(*ClientConfig)
	}{
		{"no brokers", func(c *ClientConfig) { c.Brokers = nil }},
		{"broker without port", func(c *ClientConfig) { c.Brokers = []string{"localhost"} }},
		{"no group", func(c *ClientConfig) { c.GroupID = "" }},
		{"no subscription", func(c *ClientConfig) { c.Subscription = nil }},
		{"zero threads", func(c *ClientConfig) { c.Subscription = map[string]int{"t": 0} }},
		{"bad reset", func(c *ClientConfig) { c.AutoOffsetReset = "earliest" }},
		{"sub-millisecond ping", func(c *ClientConfig) { c.PingInterval = time.Microsecond }},
		{"negative retries", func(c *ClientConfig) { c.MaxPingRetries = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mod(&cfg)
			if _, err := NewClient(cfg); err == nil {
				t.Fatal("NewClient accepted an invalid configuration")
			}
		})
	}

	// Defaults, and a 0.8-style consumer id made up from the injected Rand.
	cfg := base()
	cfg.ConsumerID = ""
	cfg.Rand = rand.New(rand.NewPCG(3, 4))
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if id := c.ConsumerID(); !strings.HasPrefix(id, "g_") || len(id) < len("g_h-1-12345678") {
		t.Errorf("made-up consumer id %q", id)
	}
	if c.reg.AutoOffsetReset != ResetLargest || c.reg.PingIntervalMs != int32(DefaultPingInterval.Milliseconds()) || c.reg.MaxPingRetries != DefaultMaxPingRetries {
		t.Errorf("defaults: %+v", c.reg)
	}
}

func TestClientBackoffIsBoundedAndJittered(t *testing.T) {
	c, err := NewClient(ClientConfig{
		Brokers: []string{"127.0.0.1:1"}, GroupID: "g", ConsumerID: "c", Subscription: map[string]int{"t": 1},
		BackoffMin: 10 * time.Millisecond, BackoffMax: time.Second, Rand: rand.New(rand.NewPCG(5, 6)),
	})
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[time.Duration]bool{}
	for attempt := range 100 {
		d := c.backoff(attempt)
		ceil := 10 * time.Millisecond
		for i := 0; i < attempt && ceil < time.Second; i++ {
			ceil *= 2
		}
		ceil = min(ceil, time.Second)
		if d < ceil/2 || d > ceil {
			t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, ceil/2, ceil)
		}
		distinct[d] = true
	}
	if len(distinct) < 10 {
		t.Errorf("backoff barely jittered: %d distinct values", len(distinct))
	}
}
