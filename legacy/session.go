package legacy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Errors of a Session's requests, for errors.Is.
var (
	// ErrTimeout: no response arrived within the consumer's ping interval (or before the
	// caller's ctx deadline). The coordinator counts it as a missed ping (docs §8
	// "Liveness"); the session stays open and the late response, if any, is read when it
	// comes: a request that went out fails with a *LateError, whose Wait returns it.
	ErrTimeout = errors.New("legacy request timed out")
	// ErrProtocol: the consumer broke the protocol — answered with the wrong message type,
	// sent a response nobody asked for, sent a request after registering, or sent a frame
	// that does not decode. The session is closed ("a consumer that answers with the wrong
	// message type is dropped").
	ErrProtocol = errors.New("legacy protocol violation")
	// ErrSessionClosed: the session's connection is closed; Session.Err says why.
	ErrSessionClosed = errors.New("legacy session closed")
	// ErrDead: the consumer missed max_ping_retries pings in a row (Keepalive).
	ErrDead = errors.New("legacy consumer missed too many pings")
)

// Session is the coordinator's handle on one registered consumer: the connection after its
// RegisterRequest was accepted, which from then on carries requests from the coordinator and
// responses from the consumer (docs §8).
//
// A Session only does IO. It never sends a request by itself — in particular it does not
// schedule pings: when to ping, stop and start is the coordinator's decision (Keepalive is an
// optional helper for the pinging part).
//
// All methods are safe for concurrent use. Requests may be pipelined, as docs §8 allows: each
// request is written at once and responses are matched to requests in the order they were
// sent, so two goroutines may, say, Ping while a Stop is outstanding. The coordinator that
// wants one outstanding request at a time simply calls from one goroutine.
type Session struct {
	reg      RegisterRequest
	nc       net.Conn
	log      zerolog.Logger
	interval time.Duration
	maxFrame int

	// wsem is held while a frame is written, so frames do not interleave and the order of
	// pending is the order on the wire. It is a channel, not a mutex, so that a caller can
	// give up waiting for it when its ctx ends.
	wsem chan struct{}
	wbuf []byte // guarded by wsem

	mu      sync.Mutex
	pending []*call // requests sent and not answered yet, oldest first
	err     error   // why the session closed; nil while open
	broken  error   // why nothing more can be sent (wraps ErrSessionClosed); the reader drains
	done    chan struct{}
}

// call is one request waiting for its response.
type call struct {
	want Type         // the response type that must answer it
	resp chan Message // buffered: the reader never blocks on a caller that gave up
}

