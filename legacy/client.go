package legacy

// The consumer side of the legacy protocol: seed 001's "consumerStartup" and the handling of
// the coordinator's requests, as a library a legacy application embeds (docs/legacy-protocol.md
// §8 "Consumer"). The application fetches and processes messages itself; the Client tells it
// when to stop and what to start (Handler) and reports the offsets it commits (Commit).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// ErrAllBrokersUnavailable is seed 001's AllKnownBrokersNotAvailable (consumerStartup step 1.2):
// no broker of the known list could be reached to consult.
var ErrAllBrokersUnavailable = errors.New("all known brokers unavailable")

// Defaults for the zero values of ClientConfig.
const (
	// DefaultPingInterval keeps the silence after which a consumer stops, (DefaultMaxPingRetries
	// + 1) × DefaultPingInterval = 8 s, below the bridge's default ZooKeeper session timeout
	// (10 s): a consumer of a crashed bridge stops before 0.8 consumers take its partitions.
	DefaultPingInterval   = 2 * time.Second
	DefaultMaxPingRetries = 3
	DefaultDialTimeout    = 5 * time.Second
	DefaultBackoffMin     = 100 * time.Millisecond
	DefaultBackoffMax     = 10 * time.Second
)

// Handler is how the application sees its assignment. Its methods are called on Run's
// goroutine, one at a time, while the coordinator waits for the answer: they must return
// within the ping interval or the coordinator counts missed pings.
type Handler interface {
	// OnStop stops every fetcher and drops what they queued ("Handling StopRequest"). It is
	// called once per OnStart: on a StopRequest, before re-discovering a lost coordinator,
	// and when Run returns — never twice in a row.
	OnStop()
	// OnStart starts fetching parts, the consumer's whole assignment, each from its offset:
	// the next offset to consume, or OffsetSmallest / OffsetLargest when the group has
	// nothing committed (the application resolves those against the partition's leader). A
	// non-nil error is reported to the coordinator (StartResponse UNKNOWN), which then drops
	// the consumer and rebalances; OnStop is still called before the next OnStart.
	OnStart(parts []PartitionOffset) error
}

// HandlerFuncs adapts two functions to Handler; a nil field does nothing.
type HandlerFuncs struct {
	Stop  func()
	Start func(parts []PartitionOffset) error
}

// OnStop calls h.Stop.
func (h HandlerFuncs) OnStop() {
	if h.Stop != nil {
		h.Stop()
	}
}

// OnStart calls h.Start.
func (h HandlerFuncs) OnStart(parts []PartitionOffset) error {
	if h.Start != nil {
		return h.Start(parts)
	}
	return nil
}

// LogHandler only logs what it is told: a dry-run consumer for the command line and for
// watching a group's assignments.
type LogHandler struct {
	Logger zerolog.Logger
}

// OnStop logs.
func (h LogHandler) OnStop() { h.Logger.Info().Msg("stop: fetchers stopped") }

// OnStart logs the assignment.
func (h LogHandler) OnStart(parts []PartitionOffset) error {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = TopicPartition{p.Topic, p.Partition}.String() + "@" + strconv.FormatInt(p.Offset, 10)
	}
	h.Logger.Info().Strs("partitions", names).Msg("start: assignment received")
	return nil
}

