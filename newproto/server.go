package newproto

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/connlimit"
)

// Defaults for the zero values of Config.
const (
	// DefaultMaxFrameBytes is Kafka's socket.request.max.bytes default.
	DefaultMaxFrameBytes int32 = 100 << 20
	// DefaultMaxInflight bounds the requests of one connection that are
	// being handled or waiting for their turn to be written.
	DefaultMaxInflight = 100
	// DefaultIdleTimeout is Kafka's connections.max.idle.ms default.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultDrainTimeout bounds how long Close waits for in-flight
	// requests before cancelling them.
	DefaultDrainTimeout = 5 * time.Second
)

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("newproto: server closed")

// Handler answers decoded requests. The built-in router (used when
// Config.Handler is nil) is one; tests and middleware may supply another.
//
// Handle is called on its own goroutine per request, concurrently with
// other requests of the same connection, and may block (a JoinGroup is
// held until the rebalance completes): the connection writes responses in
// request order whatever order they finish in. ctx is cancelled when the
// connection closes or when the server's drain deadline passes; Handle
// must then return promptly.
//
// Results:
//   - (resp, nil): resp is written. resp.Key() must be the request's key;
//     the server sets resp's version to the request's, except for
//     ApiVersions, whose handler chooses it (KIP-511 answers at v0).
//   - (nil, nil): nothing is written (a request that expects no response).
//   - (_, err): responses to earlier requests are written, then the
//     connection is closed and err logged. A panic is treated the same way.
type Handler interface {
	Handle(ctx context.Context, req *Request) (kmsg.Response, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, req *Request) (kmsg.Response, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, req *Request) (kmsg.Response, error) {
	return f(ctx, req)
}

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Listen is the address ListenAndServe listens on, e.g. ":9092".
	Listen string
	// Logger receives connection and protocol events.
	Logger zerolog.Logger
	// Registerer receives the metrics (metrics.go); nil: not exported.
	Registerer prometheus.Registerer

	// MaxFrameBytes rejects larger request frames before reading them
	// (DefaultMaxFrameBytes).
	MaxFrameBytes int32
	// MaxInflight bounds the requests one connection may have handled
	// at once (DefaultMaxInflight); the connection is not read while
	// it is reached, which pushes back on the client as Kafka's
	// channel muting does.
	MaxInflight int
	// IdleTimeout closes a connection with no request in flight that
	// has neither sent a frame nor been written to for this long, or
	// that does not take a response for this long (DefaultIdleTimeout,
	// Kafka's connections.max.idle.ms; negative: never).
	IdleTimeout time.Duration
	// DrainTimeout is how long Close lets in-flight requests finish
	// (DefaultDrainTimeout; negative: cancel them at once).
	DrainTimeout time.Duration
	// MaxQueuedBytes bounds the bytes held in frames being read, all
	// connections together (DefaultMaxQueuedBytes; negative: no limit);
	// a frame that would exceed it closes its connection (limits.go).
	MaxQueuedBytes int64
	// MaxConnections and MaxConnectionsPerIP bound the open connections,
	// in all (DefaultMaxConnections) and from one client address (0: no
	// limit); negative: no limit. One more is closed at once.
	MaxConnections, MaxConnectionsPerIP int

	// Handler answers requests. Nil means the built-in router configured
	// by the fields below; when Handler is set they are ignored.
	Handler Handler

	// NodeID is the bridge's broker id in Metadata and FindCoordinator.
	// Choose it so that it does not collide with a real broker, unless
	// the bridge stands for that broker: our node replaces a Cluster
	// broker with the same id.
	NodeID int32
	// AdvertisedHost and AdvertisedPort are the address clients are told
	// to reach our node at; empty/zero: the address each client dialed.
	AdvertisedHost string
	AdvertisedPort int32
	// ClusterID is Metadata's cluster id (v2+); empty: null.
	ClusterID string
	// Cluster supplies brokers and topics for Metadata; nil: our node
	// only, no topics.
	Cluster Cluster
	// Coordinator answers the group APIs; nil: COORDINATOR_NOT_AVAILABLE.
	Coordinator Coordinator
	// Peers, when set, names the other bridges of one service: FindCoordinator names a group's
	// owner, Metadata lists every live bridge (peers.go); nil: this bridge alone.
	Peers Peers
	// CoordinatorHold bounds how long FindCoordinator holds an answer that would name a peer
	// whose listener refuses connections (peers.go: PeerLiveness); 0: DefaultCoordinatorHold,
	// negative: never held. Keep it well under the clients' request timeout (franz-go's
	// default is 10 s past the request's own timeout, the Java client's 30 s).
	CoordinatorHold time.Duration

	// Relay, when set, makes the Server front a real cluster: every
	// request but the group APIs and ApiVersions is relayed to the
	// upstream brokers, and Metadata names the relay's proxy listeners
	// (ServeBroker) instead of the brokers (package relay). Cluster is
	// then not used.
	Relay Relay

	// TLS, when set, makes every listener of the Server (bootstrap and proxy) a TLS listener
	// (tls.go); nil: plaintext.
	TLS *tls.Config
	// PrincipalRules map a client certificate's subject to the connection's principal, as
	// ssl.principal.mapping.rules (nil: DEFAULT, "User:<the subject's DN>").
	PrincipalRules *authz.Rules
	// SASL, when set, requires clients to authenticate with SASL before anything but
	// ApiVersions (sasl.go); the listener is then SASL_PLAINTEXT, or SASL_SSL with TLS.
	SASL *SASLConfig
	// Authorizer, when set, authorizes the requests the bridge answers itself as a broker
	// does (authorize.go); nil: everything is allowed.
	Authorizer Authorizer
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.MaxFrameBytes < 0:
		return fmt.Errorf("newproto: MaxFrameBytes %d is negative", c.MaxFrameBytes)
	case c.MaxInflight < 0:
		return fmt.Errorf("newproto: MaxInflight %d is negative", c.MaxInflight)
	case c.NodeID < 0:
		// Clients use negative ids for bootstrap brokers they have
		// not identified yet (franz-go: math.MinInt32+i).
		return fmt.Errorf("newproto: NodeID %d is negative", c.NodeID)
	case c.AdvertisedPort < 0 || c.AdvertisedPort > 65535:
		return fmt.Errorf("newproto: AdvertisedPort %d out of range", c.AdvertisedPort)
	}
	if c.SASL != nil {
		if err := c.SASL.Validate(c.Relay != nil); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxFrameBytes == 0 {
		c.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxQueuedBytes == 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.CoordinatorHold == 0 {
		c.CoordinatorHold = DefaultCoordinatorHold
	}
	return c
}

// Server serves the Kafka wire protocol on one or more listeners.
type Server struct {
	cfg     Config
	log     zerolog.Logger
	handler Handler
	metrics *metrics
	// connWarns samples the warnings about single connections: at most 10 per 10 s.
	connWarns *zerolog.BurstSampler
	// frames and limits are the limits (limits.go).
	frames frameBudget
	limits connlimit.Limits

	done chan struct{} // closed when Close begins

	mu        sync.Mutex
	closing   bool
	listeners map[net.Listener]listenerRole
	conns     map[*conn]struct{}
	nextID    uint64
	connWG    sync.WaitGroup // one per conn in conns

	closeOnce sync.Once
}

// New checks cfg and builds a Server; it does not listen.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With().Str("component", "newproto").Logger()
	s := &Server{cfg: cfg, log: log, metrics: m, done: make(chan struct{}),
		connWarns: &zerolog.BurstSampler{Burst: 10, Period: 10 * time.Second}}
	h := cfg.Handler
	if h == nil {
		rt := &router{
			srv:       s,
			nodeID:    cfg.NodeID,
			host:      cfg.AdvertisedHost,
			port:      cfg.AdvertisedPort,
			clusterID: cfg.ClusterID,
			cluster:   cfg.Cluster,
			coord:     cfg.Coordinator,
			peers:     cfg.Peers,
			hold:      cfg.CoordinatorHold,
			log:       log,
		}
		if cfg.Authorizer != nil {
			if rt.guard, err = newGuard(cfg.Authorizer, cfg.Registerer, log); err != nil {
				return nil, err
			}
		}
		h = rt
	}
	s.handler = h
	s.frames.max = cfg.MaxQueuedBytes
	s.limits.Max, s.limits.PerIP = cfg.MaxConnections, cfg.MaxConnectionsPerIP
	s.listeners = map[net.Listener]listenerRole{}
	s.conns = map[*conn]struct{}{}
	return s, nil
}

