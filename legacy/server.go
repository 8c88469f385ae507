package legacy

// The coordinator side of the legacy protocol's connections (docs/legacy-protocol.md §8
// "Connection phases"): a Server accepts connections, answers ConsultRequests, validates a
// RegisterRequest and hands the registered connection to the Coordinator as a Session. Every
// decision (who coordinates, whether a group accepts the consumer, when to ping, when to
// rebalance) belongs to the Coordinator; this file only does IO.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/connlimit"
)

// Defaults for the zero values of Config.
const (
	// DefaultIdleTimeout closes a connection that sends nothing for this long before it
	// registers. A consumer consults and registers within a few round trips; a connection
	// that lingers unregistered is a leak on the consumer's side or a port scanner.
	DefaultIdleTimeout = time.Minute
	// DefaultWriteTimeout bounds writing a ConsultResponse or a refusal to a consumer that
	// does not read.
	DefaultWriteTimeout = 10 * time.Second
)

// ErrServerClosed is the reason sessions are closed with when Serve's context ends.
var ErrServerClosed = errors.New("legacy server closed")

// Coordinator is what a Server needs from the bridge: the answer to a ConsultRequest and a
// home for registered consumers. It is declared here, by its user, so that package legacy
// does not import the bridge (DESIGN §2).
type Coordinator interface {
	// Consult answers a ConsultRequest: the bridges serving the legacy port and the id of the
	// one that coordinates (docs §6 ConsultResponse). It is called on the connection's
	// goroutine, once per ConsultRequest, and should not block: the consumer waits.
	Consult(ctx context.Context) ConsultResponse

	// Register is handed every RegisterRequest that passed validation, as a Session whose
	// reader is already running, so Register may send requests before it returns.
	//
	// Returning nil accepts the consumer: the coordinator now owns the session and must send
	// it a request within the ping interval and close it when it is done with it (docs §8
	// "Coordinator"). Returning an error refuses it: the consumer is sent RegisterResponse
	// with the error's code — the ErrorCode of a CodeError found with errors.As
	// (CodeGroupModeRefused.Err(), CodeConsumerIDInUse.Err(), ...), CodeUnknown for any other
	// error — and the connection is closed; the session must then not be kept.
	//
	// ctx ends when the server shuts down; it must not be stored.
	Register(ctx context.Context, s *Session) error
}

// GroupConsulter is a Coordinator that can name each group's own coordinator: several bridges
// serving one ZooKeeper root place every group on one of them. A ConsultRequest of version
// ConsultVersionGroup (it names the group) goes to ConsultGroup when the Coordinator has it,
// to Consult otherwise.
type GroupConsulter interface {
	// ConsultGroup answers a ConsultRequest naming group, as Consult does.
	ConsultGroup(ctx context.Context, group string) ConsultResponse
}