// ClientConfig configures a Client. Zero values mean the documented defaults.
type ClientConfig struct {
	// Brokers are the known bridges' legacy listeners, "host:port" (seed 001's initBrokers).
	// Required.
	Brokers []string
	// GroupID is the consumer group. Required.
	GroupID string
	// ConsumerID is the consumer's id in the group; empty: one is made up as Kafka 0.8 does,
	// <group>_<hostname>-<unix ms>-<8 hex digits>, with the hex digits from Rand.
	ConsumerID string
	// Subscription maps each topic to the number of consumer threads (streams) for it, >= 1.
	// Required.
	Subscription map[string]int
	// AutoCommit says the consumer reports its offsets in every PingResponse (the offsets
	// given to Commit), for the coordinator to write to ZooKeeper.
	AutoCommit bool
	// AutoOffsetReset is ResetSmallest or ResetLargest (default ResetLargest, 0.8's default).
	AutoOffsetReset string
	// PingInterval is how often the coordinator pings and how long it gives the consumer to
	// answer, in whole milliseconds (DefaultPingInterval).
	PingInterval time.Duration
	// MaxPingRetries is how many consecutive missed pings make the consumer dead
	// (DefaultMaxPingRetries). The client in turn treats the coordinator as failed when no
	// request came for (MaxPingRetries + 1) × PingInterval.
	MaxPingRetries int16

	// Handler receives Stop and Start; nil: a LogHandler on Logger.
	Handler Handler
	// Logger receives connection events.
	Logger zerolog.Logger
	// Rand picks the broker to consult, jitters the backoff and makes up ConsumerID. It is used
	// from Run's goroutine only (math/rand/v2's Rand is not safe for concurrent use). Nil:
	// seeded randomly; tests pass a fixed seed.
	Rand *rand.Rand
	// Dial connects to a broker (nil: TCP with net.Dialer). ctx carries DialTimeout.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// MaxFrameBytes is the largest frame read from the coordinator (DefaultMaxFrame). A
	// StartRequest of a very wide assignment may need more (docs §2 "Size limit").
	MaxFrameBytes int
	// DialTimeout bounds connecting to a broker and getting its ConsultResponse
	// (DefaultDialTimeout).
	DialTimeout time.Duration
	// GrouplessConsult consults at version 0, without naming the group, as consumers written
	// before ConsultRequest version 1 do (docs §5); such a consumer registers with the bridge it
	// asked, which relays it to the group's coordinator when that is another bridge.
	GrouplessConsult bool
	// BackoffMin and BackoffMax bound the wait before re-discovering the coordinator: it
	// doubles from BackoffMin up to BackoffMax on consecutive failures, jittered to between
	// half and all of it so that the consumers of a failed coordinator do not come back in
	// lockstep (DefaultBackoffMin, DefaultBackoffMax).
	BackoffMin, BackoffMax time.Duration
}

// Client is a legacy consumer's connection to its group's coordinator. Create it with
// NewClient and run it with Run; Commit may be called from any goroutine.
type Client struct {
	cfg     ClientConfig
	reg     RegisterRequest
	log     zerolog.Logger
	handler Handler
	rnd     *rand.Rand
	dial    func(ctx context.Context, addr string) (net.Conn, error)
	running atomic.Bool

	// Run's goroutine only.
	known    []string // brokers to consult: the configured ones, then those learned
	fetching bool     // OnStart was called and OnStop not since
	wbuf     []byte

	mu      sync.Mutex
	owned   []PartitionOffset        // the last StartRequest's assignment, in its order
	ownedBy map[TopicPartition]bool  // the same, as a set
	offsets map[TopicPartition]int64 // next offset to consume, when known
	// pings counts the PingResponses built, written the last one written whole; written
	// closes and is replaced at each write (Reported).
	pings, pingWritten, pingBuilt uint64
	written                       chan struct{}
}

// NewClient checks cfg, fills in defaults and builds a Client; it does not connect.
func NewClient(cfg ClientConfig) (*Client, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("legacy: ClientConfig.Brokers is empty")
	}
	for _, b := range cfg.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			return nil, fmt.Errorf("legacy: broker %q: %w", b, err)
		}
	}
	if cfg.AutoOffsetReset == "" {
		cfg.AutoOffsetReset = ResetLargest
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.MaxPingRetries == 0 {
		cfg.MaxPingRetries = DefaultMaxPingRetries
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	cfg.BackoffMax = max(cfg.BackoffMax, cfg.BackoffMin)
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrame
	}
	if cfg.PingInterval%time.Millisecond != 0 || cfg.PingInterval < time.Millisecond ||
		cfg.PingInterval.Milliseconds() > math.MaxInt32 {
		return nil, fmt.Errorf("legacy: PingInterval %v is not a positive whole number of milliseconds that fits 32 bits", cfg.PingInterval)
	}
	rnd := cfg.Rand
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if cfg.ConsumerID == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "localhost"
		}
		// Kafka 0.8 ZookeeperConsumerConnector: group_host-ms-<first 8 hex of a UUID>.
		cfg.ConsumerID = fmt.Sprintf("%s_%s-%d-%08x", cfg.GroupID, host, time.Now().UnixMilli(), rnd.Uint32())
	}
	reg := RegisterRequest{
		GroupID:         cfg.GroupID,
		ConsumerID:      cfg.ConsumerID,
		AutoCommit:      cfg.AutoCommit,
		AutoOffsetReset: cfg.AutoOffsetReset,
		PingIntervalMs:  int32(cfg.PingInterval.Milliseconds()),
		MaxPingRetries:  cfg.MaxPingRetries,
		Subscription:    subscriptionFromMap(cfg.Subscription),
	}
	// The coordinator's checks, run here first so a configuration mistake is reported by
	// NewClient instead of as a refusal after connecting.
	if _, err := validateRegister(&reg, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("legacy: client configuration: %w", err)
	}
	if err := reg.Validate(); err != nil {
		return nil, fmt.Errorf("legacy: client configuration: %w", err)
	}
	log := cfg.Logger.With().Str("component", "legacy-client").
		Str("group", cfg.GroupID).Str("consumer", cfg.ConsumerID).Logger()
	handler := cfg.Handler
	if handler == nil {
		handler = LogHandler{Logger: log}
	}
	dial := cfg.Dial
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	return &Client{
		cfg:     cfg,
		reg:     reg,
		log:     log,
		handler: handler,
		rnd:     rnd,
		dial:    dial,
		known:   slices.Clone(cfg.Brokers),
		ownedBy: map[TopicPartition]bool{},
		offsets: map[TopicPartition]int64{},
		written: make(chan struct{}),
	}, nil
}

