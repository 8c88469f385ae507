package relay

// Package relay makes the bridge the only address a Kafka client needs.
//
// With a Proxy as its newproto.Config.Relay, a newproto.Server fronts a
// real cluster (an Upstream). Clients are given bootstrap.servers=<bridge>
// and nothing else:
//
//   - the bootstrap listener (the Server's own, Serve) is the bridge's node,
//     newproto.Config.NodeID, the coordinator of every group;
//   - each upstream broker k has a proxy listener (Proxy.Serve) that stands
//     for it: HOST:BASEPORT+k for broker k of the sorted broker list
//     (Config.Listen) or an explicit address (Config.Listeners).
//
// On every listener the group APIs and ApiVersions are answered by the
// Handler, as without a proxy, and every other request is relayed to the
// listener's broker (the bootstrap listener's relayed requests go to any
// live broker: the first of the broker list, starting at a per-connection
// offset, that accepts a connection). Relayed means byte for byte: the
// relay reads the request header's api key, version and correlation id,
// writes the frame to the broker unchanged, reads the broker's response
// frame and writes it back unchanged, in its place among the connection's
// responses (newproto keeps them in request order, whichever side
// answers).
// Produce and Fetch are never decoded, and large frames are not even
// buffered: they are copied between the sockets as they arrive
// (relayHeadBytes, relayStreamBytes).
//
// Three exceptions, because their answers name brokers by address:
//
//   - Metadata and DescribeCluster responses are decoded, each broker's
//     address replaced by its proxy listener's, the bridge's node added to
//     Metadata's brokers, and re-encoded (rewrite.go). Metadata is
//     small, and it is what every client learns addresses from.
//   - FindCoordinator: for groups (key type 0) the Handler answers with the
//     bridge's node; for transactions (key type 1) the request is relayed
//     and the coordinator's address rewritten to its proxy listener.
//   - Produce v10+ and Fetch v16+ responses may carry leader addresses
//     (KIP-951); ApiVersions caps those keys below them (relayCeiling) so
//     that no real broker address reaches a client.
//
// Several bridges in front of one cluster (one service: Config.Peers)
// must give every client the same broker list, or clients swap their broker
// set at every refresh. Each upstream broker is then served by one bridge,
// which the bridges compute alike from their live set (the bridge package's
// placement of "broker/<id>"), and every bridge's rewrite names the broker
// at that bridge's proxy listener and lists every live bridge as itself.
// Every bridge still keeps a listener for every broker: any bridge relays
// any broker, so a client holding an older Metadata is served where it
// was told, and moves at its next refresh.
//
// ApiVersions answers, per key, our range for the keys answered locally
// and the upstream broker's range, intersected with what kmsg knows, for
// relayed keys (mergeAPIVersions); on the bootstrap listener the upstream
// range is the intersection over the brokers whose tables are known.
//
// Produce with acks=0 has no response (Kafka's rule: the broker sends
// none, the client waits for none): the relay reads acks (produceAcks,
// the only body field it reads), forwards the request and writes nothing.
//
// The group APIs the bridge does not serve (OffsetDelete, TxnOffsetCommit,
// the KIP-848, KIP-932 and KIP-1071 group APIs) are not relayed either:
// the real cluster's coordinator would then hold a group behind the
// bridge's back. They are answered UNSUPPORTED_VERSION and left out of
// ApiVersions (routeOf).
//
// Failures:
//
//   - A broker that is down is refused as the real cluster refuses it:
//     once a dial of it fails (a client's, or the start-up Probe), its
//     proxy listener is closed, so that connecting to it gets ECONNREFUSED
//     instead of a connection accepted and then closed (which clients
//     handle worse: some retry at once, in a loop, some report confusing
//     errors). Metadata keeps naming the broker at that port while the
//     cluster does. The proxy dials a down broker every ProbeInterval, and
//     at once any broker that closed an upstream connection, and listens
//     again, on the same port, as soon as one dial succeeds (a broker
//     registered anew is assumed up). Connections already accepted stay;
//     they fail as their upstream connections do. Other listeners and
//     their connections are not touched.
//   - Each client connection has its own upstream connection per broker,
//     dialed at the first request that needs it (upConn in
//     upconn.go), closed with the client connection. A broker that
//     cannot be dialed, that closes the connection with requests in
//     flight, or that does not answer a request within
//     UpstreamConfig.RequestTimeout closes the client connection, after the
//     responses before the lost request: a client sees what a broker that
//     went down looks like, reconnects, refreshes its metadata, and the
//     bridge dials again. Other connections and listeners never wait on
//     it. A broker that closes an idle upstream connection loses nothing;
//     the next request dials again.
//   - A garbled client frame closes that client connection only.
//   - While Config.FetchGate refuses, a relayed Fetch response is
//     withheld and its client connection closed (newproto), since the
//     bridge cannot then vouch that the fetching member still owns its
//     partitions; other requests are relayed as usual.
//
// SASL: SaslHandshake and SaslAuthenticate are never relayed undecoded
// (routeOf); newproto answers them, and with SASL forwarded to the brokers
// sends them on the connection's upstream connection itself (ForwardSASL,
// sasl.go), which is then the only one the client connection uses. TLS
// toward the brokers is UpstreamConfig.Dial's.
//
// Not implemented: transactional offset commits (TxnOffsetCommit is a
// group API the bridge does not serve), and rewriting DescribeQuorum's
// controller endpoints (an admin-only API).

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/newproto"
)