// ListenAndServe listens on Config.Listen and serves until ctx is done or
// Close is called.
func (s *Server) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("newproto: listening on %q: %w", s.cfg.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve accepts connections on ln until ctx is done or Close is called,
// and closes ln. When ctx ends it closes the whole server gracefully
// (Close) before returning nil. It may be called for several listeners.
// ln is a bootstrap listener: the bridge's own node (ServeBroker serves
// the relay's).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, listenerRole{})
}

func (s *Server) serve(ctx context.Context, ln net.Listener, role listenerRole) error {
	ln = s.tlsListener(ln)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = role
	s.mu.Unlock()
	e := s.log.Info().Stringer("addr", ln.Addr())
	if role.proxied {
		e = e.Int32("upstream_broker", role.broker)
	}
	e.Msg("serving Kafka protocol")

	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	err := s.accept(ctx, ln, role)

	s.mu.Lock()
	delete(s.listeners, ln)
	closing := s.closing
	s.mu.Unlock()
	_ = ln.Close()
	switch {
	case ctx.Err() != nil:
		return s.Close()
	case closing:
		return nil
	}
	return err
}

func (s *Server) accept(ctx context.Context, ln net.Listener, role listenerRole) error {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || s.isClosing() {
				return nil
			}
			if !temporary(err) {
				return fmt.Errorf("newproto: accepting on %s: %w", ln.Addr(), err)
			}
			// Out of file descriptors and the like: wait, as
			// net/http does, instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn().Err(err).Dur("retry_in", backoff).Msg("accept failed")
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		s.startConn(nc, role)
	}
}

