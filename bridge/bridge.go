// Package bridge is the zkbridge daemon as a library, in the shape of etcd's embed package: a
// Config with Validate, New, and Run(ctx), which opens the ZooKeeper session, serves the Kafka
// listener and the admin listener, hosts one actor per consumer group and returns after every
// goroutine it started has exited. Tests and other programs run a whole bridge in process.
//
// The group decisions live in the pure engine (bridge/group); this package is its IO shell
// (DESIGN.md §3): it steps events into one group.Machine per group (coordinator.go), executes
// the writes the engine asks for as fenced ZooKeeper multis (records.go), mirrors offsets and
// ownership into the Kafka 0.8 layout (mirror.go), answers Metadata from /brokers
// (cluster.go), and exports metrics and health on the admin listener (admin.go, metrics.go).
//
// ZooKeeper layout under Config.Root (default /zkbridge):
//
//	<root>/bridges/<node-id>                 ephemeral: one per running bridge
//	<root>/groups/<g>/epoch                  its version fences every write of the group
//	<root>/groups/<g>/record                 JSON of group.Record
//	<root>/groups/<g>/offsets/<t>/<p>        JSON: offset, leader epoch, metadata, commit time
//	<root>/groups/<g>/mode                   JSON of zkstate.ModeRecord: which kinds may join (modes.go)
//	<root>/groups/<g>/transitions/t-<seq>    JSON of zkstate.Transition: one per mode change
//
// and in Kafka's own layout: /consumers/<g>/offsets/<t>/<p> (the committed offsets, decimal
// text) and, for each Stable generation, the ephemerals /consumers/<g>/ids/<consumer-id> and
// /consumers/<g>/owners/<t>/<p>.
package bridge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/relay"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Defaults for the zero values of Config.
const (
	DefaultRoot        = "/zkbridge"
	DefaultKafkaListen = "127.0.0.1:9092"
	DefaultAdminListen = "127.0.0.1:9191"
	// DefaultNodeID is the broker id the bridge advertises in Metadata and FindCoordinator. Real
	// Kafka clusters number their brokers from 0 or 1 upwards (broker.id, or from 1001 with
	// reserved.broker.max.id when generated), so 9000 stays clear of them while being a valid,
	// non-negative id (clients use negative ids for bootstrap brokers).
	DefaultNodeID int32 = 9000
	// DefaultZKSessionTimeout is the ZooKeeper session timeout the bridge asks for.
	DefaultZKSessionTimeout = 10 * time.Second
	// DefaultZKConnectTimeout bounds the wait for the first ZooKeeper session in Run.
	DefaultZKConnectTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds one group write, retries included; after it the group is
	// fenced (NOT_COORDINATOR) and loaded again by the next request.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultLoadTimeout bounds loading a group (taking its epoch, reading its record).
	DefaultLoadTimeout = 10 * time.Second
	// DefaultMirrorRetry is how often the 0.8 mirror retries znodes it could not write, e.g.
	// owners still held by the session of a bridge that was killed.
	DefaultMirrorRetry = 2 * time.Second
	// DefaultMetadataMaxAge bounds how stale the broker and topic view served in Metadata may
	// be; broker and topic additions and removals are seen at once through watches, leader
	// changes within this age.
	DefaultMetadataMaxAge = 5 * time.Second
	// DefaultGroupIdleTimeout unloads a group that has been Empty and idle this long (its state
	// stays in ZooKeeper; the next request loads it again).
	DefaultGroupIdleTimeout = 10 * time.Minute
	// DefaultDrainTimeout is how long shutdown lets Kafka connections finish their requests.
	DefaultDrainTimeout = newproto.DefaultDrainTimeout
	// DefaultHandoffTimeout bounds how long shutdown waits for the Kafka members of mixed groups
	// to give their partitions back (mixed.go: handOff).
	DefaultHandoffTimeout = 10 * time.Second
	// DefaultDrainProducerLinger is how long after a drain begins a draining bridge with the
	// data path keeps relaying for the clients producing through its proxy listeners
	// (handover_linger.go): kgo's metadata.min.age (5 s) and a margin.
	DefaultDrainProducerLinger = 5500 * time.Millisecond
)