// Forwarder is a Coordinator of one of several bridges that passes a version 0 consumer on to
// its group's coordinator. Such a consumer cannot name its group when it consults (docs §5), so
// it is told the bridge it asked and registers there; when another bridge coordinates the
// group, the Server relays the connection to that bridge instead of refusing it
// NOT_COORDINATOR, which the consumer could only answer by consulting a bridge at random
// (seed 001 "consumerStartup" step 1) until it happened upon the coordinator.
type Forwarder interface {
	// ForwardTo names the bridge that coordinates group, by id and legacy listener address,
	// when that is another bridge; ok is false when the consumer should register here.
	ForwardTo(ctx context.Context, group string) (id int32, addr string, ok bool)
}

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Logger receives connection and protocol events.
	Logger zerolog.Logger
	// MaxFrameBytes is the largest frame read from a consumer (DefaultMaxFrame). Consumers
	// send small frames only (their largest is a PingResponse with their offsets), so the
	// default fits all but consumers of tens of thousands of partitions.
	MaxFrameBytes int
	// Coordinator answers consults and takes registered sessions. Required.
	Coordinator Coordinator

	// IdleTimeout closes a connection that has not registered and sends no frame for this
	// long (DefaultIdleTimeout; negative: never). After registration liveness is the
	// coordinator's business (pings), so no read deadline applies.
	IdleTimeout time.Duration
	// WriteTimeout bounds each write of a ConsultResponse or RegisterResponse
	// (DefaultWriteTimeout). Requests sent through a Session are bounded by the consumer's
	// ping interval instead.
	WriteTimeout time.Duration

	// PingIntervalMin and PingIntervalMax bound the ping_interval_ms a consumer may register
	// with; outside them it is refused with INVALID_PING_SETTINGS (docs §6 RegisterRequest).
	// Zero: no bound besides ping_interval_ms > 0.
	PingIntervalMin, PingIntervalMax time.Duration
	// MaxConnections and MaxConnectionsPerIP bound the open connections, in all and from one
	// client address (0 or negative: no limit); one more is closed at once, as Kafka's
	// max.connections and max.connections.per.ip do.
	MaxConnections, MaxConnectionsPerIP int

	// PingRetriesMax bounds the max_ping_retries a consumer may register with (zero: no bound
	// besides max_ping_retries >= 1). It caps how long a dead consumer can hold partitions:
	// about PingRetriesMax × the ping interval.
	PingRetriesMax int16
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Coordinator == nil:
		return errors.New("legacy: Config.Coordinator is required")
	case c.MaxFrameBytes < 0:
		return fmt.Errorf("legacy: MaxFrameBytes %d is negative", c.MaxFrameBytes)
	case c.WriteTimeout < 0:
		return fmt.Errorf("legacy: WriteTimeout %v is negative", c.WriteTimeout)
	case c.PingIntervalMin < 0 || c.PingIntervalMax < 0:
		return fmt.Errorf("legacy: ping interval bounds %v..%v are negative", c.PingIntervalMin, c.PingIntervalMax)
	case c.PingIntervalMax != 0 && c.PingIntervalMax < c.PingIntervalMin:
		return fmt.Errorf("legacy: PingIntervalMax %v is below PingIntervalMin %v", c.PingIntervalMax, c.PingIntervalMin)
	case c.PingRetriesMax < 0:
		return fmt.Errorf("legacy: PingRetriesMax %d is negative", c.PingRetriesMax)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = DefaultMaxFrame
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	return c
}

// Server serves the legacy protocol on one listener. Create it with NewServer and run it with
// Serve.
type Server struct {
	cfg   Config
	log   zerolog.Logger
	coord Coordinator

	mu      sync.Mutex
	ln      net.Listener // set by Serve; Serve may run once
	closing bool
	conns   map[*serverConn]struct{}
	nextID  uint64
	wg      sync.WaitGroup // every goroutine the server started, except Serve's own

	warns  warnLimiter      // warnlimit.go
	limits connlimit.Limits // open connections, in total and by client address (warnlimit.go)
}

// NewServer checks cfg and builds a Server; it does not listen.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Server{
		cfg:    cfg,
		log:    cfg.Logger.With().Str("component", "legacy").Logger(),
		coord:  cfg.Coordinator,
		conns:  map[*serverConn]struct{}{},
		limits: connlimit.Limits{Max: cfg.MaxConnections, PerIP: cfg.MaxConnectionsPerIP},
	}, nil
}

// Addr returns the address of the listener being served, or nil before Serve.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Serve accepts connections on ln until ctx is done, then closes ln and every connection
// (sessions with ErrServerClosed, so their coordinator sees Done) and returns once every
// goroutine it started has exited. It returns nil when ctx ended it and the accept error
// otherwise. A Server serves one listener: a second call returns an error.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.ln != nil || s.closing {
		s.mu.Unlock()
		return errors.New("legacy: Server.Serve called twice")
	}
	s.ln = ln
	s.mu.Unlock()
	s.log.Info().Stringer("addr", ln.Addr()).Msg("serving legacy protocol")

	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	err := s.accept(ctx, ln)
	stop()
	_ = ln.Close()

	s.mu.Lock()
	s.closing = true
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.shutdown()
	}
	s.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (s *Server) accept(ctx context.Context, ln net.Listener) error {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !temporaryAcceptError(err) {
				return fmt.Errorf("legacy: accepting on %s: %w", ln.Addr(), err)
			}
			// Out of file descriptors and the like: wait, as net/http does, instead of
			// spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn().Err(err).Dur("retry_in", backoff).Msg("accept failed")
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			continue
		}
		backoff = 0
		s.startConn(ctx, nc)
	}
}