// subscriptionFromMap turns a topic → threads map into the wire form, sorted by topic so that
// the same configuration always registers the same bytes.
func subscriptionFromMap(m map[string]int) []TopicThreads {
	out := make([]TopicThreads, 0, len(m))
	for t, n := range m {
		out = append(out, TopicThreads{Topic: t, Threads: int32(min(max(n, math.MinInt32), math.MaxInt32))})
	}
	slices.SortFunc(out, func(a, b TopicThreads) int { return strings.Compare(a.Topic, b.Topic) })
	return out
}

// ConsumerID returns the consumer id the client registers with (made up by NewClient when the
// configuration left it empty).
func (c *Client) ConsumerID() string { return c.reg.ConsumerID }

// Commit records that the application consumed tp up to nextOffset-1: nextOffset is the next
// offset to consume, the value 0.8 writes to /offsets. With AutoCommit it is reported in every
// PingResponse; the coordinator writes it to ZooKeeper. It only updates memory and may be
// called from any goroutine. A partition not in the current assignment (revoked by a Start
// since) and negative offsets are ignored: the coordinator would reject them, and a late
// commit of a revoked partition must not overwrite its new owner's progress.
func (c *Client) Commit(tp TopicPartition, nextOffset int64) {
	if nextOffset < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ownedBy[tp] {
		c.offsets[tp] = nextOffset
	}
}

// Reported waits until a PingResponse built after the call has been written to the
// coordinator: with AutoCommit, it carried every offset given to Commit before the call. The
// protocol has no leave, so a consumer that shuts down stops consuming, calls Reported, then
// ends Run; offsets it never reported would be lost, and the next owner of their partitions
// would start behind them. Without AutoCommit it returns at once. It returns ctx's error when no
// such ping is answered in time (no coordinator, or one that does not ping).
func (c *Client) Reported(ctx context.Context) error {
	if !c.cfg.AutoCommit {
		return nil
	}
	c.mu.Lock()
	target := c.pings + 1
	c.mu.Unlock()
	for {
		c.mu.Lock()
		done, written := c.pingWritten >= target, c.written
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-written:
		case <-ctx.Done():
			return fmt.Errorf("legacy: %s: no ping reported the last offsets: %w", c.reg.ConsumerID, ctx.Err())
		}
	}
}