// Bridge is one zkbridge daemon. Build it with New, run it with Run.
type Bridge struct {
	cfg     Config
	log     zerolog.Logger
	reg     *prometheus.Registry
	metrics *metrics
	coord   *coordinator
	// claimers holds one claimer per group (claimer.go), shared by the group's Kafka and legacy
	// actors.
	claimers *claimers
	// hosts holds one goroutine per group (host.go), shared by its Kafka and legacy members.
	hosts  *hosts
	modes  *groupModes // every group's mode, kept current (modes.go)
	peers  *peerSet    // the live bridges and the groups' placement (peers.go)
	legacy atomic.Pointer[LegacyCoordinator]
	// proxySrv is the Kafka server while it relays to an upstream cluster (upstream.go).
	proxySrv atomic.Pointer[newproto.Server]
	// cluster serves Metadata; OffsetFetch v10 maps topic ids through it (TopicIDs).
	cluster atomic.Pointer[cluster]

	groupOnlyNote atomic.Pointer[string] // bypass.go

	registrar registrar // writes <root>/bridges/<node-id> (peers.go)

	started  atomic.Bool
	ready    chan struct{}
	serving  atomic.Bool // the Kafka listener accepts connections
	stopping atomic.Bool // Run is shutting down

	mu         sync.Mutex
	kafkaAddr  net.Addr
	adminAddr  net.Addr
	legacyAddr net.Addr
}

// New checks cfg and builds a Bridge; it neither connects nor listens (Run does).
func New(cfg Config) (*Bridge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With().Str("component", "bridge").Int32("node_id", cfg.NodeID).Logger()
	b := &Bridge{
		cfg:     cfg,
		log:     log,
		reg:     reg,
		metrics: m,
		ready:   make(chan struct{}),
	}
	b.coord = newCoordinator(cfg, log, m)
	// Group modes (modes.go): enforced by the coordinator and the legacy coordinator, which
	// hear about every change.
	b.modes = newGroupModes(cfg, log, m)
	b.modes.onChange = b.coord.modeChanged
	b.coord.modes = b.modes
	b.claimers = newClaimers()
	b.coord.claimers = b.claimers
	b.hosts = newHosts()
	b.coord.hosts = b.hosts
	b.modes.ours = b.claimers.ours
	b.peers = newPeerSet(cfg.NodeID, cfg.Root, log)
	b.coord.peers = b.peers                 // handover.go
	b.peers.ownGone = b.registrationDeleted // register_own.go
	if b.coord.pm, err = newPlacementMetrics(reg, b.coord.owned); err != nil {
		return nil, err
	}
	if b.peers.agree.gauge, err = newAgreementMetric(reg); err != nil { // peers_agree.go
		return nil, err
	}
	b.peers.subscribe(b.coord.takePrepared) // preload.go: before the rescan placementChanged starts
	b.peers.subscribe(b.coord.placementChanged)
	b.peers.subscribe(b.coord.unpark) // park.go: after takePrepared
	b.peers.subscribeNamed(b.coord.namedChanged)
	b.peers.subscribeNamed(b.coord.unpark)
	b.modes.owns = b.peers.owns // modes_foreign.go: only the owner checks for foreign zk members
	b.peers.subscribe(func(_, _ *liveView) { b.modes.placementChanged() })
	return b, nil
}

// Ready is closed once Run has a ZooKeeper session and both listeners are serving.
func (b *Bridge) Ready() <-chan struct{} { return b.ready }

// Addr is the Kafka listener's address; nil before Ready.
func (b *Bridge) Addr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kafkaAddr
}