func newSession(nc net.Conn, reg RegisterRequest, log zerolog.Logger, maxFrame int) *Session {
	reg.Subscription = slices.Clone(reg.Subscription)
	return &Session{
		reg:      reg,
		nc:       nc,
		log:      log,
		interval: time.Duration(reg.PingIntervalMs) * time.Millisecond,
		maxFrame: maxFrame,
		wsem:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
}

// Register returns the consumer's RegisterRequest (a copy).
func (s *Session) Register() RegisterRequest {
	r := s.reg
	r.Subscription = slices.Clone(r.Subscription)
	return r
}

// PingInterval is the consumer's ping_interval_ms: the time it has to answer any request, and
// the period it expects requests at.
func (s *Session) PingInterval() time.Duration { return s.interval }

// RemoteAddr returns the consumer's address.
func (s *Session) RemoteAddr() net.Addr { return s.nc.RemoteAddr() }

// Done is closed when the session's connection has closed, for whatever reason: the consumer
// hung up, broke the protocol, Close was called, the server shut down. The coordinator then
// removes the member and rebalances its group.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session is open, and then why it closed. The error wraps
// ErrSessionClosed and the cause (io.EOF when the consumer hung up, ErrProtocol, the reason
// given to Close, ErrServerClosed, ...).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close closes the connection with reason (nil: just ErrSessionClosed); requests waiting for a
// response return at once. Closing a closed session does nothing.
func (s *Session) Close(reason error) {
	s.closeWith(reason)
}

func (s *Session) closeWith(cause error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if cause == nil || errors.Is(cause, ErrSessionClosed) {
		s.err = ErrSessionClosed
		if cause != nil {
			s.err = cause
		}
	} else {
		s.err = fmt.Errorf("%w: %w", ErrSessionClosed, cause)
	}
	s.pending = nil
	s.mu.Unlock()
	_ = s.nc.Close()
	close(s.done)
	s.log.Debug().Err(cause).Msg("session closed")
}

// Ping sends a PingRequest with num_retries (0 for a regular ping, n after n consecutive missed
// pings, docs §8 "Liveness") and returns the consumer's PingResponse: its offsets when it
// registered with auto_commit. Errors are those of Stop.
func (s *Session) Ping(ctx context.Context, numRetries int16) (PingResponse, error) {
	m, err := s.roundTrip(ctx, &PingRequest{NumRetries: numRetries})
	if err != nil {
		return PingResponse{}, err
	}
	return *m.(*PingResponse), nil
}

// Stop sends a StopRequest and returns the consumer's StopResponse. The response's ErrorCode is
// the caller's to judge (docs §8 "Coordinator" 5 treats non-NONE as a failed member).
//
// It waits at most the ping interval, less if ctx says so: no answer in time is an error
// wrapping ErrTimeout (the session stays open; the coordinator counts a missed ping). A
// cancelled ctx returns its error. ctx bounds the wait for the response, not the write of the
// request, which may take up to the ping interval if the consumer does not read (and then
// closes the session: a partly written frame cannot be taken back). A response of the wrong type closes the session and returns
// an error wrapping ErrProtocol; a closed session returns an error wrapping ErrSessionClosed.
func (s *Session) Stop(ctx context.Context) (StopResponse, error) {
	m, err := s.roundTrip(ctx, &StopRequest{})
	if err != nil {
		return StopResponse{}, err
	}
	return *m.(*StopResponse), nil
}

// Start sends a StartRequest with the consumer's whole new assignment (offsets may be
// OffsetSmallest or OffsetLargest when nothing is committed) and returns its StartResponse.
// parts that cannot be encoded (a topic over 32767 bytes) are refused before anything is sent.
// Errors are those of Stop.
func (s *Session) Start(ctx context.Context, parts []PartitionOffset) (StartResponse, error) {
	req := &StartRequest{Assigned: parts}
	if err := req.Validate(); err != nil {
		return StartResponse{}, err
	}
	m, err := s.roundTrip(ctx, req)
	if err != nil {
		return StartResponse{}, err
	}
	return *m.(*StartResponse), nil
}

// roundTrip writes req and waits for its response. The reader goroutine matches responses to
// requests in order and checks their types, so a caller that gave up (ErrTimeout) leaves its
// call in the queue: the late response still has to be consumed in its place.
func (s *Session) roundTrip(ctx context.Context, req Message) (Message, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, s.interval, ErrTimeout)
	defer cancel()

	select {
	case s.wsem <- struct{}{}:
	case <-ctx.Done():
		return nil, s.ctxError(ctx, req, "waiting to send")
	case <-s.done:
		return nil, s.closedError(req)
	}
	if ctx.Err() != nil {
		// Nothing was sent: the session is intact and nothing is queued.
		<-s.wsem
		return nil, s.ctxError(ctx, req, "waiting to send")
	}
	c := &call{want: req.Type().Response(), resp: make(chan Message, 1)}
	s.mu.Lock()
	if s.err != nil || s.broken != nil {
		s.mu.Unlock()
		<-s.wsem
		return nil, s.closedError(req)
	}
	// Queued before writing: the response may be read before Write returns.
	s.pending = append(s.pending, c)
	s.mu.Unlock()

	// The write gets its own deadline whatever ctx says: a frame cut short by a deadline would
	// corrupt the stream and cost the session, which a caller's short ctx must not do.
	_ = s.nc.SetWriteDeadline(time.Now().Add(writeDeadline(s.interval)))
	s.wbuf = AppendFrame(s.wbuf[:0], req)
	_, werr := s.nc.Write(s.wbuf)
	<-s.wsem
	if werr != nil {
		// A partial frame may be on the wire: nothing more can be sent.
		s.breakWrites(fmt.Errorf("legacy: sending %v: %w", req.Type(), werr))
		return nil, s.closedError(req)
	}

	select {
	case m := <-c.resp:
		return m, nil
	case <-ctx.Done():
	case <-s.done:
	}
	// An answer read before the hang-up (or just as ctx ended) is still the consumer's answer:
	// a consumer that leaves right after a ping has reported its last offsets in it, which a
	// random pick among the ready cases above would lose.
	select {
	case m := <-c.resp:
		return m, nil
	default:
	}
	if ctx.Err() != nil {
		return nil, &LateError{err: s.ctxError(ctx, req, "waiting for its response"), s: s, c: c}
	}
	return nil, s.closedError(req)
}

