package relay

// The upstream cluster: the real Kafka brokers the relay forwards to.
//
// An Upstream is the set of brokers (node id → host:port), which the
// bridge keeps current with SetBrokers (from ZooKeeper's /brokers/ids, or
// from Discover for --upstream bootstrap brokers), plus how to reach them.
// It holds no connection of its own between calls: each client connection
// of the bridge gets its own upstream connection per broker (upConn below),
// dialed when it first needs one and closed with it. Pairing connections
// one to one keeps the relay byte for byte: correlation ids pass through
// unchanged, and the broker sees each client's requests in the order the
// client sent them, on one connection, as it would without the bridge
// (Kafka's per-connection ordering is what idempotent and in-order
// producers rely on).
//
// Every upstream connection starts with ApiVersions v0, which every broker
// from Kafka 0.10 on answers (KIP-35) and none before it does (they close
// the connection on an unknown api key). The answer is the broker's version
// table, which the bridge's own ApiVersions answers are built from
// (relay.go). The start-up check (Probe, Discover) tells the ways of not
// answering apart: a broker older than 0.10 closes the connection on
// ApiVersions but answers Metadata v0 on a fresh one; anything that closes
// both is not a Kafka PLAINTEXT listener (or a broker going down); one that
// keeps the connection open and says nothing times out.
//
// The Upstream also remembers which brokers are down: a broker whose last
// dial failed (refused, timed out, closed before answering) is down until a
// dial succeeds again. Its proxy listener stops listening meanwhile, so
// that clients are refused as by the broker itself (Proxy.Serve), and the
// proxy dials it every Config.ProbeInterval to see it come back.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// Defaults for the zero values of UpstreamConfig.
const (
	// DefaultUpstreamDialTimeout bounds dialing a broker plus its
	// ApiVersions handshake.
	DefaultUpstreamDialTimeout = 10 * time.Second
	// DefaultRelayTimeout bounds the wait for a broker's response to a
	// relayed request. It must exceed the longest wait a client asks a
	// broker for: Fetch max wait (kgo 5 s, Java 500 ms) and Produce
	// timeout (kgo 10 s, Java request.timeout.ms 30 s).
	DefaultRelayTimeout = 30 * time.Second
	// DefaultMaxResponseBytes rejects a larger response frame from a
	// broker (a garbled size) before allocating it. The protocol does not
	// bound responses; clients bound Fetch responses themselves
	// (fetch.max.bytes, 50 MiB by default).
	DefaultMaxResponseBytes int32 = 1 << 30
)

// ErrUpstreamTooOld is wrapped by the error for a broker older than Kafka
// 0.10 (it closes the connection on ApiVersions and answers Metadata v0):
// the relay needs ApiVersions.
var ErrUpstreamTooOld = errors.New("Kafka 0.10 or newer is required")