// AdminAddr is the admin listener's address; nil before Ready.
func (b *Bridge) AdminAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.adminAddr
}

// LegacyAddr is the legacy listener's address; nil before Ready or without Config.LegacyListen.
func (b *Bridge) LegacyAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.legacyAddr
}

// Registry is the Prometheus registry the bridge's metrics live on (served at /metrics).
func (b *Bridge) Registry() *prometheus.Registry { return b.reg }

// Run connects to ZooKeeper, registers the bridge, serves the Kafka and admin listeners until
// ctx ends, then shuts down: /readyz fails, every group is unloaded (parked requests are
// answered NOT_COORDINATOR), Kafka connections are drained, the listeners closed and the
// ZooKeeper session ended (which releases the bridge's ephemerals at once). It returns after
// every goroutine it started has exited: nil after ctx ended, or the error that stopped it.
// Run may be called once.
func (b *Bridge) Run(ctx context.Context) error {
	if b.started.Swap(true) {
		return errors.New("bridge: Run called twice")
	}
	store, err := b.openStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	p, err := b.open(ctx, store)
	if err != nil {
		return err
	}
	s := b.start(ctx, store, p)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-s.errc:
	}
	return b.stop(ctx, store, p, s, runErr)
}

// openStore opens the bridge's ZooKeeper session.
func (b *Bridge) openStore(ctx context.Context) (*zkstate.Store, error) {
	cfg := b.cfg
	var zkTLS *tls.Config
	if cfg.ZKTLS != nil {
		var err error
		if zkTLS, err = tlsconfig.NewClient(*cfg.ZKTLS); err != nil {
			return nil, fmt.Errorf("bridge: ZooKeeper TLS: %w", err)
		}
	}
	openCtx, cancelOpen := context.WithTimeout(ctx, cfg.ZKConnectTimeout)
	store, err := zkstate.Open(openCtx, zkstate.Config{
		Connect:        cfg.ZKConnect,
		SessionTimeout: cfg.ZKSessionTimeout,
		Digest:         cfg.ZKDigest,
		TLS:            zkTLS,
		Logger:         cfg.Logger,
		OnSession: func(ev zkstate.SessionEvent) {
			b.coord.onSession(ev)
			if ev.State == zkstate.Connected {
				b.peers.own.poke() // register_own.go: our registration in this session
			}
			if l := b.legacy.Load(); l != nil {
				l.OnSession(ev)
			}
		},
	})
	cancelOpen()
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if got := store.SessionTimeout(); got != cfg.ZKSessionTimeout {
		// The server clamps it to its [minSessionTimeout, maxSessionTimeout]: the granted one
		// is how long this bridge's owner znodes outlive a crash (mixed.go: checkCrashSafety).
		b.log.Warn().Dur("asked", cfg.ZKSessionTimeout).Dur("granted", got).
			Msg("zookeeper granted another session timeout than --zk-session-timeout; its minSessionTimeout/maxSessionTimeout bound it")
	}
	if err := b.reg.Register(newZKRequests(store)); err != nil {
		store.Close()
		return nil, fmt.Errorf("bridge: metrics: %w", err)
	}
	return store, nil
}

// parts is what Run opens before it serves anything: the listeners and the servers for them.
type parts struct {
	kafkaLn, adminLn net.Listener
	adminTLS         *tls.Config
	srv              *newproto.Server
	cl               *cluster
	az               *authz.Authorizer
	host             string // advertised
	port             int32
	up               *relay.Upstream // nil without an upstream
	proxy            *relay.Proxy
	legacyLn         net.Listener // nil without Config.LegacyListen
	legacySrv        *legacy.Server
	legacyCoord      *LegacyCoordinator
}