// LateError is the error of a request that went out and was not answered in time (it wraps
// ErrTimeout). The answer may still come, in its place on the connection: Wait returns it.
type LateError struct {
	err error
	s   *Session
	c   *call
}

func (e *LateError) Error() string { return e.err.Error() }
func (e *LateError) Unwrap() error { return e.err }

// Wait returns the late answer (a PingResponse to a PingRequest, and so on), or an error when
// the session closed before it came or ctx ended.
func (e *LateError) Wait(ctx context.Context) (Message, error) {
	select {
	case m := <-e.c.resp:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.s.done:
	}
	select { // read before the hang-up
	case m := <-e.c.resp:
		return m, nil
	default:
		return nil, e.s.Err()
	}
}

// minWriteDeadline is the least time a request or an answer gets to be written. A frame of
// either side is small and never fills a healthy peer's socket buffer, so a write that misses a
// deadline of one ping interval (100 ms in tests) most likely started late, its goroutine
// descheduled on a loaded machine: closing the connection then would drop a live consumer, and
// the offsets it has not reported yet. A peer that stops reading is found out by its missed
// pings all the same (the waits for an answer keep the ping interval).
const minWriteDeadline = 5 * time.Second

func writeDeadline(interval time.Duration) time.Duration { return max(interval, minWriteDeadline) }

func (s *Session) ctxError(ctx context.Context, req Message, doing string) error {
	if errors.Is(context.Cause(ctx), ErrTimeout) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("legacy: %v to consumer %q: %w after %s (ping interval %v)",
			req.Type(), s.reg.ConsumerID, ErrTimeout, doing, s.interval)
	}
	return fmt.Errorf("legacy: %v to consumer %q: %w", req.Type(), s.reg.ConsumerID, context.Cause(ctx))
}

func (s *Session) closedError(req Message) error {
	s.mu.Lock()
	err := s.err
	if err == nil {
		err = s.broken
	}
	s.mu.Unlock()
	return fmt.Errorf("legacy: %v to consumer %q: %w", req.Type(), s.reg.ConsumerID, err)
}

// breakWrites ends the session's sending after a failed write, but not its reading: the most
// common cause is a consumer that hung up (a reset) right after answering, and its answers
// may still be unread in the socket buffer, the last offsets of a leaving consumer among them.
// The reader takes them, in their places, for at most one ping interval more, and then closes
// the session with cause.
func (s *Session) breakWrites(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.broken != nil {
		return
	}
	s.broken = fmt.Errorf("%w: %w", ErrSessionClosed, cause)
	_ = s.nc.SetReadDeadline(time.Now().Add(s.interval))
}