// Config configures a Proxy.
type Config struct {
	// Upstream is the real cluster; required.
	Upstream *Upstream
	// Listen is "HOST:BASEPORT": broker k of the sorted broker list gets
	// a proxy listener on HOST:BASEPORT+k; a broker that joins later gets
	// the lowest free k, and a broker keeps its k while the process
	// lives (portPlan). A BASEPORT of 0 lets the system choose each
	// port (tests). Empty: only the brokers in Listeners get one.
	Listen string
	// Listeners gives brokers explicit listen addresses (node id →
	// host:port), taking precedence over Listen.
	Listeners map[int32]string
	// ProbeInterval is how often a broker that is down (its last dial
	// failed, its proxy listener closed) is dialed to see whether it is
	// back; 0: DefaultProbeInterval.
	ProbeInterval time.Duration
	// FetchGate, when set, is asked before each relayed Fetch response
	// is written to its client; while it returns an error the response
	// is withheld and the client's connection closed, and the client
	// retries as after any broken connection. The bridge closes it while
	// it cannot vouch that its groups' members still own what they fetch
	// (its ZooKeeper session in doubt, or lost and its groups not yet
	// rebalanced): a fetch then could hand out records of a partition
	// another consumer has taken. until, unless zero, is how long its
	// answer holds: a response not written in full by then is withheld
	// (or cut) and the connection closed as well, since a process paused
	// between the answer and the write would otherwise hand it out
	// after its session may have expired. It runs on every relayed Fetch
	// response, on the connection's writer, so it must be cheap and
	// must not block.
	FetchGate func(now time.Time) (until time.Time, err error)
	// Peers, when set, names the other bridges fronting the same
	// cluster (several bridges as one service, peers.go): Metadata then
	// lists them too, and names each upstream broker at the proxy
	// listener of the one bridge that serves it. Nil: this bridge alone.
	Peers Peers
	// Logger receives listener and connection events.
	Logger zerolog.Logger
	// Registerer receives the metrics; nil: not exported.
	Registerer prometheus.Registerer
}

// Peers names the other bridges of one service, so that every bridge's
// relayed Metadata lists the same brokers at the same addresses. Its
// methods are called for every rewritten response: they must be cheap and
// safe for concurrent use, and what they return is shared (read only).
type Peers interface {
	// Others returns the other live bridges, which Metadata lists as
	// themselves (the group coordinators) beside this bridge's node.
	Others() []newproto.Broker
	// ServedElsewhere returns, by upstream broker id, the proxy listener
	// of the bridge that serves the broker when that is another bridge
	// (NodeID is the upstream broker's id, Host and Port the listener's
	// address). A broker it does not name is served by this bridge.
	ServedElsewhere() map[int32]newproto.Broker
}