// open opens the listeners and builds the servers, in the order their configuration needs
// (the Kafka listener's address decides the advertised one and the proxy listeners' default);
// on an error it closes the listeners it opened.
func (b *Bridge) open(ctx context.Context, store *zkstate.Store) (_ *parts, err error) {
	cfg := b.cfg
	p := &parts{}
	kafkaTLS, err := b.serverTLS("kafka", cfg.KafkaTLS) // security.go
	if err != nil {
		return nil, err
	}
	if p.adminTLS, err = b.serverTLS("admin", cfg.AdminTLS); err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	if p.kafkaLn, err = listenLast(ctx, &lc, cfg.KafkaListen); err != nil { // the first socket closed when the process dies
		return nil, fmt.Errorf("bridge: Kafka listener: %w", err)
	}
	if p.adminLn, err = lc.Listen(ctx, "tcp", cfg.AdminListen); err != nil {
		p.kafkaLn.Close()
		return nil, fmt.Errorf("bridge: admin listener: %w", err)
	}
	defer func() {
		if err != nil {
			p.kafkaLn.Close()
			p.adminLn.Close()
		}
	}()

	if p.az, err = b.authorizer(ctx, store); err != nil { // security.go
		return nil, err
	}
	rules, _ := authz.ParseRules(cfg.PrincipalMappingRules) // Validate checked it
	saslCfg, err := b.saslConfig(store)                     // scram.go
	if err != nil {
		return nil, err
	}
	p.cl = newCluster(store, cfg.MetadataMaxAge, b.log)
	p.cl.connected = b.coord.connected.Load // Metadata from the cache while ZooKeeper is away
	b.cluster.Store(p.cl)
	b.coord.topics, b.coord.groups = p.cl, b.modes // limits.go
	p.host, p.port = b.advertised(p.kafkaLn.Addr())
	b.chooseRelay(ctx, store) // bypass.go
	cfg = b.cfg
	if p.up, p.proxy, err = b.openUpstream(ctx, store, p.kafkaLn.Addr()); err != nil { // upstream.go; nil without one
		return nil, err
	}
	var rl newproto.Relay // a nil *relay.Proxy is not a nil Relay
	if p.proxy != nil {
		rl = p.proxy
	} else if cfg.SASLForward {
		return nil, fmt.Errorf("bridge: SASLForward: no upstream broker registered in %s to authenticate clients", zkstate.BrokerIDsPath)
	}
	p.srv, err = newproto.New(newproto.Config{
		Relay:          rl,
		Listen:         cfg.KafkaListen,
		Logger:         cfg.Logger,
		Registerer:     b.reg,
		DrainTimeout:   cfg.DrainTimeout,
		NodeID:         cfg.NodeID,
		AdvertisedHost: p.host,
		AdvertisedPort: p.port,
		ClusterID:      cfg.ClusterID,
		Cluster:        p.cl,
		Coordinator:    newproto.NewGroupCoordinator(b, newproto.WithLogger(b.log), newproto.WithHeartbeatHold(cfg.HeartbeatHold)),
		Peers:          b.peers, // peers.go: the other bridges of one service
		TLS:            kafkaTLS,
		PrincipalRules: rules,
		SASL:           saslCfg,
		Authorizer:     newprotoAuthorizer(p.az),

		MaxQueuedBytes:      cfg.MaxQueuedBytes,
		MaxConnections:      cfg.MaxConnections,
		MaxConnectionsPerIP: cfg.MaxConnectionsPerIP,
	})
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}

	if cfg.LegacyListen != "" {
		if p.legacyLn, p.legacySrv, p.legacyCoord, err = b.newLegacy(ctx, &lc, store); err != nil {
			return nil, err
		}
		b.legacy.Store(p.legacyCoord)
	}
	return p, nil
}

// serving is what start leaves running for stop to end, in its order.
type serving struct {
	errc       chan error // the first failure of a listener
	admin      *http.Server
	serveWG    sync.WaitGroup // the Kafka, admin and proxy listeners
	stopBG     context.CancelFunc
	bg         sync.WaitGroup // registration, watches, the upstream's broker set
	stopLegacy context.CancelFunc
	legacyWG   sync.WaitGroup // the legacy coordinator and its listener
}