// UpstreamConfig configures an Upstream. Zero values mean the documented
// defaults.
type UpstreamConfig struct {
	// Brokers is the initial broker set; SetBrokers replaces it.
	Brokers []newproto.Broker
	// Logger receives upstream events.
	Logger zerolog.Logger
	// DialTimeout bounds dialing a broker and its ApiVersions handshake
	// (DefaultUpstreamDialTimeout).
	DialTimeout time.Duration
	// RequestTimeout bounds the wait for the response to a relayed
	// request (DefaultRelayTimeout); past it the broker is deemed down
	// and the client's connection closed, as a broker that stops
	// answering looks to a client.
	RequestTimeout time.Duration
	// MaxResponseBytes bounds a response frame (DefaultMaxResponseBytes).
	MaxResponseBytes int32
	// ClientID is the client id of the bridge's own requests
	// (ApiVersions handshakes, Discover); empty: "zkbridge".
	ClientID string
	// Dial dials a broker; nil: a net.Dialer. Tests put faults here.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Validate reports the first invalid field.
func (c UpstreamConfig) Validate() error {
	switch {
	case c.DialTimeout < 0:
		return fmt.Errorf("newproto: upstream DialTimeout %s is negative", c.DialTimeout)
	case c.RequestTimeout < 0:
		return fmt.Errorf("newproto: upstream RequestTimeout %s is negative", c.RequestTimeout)
	case c.MaxResponseBytes < 0:
		return fmt.Errorf("newproto: upstream MaxResponseBytes %d is negative", c.MaxResponseBytes)
	}
	_, err := brokerSet(c.Brokers)
	return err
}

func (c UpstreamConfig) withDefaults() UpstreamConfig {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultUpstreamDialTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRelayTimeout
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.ClientID == "" {
		c.ClientID = "zkbridge"
	}
	if c.Dial == nil {
		var d net.Dialer
		c.Dial = d.DialContext
	}
	return c
}

// Upstream is the real Kafka cluster behind the bridge: its brokers and
// how to reach them. It is safe for concurrent use; the broker set may
// change at any time (SetBrokers), and the relay follows: new upstream
// connections go to the current address, proxy listeners open and close
// (Proxy.Serve).
type Upstream struct {
	cfg UpstreamConfig
	log zerolog.Logger

	mu      sync.Mutex
	brokers map[int32]*upstreamBroker
	// changed is closed and replaced when the broker set changes or a
	// broker goes down or comes back.
	changed chan struct{}
}

// upstreamBroker is one broker and, once a handshake told it, its version
// table, and whether it is down. Both belong to the address: a new address
// (a broker moved or was replaced) forgets them, and so does a broker that
// leaves the set and comes back (it registered again: it is up).
type upstreamBroker struct {
	newproto.Broker
	addr     string
	versions map[int16]versionRange // nil until a handshake
	down     error                  // why the last dial failed; nil: up, or not dialed yet
}

// NewUpstream checks cfg and builds an Upstream; it dials nothing (Probe
// does).
func NewUpstream(cfg UpstreamConfig) (*Upstream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	set, _ := brokerSet(cfg.Brokers)
	return &Upstream{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("component", "newproto.upstream").Logger(),
		brokers: set,
		changed: make(chan struct{}),
	}, nil
}

// brokerSet checks a broker list and indexes it by node id.
func brokerSet(brokers []newproto.Broker) (map[int32]*upstreamBroker, error) {
	set := make(map[int32]*upstreamBroker, len(brokers))
	for _, b := range brokers {
		switch {
		case b.NodeID < 0:
			return nil, fmt.Errorf("newproto: upstream broker id %d is negative", b.NodeID)
		case b.Host == "":
			return nil, fmt.Errorf("newproto: upstream broker %d has no host", b.NodeID)
		case b.Port <= 0 || b.Port > 65535:
			return nil, fmt.Errorf("newproto: upstream broker %d port %d out of range", b.NodeID, b.Port)
		}
		if _, dup := set[b.NodeID]; dup {
			return nil, fmt.Errorf("newproto: upstream broker id %d listed twice", b.NodeID)
		}
		set[b.NodeID] = &upstreamBroker{Broker: b, addr: net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))}
	}
	return set, nil
}