func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EMFILE) ||
		errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

func (s *Server) startConn(ctx context.Context, nc net.Conn) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	if !s.admit(nc.RemoteAddr()) { // warnlimit.go
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.nextID++
	c := &serverConn{
		srv: s,
		nc:  nc,
		log: s.log.With().Uint64("conn", s.nextID).Str("remote", nc.RemoteAddr().String()).Logger(),
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		if !c.serve(ctx) {
			s.forget(c)
		}
	}()
}

func (s *Server) forget(c *serverConn) {
	s.mu.Lock()
	if _, ok := s.conns[c]; ok {
		s.release(c.nc.RemoteAddr())
	}
	delete(s.conns, c)
	s.mu.Unlock()
}

// serverConn is one accepted connection. Its goroutine runs the phase before registration
// (docs §8 "Connection phases"); after a valid RegisterRequest the connection belongs to a
// Session, whose reader goroutine takes over.
type serverConn struct {
	srv *Server
	nc  net.Conn
	log zerolog.Logger
	buf []byte // write buffer of the pre-registration phase

	// consultedV0 says the connection's last ConsultRequest was of version 0 (no group): a
	// RegisterRequest on it may be relayed (Forwarder).
	consultedV0 bool

	mu      sync.Mutex
	session *Session // set once registered
}

// shutdown closes the connection, through its session if it has one so that the session's
// Err says why.
func (c *serverConn) shutdown() {
	c.mu.Lock()
	sess := c.session
	c.mu.Unlock()
	if sess != nil {
		sess.Close(ErrServerClosed)
	}
	_ = c.nc.Close()
}

// serve runs the connection until it registers or fails. It reports whether a Session took
// the connection over (and with it the duty to forget c when it ends).
func (c *serverConn) serve(ctx context.Context) (handedOver bool) {
	for {
		if c.srv.cfg.IdleTimeout > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.IdleTimeout))
		}
		frame, err := ReadFrame(c.nc, c.srv.cfg.MaxFrameBytes)
		if err != nil {
			c.logReadError(err)
			_ = c.nc.Close()
			return false
		}
		m, err := Decode(frame)
		if err != nil {
			if c.rejectUndecodable(err) {
				continue
			}
			return false
		}
		switch m := m.(type) {
		case *ConsultRequest:
			c.consultedV0 = m.GroupID == ""
			var resp ConsultResponse
			if gc, ok := c.srv.coord.(GroupConsulter); ok && m.GroupID != "" {
				resp = gc.ConsultGroup(ctx, m.GroupID)
			} else {
				resp = c.srv.coord.Consult(ctx)
			}
			if err := resp.Validate(); err != nil {
				// A coordinator bug: answer something the consumer can act on (consult
				// again later) rather than a frame it would reject.
				c.log.Error().Err(err).Msg("coordinator's ConsultResponse cannot be encoded")
				resp = ConsultResponse{ErrorCode: CodeCoordinatorNotAvailable, CoordinatorID: -1}
			}
			if err := c.write(&resp); err != nil {
				c.log.Debug().Err(err).Msg("writing ConsultResponse failed")
				_ = c.nc.Close()
				return false
			}
		case *RegisterRequest:
			return c.register(ctx, m)
		default:
			// Before registering, a consumer sends only Consult and Register requests;
			// anything else means it is not speaking this protocol (or is confused about
			// the connection's phase). Closing is all we can do: there is no response
			// type to report it with.
			c.warn().Stringer("type", m.Type()).Msg("unexpected message before registration; closing")
			_ = c.nc.Close()
			return false
		}
	}
}