// start serves: the coordinator, the background work (registration, watches), the listeners and
// the legacy coordinator; then the bridge is ready.
func (b *Bridge) start(ctx context.Context, store *zkstate.Store, p *parts) *serving {
	cfg := b.cfg
	s := &serving{errc: make(chan error, 3)}
	b.mu.Lock()
	b.kafkaAddr, b.adminAddr = p.kafkaLn.Addr(), p.adminLn.Addr()
	if p.legacyLn != nil {
		b.legacyAddr = p.legacyLn.Addr()
	}
	b.mu.Unlock()
	b.coord.start(store)

	// Background work that lives as long as Run: registration, the metadata watches.
	bgCtx, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	s.stopBG = stopBG
	b.modes.start(store) // before the listeners serve: requests ensure modes through it
	// peers.go: the live bridges, read before the listeners serve, so that the first request
	// is placed as every other bridge places it.
	if w, err := b.peers.start(bgCtx, store); err != nil {
		b.log.Error().Err(err).Msg("cannot watch the live bridges; serving every group as if alone")
	} else {
		s.bg.Go(func() { b.peers.follow(bgCtx, store, w) })
		s.bg.Go(func() { b.peers.watchPeers(bgCtx) }) // peers_down.go: who looks dead
	}
	s.bg.Go(func() { b.modes.run(bgCtx) }) // modes.go: watches every group's mode
	s.bg.Go(func() { b.register(bgCtx, store, p.host, p.port) })
	s.bg.Go(func() {
		p.cl.warm(bgCtx) // a view to serve Metadata from if ZooKeeper goes away early
		p.cl.watch(bgCtx)
	})

	// The listeners. Their contexts are not ctx: shutdown closes them in its own order.
	b.serving.Store(true) // bound: connections queue until Serve accepts them
	s.serveWG.Go(func() {
		err := p.srv.Serve(context.WithoutCancel(ctx), p.kafkaLn)
		b.serving.Store(false)
		if err != nil && !errors.Is(err, newproto.ErrServerClosed) {
			s.errc <- fmt.Errorf("bridge: Kafka listener: %w", err)
		}
	})
	// Keep-alive connections of scrapers and probes expire: without IdleTimeout a scraper that
	// never closes its connection holds a goroutine and a socket for ever.
	s.admin = &http.Server{Handler: withAdminToken(cfg.AdminToken, b.adminHandler()), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second, IdleTimeout: adminIdleTimeout, MaxHeaderBytes: 64 << 10}
	s.serveWG.Go(func() {
		if err := s.admin.Serve(tlsListener(p.adminLn, p.adminTLS)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errc <- fmt.Errorf("bridge: admin listener: %w", err)
		}
	})
	if p.az != nil {
		s.bg.Go(func() { followACLs(bgCtx, store, p.az, b.log) }) // acls.go
	}
	if p.up != nil {
		// upstream.go: the proxy listeners (closed by srv.Close at shutdown) and the broker set.
		b.proxySrv.Store(p.srv)
		s.serveWG.Go(func() { b.serveProxy(ctx, p.proxy, p.srv, s.errc) })
		s.bg.Go(func() { b.followUpstream(bgCtx, store, p.up) })
		// peers.go: the proxy listeners in the registration, for the other bridges.
		s.bg.Go(func() { b.advertiseProxies(bgCtx, store, p.proxy, p.host) })
		// relay/drain.go: Refresh. Clients refresh their metadata while a bridge that left, or
		// looks dead (peers_down.go), is out of it, and drop their connections to it.
		b.peers.subscribeNamed(b.peers.refreshOnOmission(p.proxy.Refresh, afterFunc))
		if b.cfg.LagInterval > 0 && !b.cfg.SASLForward { // lag.go; with SASLForward the bridge has no credentials
			s.bg.Go(func() { b.collectLag(bgCtx, store, p.up) }) // lag.go
		} else if b.cfg.LagInterval > 0 {
			b.log.Info().Msg("lag is not collected: with SASLForward the bridge holds no credentials for the brokers")
		}
	}

	// The legacy coordinator and its listener; stopped after the Kafka groups and before the
	// ZooKeeper session closes, since the coordinator deletes its ids and owners through it.
	legacyCtx, stopLegacy := context.WithCancel(context.WithoutCancel(ctx))
	s.stopLegacy = stopLegacy
	if p.legacySrv != nil {
		s.legacyWG.Go(func() { _ = p.legacyCoord.Run(legacyCtx) })
		s.legacyWG.Go(func() {
			if err := p.legacySrv.Serve(legacyCtx, p.legacyLn); err != nil {
				s.errc <- fmt.Errorf("bridge: legacy listener: %w", err)
			}
		})
		b.log.Info().Stringer("legacy", p.legacyLn.Addr()).Msg("legacy coordinator serving")
	}

	b.log.Info().Stringer("kafka", p.kafkaLn.Addr()).Stringer("admin", p.adminLn.Addr()).
		Str("zk", cfg.ZKConnect).Str("root", cfg.Root).Msg("bridge serving")
	close(b.ready)
	return s
}