// Run is the consumer's life: consumerStartup (consult a random known broker, trying the others
// on failure; connect to the coordinator; register), then answering the coordinator's requests
// until the connection is lost, then — after stopping the fetchers — the same again, with a
// bounded, jittered backoff, until ctx ends.
//
// It returns nil when ctx ends, and returns early with an error:
//   - wrapping ErrAllBrokersUnavailable when no known broker answers at the very first consult
//     (seed 001 step 1.2; later, once the client has found a coordinator, an unreachable
//     cluster is a failover in progress and Run keeps retrying);
//   - wrapping the CodeError of a registration refused for good: GROUP_MODE_REFUSED (the group
//     moved to the Kafka protocol; retrying cannot help, an operator must act), and the
//     configuration errors INVALID_REQUEST, INVALID_PING_SETTINGS, UNSUPPORTED_VERSION and
//     ILLEGAL_STATE (docs §8 "Consumer" 3). NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
//     CONSUMER_ID_IN_USE (our own previous session that the coordinator has not yet found
//     dead, as 0.8 retries its conflicting ephemeral node), UNKNOWN and codes this version
//     does not know are retried.
//
// Handler's OnStop is called before Run returns if the fetchers were started. Only one Run may
// be active at a time.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("legacy: Client.Run is already running")
	}
	defer c.running.Store(false)
	defer c.stopFetching()

	discovered := false // a coordinator was found once: from then on failures are retried
	attempt := 0
	for {
		served, err := c.session(ctx, &discovered)
		c.stopFetching()
		if ctx.Err() != nil {
			return nil
		}
		if !discovered && errors.Is(err, ErrAllBrokersUnavailable) {
			return err
		}
		var refused *RegisterRefusedError
		if errors.As(err, &refused) && refused.Permanent() {
			return err
		}
		if served {
			attempt = 0
		}
		wait := c.backoff(attempt)
		attempt++
		c.log.Warn().Err(err).Dur("retry_in", wait).Msg("lost the coordinator; discovering it again")
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// backoff is BackoffMin doubled attempt times, capped at BackoffMax, then jittered to
// [d/2, d].
func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.BackoffMin
	for i := 0; i < attempt && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.BackoffMax)
	half := d / 2
	return half + time.Duration(c.rnd.Int64N(int64(d-half)+1))
}

// RegisterRefusedError is the coordinator's refusal of our RegisterRequest. It wraps the
// CodeError, so errors.Is(err, CodeGroupModeRefused.Err()) works.
type RegisterRefusedError struct {
	Group, Consumer string
	Code            ErrorCode
}

func (e *RegisterRefusedError) Error() string {
	var advice string
	switch e.Code {
	case CodeGroupModeRefused:
		advice = "the group has moved to the Kafka group protocol (mode kafka or finalized) and accepts no legacy consumer; " +
			"upgrade this application to a Kafka client, or roll the group back with \"zkbridge rollback\""
	case CodeInvalidRequest, CodeInvalidPingSettings:
		advice = "check the consumer's configuration"
	case CodeConsumerIDInUse:
		advice = "another live consumer registered this id (or the coordinator has not yet noticed our previous connection died)"
	default:
		advice = e.Code.Description()
	}
	return fmt.Sprintf("legacy: coordinator refused consumer %q of group %q: %v: %s", e.Consumer, e.Group, e.Code, advice)
}

// Unwrap returns the CodeError.
func (e *RegisterRefusedError) Unwrap() error { return CodeError{Code: e.Code} }

// Permanent reports whether registering again cannot succeed without an operator (docs §8
// "Consumer" 3): Run returns such refusals instead of retrying them.
func (e *RegisterRefusedError) Permanent() bool {
	switch e.Code {
	case CodeGroupModeRefused, CodeInvalidRequest, CodeInvalidPingSettings, CodeUnsupportedVersion, CodeIllegalState:
		return true
	}
	return false
}

// session runs one consumerStartup and serves the coordinator until the connection is lost.
// served says the coordinator sent at least one request, i.e. the registration took.
func (c *Client) session(ctx context.Context, discovered *bool) (served bool, err error) {
	conn, err := c.discover(ctx)
	if err != nil {
		return false, err
	}
	*discovered = true
	defer conn.Close()
	// Reads block for up to the silence window; ctx must be able to cut them short.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	if err := c.write(conn, &c.reg); err != nil {
		return false, fmt.Errorf("legacy: sending RegisterRequest to %s: %w", conn.RemoteAddr(), err)
	}
	c.log.Info().Stringer("coordinator", conn.RemoteAddr()).Msg("sent RegisterRequest; waiting for the coordinator's requests")
	return c.serve(conn)
}

// discover is consumerStartup steps 1-4: consult a randomly picked known broker (the others in
// random order when it fails) and connect to the coordinator it names, reusing the consult
// connection when the coordinator is the broker consulted.
func (c *Client) discover(ctx context.Context) (net.Conn, error) {
	var errs []error
	answered := false
	for _, i := range c.rnd.Perm(len(c.known)) {
		addr := c.known[i]
		conn, resp, err := c.consult(ctx, addr)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			errs = append(errs, err)
			continue
		}
		answered = true
		coord, err := c.learn(addr, resp)
		if err != nil {
			_ = conn.Close()
			errs = append(errs, err)
			continue
		}
		if coord == addr {
			return conn, nil
		}
		_ = conn.Close()
		dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
		conn, err = c.dial(dctx, coord)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("legacy: connecting to coordinator %s: %w", coord, err)
		}
		return conn, nil
	}
	if !answered {
		return nil, fmt.Errorf("legacy: consult %s: %w: %w", strings.Join(c.known, ", "), ErrAllBrokersUnavailable, errors.Join(errs...))
	}
	return nil, fmt.Errorf("legacy: no coordinator found: %w", errors.Join(errs...))
}

