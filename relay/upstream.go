package relay

// The upstream cluster: the real Kafka brokers the relay forwards to.
//
// An Upstream is the set of brokers (node id → host:port), which the
// bridge keeps current with SetBrokers (from ZooKeeper's /brokers/ids, or
// from Discover for --upstream bootstrap brokers), plus how to reach them.
// It holds no connection of its own between calls: each client connection
// of the bridge gets its own upstream connection per broker (upConn, upconn.go),
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
// (conn.go). The start-up check (Probe, Discover) tells the ways of not
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
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
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