// stop shuts down in the order that answers every client: groups first (parked JoinGroups and
// SyncGroups get NOT_COORDINATOR and go look for the coordinator again), then the Kafka
// connections drain those answers, then the rest. It returns runErr, or the failure to close
// the ZooKeeper session when there was none.
func (b *Bridge) stop(ctx context.Context, store *zkstate.Store, p *parts, s *serving, runErr error) error {
	b.log.Info().Msg("bridge shutting down")
	if b.cfg.HandoffTimeout > 0 && !b.peers.alone() {
		// handover.go: deregister, then hand every group to the bridges that remain; with the
		// data path, the brokers too (relay/drain.go: the clients fetching through our proxy
		// listeners are told to refresh their metadata, which names the others now).
		var cl *drainClients
		told := b.coord.drain(context.WithoutCancel(ctx), b.cfg.HandoffTimeout, func() {
			drained := time.Now()
			b.deregister(store)
			if p.proxy != nil {
				p.proxy.Drain()
				cl = &drainClients{fetchers: p.proxy.Untold, producers: p.proxy.Producers,
					drained: drained, producerLinger: b.cfg.DrainProducerLinger, refuse: p.proxy.RefuseProducers}
			}
		})
		b.unregister(store)
		// handover_linger.go: the members hear NOT_COORDINATOR, and the fetchers
		// NOT_LEADER_OR_FOLLOWER, before the listeners close; producers are relayed for until
		// kgo's metadata.min.age has passed since the drain began, then refused once.
		b.coord.linger(context.WithoutCancel(ctx), told, p.srv.Conns, cl)
	}
	if b.cfg.HandoffTimeout > 0 {
		b.coord.handOff(b.cfg.HandoffTimeout) // mixed.go: Kafka members of mixed groups revoke first
	}
	b.stopping.Store(true)
	b.coord.close()
	s.stopLegacy()
	s.legacyWG.Wait()
	_ = p.srv.Close()
	shutCtx, cancelShut := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = s.admin.Shutdown(shutCtx)
	cancelShut()
	s.serveWG.Wait()
	s.stopBG()
	s.bg.Wait()
	if err := store.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("bridge: closing ZooKeeper session: %w", err)
	}
	b.log.Info().Msg("bridge stopped")
	return runErr
}