// readLoop reads the consumer's frames until the connection closes, handing each response to
// the oldest pending request. It runs on its own goroutine for the session's whole life.
func (s *Session) readLoop() {
	for {
		frame, err := ReadFrame(s.nc, s.maxFrame)
		if err != nil {
			s.mu.Lock()
			broken := s.broken
			s.mu.Unlock()
			switch {
			case broken != nil:
				s.closeWith(broken) // the reset or the deadline is only the failed write's sequel
			case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrMalformed):
				s.closeWith(fmt.Errorf("%w: %w", ErrProtocol, err))
			case errors.Is(err, io.EOF):
				s.closeWith(fmt.Errorf("legacy: consumer %q closed the connection: %w", s.reg.ConsumerID, err))
			default:
				s.closeWith(err)
			}
			return
		}
		m, err := Decode(frame)
		if err != nil {
			// Undecodable, or a version we do not speak: responses get no UNSUPPORTED_VERSION
			// answer (docs §5), the connection closes.
			s.closeWith(fmt.Errorf("%w: %w", ErrProtocol, err))
			return
		}
		if !m.Type().IsResponse() {
			if m.Type() == TypeRegisterRequest {
				s.refuse(CodeIllegalState, fmt.Errorf("%w: second RegisterRequest on one connection", ErrProtocol), s.interval)
			} else {
				s.closeWith(fmt.Errorf("%w: consumer sent a %v after registering", ErrProtocol, m.Type()))
			}
			return
		}
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			s.closeWith(fmt.Errorf("%w: unsolicited %v", ErrProtocol, m.Type()))
			return
		}
		c := s.pending[0]
		s.pending[0] = nil
		s.pending = s.pending[1:]
		s.mu.Unlock()
		if m.Type() != c.want {
			s.closeWith(fmt.Errorf("%w: got %v in answer to %v", ErrProtocol, m.Type(), c.want.Request()))
			return
		}
		c.resp <- m
	}
}

// refuse answers RegisterResponse{code} and closes the session with cause (docs §6
// RegisterResponse: a refusal is followed by closing the connection).
func (s *Session) refuse(code ErrorCode, cause error, timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s.wsem <- struct{}{}:
		_ = s.nc.SetWriteDeadline(time.Now().Add(timeout))
		s.wbuf = AppendFrame(s.wbuf[:0], &RegisterResponse{ErrorCode: code})
		_, _ = s.nc.Write(s.wbuf)
		<-s.wsem
	case <-t.C:
	case <-s.done:
	}
	s.closeWith(fmt.Errorf("legacy: registration refused with %v: %w", code, cause))
}

// Keepalive pings s every ping interval until ctx ends, the session closes, or the consumer
// is dead, and hands every PingResponse to onOffsets (nil: ignored) on Keepalive's goroutine.
// It is the liveness rule of docs §8 in its simplest form, for a coordinator that does not
// schedule pings itself: a ping unanswered within the interval is a miss, the next ping goes
// out at once with num_retries = consecutive misses so far, any response resets the count,
// and at max_ping_retries misses it closes the session with ErrDead and returns an error
// wrapping ErrDead — max_ping_retries × ping interval after the first unanswered ping.
//
// It returns ctx's error when ctx ends and an error wrapping ErrSessionClosed when the session
// closes otherwise. A coordinator that pipelines its own requests (Stop, Start) alongside may
// run Keepalive on a goroutine of its own; one that wants rebalance requests to count as pings
// schedules pings itself instead.
func Keepalive(ctx context.Context, s *Session, onOffsets func(PingResponse)) error {
	maxMissed := max(int(s.reg.MaxPingRetries), 1)
	missed := 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.Done():
			return fmt.Errorf("legacy: keepalive of consumer %q: %w", s.reg.ConsumerID, s.Err())
		}
		sent := time.Now()
		resp, err := s.Ping(ctx, int16(missed))
		switch {
		case err == nil:
			missed = 0
			if onOffsets != nil {
				onOffsets(resp)
			}
		case errors.Is(err, ErrTimeout) && ctx.Err() == nil:
			missed++
			if missed >= maxMissed {
				dead := fmt.Errorf("legacy: consumer %q: %w (%d in a row, ping interval %v)",
					s.reg.ConsumerID, ErrDead, missed, s.interval)
				s.Close(dead)
				return dead
			}
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return err
		}
		// The next ping is due one interval after this one was sent: at once after a miss.
		t.Reset(time.Until(sent.Add(s.interval)))
	}
}