// DefaultProbeInterval is what a zero Config.ProbeInterval means:
// about as often as clients retry a broker that refuses them.
const DefaultProbeInterval = time.Second

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.Upstream == nil:
		return errors.New("relay: Upstream is required")
	case c.Listen == "" && len(c.Listeners) == 0:
		return errors.New("relay: Listen or Listeners is required: brokers without a proxy listener cannot be reached")
	case c.ProbeInterval < 0:
		return fmt.Errorf("relay: ProbeInterval %s is negative", c.ProbeInterval)
	}
	if c.Listen != "" {
		if _, _, err := parseBaseAddr(c.Listen); err != nil {
			return err
		}
	}
	for id, a := range c.Listeners {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("relay: proxy listener of broker %d: %w", id, err)
		}
	}
	return nil
}

// Proxy relays a newproto.Server's requests to the Upstream
// (newproto.Config.Relay) and serves a proxy listener per upstream broker
// (Serve).
type Proxy struct {
	cfg     Config
	up      *Upstream
	log     zerolog.Logger
	metrics *relayMetrics
	bufs    *bufPool // frames the relay forwards

	// suspects receives brokers that closed an upstream connection: the
	// prober dials them at once to learn whether they are down.
	suspects chan int32

	mu sync.Mutex
	// ports is where clients reach each broker: its proxy listener's
	// port, open, or closed while the broker is down.
	ports map[int32]int32
	plan  portPlan
	// last is the port each broker's listener had, so that a broker
	// that leaves and comes back gets it again even when the system
	// chose it (BASEPORT 0).
	last map[int32]int32
	// portsChanged is closed, and replaced, when ports changes (Ports).
	portsChanged chan struct{}

	// draining: Fetches for brokers served elsewhere are refused (drain.go).
	draining atomic.Bool
	// producersRefused: RefuseProducers was called (drain.go).
	producersRefused atomic.Bool
	// refresh counts the calls of Refresh (drain.go).
	refresh atomic.Int64
	connsMu sync.Mutex
	conns   map[*relayConn]struct{} // open client connections, for Untold
}

// New checks cfg and builds a Proxy; it does not listen.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newRelayMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	log := cfg.Logger.With().Str("component", "relay").Logger()
	return &Proxy{cfg: cfg, up: cfg.Upstream, log: log, metrics: m, bufs: &bufPool{},
		suspects: make(chan int32, 64), ports: map[int32]int32{}, last: map[int32]int32{},
		portsChanged: make(chan struct{}), conns: map[*relayConn]struct{}{}}, nil
}

// suspect asks the prober to dial broker id soon: it closed an upstream
// connection, and may be going down. It never blocks; a full queue drops
// the request (the prober has plenty to do already).
func (p *Proxy) suspect(id int32) {
	select {
	case p.suspects <- id:
	default:
	}
}

// addressBook snapshots where clients of a connection reach each broker:
// the advertised host, or the host the client dialed, and the proxy
// listeners' ports.
func (p *Proxy) addressBook(c *newproto.ClientConn) *addressBook {
	// The node's host is the advertised one, or the one the client
	// dialed.
	a := &addressBook{self: c.Node()}
	a.host = a.self.Host
	p.mu.Lock()
	a.ports = make(map[int32]int32, len(p.ports))
	for id, port := range p.ports {
		a.ports[id] = port
	}
	p.mu.Unlock()
	if p.cfg.Peers != nil {
		a.bridges = p.cfg.Peers.Others()
		a.elsewhere = p.cfg.Peers.ServedElsewhere()
		a.draining = p.draining.Load()
	}
	return a
}

// Ports returns the port of this bridge's proxy listener for each upstream
// broker (open, or kept while the broker is down: where Metadata names it),
// and a channel closed at the next change. The bridge advertises them to
// the other bridges of its service (its registration).
func (p *Proxy) Ports() (map[int32]int32, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int32]int32, len(p.ports))
	for id, port := range p.ports {
		out[id] = port
	}
	return out, p.portsChanged
}

// portsChangedLocked wakes the callers of Ports; p.mu is held.
func (p *Proxy) portsChangedLocked() {
	close(p.portsChanged)
	p.portsChanged = make(chan struct{})
}
