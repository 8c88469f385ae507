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
//     upstream.go), closed with the client connection. A broker that
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
// Not implemented: SASL and TLS toward the brokers (the bridge dials
// PLAINTEXT; a client's SaslHandshake is relayed like any request, on its
// own upstream connection, but nothing checks it), transactional offset
// commits (TxnOffsetCommit is a group API the bridge does not serve), and
// rewriting DescribeQuorum's controller endpoints (an admin-only API).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	// another consumer has taken. It runs on every relayed Fetch
	// response, on the connection's writer, so it must be cheap and
	// must not block.
	FetchGate func(now time.Time) error
	// Logger receives listener and connection events.
	Logger zerolog.Logger
	// Registerer receives the metrics; nil: not exported.
	Registerer prometheus.Registerer
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
		suspects: make(chan int32, 64), ports: map[int32]int32{}, last: map[int32]int32{}}, nil
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
	return a
}

// Serve serves a proxy listener on srv for each upstream broker and follows
// the Upstream's broker set: a broker that joins gets a listener, one that
// leaves loses it (its clients are refused, as by a broker that is down),
// one that comes back gets its old port again. A broker that is down (a
// dial failed) has its listener closed until a dial succeeds again, which
// Serve tries every ProbeInterval. A listener that cannot be opened
// is retried every few seconds. Serve returns when ctx is done (closing
// the whole server, as srv.Serve does) or srv is closed. srv must have p
// as its newproto.Config.Relay.
func (p *Proxy) Serve(ctx context.Context, srv *newproto.Server) error {
	open := map[int32]net.Listener{}
	var wg sync.WaitGroup
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer func() {
		stopProbes()
		for id, ln := range open {
			_ = ln.Close()
			p.setPort(id, 0)
		}
		wg.Wait()
	}()
	wg.Go(func() { p.probe(probeCtx) })
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		changed := p.up.watch()
		if p.reconcile(ctx, srv, open, &wg) {
			retry.Reset(5 * time.Second)
		} else {
			retry.Stop()
		}
		select {
		case <-changed:
		case <-retry.C:
		case <-srv.Done():
			return nil
		case <-ctx.Done():
			// The proxy listeners' serve calls close the server
			// too; closing it here as well makes the return wait
			// for the drain, as Serve's does.
			return srv.Close()
		}
	}
}

// reconcile opens a listener for every broker that is up and has none,
// and closes those of brokers that left or are down. It reports whether a
// listener failed to open.
func (p *Proxy) reconcile(ctx context.Context, srv *newproto.Server, open map[int32]net.Listener, wg *sync.WaitGroup) (retry bool) {
	ids := p.up.brokerIDs()
	down := p.up.downBrokers()
	p.metrics.brokersDown.Set(float64(len(down)))
	p.mu.Lock()
	p.plan = p.plan.assign(ids)
	plan := p.plan
	p.mu.Unlock()

	want := make(map[int32]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for id, ln := range open {
		switch {
		case !want[id]:
			_ = ln.Close()
			delete(open, id)
			p.setPort(id, 0)
			p.log.Info().Int32("broker", id).Stringer("addr", ln.Addr()).Msg("upstream broker left; proxy listener closed")
		case down[id]:
			// Its port stays in the address book: Metadata names
			// the broker there as long as the cluster does, and
			// clients are refused there, as by the broker.
			_ = ln.Close()
			delete(open, id)
			p.log.Info().Int32("broker", id).Stringer("addr", ln.Addr()).Msg("upstream broker down; proxy listener closed until it answers")
		}
	}
	p.mu.Lock()
	for id := range p.ports {
		if !want[id] {
			delete(p.ports, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		if _, ok := open[id]; ok {
			continue
		}
		p.mu.Lock()
		addr, err := plan.listenAddr(id, p.cfg.Listeners, p.cfg.Listen)
		last := p.last[id]
		_, known := p.ports[id]
		p.mu.Unlock()
		if err == nil && addr == "" {
			p.log.Warn().Int32("broker", id).Msg("upstream broker has no proxy listener configured; Metadata leaves it out")
			continue
		}
		if down[id] {
			if _, port, perr := net.SplitHostPort(addr); err == nil && perr == nil && !known && port != "0" {
				// Down from the start: clients are refused at
				// the port it is to have.
				n, _ := strconv.Atoi(port)
				p.setPort(id, int32(n))
			}
			continue
		}
		var ln net.Listener
		if err == nil {
			var lc net.ListenConfig
			if host, port, _ := net.SplitHostPort(addr); port == "0" && last != 0 {
				// The port it had, if it is still free.
				ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(last))))
			}
			if ln == nil {
				ln, err = lc.Listen(ctx, "tcp", addr)
			}
		}
		if err != nil {
			p.log.Error().Err(err).Int32("broker", id).Msg("cannot open proxy listener; retrying")
			retry = true
			continue
		}
		open[id] = ln
		p.setPort(id, int32(ln.Addr().(*net.TCPAddr).Port))
		wg.Go(func() {
			err := srv.ServeBroker(ctx, ln, id)
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, newproto.ErrServerClosed) {
				p.log.Error().Err(err).Int32("broker", id).Msg("proxy listener failed")
			}
		})
	}
	return retry
}