func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EMFILE) ||
		errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Addr returns the address of a bootstrap listener being served (Serve,
// not ServeBroker), or nil.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln, role := range s.listeners {
		if !role.proxied {
			return ln.Addr()
		}
	}
	return nil
}

func (s *Server) startConn(nc net.Conn, role listenerRole) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	ip, refused := s.limits.Admit(nc.RemoteAddr()) // connlimit
	if refused != "" {
		s.mu.Unlock()
		s.metrics.connsRefused.WithLabelValues(refused).Inc()
		l := s.log.Sample(s.connWarns)
		l.Warn().Str("remote", addrString(nc.RemoteAddr())).Str("reason", refused).Msg("connection refused by a limit")
		_ = nc.Close()
		return
	}
	s.nextID++
	// The connection's ctx ends with the connection, or when Close cancels what remains after
	// the drain deadline (through c.cancel: s.conns holds every live connection).
	ctx, cancel := context.WithCancel(context.Background())
	c := newConn(s, nc, s.nextID, role, cancel)
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()

	s.metrics.connsAccepted.Inc()
	s.metrics.connsOpen.Inc()
	go func() {
		defer s.connWG.Done()
		defer s.metrics.connsOpen.Dec()
		defer s.limits.Done(ip)
		c.serve(ctx)
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
}

// Conns returns the number of open connections, on every listener.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Close stops accepting, stops reading new requests, lets in-flight
// requests finish and their responses be written for up to DrainTimeout,
// then cancels what remains and closes every connection. It returns when
// every goroutine the server started has exited. It is safe to call more
// than once and concurrently with Serve.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.mu.Lock()
		s.closing = true
		for ln := range s.listeners {
			_ = ln.Close()
		}
		for c := range s.conns {
			c.beginDrain()
		}
		s.mu.Unlock()

		done := make(chan struct{})
		go func() {
			s.connWG.Wait()
			close(done)
		}()
		timer := time.NewTimer(max(s.cfg.DrainTimeout, 0))
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			s.log.Warn().Dur("drain_timeout", s.cfg.DrainTimeout).Msg("drain deadline passed; cancelling in-flight requests")
		}
		s.mu.Lock()
		for c := range s.conns {
			c.cancel() // cancels in-flight requests
		}
		s.mu.Unlock()
		<-done
	})
	return nil
}