// consult dials addr and exchanges ConsultRequest/ConsultResponse within DialTimeout.
func (c *Client) consult(ctx context.Context, addr string) (net.Conn, *ConsultResponse, error) {
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	conn, err := c.dial(dctx, addr)
	if err != nil {
		return nil, nil, fmt.Errorf("legacy: connecting to broker %s: %w", addr, err)
	}
	deadline, _ := dctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(dctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	resp, err := c.consultOn(conn)
	if !stop() {
		// ctx ended during the exchange, and the AfterFunc may have set a past deadline.
		err = errors.Join(err, dctx.Err())
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("legacy: consulting broker %s: %w", addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, resp, nil
}

// consultOn asks with the group named (version ConsultVersionGroup), so that a bridge of
// several names the group's own coordinator; a bridge that answers UNSUPPORTED_VERSION (one
// before several bridges) is asked again at version 0 on the same connection (docs §5).
func (c *Client) consultOn(conn net.Conn) (*ConsultResponse, error) {
	if c.cfg.GrouplessConsult {
		return c.consultAs(conn, &ConsultRequest{})
	}
	resp, err := c.consultAs(conn, &ConsultRequest{GroupID: c.reg.GroupID})
	if err != nil || resp.ErrorCode != CodeUnsupportedVersion {
		return resp, err
	}
	return c.consultAs(conn, &ConsultRequest{})
}

func (c *Client) consultAs(conn net.Conn, req *ConsultRequest) (*ConsultResponse, error) {
	c.wbuf = AppendFrame(c.wbuf[:0], req)
	if _, err := conn.Write(c.wbuf); err != nil {
		return nil, err
	}
	frame, err := ReadFrame(conn, c.cfg.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	m, err := Decode(frame)
	if err != nil {
		return nil, err
	}
	resp, ok := m.(*ConsultResponse)
	if !ok {
		return nil, fmt.Errorf("%w: got %v in answer to ConsultRequest", ErrProtocol, m.Type())
	}
	return resp, nil
}

// learn applies a ConsultResponse (consumerStartup step 3): the brokers it lists join the
// known list, and the coordinator's address is returned.
func (c *Client) learn(from string, resp *ConsultResponse) (string, error) {
	if err := resp.ErrorCode.Err(); err != nil {
		return "", fmt.Errorf("legacy: broker %s: %w", from, err)
	}
	coord := ""
	for _, b := range resp.Brokers {
		addr := net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		if !slices.Contains(c.known, addr) {
			c.known = append(c.known, addr)
		}
		if b.ID == resp.CoordinatorID {
			coord = addr
		}
	}
	if coord == "" {
		return "", fmt.Errorf("legacy: broker %s names coordinator %d, which is not in its broker list", from, resp.CoordinatorID)
	}
	return coord, nil
}

// serve is consumerStartup step 5, "keep block-reading from the channel": answer every request
// in order until the connection fails or the coordinator stays silent for
// (max_ping_retries + 1) × ping_interval (docs §8 "Consumer" 2).
func (c *Client) serve(conn net.Conn) (served bool, err error) {
	silence := time.Duration(int64(c.cfg.MaxPingRetries)+1) * c.cfg.PingInterval
	for {
		_ = conn.SetReadDeadline(time.Now().Add(silence))
		frame, err := ReadFrame(conn, c.cfg.MaxFrameBytes)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return served, fmt.Errorf("legacy: no request from the coordinator for %v; considering it failed", silence)
			}
			if errors.Is(err, io.EOF) {
				return served, fmt.Errorf("legacy: the coordinator closed the connection: %w", err)
			}
			return served, fmt.Errorf("legacy: reading from the coordinator: %w", err)
		}
		m, err := Decode(frame)
		if err != nil {
			resp := unsupportedVersionAnswer(err)
			if resp == nil {
				return served, fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			c.log.Warn().Err(err).Msg("request of an unsupported version")
			m = resp
		} else {
			if refusal, ok := m.(*RegisterResponse); ok {
				return served, &RegisterRefusedError{Group: c.reg.GroupID, Consumer: c.reg.ConsumerID, Code: refusal.ErrorCode}
			}
			resp := c.handle(m)
			if resp == nil {
				return served, fmt.Errorf("%w: unexpected %v from the coordinator", ErrProtocol, m.Type())
			}
			m = resp
		}
		served = true
		if err := c.write(conn, m); err != nil {
			return served, fmt.Errorf("legacy: answering the coordinator: %w", err)
		}
		if _, ok := m.(*PingResponse); ok {
			c.mu.Lock()
			c.pingWritten = c.pingBuilt
			close(c.written)
			c.written = make(chan struct{})
			c.mu.Unlock()
		}
	}
}

// unsupportedVersionAnswer returns the UNSUPPORTED_VERSION answer docs §5 prescribes for a
// Stop or Start request of a version we do not speak, nil for any other decoding failure.
func unsupportedVersionAnswer(err error) Message {
	var de *DecodeError
	if !errors.Is(err, ErrUnsupportedVersion) || !errors.As(err, &de) {
		return nil
	}
	switch de.Type {
	case TypeStopRequest:
		return &StopResponse{ErrorCode: CodeUnsupportedVersion}
	case TypeStartRequest:
		return &StartResponse{ErrorCode: CodeUnsupportedVersion}
	}
	return nil
}

// handle answers one request from the coordinator; nil for anything that is not one.
func (c *Client) handle(m Message) Message {
	switch m := m.(type) {
	case *PingRequest:
		if m.NumRetries > 0 {
			c.log.Debug().Int16("num_retries", m.NumRetries).Msg("coordinator missed our answers")
		}
		return c.pingResponse()
	case *StopRequest:
		c.stopFetching()
		return &StopResponse{ErrorCode: CodeNone}
	case *StartRequest:
		return &StartResponse{ErrorCode: c.start(m.Assigned)}
	}
	return nil
}

// pingResponse reports the offsets of the partitions owned since the last Start whose next
// offset is known ("Handling PingRequest"): committed, or the Start's real offset. A partition
// still at OffsetSmallest/OffsetLargest has nothing to report. After a Stop the same
// partitions are reported, so the coordinator collects final offsets (docs §8 "Coordinator" 2).
func (c *Client) pingResponse() *PingResponse {
	if !c.cfg.AutoCommit {
		return &PingResponse{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pings++
	c.pingBuilt = c.pings
	resp := &PingResponse{HasOffsets: true}
	for _, p := range c.owned {
		tp := TopicPartition{p.Topic, p.Partition}
		if off, ok := c.offsets[tp]; ok {
			resp.Offsets = append(resp.Offsets, PartitionOffset{Topic: p.Topic, Partition: p.Partition, Offset: off})
		}
	}
	return resp
}

// start handles a StartRequest: it is valid only while stopped, with offsets >= -2 and no
// partition twice (docs §6 StartRequest).
func (c *Client) start(parts []PartitionOffset) ErrorCode {
	if c.fetching {
		c.log.Warn().Msg("StartRequest without a StopRequest first")
		return CodeIllegalState
	}
	set := make(map[TopicPartition]bool, len(parts))
	for _, p := range parts {
		tp := TopicPartition{p.Topic, p.Partition}
		if p.Offset < OffsetSmallest || set[tp] {
			c.log.Warn().Stringer("partition", tp).Int64("offset", p.Offset).Msg("invalid StartRequest")
			return CodeInvalidRequest
		}
		set[tp] = true
	}
	// The new assignment replaces the old before the handler runs, so that commits made from
	// its fetchers are accepted at once.
	c.mu.Lock()
	c.owned = slices.Clone(parts)
	c.ownedBy = set
	clear(c.offsets)
	for _, p := range parts {
		if p.Offset >= 0 {
			c.offsets[TopicPartition{p.Topic, p.Partition}] = p.Offset
		}
	}
	c.mu.Unlock()

	c.fetching = true
	if err := c.handler.OnStart(slices.Clone(parts)); err != nil {
		c.log.Error().Err(err).Msg("starting the fetchers failed")
		return CodeUnknown
	}
	return CodeNone
}

func (c *Client) stopFetching() {
	if c.fetching {
		c.handler.OnStop()
		c.fetching = false
	}
}

func (c *Client) write(conn net.Conn, m Message) error {
	_ = conn.SetWriteDeadline(time.Now().Add(writeDeadline(c.cfg.PingInterval)))
	c.wbuf = AppendFrame(c.wbuf[:0], m)
	_, err := conn.Write(c.wbuf)
	return err
}