// SetBrokers replaces the broker set. A broker that keeps its address
// keeps its known version table. Connections already open to a broker that
// left or moved stay until they fail or their client leaves: a client
// learns of the change from Metadata, as it would from the real cluster.
func (u *Upstream) SetBrokers(brokers []newproto.Broker) error {
	set, err := brokerSet(brokers)
	if err != nil {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	same := len(set) == len(u.brokers)
	for id, nb := range set {
		ob, ok := u.brokers[id]
		if ok && ob.addr == nb.addr {
			nb.versions, nb.down = ob.versions, ob.down
		}
		if !ok || ob.addr != nb.addr || !rackEqual(ob.Rack, nb.Rack) {
			same = false
		}
	}
	u.brokers = set
	if !same {
		u.notifyLocked()
		u.log.Info().Interface("brokers", u.sortedLocked()).Msg("upstream brokers changed")
	}
	return nil
}

func (u *Upstream) notifyLocked() {
	close(u.changed)
	u.changed = make(chan struct{})
}

// setReachable records the outcome of a dial of broker id at addr: err nil
// is up, otherwise down. A broker that has since moved or left is not
// touched.
func (u *Upstream) setReachable(id int32, addr string, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	b, ok := u.brokers[id]
	if !ok || b.addr != addr || (b.down == nil) == (err == nil) {
		if ok && b.addr == addr && err != nil {
			b.down = err // still down; the latest reason
		}
		return
	}
	b.down = err
	u.notifyLocked()
	if err != nil {
		u.log.Warn().Err(err).Int32("broker", id).Str("addr", addr).Msg("upstream broker down; its proxy listener refuses connections until it answers again")
	} else {
		u.log.Info().Int32("broker", id).Str("addr", addr).Msg("upstream broker answers again")
	}
}

// downBrokers returns the brokers whose last dial failed.
func (u *Upstream) downBrokers() map[int32]bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[int32]bool{}
	for id, b := range u.brokers {
		if b.down != nil {
			out[id] = true
		}
	}
	return out
}

func rackEqual(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// Brokers returns the broker set, sorted by node id.
func (u *Upstream) Brokers() []newproto.Broker {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sortedLocked()
}

func (u *Upstream) sortedLocked() []newproto.Broker {
	out := make([]newproto.Broker, 0, len(u.brokers))
	for _, b := range u.brokers {
		out = append(out, b.Broker)
	}
	slices.SortFunc(out, func(a, b newproto.Broker) int { return int(a.NodeID) - int(b.NodeID) })
	return out
}

// watch returns a channel that is closed at the next change of the broker
// set or of a broker's reachability.
func (u *Upstream) watch() <-chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.changed
}