func (c *serverConn) logReadError(err error) {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Debug().Msg("connection closed before registration")
	default:
		c.warn().Err(err).Msg("reading frame failed; closing")
	}
}

// rejectUndecodable handles a frame Decode refused and reports whether the connection stays
// open. An unsupported version of a request whose response has an error code is answered with
// UNSUPPORTED_VERSION (docs §5): a ConsultRequest's sender may then fall back to version 0 on
// the same connection, a RegisterRequest's connection is closed. Anything else closes the
// connection without an answer (docs §2 "Exactness": we cannot know what the bytes were).
func (c *serverConn) rejectUndecodable(err error) (keepOpen bool) {
	var de *DecodeError
	if errors.Is(err, ErrUnsupportedVersion) && errors.As(err, &de) {
		switch de.Type {
		case TypeConsultRequest:
			c.log.Info().Int16("version", de.Version).Msg("ConsultRequest of an unsupported version")
			if werr := c.write(&ConsultResponse{ErrorCode: CodeUnsupportedVersion, CoordinatorID: -1}); werr == nil {
				return true
			}
		case TypeRegisterRequest:
			c.log.Info().Int16("version", de.Version).Msg("RegisterRequest of an unsupported version; refusing")
			_ = c.write(&RegisterResponse{ErrorCode: CodeUnsupportedVersion})
		}
	}
	c.warn().Err(err).Msg("undecodable frame; closing")
	_ = c.nc.Close()
	return false
}

func (c *serverConn) write(m Message) error {
	c.buf = AppendFrame(c.buf[:0], m)
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.WriteTimeout))
	_, err := c.nc.Write(c.buf)
	return err
}

// register validates m and hands the connection to the coordinator as a Session.
func (c *serverConn) register(ctx context.Context, m *RegisterRequest) (handedOver bool) {
	log := c.log.With().Str("group", m.GroupID).Str("consumer", m.ConsumerID).Logger()
	if code, err := c.srv.validateRegister(m); err != nil {
		c.warn().Str("group", m.GroupID).Str("consumer", m.ConsumerID).Err(err).Stringer("code", code).Msg("refusing invalid RegisterRequest")
		_ = c.write(&RegisterResponse{ErrorCode: code})
		_ = c.nc.Close()
		return false
	}
	if f, ok := c.srv.coord.(Forwarder); ok && c.consultedV0 {
		if id, addr, ok := f.ForwardTo(ctx, m.GroupID); ok {
			c.relay(ctx, m, id, addr, log)
			return false
		}
	}
	// From now on liveness is the coordinator's (pings); a quiet consumer is normal.
	_ = c.nc.SetReadDeadline(time.Time{})
	sess := newSession(c.nc, *m, log, c.srv.cfg.MaxFrameBytes)

	c.mu.Lock()
	c.session = sess
	c.mu.Unlock()
	c.srv.mu.Lock()
	closing := c.srv.closing
	c.srv.wg.Add(1)
	c.srv.mu.Unlock()
	if closing {
		// Serve's shutdown may have looked at c before the session was set.
		sess.Close(ErrServerClosed)
	}
	go func() {
		defer c.srv.wg.Done()
		sess.readLoop()
		c.srv.forget(c)
	}()

	if err := c.srv.coord.Register(ctx, sess); err != nil {
		code := CodeUnknown
		if ce := (CodeError{}); errors.As(err, &ce) && ce.Code != CodeNone {
			code = ce.Code
		}
		log.Info().Err(err).Stringer("code", code).Msg("registration refused")
		sess.refuse(code, err, c.srv.cfg.WriteTimeout)
		return true
	}
	log.Info().Int32("ping_interval_ms", m.PingIntervalMs).Int16("max_ping_retries", m.MaxPingRetries).
		Msg("consumer registered")
	return true
}

// validateRegister checks what the codec cannot (docs §6 RegisterRequest) against the
// server's bounds.
func (s *Server) validateRegister(m *RegisterRequest) (ErrorCode, error) {
	return validateRegister(m, s.cfg.PingIntervalMin, s.cfg.PingIntervalMax, s.cfg.PingRetriesMax)
}