// probe dials, every ProbeInterval, the brokers that are down, and at once
// those suspected (suspect), one dial per broker at a time, until ctx
// ends. A dial records its outcome (Upstream.setReachable), which
// Serve follows.
func (p *Proxy) probe(ctx context.Context) {
	tick := time.NewTicker(p.cfg.ProbeInterval)
	defer tick.Stop()
	busy := map[int32]bool{}
	done := make(chan int32)
	var wg sync.WaitGroup
	defer wg.Wait()
	dial := func(id int32) {
		if busy[id] {
			return
		}
		busy[id] = true
		wg.Go(func() {
			if nc, _, err := p.up.dial(ctx, id); err == nil {
				_ = nc.Close()
			}
			select {
			case done <- id:
			case <-ctx.Done():
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-done:
			delete(busy, id)
		case id := <-p.suspects:
			dial(id)
		case <-tick.C:
			for id := range p.up.downBrokers() {
				dial(id)
			}
		}
	}
}

func (p *Proxy) setPort(id, port int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if port == 0 {
		delete(p.ports, id)
		return
	}
	p.ports[id] = port
	p.last[id] = port
}

// relayConn is the relay state of one client connection: its upstream
// connection, dialed on first use.
type relayConn struct {
	p  *Proxy
	c  *newproto.ClientConn
	in io.Reader // c's
	// broker is the upstream broker whose proxy listener c came on;
	// proxied is false on the bootstrap listener.
	broker  int32
	proxied bool

	mu     sync.Mutex
	up     *upConn
	lost   error // requests were lost upstream: the client connection is closing
	closed bool
}

// Open is the Server's hook for a new client connection
// (newproto.Relay).
func (p *Proxy) Open(c *newproto.ClientConn) newproto.RelayConn {
	rc := &relayConn{p: p, c: c, in: c.Reader()}
	rc.broker, rc.proxied = c.Info().UpstreamBroker()
	return rc
}

// Frames larger than these are not buffered whole: a request is read up
// to relayHeadBytes, which holds everything the relay reads of it (the
// header and, for Produce, the transactional id and acks, unless a client
// id or transactional id is unusually long: then the whole frame is read),
// and the rest copied to the broker as it arrives; a response over
// relayStreamBytes is copied to the client as it arrives. Cut-through
// keeps the relay's latency to one hop instead of a frame's transfer time,
// and its memory to a few kilobytes per request however large the frames
// (Fetch responses are up to fetch.max.bytes, 50 MiB by default). On
// Linux the copies are splice(2)s between the two sockets.
const (
	relayHeadBytes   = 4 << 10
	relayStreamBytes = 64 << 10
)

// coordinatorTransaction is FindCoordinatorRequest.CoordinatorType for a
// transaction coordinator, which the relay asks the real cluster for.
const coordinatorTransaction int8 = 1

// Next is the reader's hook (newproto.RelayConn): it reads the next frame
// and either relays it (relayed true) or returns it for the Handler
// (frame, and req when Next had to decode it to decide). err closes the
// connection; it is newproto.ReadFrameSize's for a frame not begun.
func (rc *relayConn) Next(ctx context.Context, seq uint64) (relayed bool, req *newproto.Request, frame []byte, err error) {
	c := rc.c
	n, err := newproto.ReadFrameSize(rc.in, c.MaxFrameBytes())
	if err != nil {
		return false, nil, nil, err
	}
	head := rc.p.bufs.get(int(min(n, relayHeadBytes)))
	if _, err := io.ReadFull(rc.in, head); err != nil {
		return false, nil, nil, shortFrame(n, err)
	}
	// whole reads the rest of the frame after head.
	whole := func() ([]byte, error) {
		if int(n) == len(head) {
			return head, nil
		}
		f := make([]byte, n)
		got := copy(f, head)
		rc.p.bufs.put(head)
		head = f
		if _, err := io.ReadFull(rc.in, f[got:]); err != nil {
			return nil, shortFrame(n, err)
		}
		return f, nil
	}
	h, err := peekHeader(head)
	if err != nil {
		frame, err := whole()
		return false, nil, frame, err // newproto.ParseRequest rejects it
	}
	p := &pendingReq{seq: seq, corr: h.corr, key: h.key, version: h.version}
	switch routeOf(h.key) {
	case routeLocal, routeRefuse:
		frame, err := whole()
		return false, nil, frame, err

	case routeFindCoordinator:
		if head, err = whole(); err != nil {
			return false, nil, nil, err
		}
		req, err := newproto.ParseRequest(head)
		if err != nil {
			return false, nil, nil, err
		}
		if req.Msg.(*kmsg.FindCoordinatorRequest).CoordinatorType != coordinatorTransaction {
			return false, req, head, nil
		}
		p.rewrite = rc.rewriter(h, (*addressBook).rewriteFindCoordinator)

	case routeRewrite:
		if kmsg.ResponseForKey(h.key).MaxVersion() < h.version || h.version < 0 {
			return false, nil, nil, newproto.BadFrame(newproto.RejectVersion, "%s v%d cannot be rewritten (codec knows v0-v%d)",
				kmsg.NameForKey(h.key), h.version, kmsg.ResponseForKey(h.key).MaxVersion())
		}
		edit := (*addressBook).rewriteMetadata
		if h.key == int16(kmsg.DescribeCluster) {
			edit = (*addressBook).rewriteDescribeCluster
		}
		p.rewrite = rc.rewriter(h, edit)

	case routeRelay:
		if h.key == int16(kmsg.Produce) {
			acks, err := produceAcks(head, h.version)
			if err != nil && int(n) > len(head) {
				// A long client or transactional id: acks lies
				// past the head.
				if head, err = whole(); err == nil {
					acks, err = produceAcks(head, h.version)
				}
			}
			if err != nil {
				return false, nil, nil, err
			}
			if acks == 0 {
				p = nil
			}
		}
	}

	rc.p.metrics.relayed(h.key)
	up, err := rc.upstream(ctx)
	if err != nil {
		return false, nil, nil, err
	}
	queued, err := up.send(p, n, head, rc.in)
	rc.p.bufs.put(head) // written: nothing refers to it
	switch {
	case err != nil && (queued || int(n) > len(head)):
		// The frame may have gone out in part, or the client's
		// stream stopped in the middle of it: neither stream can be
		// trusted. The upstream connection fails what it has
		// pending, this request included.
		return false, nil, nil, err
	case err != nil:
		c.Post(newproto.Relayed{Seq: seq, CorrelationID: h.corr, Key: h.key, Version: h.version,
			Err: &upstreamError{broker: up.broker, addr: up.addr, err: err}})
	case queued:
		// Answered by up.run, with a response or an error.
	default:
		// acks=0: nothing to write; the writer frees the slot in
		// its turn.
		c.Post(newproto.Relayed{Seq: seq, CorrelationID: h.corr, Key: h.key, Version: h.version})
	}
	return true, nil, nil, nil
}

// shortFrame is a frame that ended early: the client closed or stalled.
func shortFrame(n int32, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %d-byte frame: %w", n, err)
}

// rewriter returns the response rewrite for a request of this connection.
// The address book is taken when the response arrives, so a proxy
// listener opened meanwhile is in it.
func (rc *relayConn) rewriter(h relayHeader, edit func(*addressBook, kmsg.Response)) func([]byte) ([]byte, error) {
	return func(raw []byte) ([]byte, error) {
		book := rc.p.addressBook(rc.c)
		return rewriteResponse(raw, h.key, h.version, func(r kmsg.Response) { edit(book, r) })
	}
}

// upstream returns the connection's live upstream connection, dialing one
// if there is none: to the listener's broker, or for the bootstrap
// listener to the first broker that accepts, starting at an offset that
// spreads connections over the brokers.
func (rc *relayConn) upstream(ctx context.Context) (*upConn, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case rc.closed:
		return nil, net.ErrClosed
	case rc.lost != nil:
		return nil, rc.lost
	case rc.up != nil && rc.up.failed() == nil:
		return rc.up, nil
	}
	rc.up = nil

	var candidates []int32
	if rc.proxied {
		candidates = []int32{rc.broker}
	} else {
		ids := rc.p.up.brokerIDs()
		if len(ids) == 0 {
			return nil, errors.New("no upstream brokers")
		}
		start := int(rc.c.Info().ID % uint64(len(ids)))
		candidates = append(ids[start:], ids[:start]...)
		// Brokers known to be down last: they are tried, but
		// only when no other answers.
		down := rc.p.up.downBrokers()
		slices.SortStableFunc(candidates, func(a, b int32) int {
			return cmpBool(down[a], down[b])
		})
	}
	var errs []error
	for _, id := range candidates {
		nc, br, err := rc.p.up.dial(ctx, id)
		if err != nil {
			rc.p.metrics.failure("dial")
			errs = append(errs, err)
			continue
		}
		u := &upConn{
			broker:  id,
			addr:    nc.RemoteAddr().String(),
			nc:      nc,
			br:      br,
			timeout: rc.p.up.cfg.RequestTimeout,
			maxResp: rc.p.up.cfg.MaxResponseBytes,
			bufs:    rc.p.bufs,
			gone:    func() { rc.p.suspect(id) },
			closed:  make(chan struct{}),
			post:    rc.c.Post,
			lost:    rc.setLost,
		}
		rc.up = u
		rc.p.metrics.upstreamOpen.Inc()
		rc.c.Go(func() {
			defer rc.p.metrics.upstreamOpen.Dec()
			u.run()
		})
		rc.c.Logger().Debug().Int32("broker", id).Str("upstream", u.addr).Msg("upstream connection opened")
		return u, nil
	}
	return nil, errors.Join(errs...)
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// setLost records that requests were lost upstream: the client connection
// is closing (its writer reaches the error result), so no new upstream
// connection is dialed for it.
func (rc *relayConn) setLost(err error) {
	rc.p.metrics.failure("lost")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.lost == nil {
		rc.lost = err
	}
}

// versions returns the upstream version table this connection's
// ApiVersions answer is built from: the one learned by the last handshake
// with the broker (for the bootstrap listener, what every known broker
// serves), or if there is none yet, the one the handshake of this
// connection's own upstream connection learns. A client that only talks to
// the group coordinator thus costs no upstream connection.
func (rc *relayConn) versions(ctx context.Context) (map[int16]versionRange, error) {
	if rc.proxied {
		if v := rc.p.up.versionsOf(rc.broker); v != nil {
			return v, nil
		}
	} else if v := rc.p.up.commonVersions(); v != nil {
		return v, nil
	}
	up, err := rc.upstream(ctx)
	if err != nil {
		return nil, err
	}
	if rc.proxied {
		if v := rc.p.up.versionsOf(up.broker); v != nil {
			return v, nil
		}
	} else if v := rc.p.up.commonVersions(); v != nil {
		return v, nil
	}
	// The broker was replaced in the set since the dial; the client
	// reconnects and asks again.
	return nil, &upstreamError{broker: up.broker, addr: up.addr, err: errors.New("version table unknown")}
}

// APIVersions is the hook for ApiVersions answers (newproto.RelayConn):
// the Handler's table merged with the upstream's.
func (rc *relayConn) APIVersions(ctx context.Context, resp kmsg.Response) (kmsg.Response, error) {
	av, ok := resp.(*kmsg.ApiVersionsResponse)
	if !ok || len(av.ApiKeys) == 0 {
		return resp, nil // INVALID_REQUEST: no table
	}
	// The KIP-511 answer (UNSUPPORTED_VERSION at v0) is merged too: it
	// carries the whole table, and kgo uses that table as it is instead
	// of asking again.

	v, err := rc.versions(ctx)
	if err != nil {
		return nil, err
	}
	av.ApiKeys = mergeAPIVersions(av.ApiKeys, v)
	return av, nil
}

// FetchGate asks Config.FetchGate whether a relayed Fetch response may be
// written now, and counts a refusal.
func (rc *relayConn) FetchGate(now time.Time) error {
	if rc.p.cfg.FetchGate == nil {
		return nil
	}
	err := rc.p.cfg.FetchGate(now)
	if err != nil {
		rc.p.metrics.failure("fetch_gated")
	}
	return err
}

// Release recycles a relayed response frame the writer is done with.
func (rc *relayConn) Release(raw []byte) { rc.p.bufs.put(raw) }

// Close closes the upstream connection; its goroutine then fails what was
// in flight (nobody reads it: the client connection is gone) and exits.
func (rc *relayConn) Close() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.closed = true
	if rc.up != nil {
		rc.up.fail(net.ErrClosed)
	}
}

// bufPool recycles the buffers of relayed frames, by power-of-two size
// class: Produce requests and Fetch responses are up to megabytes each,
// and a fresh buffer per frame costs its zeroing and the collector's
// work, which on a busy relay is most of what it spends. A buffer is put
// back only once nothing refers to it (written to the broker or the
// client); frames the Handler decodes are never put back, since decoded
// requests alias their frame.
type bufPool struct {
	classes [bufClasses]sync.Pool // class c holds *[]byte of capacity 1<<(c+bufMinShift)
}

const (
	bufMinShift = 12 // 4 KiB: smaller frames are cheap to make
	bufClasses  = 15 // up to 64 MiB
)

func bufClass(n int) (int, bool) {
	c := bits.Len(uint(n-1)) - bufMinShift
	return max(c, 0), n > 0 && c < bufClasses
}

// get returns a buffer of length n (contents undefined: the caller fills
// it all).
func (p *bufPool) get(n int) []byte {
	c, ok := bufClass(n)
	if !ok || n < 1<<bufMinShift {
		return make([]byte, n)
	}
	if b, _ := p.classes[c].Get().(*[]byte); b != nil {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<(c+bufMinShift))
}

// put recycles b, whose contents nobody may use afterwards.
func (p *bufPool) put(b []byte) {
	c, ok := bufClass(cap(b))
	if !ok || cap(b) != 1<<(c+bufMinShift) {
		return // not one of ours
	}
	b = b[:0]
	p.classes[c].Put(&b)
}

// relayMetrics are the relay's Prometheus metrics.
type relayMetrics struct {
	requests     *prometheus.CounterVec // api_key, api
	byKey        []prometheus.Counter   // requests, cached per key (hot path)
	failures     *prometheus.CounterVec // reason
	upstreamOpen prometheus.Gauge
	brokersDown  prometheus.Gauge
}

func newRelayMetrics(reg prometheus.Registerer) (*relayMetrics, error) {
	m := &relayMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "relayed_requests_total",
			Help: "Kafka requests relayed to an upstream broker, by api key.",
		}, []string{"api_key", "api"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "relay_failures_total",
			Help: "Relay failures that closed a client connection (dial: no broker reachable; " +
				"lost: the broker went away or did not answer in time with requests in flight; " +
				"fetch_gated: a Fetch response withheld because the bridge could not vouch for its groups' " +
				"partition ownership, Config.FetchGate).",
		}, []string{"reason"}),
		upstreamOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "upstream_connections_open",
			Help: "Connections from the bridge to upstream brokers currently open.",
		}),
		brokersDown: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "upstream_brokers_down",
			Help: "Upstream brokers whose last dial failed; their proxy listeners refuse connections until one succeeds.",
		}),
	}
	for _, reason := range []string{"dial", "lost", "fetch_gated"} {
		m.failures.WithLabelValues(reason)
	}
	for k := range int16(128) {
		if kmsg.RequestForKey(k) != nil {
			m.byKey = append(m.byKey, m.requests.WithLabelValues(strconv.Itoa(int(k)), kmsg.NameForKey(k)))
		} else {
			m.byKey = append(m.byKey, nil)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.failures, m.upstreamOpen, m.brokersDown} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("relay: registering metrics: %w", err)
		}
	}
	return m, nil
}

func (m *relayMetrics) relayed(key int16) {
	if key >= 0 && int(key) < len(m.byKey) && m.byKey[key] != nil {
		m.byKey[key].Inc()
		return
	}
	m.requests.WithLabelValues(strconv.Itoa(int(key)), kmsg.NameForKey(key)).Inc()
}

func (m *relayMetrics) failure(reason string) { m.failures.WithLabelValues(reason).Inc() }