// newLegacy opens the legacy listener and builds its coordinator and server. The coordinator
// advertises the listener's own address in ConsultResponse (the host name when it listens on
// every interface).
func (b *Bridge) newLegacy(ctx context.Context, lc *net.ListenConfig, store *zkstate.Store) (net.Listener, *legacy.Server, *LegacyCoordinator, error) {
	legacyTLS, err := b.serverTLS("legacy", b.cfg.LegacyTLS) // security.go
	if err != nil {
		return nil, nil, nil, err
	}
	ln, err := lc.Listen(ctx, "tcp", b.cfg.LegacyListen)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bridge: legacy listener: %w", err)
	}
	tcp := ln.Addr().(*net.TCPAddr)
	host := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	coord, err := NewLegacyCoordinator(LegacyConfig{Store: store, Logger: b.cfg.Logger, NodeID: b.cfg.NodeID, Root: b.cfg.Root, Strategy: b.cfg.Strategy,
		AdvertisedHost: host, AdvertisedPort: int32(tcp.Port), Registerer: b.reg, SessionCheck: b.cfg.MixedSessionCheck,
		Bridges: b.peers.legacyBrokers})
	if err != nil {
		ln.Close()
		return nil, nil, nil, fmt.Errorf("bridge: %w", err)
	}
	coord.peers = b.peers // legacy_placement.go: the live bridges place legacy groups too
	coord.noRelay = legacyTLS != nil
	b.peers.subscribe(coord.placementChanged)
	coord.modes = b.modes // modes.go: kafka and finalized groups refuse legacy consumers
	coord.claimers = b.claimers
	coord.hosts = b.hosts
	maxConns := b.cfg.MaxConnections // the Kafka listeners' connection limits apply here too
	if maxConns == 0 {
		maxConns = newproto.DefaultMaxConnections
	}
	srv, err := legacy.NewServer(legacy.Config{Logger: b.cfg.Logger, Coordinator: coord,
		MaxConnections: maxConns, MaxConnectionsPerIP: b.cfg.MaxConnectionsPerIP})
	if err != nil {
		ln.Close()
		return nil, nil, nil, fmt.Errorf("bridge: %w", err)
	}
	return tlsListener(ln, legacyTLS), srv, coord, nil
}

// advertised is the address Metadata and FindCoordinator give for the bridge's node: the
// configured one, else the listener's, unless it listens on every interface, in which case
// newproto uses the address each client dialed (empty host).
func (b *Bridge) advertised(ln net.Addr) (string, int32) {
	if b.cfg.AdvertisedAddr != "" {
		host, port, _ := splitAdvertised(b.cfg.AdvertisedAddr)
		return host, port
	}
	tcp, ok := ln.(*net.TCPAddr)
	if !ok {
		return "", 0
	}
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return "", int32(tcp.Port)
	}
	return tcp.IP.String(), int32(tcp.Port)
}

// readiness lists why the bridge is not ready; none when it is.
func (b *Bridge) readiness() []string {
	var why []string
	if b.stopping.Load() {
		why = append(why, "shutting down")
	}
	if !b.coord.connected.Load() {
		why = append(why, "zookeeper: no session")
	}
	if !b.serving.Load() {
		why = append(why, "kafka listener: not serving")
	}
	if r := b.registrationReadiness(); r != "" { // register_own.go
		why = append(why, r)
	}
	return why
}

// adminIdleTimeout closes an admin keep-alive connection that sends no request for this long.
const adminIdleTimeout = 2 * time.Minute

// Available implements newproto.Availability: FindCoordinator answers COORDINATOR_NOT_AVAILABLE
// (which clients back off on) while the bridge has no ZooKeeper session to serve groups with.
func (b *Bridge) Available() error {
	if !b.coord.connected.Load() {
		return errors.New("zkbridge has no ZooKeeper session")
	}
	return nil
}

// TopicIDs implements newproto.TopicIDs for OffsetFetch v10: the ids Metadata hands out.
func (b *Bridge) TopicIDs(ctx context.Context) (map[string][16]byte, error) {
	cl := b.cluster.Load()
	if cl == nil {
		return nil, nil
	}
	return cl.TopicIDs(ctx)
}