// validateRegister checks a RegisterRequest's values (docs §6 RegisterRequest): names that can
// be znode names (the bridge writes /consumers/<group>/ids/<consumer> and
// /consumers/<group>/owners/<topic>/...), a known auto_offset_reset, a non-empty subscription
// of distinct topics with threads >= 1 (INVALID_REQUEST), and ping settings within the bounds
// (INVALID_PING_SETTINGS; zero bounds mean none). The client runs the same check on its
// configuration so that a mistake is reported before any connection is made.
func validateRegister(m *RegisterRequest, minInterval, maxInterval time.Duration, maxRetries int16) (ErrorCode, error) {
	if err := checkZnodeName("group_id", m.GroupID); err != nil {
		return CodeInvalidRequest, err
	}
	if err := checkZnodeName("consumer_id", m.ConsumerID); err != nil {
		return CodeInvalidRequest, err
	}
	if _, ok := ResetOffset(m.AutoOffsetReset); !ok {
		return CodeInvalidRequest, fmt.Errorf("legacy: auto_offset_reset %q is neither %q nor %q", m.AutoOffsetReset, ResetSmallest, ResetLargest)
	}
	if len(m.Subscription) == 0 {
		return CodeInvalidRequest, errors.New("legacy: subscription is empty")
	}
	seen := make(map[string]bool, len(m.Subscription))
	for i, s := range m.Subscription {
		if err := checkZnodeName(fmt.Sprintf("subscription[%d].topic", i), s.Topic); err != nil {
			return CodeInvalidRequest, err
		}
		if seen[s.Topic] {
			return CodeInvalidRequest, fmt.Errorf("legacy: subscription lists topic %q twice", s.Topic)
		}
		seen[s.Topic] = true
		if s.Threads < 1 {
			return CodeInvalidRequest, fmt.Errorf("legacy: subscription[%d] (topic %q): threads %d < 1", i, s.Topic, s.Threads)
		}
	}
	interval := time.Duration(m.PingIntervalMs) * time.Millisecond
	switch {
	case m.PingIntervalMs <= 0:
		return CodeInvalidPingSettings, fmt.Errorf("legacy: ping_interval_ms %d is not positive", m.PingIntervalMs)
	case minInterval > 0 && interval < minInterval:
		return CodeInvalidPingSettings, fmt.Errorf("legacy: ping_interval_ms %d is below the minimum %v", m.PingIntervalMs, minInterval)
	case maxInterval > 0 && interval > maxInterval:
		return CodeInvalidPingSettings, fmt.Errorf("legacy: ping_interval_ms %d is above the maximum %v", m.PingIntervalMs, maxInterval)
	case m.MaxPingRetries < 1:
		// One missed ping must be survivable and zero retries would make the liveness
		// rule (docs §8 "Liveness") declare a consumer dead before it missed anything.
		return CodeInvalidPingSettings, fmt.Errorf("legacy: max_ping_retries %d is below 1", m.MaxPingRetries)
	case maxRetries > 0 && m.MaxPingRetries > maxRetries:
		return CodeInvalidPingSettings, fmt.Errorf("legacy: max_ping_retries %d is above the maximum %d", m.MaxPingRetries, maxRetries)
	}
	return CodeNone, nil
}

// checkZnodeName applies ZooKeeper's rules for one path element (PathUtils.validatePath):
// non-empty, not "." or "..", no '/', no NUL, control characters or the ranges ZooKeeper
// refuses (U+007F-U+009F, U+D800-U+F8FF, U+FFF0-U+FFFF).
func checkZnodeName(field, s string) error {
	switch s {
	case "":
		return fmt.Errorf("legacy: %s is empty", field)
	case ".", "..":
		return fmt.Errorf("legacy: %s %q is not a valid znode name", field, s)
	}
	for _, r := range s {
		if r == '/' || r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 && r <= 0xffff {
			return fmt.Errorf("legacy: %s %q contains %U, which ZooKeeper refuses in a znode name", field, s, r)
		}
	}
	return nil
}