// brokerIDs returns the node ids, sorted.
func (u *Upstream) brokerIDs() []int32 {
	u.mu.Lock()
	defer u.mu.Unlock()
	ids := make([]int32, 0, len(u.brokers))
	for id := range u.brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// versionsOf returns a broker's version table, nil if unknown.
func (u *Upstream) versionsOf(id int32) map[int16]versionRange {
	u.mu.Lock()
	defer u.mu.Unlock()
	if b, ok := u.brokers[id]; ok {
		return b.versions
	}
	return nil
}

// commonVersions is the intersection of the version tables of every broker
// whose table is known: what any of them serves. nil if none is known.
func (u *Upstream) commonVersions() map[int16]versionRange {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out map[int16]versionRange
	for _, b := range u.brokers {
		if b.versions == nil {
			continue
		}
		if out == nil {
			out = make(map[int16]versionRange, len(b.versions))
			for k, r := range b.versions {
				out[k] = r
			}
			continue
		}
		for k, r := range out {
			o, ok := b.versions[k]
			if !ok || max(r.min, o.min) > min(r.max, o.max) {
				delete(out, k)
				continue
			}
			out[k] = versionRange{max(r.min, o.min), min(r.max, o.max)}
		}
	}
	return out
}

// Probe dials every broker and checks that it answers ApiVersions, as the
// bridge does at start: an error wrapping ErrUpstreamTooOld names a broker
// older than Kafka 0.10, which the relay cannot serve; other errors are
// brokers that could not be reached (refused, timed out, or closing
// connections without answering, each said as such), now marked down. The
// errors of all brokers are joined.
func (u *Upstream) Probe(ctx context.Context) error {
	ids := u.brokerIDs()
	if len(ids) == 0 {
		return errors.New("newproto: no upstream brokers")
	}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			nc, _, err := u.dial(ctx, id)
			if err == nil {
				_ = nc.Close()
			}
			var ue *upstreamError
			if errors.As(err, &ue) && errors.Is(err, errHandshakeClosed) {
				err = &upstreamError{broker: ue.broker, addr: ue.addr, err: u.explainClosed(ctx, ue.addr, ue.err)}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Discover asks the first seed (host:port) that answers for the cluster's
// brokers and makes them the broker set: the --upstream bootstrap mode,
// where no registry lists the brokers. Call it again to follow changes.
func (u *Upstream) Discover(ctx context.Context, seeds []string) error {
	var errs []error
	for _, seed := range seeds {
		brokers, err := u.discover(ctx, seed)
		if err == nil {
			return u.SetBrokers(brokers)
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return errors.New("newproto: no upstream seed brokers")
	}
	return errors.Join(errs...)
}

func (u *Upstream) discover(ctx context.Context, seed string) ([]newproto.Broker, error) {
	ctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout+u.cfg.RequestTimeout)
	defer cancel()
	nc, err := u.cfg.Dial(ctx, "tcp", seed)
	if err != nil {
		return nil, fmt.Errorf("newproto: dialing upstream seed %s: %w", seed, err)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	br := bufio.NewReader(nc)
	versions, err := u.handshake(nc, br)
	if errors.Is(err, errHandshakeClosed) {
		err = u.explainClosed(ctx, seed, err)
	}
	if err != nil {
		return nil, fmt.Errorf("newproto: upstream seed %s: %w", seed, err)
	}
	// Any version both sides know works; v1+ because v0 cannot ask for
	// no topics (an empty list means all of them).
	mr, ok := versions[int16(kmsg.Metadata)]
	req := kmsg.NewPtrMetadataRequest()
	v := min(mr.max, req.MaxVersion())
	if !ok || v < max(mr.min, 1) {
		return nil, fmt.Errorf("newproto: upstream seed %s serves Metadata v%d-v%d, none the bridge can read", seed, mr.min, mr.max)
	}
	req.SetVersion(v)
	req.Topics = []kmsg.MetadataRequestTopic{} // none: brokers only
	resp, err := u.roundTrip(nc, br, req, 1)
	if err != nil {
		return nil, fmt.Errorf("newproto: upstream seed %s: Metadata: %w", seed, err)
	}
	md := resp.(*kmsg.MetadataResponse)
	brokers := make([]newproto.Broker, 0, len(md.Brokers))
	for _, b := range md.Brokers {
		brokers = append(brokers, newproto.Broker{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack})
	}
	return brokers, nil
}

// upstreamError is a failure to reach or hear from an upstream broker; the
// connection shell logs it as a warning (the operator's concern), unlike a
// client that leaves.
type upstreamError struct {
	broker int32
	addr   string
	err    error
}

func (e *upstreamError) Error() string {
	return fmt.Sprintf("upstream broker %d (%s): %v", e.broker, e.addr, e.err)
}
func (e *upstreamError) Unwrap() error { return e.err }

// UpstreamBroker says that the error is the upstream broker's: newproto
// logs it as such.
func (e *upstreamError) UpstreamBroker() int32 { return e.broker }

// dial connects to a broker and runs the ApiVersions handshake, recording
// the broker's version table, and whether it is up (setReachable) unless
// ctx ended first (the caller left: that says nothing of the broker). The
// returned reader buffers the connection.
func (u *Upstream) dial(ctx context.Context, id int32) (net.Conn, *bufio.Reader, error) {
	u.mu.Lock()
	b, ok := u.brokers[id]
	var addr string
	if ok {
		addr = b.addr
	}
	u.mu.Unlock()
	if !ok {
		return nil, nil, &upstreamError{broker: id, addr: "?", err: errors.New("not in the upstream broker set")}
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout)
	defer cancel()
	failed := func(err error) (net.Conn, *bufio.Reader, error) {
		if parent.Err() != nil {
			err = fmt.Errorf("%w (%w)", parent.Err(), err)
		} else {
			u.setReachable(id, addr, err)
		}
		return nil, nil, &upstreamError{broker: id, addr: addr, err: err}
	}
	nc, err := u.cfg.Dial(ctx, "tcp", addr)
	if err != nil {
		return failed(fmt.Errorf("dialing: %w", err))
	}
	// The handshake obeys ctx too: a broker that accepts and says
	// nothing must not hold the client.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	br := bufio.NewReaderSize(nc, upstreamReadBuffer)
	versions, err := u.handshake(nc, br)
	if !stop() || err != nil {
		_ = nc.Close()
		if err == nil {
			err = fmt.Errorf("ApiVersions: %w", ctx.Err())
		}
		return failed(err)
	}
	_ = nc.SetDeadline(time.Time{})

	u.mu.Lock()
	if b, ok := u.brokers[id]; ok && b.addr == addr {
		b.versions = versions
	}
	u.mu.Unlock()
	u.setReachable(id, addr, nil)
	return nc, br, nil
}

// upstreamReadBuffer is the read buffer of an upstream connection: it
// holds the small responses that come in a burst (one read for many), and
// the start of a large one, which is streamed (copyResponse).
const upstreamReadBuffer = 64 << 10

// handshake sends ApiVersions v0 and returns the broker's version table.
// Its errors say which way the broker failed to answer: an error wrapping
// errHandshakeClosed for a connection closed or reset before any response
// (a broker older than Kafka 0.10, or something else: explainClosed tells
// which), one wrapping os.ErrDeadlineExceeded for no answer in time (the
// caller's deadline on nc).
func (u *Upstream) handshake(nc net.Conn, br *bufio.Reader) (map[int16]versionRange, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	start := time.Now()
	resp, err := u.roundTrip(nc, br, req, 0)
	switch {
	case err == nil:
	case closedBeforeResponse(err):
		return nil, &handshakeClosedError{cause: err}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("no answer to ApiVersions within %s: the broker accepts connections but does not answer "+
			"(hung or overloaded, or not speaking the Kafka protocol on this port): %w", time.Since(start).Round(time.Millisecond), err)
	case closedByPeer(err):
		return nil, fmt.Errorf("closed the connection in the middle of its ApiVersions response: %w", err)
	default:
		return nil, fmt.Errorf("ApiVersions: %w", err)
	}
	av := resp.(*kmsg.ApiVersionsResponse)
	if av.ErrorCode != 0 {
		return nil, fmt.Errorf("ApiVersions v0 answered %s", newproto.ErrorCode(av.ErrorCode).Name())
	}
	versions := make(map[int16]versionRange, len(av.ApiKeys))
	for _, k := range av.ApiKeys {
		versions[k.ApiKey] = versionRange{k.MinVersion, k.MaxVersion}
	}
	if _, ok := versions[int16(kmsg.ApiVersions)]; !ok {
		return nil, fmt.Errorf("ApiVersions answer does not list ApiVersions: %w", ErrUpstreamTooOld)
	}
	return versions, nil
}

// errHandshakeClosed is wrapped by handshakeClosedError.
var errHandshakeClosed = errors.New("closed the connection without answering ApiVersions")

// handshakeClosedError is a broker that closed (or reset) the connection
// before answering ApiVersions: a broker older than Kafka 0.10 does, on an
// api key it does not know; so does a listener that is not Kafka's
// PLAINTEXT (SSL, SASL_*, another service) and a broker going down.
type handshakeClosedError struct{ cause error }

func (e *handshakeClosedError) Error() string {
	return fmt.Sprintf("%v (%v)", errHandshakeClosed, e.cause)
}
func (e *handshakeClosedError) Unwrap() []error { return []error{errHandshakeClosed, e.cause} }

// explainClosed tells the two kinds of handshakeClosedError apart (closed,
// from handshake, for the broker at addr): a broker older than 0.10 answers
// Metadata v0, an api key it knows, on a fresh connection; anything else
// closes that one too, or fails otherwise.
func (u *Upstream) explainClosed(ctx context.Context, addr string, closed error) error {
	var hc *handshakeClosedError
	if !errors.As(closed, &hc) {
		return closed
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout)
	defer cancel()
	nc, err := u.cfg.Dial(ctx, "tcp", addr)
	if err == nil {
		stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
		// Metadata v0 with no topics asks for all of them: v0 has no
		// way to ask for none, and naming one could create it on a
		// broker with auto.create.topics.enable.
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(0)
		_, err = u.roundTrip(nc, bufio.NewReader(nc), req, 0)
		stop()
		_ = nc.Close()
	}
	if err == nil {
		return fmt.Errorf("closed the connection on ApiVersions (%v) but answers Metadata v0: a Kafka broker older than 0.10: %w",
			hc.cause, ErrUpstreamTooOld)
	}
	return fmt.Errorf("%w (%v), and a Metadata v0 request too (%v): not a Kafka broker's PLAINTEXT listener "+
		"(an SSL or SASL listener, or another service), or a broker shutting down", errHandshakeClosed, hc.cause, err)
}

// closedByPeer reports an error of a connection the peer closed or reset.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// closedBeforeResponse reports a connection closed or reset before any
// byte of the response (a frame cut short is io.ErrUnexpectedEOF).
func closedBeforeResponse(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// roundTrip writes req with correlation id corr and decodes the response:
// the bridge's own requests, on a connection that carries nothing else at
// the time.
func (u *Upstream) roundTrip(nc net.Conn, br *bufio.Reader, req kmsg.Request, corr int32) (kmsg.Response, error) {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID(u.cfg.ClientID))
	if _, err := nc.Write(f.AppendRequest(nil, req, corr)); err != nil {
		return nil, fmt.Errorf("writing %s: %w", kmsg.NameForKey(req.Key()), err)
	}
	raw, err := readResponseFrame(br, u.cfg.MaxResponseBytes)
	if err != nil {
		return nil, fmt.Errorf("reading %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	if got := responseCorrelationID(raw); got != corr {
		return nil, fmt.Errorf("%s response has correlation id %d, want %d", kmsg.NameForKey(req.Key()), got, corr)
	}
	resp := req.ResponseKind()
	body, err := responseBody(raw, resp.Key(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decoding %s v%d response: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp, nil
}

// readResponseFrame reads one response frame, size prefix included.
func readResponseFrame(r io.Reader, maxBytes int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > maxBytes {
		return nil, fmt.Errorf("response frame size %d outside [4, %d]", n, maxBytes)
	}
	raw := make([]byte, 4+int(n))
	copy(raw, size[:])
	if _, err := io.ReadFull(r, raw[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %d-byte response frame: %w", n, err)
	}
	return raw, nil
}

// upConn is one upstream connection of one client connection: requests
// are written in the order the client sent them and responses read in the
// same order (a broker answers each connection in order), so a FIFO of the
// requests that expect a response pairs each response with its request.
//
// The client connection's reader goroutine is the only writer; the upConn's
// own goroutine (run) is the only reader and posts each response to the
// client connection's writer, which puts it in its place among the
// connection's responses.
type upConn struct {
	broker  int32
	addr    string
	nc      net.Conn
	br      *bufio.Reader
	timeout time.Duration
	maxResp int32
	bufs    *bufPool
	// post hands a finished request to the client connection's writer;
	// it never blocks (the writer has room for every request in flight).
	post func(newproto.Relayed)
	// lost is called once if the connection fails with requests in
	// flight: their client connection must close.
	lost func(error)
	// gone is called once if the connection fails other than by being
	// closed on our side (the broker closed it, or did not answer): the
	// broker may be going down, which a dial tells.
	gone func()

	closed chan struct{} // closed with the connection (fail)

	mu      sync.Mutex
	pending []pendingReq
	dead    error // set once; the connection is closed
}

// pendingReq is a relayed request waiting for its response.
type pendingReq struct {
	seq          uint64
	corr         int32
	key, version int16
	sent         time.Time
	// rewrite, when set, edits the response (Metadata and the other
	// responses that name brokers, rewrite.go).
	rewrite func(raw []byte) ([]byte, error)
}

// resetReadDeadline sets the read deadline for the oldest request still
// waiting (none: no deadline; an idle connection is the broker's to close).
func (u *upConn) resetReadDeadline() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.pending) > 0 {
		_ = u.nc.SetReadDeadline(u.pending[0].sent.Add(u.timeout))
	} else {
		_ = u.nc.SetReadDeadline(time.Time{})
	}
}

// stream hands a large response to the client connection's writer, which
// copies it from the broker's socket when its turn comes, and waits until
// it has: the response's bytes are the next on the socket, so nothing
// else can be read meanwhile. A failure fails the connection; the writer's
// side of it closes the client connection (it wrote part of a frame).
func (u *upConn) stream(p pendingReq, hdr [8]byte, n int32) error {
	done := make(chan error, 1)
	u.post(newproto.Relayed{Seq: p.seq, CorrelationID: p.corr, Key: p.key, Version: p.version, Stream: func(w io.Writer) error {
		err := u.copyResponse(w, hdr, n)
		done <- err
		return err
	}})
	select {
	case err := <-done:
		return err
	case <-u.closed:
		// The client connection closed before (or while) its writer
		// took the response.
		return net.ErrClosed
	}
}

// copyResponse writes a response frame whose first 8 bytes (hdr) were
// read: hdr and what the reader has buffered, then the rest straight from
// the socket, which TCPConn.ReadFrom turns into splice(2) on Linux.
func (u *upConn) copyResponse(w io.Writer, hdr [8]byte, n int32) error {
	// The deadline counts from now: the response may have waited for
	// its turn behind a slow earlier one.
	_ = u.nc.SetReadDeadline(time.Now().Add(u.timeout))
	rest := int(n) - 4
	buffered, _ := u.br.Peek(min(u.br.Buffered(), rest))
	bufs := net.Buffers{hdr[:], buffered}
	if _, err := bufs.WriteTo(w); err != nil {
		return fmt.Errorf("writing to the client: %w", err)
	}
	_, _ = u.br.Discard(len(buffered))
	if left := int64(rest - len(buffered)); left > 0 {
		if m, err := io.CopyN(w, u.nc, left); err != nil {
			if m < left && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("relaying a %d-byte response: %w", n, err)
		}
	}
	return nil
}

// errUpstreamIdle is an upstream connection the broker closed with nothing
// in flight (connections.max.idle.ms): nothing is lost, the next request
// dials again.
var errUpstreamIdle = errors.New("closed by the broker with no request in flight")

// send writes one request frame of size bytes to the broker: head, its
// start, then the rest as it comes from src (the client's connection).
// With p == nil the request expects no response (Produce acks=0).
//
// queued reports whether p was recorded: from then on its result is
// posted by run, an error result if the connection fails. When it was not
// (the connection had already failed, or a request without response could
// not be written), the caller answers for the request. Any error fails
// the connection.
func (u *upConn) send(p *pendingReq, size int32, head []byte, src io.Reader) (queued bool, err error) {
	now := time.Now()
	if p != nil {
		u.mu.Lock()
		if u.dead != nil {
			u.mu.Unlock()
			return false, u.dead
		}
		// Recorded before the write, so that run finds it however
		// fast the broker answers.
		p.sent = now
		u.pending = append(u.pending, *p)
		if len(u.pending) == 1 {
			_ = u.nc.SetReadDeadline(now.Add(u.timeout))
		}
		u.mu.Unlock()
	}
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], uint32(size))
	bufs := net.Buffers{prefix[:], head}
	_ = u.nc.SetWriteDeadline(now.Add(u.timeout))
	_, err = bufs.WriteTo(u.nc)
	if rest := int64(size) - int64(len(head)); err == nil && rest > 0 {
		// TCPConn.ReadFrom of a LimitedReader of a TCPConn: splice.
		var n int64
		n, err = io.CopyN(u.nc, src, rest)
		if err != nil && n < rest && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		// run sees the closed connection and fails what is pending,
		// p included.
		err = fmt.Errorf("relaying %s: %w", kmsg.NameForKey(int16(binary.BigEndian.Uint16(head))), err)
		u.fail(err)
		return p != nil, err
	}
	return p != nil, nil
}

// fail marks the connection dead and closes it, once.
func (u *upConn) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.dead == nil {
		u.dead = err
		_ = u.nc.Close()
		close(u.closed)
		if u.gone != nil && !errors.Is(err, net.ErrClosed) {
			u.gone()
		}
	}
}

// failed returns why the connection died, nil while it lives.
func (u *upConn) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dead
}

// run reads responses until the connection fails or is closed, then fails
// every request still pending.
func (u *upConn) run() {
	err := u.readLoop()
	u.fail(err)
	u.mu.Lock()
	lost := u.pending
	u.pending = nil
	u.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	uerr := &upstreamError{broker: u.broker, addr: u.addr, err: err}
	u.lost(uerr)
	for _, p := range lost {
		u.post(newproto.Relayed{Seq: p.seq, CorrelationID: p.corr, Key: p.key, Version: p.version, Err: uerr})
	}
}

func (u *upConn) readLoop() error {
	var hdr [8]byte // size and correlation id
	for {
		if _, err := io.ReadFull(u.br, hdr[:]); err != nil {
			u.mu.Lock()
			idle := len(u.pending) == 0
			u.mu.Unlock()
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				return fmt.Errorf("no response within %s", u.timeout)
			case idle && closedByPeer(err):
				return errUpstreamIdle
			}
			return err
		}
		n := int32(binary.BigEndian.Uint32(hdr[:]))
		if n < 4 || n > u.maxResp {
			return fmt.Errorf("response frame size %d outside [4, %d]", n, u.maxResp)
		}
		u.mu.Lock()
		if len(u.pending) == 0 {
			u.mu.Unlock()
			return fmt.Errorf("response (correlation id %d) to no request", responseCorrelationID(hdr[:]))
		}
		p := u.pending[0]
		if got := responseCorrelationID(hdr[:]); got != p.corr {
			// The pairing is lost: nothing after this can be
			// trusted either.
			u.mu.Unlock()
			return fmt.Errorf("response correlation id %d, want %d (%s)", got, p.corr, kmsg.NameForKey(p.key))
		}
		u.pending[0] = pendingReq{} // drop the rewrite closure
		u.pending = u.pending[1:]
		u.mu.Unlock()

		if p.rewrite == nil && n > relayStreamBytes {
			if err := u.stream(p, hdr, n); err != nil {
				return err
			}
			u.resetReadDeadline()
			continue
		}
		raw := u.bufs.get(4 + int(n))
		copy(raw, hdr[:])
		if _, err := io.ReadFull(u.br, raw[8:]); err != nil {
			u.bufs.put(raw)
			u.mu.Lock()
			u.pending = append([]pendingReq{p}, u.pending...) // failed with the rest
			u.mu.Unlock()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("no response within %s", u.timeout)
			}
			return fmt.Errorf("reading %d-byte response frame: %w", n, err)
		}
		u.resetReadDeadline()
		r := newproto.Relayed{Seq: p.seq, CorrelationID: p.corr, Key: p.key, Version: p.version, Raw: raw}
		if p.rewrite != nil {
			var err error
			if r.Raw, err = p.rewrite(raw); err != nil {
				r.Raw, r.Err = nil, &upstreamError{broker: u.broker, addr: u.addr, err: err}
			}
			u.bufs.put(raw) // the rewrite copied what it kept
		}
		u.post(r)
	}
}
