package bridge

// The legacy coordinator: the IO shell that hosts groups of seed-001 consumers (the "legacy"
// member kind of DESIGN §1) on a legacy.Server. It implements legacy.Coordinator: Consult
// answers with this bridge, Register hands each registered consumer to its group's actor.
//
// One goroutine (actor) per group owns all of the group's state: members, the current
// assignment, the partitions of its topics (kept current by ZooKeeper watches on
// /brokers/topics/<t>), the committed offsets it knows, and the rebalance in progress. Sockets
// never block it: every request to a consumer (Ping, Stop, Start) runs on a goroutine of its
// own and comes back as an event, so Registers, closed sockets and topic changes are handled
// while a rebalance waits for its answers. ZooKeeper calls are made from the actor, bounded by
// LegacyConfig.ZKTimeout. The decisions are pure functions (legacy_plan.go); this file only
// gathers their inputs and carries out what they return.
//
// A rebalance follows seed 001 "rebalance (group)" with the additions of
// docs/legacy-protocol.md §8:
//
//	steps 1-3   read the group (owners), plan; stop here when nothing is necessary (3.5).
//	            No read when the answer cannot be "not necessary" (certainNeed: a member of
//	            ours not started, a partition of a member that left)
//	step 4.1    StopRequest to every member; wait for every StopResponse
//	§8 Coord. 2 PingRequest to every auto_commit member: its final offsets
//	step 4      read the group again (owners, offsets); while another member holds an owner
//	            znode we must claim, let go of what is no longer ours (final offsets, our
//	            owners that moved: legacyPlan.Release) and wait with backoff, then read again
//	            only the partitions waited for; then ONE Multi: final offsets, released owners
//	            deleted, new owners created (a Multi that fails after such a partial read
//	            reads the group in full and tries once more)
//	step 4.2    StartRequest to every member with its part and starting offsets
//	step 4.3    wait for every StartResponse
//	step 5      a member that does not answer in time fails the attempt: log it, retry after a
//	            backoff that doubles up to RetryBackoffMax
//
// Each read of the group is a zkstate Snapshot (a handful of multiRead requests for a group of
// a thousand partitions) plus the stat of every owner znode this actor did not write itself.
// Liveness runs alongside (docs §8 "Liveness"): every member with no request in flight is
// pinged every ping interval, during a rebalance too; a Stop, final Ping or Start counts as
// the member's ping; max_ping_retries requests in a row without an answer make it dead.
//
// An attempt restarts from step 1 when the membership or a topic's partitions changed while
// it was stopping the members (so a new member is stopped and counted before anything is
// claimed); a change during the Start phase is served by the next rebalance.
//
// Other members ("federated 0.8", legacy_plan.go): a group may also hold zk members and the
// members other coordinators host, all registered in /consumers/<g>/ids. The assignment counts
// every registration there, as each zk member's does, and this coordinator claims only its own
// members' part. So the actor watches the children of /consumers/<g>/ids — as every 0.8.2
// consumer does (ZCC:896) — and the data of every other registration (a registration can change
// in place), and checks the group when the other registrations or their subscriptions change;
// its own members' registrations, which it writes itself, are not a trigger (their Register and
// removal are). The check finds nothing to do when our part did not change; the zk members, who
// rebalance on every change, release what moves to us before we can claim it (the claim waits
// for them), and we release what moves to them in the claim's Multi, after our members stopped.
//
// Ephemerals: a member's /consumers/<g>/ids/<id> is created with Store.CreateEphemeral, so the
// Store re-creates it after a session expiry, as a 0.8 consumer re-registers; beside it, the
// hosted-member znode <root>/groups/<g>/hosted/<id> (zkstate/hosted.go: kind legacy, this
// bridge's node id) says which kind of member stands behind the registration, created before it
// and deleted after it with the same rules. Owner znodes are
// plain ephemeral creates inside the rebalance's Multi instead: the claim must be one request
// after every StopResponse, and a re-created owner after an expiry would hand a partition over
// without the Stop/Start that must precede it. After an expiry the owners are simply gone; the
// watches' SessionExpired events (and OnSession) trigger a check, which finds them missing
// (step 3.1 or 3.2) and runs a full rebalance that writes them again.
//
// Identifiers of this file start with "legacy" (or "Legacy" when exported): package bridge is
// shared with the Kafka-protocol shell, and the legacy members will later join the common group
// engine, with this actor's inputs becoming its events.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Defaults for the zero values of LegacyConfig.
const (
	// DefaultLegacyListen is the address of the legacy listener (zkbridge serve --legacy-listen).
	DefaultLegacyListen = "127.0.0.1:9190"
	// DefaultLegacyRetryBackoff is the first wait after a failed rebalance attempt (seed 001
	// step 5) and between checks of an owner znode held by another session.
	DefaultLegacyRetryBackoff = 100 * time.Millisecond
	// DefaultLegacyRetryBackoffMax caps the doubling of the backoff.
	DefaultLegacyRetryBackoffMax = 5 * time.Second
	// DefaultLegacyZKTimeout bounds each ZooKeeper call of a group's actor.
	DefaultLegacyZKTimeout = 10 * time.Second
	// legacyReadParallelism is how many ZooKeeper reads a group keeps in flight when it reads
	// owners and offsets: go-zookeeper pipelines them on its one connection, so a thousand
	// reads cost a few round trips rather than a thousand.
	legacyReadParallelism = 64
	legacyInboxSize       = 1024
	// legacyClaimWarnAfter is how long a claim waits for another member's owner znodes before
	// the wait is logged as a warning.
	legacyClaimWarnAfter = 10 * time.Second
)

// ErrLegacyCoordinatorStopped is the reason the sessions of a stopping coordinator are closed
// with; their consumers stop fetching and look for a coordinator again.
var ErrLegacyCoordinatorStopped = errors.New("legacy coordinator stopped")

// LegacyConfig configures a LegacyCoordinator. Store, AdvertisedHost and AdvertisedPort are
// required; zero values of the rest mean the defaults.
type LegacyConfig struct {
	// Store is the ZooKeeper session the coordinator reads and writes through. It is not
	// closed by the coordinator.
	Store *zkstate.Store
	// Logger receives the coordinator's logs.
	Logger zerolog.Logger
	// NodeID is this bridge's id in ConsultResponse (coordinator_id and brokers_info[].id),
	// and the node of its members' hosted-member znodes.
	NodeID int32
	// Root is the bridge's own ZooKeeper subtree (Config.Root, DefaultRoot when empty), where
	// each member's hosted-member znode <Root>/groups/<g>/hosted/<consumer-id> is written.
	Root string
	// InstanceName is this bridge's creator_id in ConsultResponse; default "zkbridge-<NodeID>".
	InstanceName string
	// AdvertisedHost and AdvertisedPort are the legacy listener's address as consumers must
	// dial it, given in ConsultResponse.
	AdvertisedHost string
	AdvertisedPort int32
	// Bridges, when set, lists every bridge serving the legacy port, for ConsultResponse's
	// brokers_info; this bridge is added when missing. Nil: this bridge only. It is called on
	// the consulting connection's goroutine and should not block.
	Bridges func(ctx context.Context) []legacy.Broker
	// Strategy is the 0.8.2 assignor (seed step 2), legacy.StrategyRange by default.
	Strategy legacy.Strategy
	// StartTimeout bounds the wait for each StopResponse, final PingResponse and
	// StartResponse of a rebalance. Zero: each consumer's own ping interval, the time
	// docs/legacy-protocol.md §8 gives it to answer any request; a smaller value is useful only
	// to fail attempts faster than the consumers' intervals.
	StartTimeout time.Duration
	// RetryBackoff and RetryBackoffMax bound the wait before retrying a failed rebalance attempt
	// (seed step 5) or a claim blocked by another session's owner znode: it starts at
	// RetryBackoff and doubles up to RetryBackoffMax.
	RetryBackoff, RetryBackoffMax time.Duration
	// RebalanceDelay holds a rebalance back this long after its first trigger, so that a burst
	// of registrations (a whole fleet restarting) is served by one rebalance instead of one
	// each. Zero: rebalance at once; registrations that arrive while members are being
	// stopped still join the same rebalance.
	RebalanceDelay time.Duration
	// ZKTimeout bounds each ZooKeeper call (DefaultLegacyZKTimeout).
	ZKTimeout time.Duration
	// Registerer, when set, receives the coordinator's Prometheus metrics
	// (zkbridge_legacy_*). Stats returns the same figures either way.
	Registerer prometheus.Registerer
	// SessionCheck says what Register does with a consumer that would outlive a crash of the
	// bridge (checkCrashSafety): SessionCheckWarn (the default) admits, counts and logs it,
	// SessionCheckRefuse refuses it with INVALID_PING_SETTINGS.
	SessionCheck SessionCheck
}

// Validate reports the first setting NewLegacyCoordinator would refuse.
func (c LegacyConfig) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("bridge: LegacyConfig.Store is required")
	case c.AdvertisedHost == "":
		return errors.New("bridge: LegacyConfig.AdvertisedHost is required: consumers dial the address ConsultResponse gives")
	case c.AdvertisedPort <= 0 || c.AdvertisedPort > math.MaxUint16:
		return fmt.Errorf("bridge: LegacyConfig.AdvertisedPort %d is not a TCP port", c.AdvertisedPort)
	case c.NodeID < 0:
		return fmt.Errorf("bridge: LegacyConfig.NodeID %d is negative", c.NodeID)
	case c.Root != "" && validRoot(c.Root) != nil:
		return fmt.Errorf("bridge: LegacyConfig.Root %q must be an absolute path such as %s", c.Root, DefaultRoot)
	case c.Strategy != "" && c.Strategy != legacy.StrategyRange && c.Strategy != legacy.StrategyRoundRobin:
		return fmt.Errorf("bridge: LegacyConfig.Strategy: %w %q", legacy.ErrUnknownStrategy, string(c.Strategy))
	case c.StartTimeout < 0 || c.RetryBackoff < 0 || c.RetryBackoffMax < 0 || c.RebalanceDelay < 0 || c.ZKTimeout < 0:
		return errors.New("bridge: LegacyConfig durations must not be negative")
	case c.SessionCheck != "" && c.SessionCheck != SessionCheckWarn && c.SessionCheck != SessionCheckRefuse:
		return fmt.Errorf("bridge: LegacyConfig.SessionCheck %q: want %q or %q", c.SessionCheck, SessionCheckWarn, SessionCheckRefuse)
	}
	return nil
}

func (c LegacyConfig) withDefaults() LegacyConfig {
	if c.InstanceName == "" {
		c.InstanceName = "zkbridge-" + strconv.Itoa(int(c.NodeID))
	}
	if c.Strategy == "" {
		c.Strategy = legacy.StrategyRange
	}
	if c.Root == "" {
		c.Root = DefaultRoot
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultLegacyRetryBackoff
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = DefaultLegacyRetryBackoffMax
	}
	c.RetryBackoffMax = max(c.RetryBackoffMax, c.RetryBackoff)
	if c.ZKTimeout == 0 {
		c.ZKTimeout = DefaultLegacyZKTimeout
	}
	return c
}

// LegacyStats are the coordinator's counters since NewLegacyCoordinator.
type LegacyStats struct {
	Groups  int // groups with a running actor
	Members int // registered legacy consumers, over all groups

	Rebalances        uint64 // rebalances completed (every StartResponse received)
	RebalanceFailures uint64 // attempts that failed and were retried with backoff (seed step 5)
	RebalancesSkipped uint64 // checks that found no rebalance necessary (seed step 3.5)
	// ClaimWaits counts claims that found partitions of the new assignment still owned by
	// another member (a zk member, the bridge's Kafka members, another bridge) and waited.
	ClaimWaits uint64

	OffsetsCommitted uint64 // offsets written to /consumers/<g>/offsets
	// OffsetsRefused counts offsets of PingResponses that were not written: for a partition
	// the member does not own in the current assignment, negative, listed twice, or from a
	// member registered without auto_commit (legacyCheckPing).
	OffsetsRefused uint64

	ZKReads        uint64 // znodes read from ZooKeeper (data, children, watch arming)
	ZKReadRequests uint64 // requests that carried them (a multiRead carries hundreds)
	ZKWrites       uint64 // ZooKeeper write operations issued (each op of a multi counts)
	ZKMultis       uint64 // multi requests issued

	// LastRebalance describes the most recent completed rebalance.
	LastRebalance LegacyRebalanceStats
}

// LegacyRebalanceStats describes one completed rebalance.
type LegacyRebalanceStats struct {
	Group string
	// Duration runs from the first trigger the rebalance served (a Register, a closed or dead
	// member, a partition change) to the last StartResponse.
	Duration   time.Duration
	Attempts   int // attempts it took (restarts and failed ones included)
	Members    int
	Partitions int // partitions assigned
	// The ZooKeeper operations of the rebalance (not those of the pings in between): znodes
	// read and the requests that carried them, write ops and the multi requests that carried
	// them.
	ZKReads, ZKReadRequests, ZKWrites, ZKMultis int
	// Where the time of the last attempt went: steps 1-3 (reading the group, planning), the
	// Stops and final Pings, the claim (reading the group again and the Multi), the Starts.
	Checking, Stopping, Claiming, Starting time.Duration
	Completed                              time.Time
}

// legacyMetrics are the Prometheus side of LegacyStats.
type legacyMetrics struct {
	rebalances *prometheus.CounterVec
	duration   prometheus.Histogram
	offsets    *prometheus.CounterVec
	members    prometheus.Gauge
	zkOps      *prometheus.CounterVec
	unsafe     *prometheus.CounterVec
}

func newLegacyMetrics(reg prometheus.Registerer) (*legacyMetrics, error) {
	m := &legacyMetrics{
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zkbridge_legacy_rebalances_total",
			Help: "Rebalance checks of legacy groups by result: completed, failed (retried with backoff, seed 001 step 5) or unnecessary (step 3.5).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "zkbridge_legacy_rebalance_duration_seconds",
			Help:    "Time from a legacy group's membership or partition change to the last StartResponse of the rebalance it caused.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		offsets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zkbridge_legacy_offsets_total",
			Help: "Offsets reported in legacy PingResponses by result: committed to /consumers/<g>/offsets, or refused (partition not owned by the member in the current assignment, negative, duplicate, or no auto_commit).",
		}, []string{"result"}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "zkbridge_legacy_members",
			Help: "Registered legacy consumers.",
		}),
		zkOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zkbridge_legacy_zookeeper_operations_total",
			Help: "ZooKeeper operations issued by the legacy coordinator: read (znodes read), read_request (requests carrying them), write (each op of a multi), multi (multi requests).",
		}, []string{"kind"}),
		unsafe: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zkbridge_legacy_crash_unsafe_registrations_total",
			Help: "Legacy registrations whose (max_ping_retries + 1) × ping_interval is not below the bridge's ZooKeeper session timeout, by result (admitted, refused: --mixed-session-check=refuse): such a consumer could go on consuming after a crash of the bridge while zk and Kafka members take its partitions.",
		}, []string{"result"}),
	}
	for _, r := range []string{"admitted", "refused"} {
		m.unsafe.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.rebalances, m.duration, m.offsets, m.members, m.zkOps, m.unsafe} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("bridge: registering legacy metrics: %w", err)
			}
		}
	}
	return m, nil
}

// LegacyCoordinator coordinates groups of legacy consumers. Build it with NewLegacyCoordinator,
// run it with Run, and give it to a legacy.Server as its Coordinator.
type LegacyCoordinator struct {
	cfg     LegacyConfig
	log     zerolog.Logger
	store   *zkstate.Store
	metrics *legacyMetrics
	// modes is the daemon's view of the groups' modes (modes.go), set by Bridge.newLegacy; nil
	// (a coordinator outside a Bridge) admits every group.
	modes *groupModes
	// releases wakes the other claimers of a group in this bridge (the Kafka members' claim)
	// when a rebalance released owner znodes, and wakes ours when they did (releases.go); set
	// by Bridge.newLegacy, nil outside a Bridge.
	releases *ownerReleases

	rebalances, failures, skipped, claimWaits   atomic.Uint64
	committed, refused                          atomic.Uint64
	zkReads, zkReadRequests, zkWrites, zkMultis atomic.Uint64
	members                                     atomic.Int64

	mu sync.Mutex
	// lifetime is Run's ctx while it runs: it bounds the actors' own work (rebalances, pings,
	// ZooKeeper calls), which belongs to no caller's request, as zkstate.Store's lifetime does.
	lifetime context.Context
	state    int // legacyNew, legacyRunning, legacyStopped
	groups   map[string]*legacyGroup
	last     LegacyRebalanceStats
	actorWG  sync.WaitGroup
}

const (
	legacyNew = iota
	legacyRunning
	legacyStopped
)

// NewLegacyCoordinator checks cfg and builds a coordinator; Run starts it.
func NewLegacyCoordinator(cfg LegacyConfig) (*LegacyCoordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newLegacyMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &LegacyCoordinator{
		cfg:     cfg,
		log:     cfg.Logger.With().Str("component", "legacy-coordinator").Int32("node_id", cfg.NodeID).Logger(),
		store:   cfg.Store,
		metrics: m,
		groups:  map[string]*legacyGroup{},
	}, nil
}

// Run serves until ctx ends, then stops every group: their consumers' connections are closed
// (they stop fetching and look for a coordinator again), their ids znodes and the owner znodes
// this coordinator wrote are deleted. It returns after every goroutine it started has exited.
// Run may be called once; registrations before it and after it are refused with
// COORDINATOR_NOT_AVAILABLE.
func (c *LegacyCoordinator) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.state != legacyNew {
		c.mu.Unlock()
		return errors.New("bridge: LegacyCoordinator.Run called twice")
	}
	c.state, c.lifetime = legacyRunning, ctx
	c.mu.Unlock()
	c.log.Info().Str("advertised", c.cfg.AdvertisedHost+":"+strconv.Itoa(int(c.cfg.AdvertisedPort))).
		Str("strategy", string(c.cfg.Strategy)).Msg("legacy coordinator running")

	<-ctx.Done()
	c.mu.Lock()
	c.state = legacyStopped
	c.mu.Unlock()
	c.actorWG.Wait() // the actors end with ctx
	c.log.Info().Msg("legacy coordinator stopped")
	return nil
}

// Stats returns the coordinator's counters.
func (c *LegacyCoordinator) Stats() LegacyStats {
	c.mu.Lock()
	groups, last := len(c.groups), c.last
	c.mu.Unlock()
	return LegacyStats{
		Groups:            groups,
		Members:           int(c.members.Load()),
		Rebalances:        c.rebalances.Load(),
		RebalanceFailures: c.failures.Load(),
		RebalancesSkipped: c.skipped.Load(),
		ClaimWaits:        c.claimWaits.Load(),
		OffsetsCommitted:  c.committed.Load(),
		OffsetsRefused:    c.refused.Load(),
		ZKReads:           c.zkReads.Load(),
		ZKReadRequests:    c.zkReadRequests.Load(),
		ZKWrites:          c.zkWrites.Load(),
		ZKMultis:          c.zkMultis.Load(),
		LastRebalance:     last,
	}
}

// Consult answers a ConsultRequest (seed 001 "ConsultResponse"): this bridge coordinates every
// legacy group it is asked about, and brokers_info lists the bridges serving the legacy port.
func (c *LegacyCoordinator) Consult(ctx context.Context) legacy.ConsultResponse {
	c.mu.Lock()
	running := c.state == legacyRunning
	c.mu.Unlock()
	if !running {
		return legacy.ConsultResponse{ErrorCode: legacy.CodeCoordinatorNotAvailable, CoordinatorID: -1}
	}
	self := legacy.Broker{CreatorID: c.cfg.InstanceName, ID: c.cfg.NodeID, Host: c.cfg.AdvertisedHost, Port: c.cfg.AdvertisedPort}
	brokers := []legacy.Broker{self}
	if c.cfg.Bridges != nil {
		brokers = slices.Clone(c.cfg.Bridges(ctx))
		if !slices.ContainsFunc(brokers, func(b legacy.Broker) bool { return b.ID == self.ID }) {
			brokers = append(brokers, self)
		}
	}
	return legacy.ConsultResponse{ErrorCode: legacy.CodeNone, CoordinatorID: c.cfg.NodeID, Brokers: brokers}
}

// Register takes a registered consumer into its group (seed 001 "On Consumer Startup"): the
// group's actor refuses a consumer id that a live member already uses (CONSUMER_ID_IN_USE, as
// 0.8 fails to create a second /ids znode), registers the consumer in
// /consumers/<g>/ids/<id> for 0.8 tools, and rebalances.
func (c *LegacyCoordinator) Register(ctx context.Context, s *legacy.Session) error {
	reg := s.Register()
	// Group modes (modes.go): kafka and finalized groups refuse legacy consumers with
	// GROUP_MODE_REFUSED; a new group's default mode is persisted first.
	if err := c.modes.admitLegacy(ctx, reg.GroupID); err != nil {
		return err
	}
	if err := c.checkCrashSafety(reg); err != nil {
		return err
	}
	if !c.store.Vouched(time.Now()) {
		// Its owner znodes could not be trusted (fenceUnvouched): the consumer backs off and
		// consults again.
		return fmt.Errorf("bridge: the ZooKeeper session of the coordinator of group %q cannot be vouched for: %w", reg.GroupID, legacy.CodeCoordinatorNotAvailable.Err())
	}
	g, err := c.group(reg.GroupID)
	if err != nil {
		return err
	}
	ev := legacyRegisterEv{sess: s, reply: make(chan error, 1)}
	select {
	case g.inbox <- ev:
	case <-g.exited:
		return legacyNotAvailable(reg.GroupID)
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-ev.reply:
		return err
	case <-g.exited:
		return legacyNotAvailable(reg.GroupID)
	case <-ctx.Done():
		// The actor may have accepted the session; the server now refuses and closes it,
		// and the actor removes the member when it sees the session end.
		return ctx.Err()
	}
}

// checkCrashSafety looks at how long a consumer would go on after its coordinator went quiet.
// A legacy consumer treats its coordinator as failed only after (max_ping_retries + 1) ×
// ping_interval without a request (docs/legacy-protocol.md §8), and stops consuming then. Its
// owner znodes are ephemerals of the bridge's ZooKeeper session, so when a dead or silent bridge's
// session expires, zk and Kafka members take its partitions: if the consumer's silence is not
// below the session timeout, it consumes them too meanwhile. It cannot fetch through the
// bridge (legacy consumers fetch from the brokers themselves), so the fetch gate does not help.
func (c *LegacyCoordinator) checkCrashSafety(reg legacy.RegisterRequest) error {
	silence := time.Duration(int64(reg.MaxPingRetries)+1) * time.Duration(reg.PingIntervalMs) * time.Millisecond
	limit := c.store.SessionTimeout()
	if silence < limit {
		return nil
	}
	log := c.log.Warn().Str("group", reg.GroupID).Str("consumer", reg.ConsumerID).
		Int32("ping_interval_ms", reg.PingIntervalMs).Int16("max_ping_retries", reg.MaxPingRetries).Dur("zk_session_timeout", limit)
	if c.cfg.SessionCheck == SessionCheckRefuse {
		c.metrics.unsafe.WithLabelValues("refused").Inc()
		log.Msg("refusing a legacy consumer with INVALID_PING_SETTINGS (--mixed-session-check=refuse): it would take (max_ping_retries + 1) × ping_interval to stop after a crash of this bridge, and zk and Kafka members would take its partitions after the ZooKeeper session timeout")
		return fmt.Errorf("bridge: (max_ping_retries %d + 1) × ping_interval %d ms = %v is not below the coordinator's ZooKeeper session timeout %v: %w",
			reg.MaxPingRetries, reg.PingIntervalMs, silence, limit, legacy.CodeInvalidPingSettings.Err())
	}
	c.metrics.unsafe.WithLabelValues("admitted").Inc()
	log.Msg("legacy consumer admitted, but if this bridge crashed it would go on consuming for (max_ping_retries + 1) × ping_interval, while zk and Kafka members take its partitions after the ZooKeeper session timeout; lower its ping settings or raise --zk-session-timeout")
	return nil
}

// OnSession takes the Store's session events (zkstate.Config.OnSession; the daemon forwards
// them): after an expiry every owner znode of ours is gone, so every group checks its ownership
// again (and rebalances, seed step 3.1). It never blocks.
func (c *LegacyCoordinator) OnSession(ev zkstate.SessionEvent) {
	if ev.State != zkstate.Expired && ev.State != zkstate.Reclaimed {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, g := range c.groups {
		select {
		case g.inbox <- legacySessionEv{ev: ev}:
		default: // a full inbox: the watches' SessionExpired events trigger the same check
		}
	}
}

func legacyNotAvailable(group string) error {
	return fmt.Errorf("bridge: legacy coordinator of group %q is not running: %w", group, legacy.CodeCoordinatorNotAvailable.Err())
}

// group returns the group's actor, starting it if needed.
func (c *LegacyCoordinator) group(name string) (*legacyGroup, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != legacyRunning {
		return nil, legacyNotAvailable(name)
	}
	if g := c.groups[name]; g != nil {
		return g, nil
	}
	g := &legacyGroup{
		c:           c,
		name:        name,
		log:         c.log.With().Str("group", name).Logger(),
		lifetime:    c.lifetime,
		inbox:       make(chan any, legacyInboxSize),
		wake:        c.releases.subscribe(name),
		gone:        make(chan struct{}, 1),
		quit:        make(chan struct{}),
		exited:      make(chan struct{}),
		members:     map[string]*legacyMember{},
		topics:      map[string]*legacyTopic{},
		others:      map[string]*legacyWatch{},
		regs:        map[string]string{},
		owner:       map[legacy.TopicPartition]string{},
		committed:   map[legacy.TopicPartition]int64{},
		offsetNodes: map[legacy.TopicPartition]bool{},
	}
	c.groups[name] = g
	c.actorWG.Add(1)
	go func() {
		defer c.actorWG.Done()
		defer c.releases.unsubscribe(name, g.wake)
		g.run()
		c.mu.Lock()
		delete(c.groups, name)
		c.mu.Unlock()
	}()
	return g, nil
}

// Events of a group's actor.
type (
	legacyRegisterEv struct {
		sess  *legacy.Session
		reply chan error // buffered: the actor never waits on it
	}
	// legacyClosedEv: a member's connection closed (the consumer hung up, broke the protocol,
	// or was closed by us).
	legacyClosedEv struct {
		member string
		sess   *legacy.Session
	}
	// legacyResultEv: a request to a member came back, answered or not.
	legacyResultEv struct {
		member string
		sess   *legacy.Session
		kind   legacyReqKind
		sent   time.Time
		ping   legacy.PingResponse
		code   legacy.ErrorCode // of a StopResponse or StartResponse
		err    error
	}
	// legacyTopicEv: the watch on /brokers/topics/<t> fired.
	legacyTopicEv struct {
		topic string
		watch *legacyTopic
		ev    zkstate.WatchEvent
	}
	legacySessionEv struct{ ev zkstate.SessionEvent }
	// legacyIDsEv: the watch on the children of /consumers/<g>/ids fired.
	legacyIDsEv struct {
		watch *legacyWatch
		ev    zkstate.WatchEvent
	}
	// legacyRegEv: the watch on another member's registration /consumers/<g>/ids/<id> fired.
	legacyRegEv struct {
		id    string
		watch *legacyWatch
		ev    zkstate.WatchEvent
	}
)

type legacyReqKind int

const (
	legacyReqPing      legacyReqKind = iota // a regular ping (liveness, offsets)
	legacyReqStop                           // rebalance step 4.1
	legacyReqFinalPing                      // the ping after a StopResponse: final offsets
	legacyReqStart                          // rebalance step 4.2
)

func (k legacyReqKind) String() string {
	return [...]string{"PingRequest", "StopRequest", "PingRequest (final offsets)", "StartRequest"}[k]
}

// legacyPhase is where a group's rebalance stands.
type legacyPhase int

const (
	legacyIdle       legacyPhase = iota // no rebalance in progress
	legacyStopping                      // StopRequests sent; waiting for every StopResponse
	legacyCollecting                    // final PingRequests sent to auto_commit members
	legacyClaimWait                     // an owner znode to claim is another session's; retry at retryAt
	legacyStarting                      // StartRequests sent; waiting for every StartResponse
	legacyBackoff                       // the attempt failed (step 5); retry at retryAt
)

func (p legacyPhase) String() string {
	return [...]string{"idle", "stopping", "collecting", "claim-wait", "starting", "backoff"}[p]
}

// legacyMember is one registered consumer, owned by its group's actor.
type legacyMember struct {
	id        string
	sess      *legacy.Session
	reg       legacy.RegisterRequest
	interval  time.Duration
	maxMissed int

	missed    int       // consecutive requests unanswered within the ping interval
	pinging   bool      // a regular PingRequest is in flight
	inAttempt bool      // a Stop, final Ping or Start of the current attempt is in flight
	nextPing  time.Time // when the next regular ping is due

	started bool                    // acknowledged a StartRequest, not stopped since
	running []legacy.TopicPartition // the part it was started with
	pending []legacy.TopicPartition // the part of the StartRequest in flight
}

// legacyTopic is the watch on one subscribed topic's /brokers/topics/<t>.
type legacyTopic struct {
	cancel     context.CancelFunc
	partitions []int32
}

// legacyWatch is a watch of the group's registrations: of /consumers/<g>/ids's children, or of
// another member's /consumers/<g>/ids/<id>.
type legacyWatch struct {
	cancel context.CancelFunc
}

// legacyAttempt is one rebalance attempt in progress.
type legacyAttempt struct {
	// when each phase began: begin, Stops sent, claim started, Starts sent
	began, stopping, claiming, starting time.Time

	why     string
	waiting map[string]bool // members whose answer the current phase waits for
	failed  error           // the first member that did not answer in time (step 5)
	dirty   bool            // membership or partitions changed since the attempt began
	final   map[legacy.TopicPartition]int64
	// reclaimed: the claim was tried again at once after another member created a parent
	// directory (/owners/<t>, /offsets/<t>) that the Multi was about to create
	// (legacyParentRace).
	reclaimed bool
	// waited is what the last claim read, as its Release left it, while the claim waits for
	// the owner znodes of foreign partitions; nil when the next claim must read the group.
	waited *legacyWaited
}

// legacyWaited is a claim waiting for other members to release partitions (legacyClaimWait).
type legacyWaited struct {
	view    legacyGroupView
	foreign []legacy.TopicPartition
}

// legacyGroup is the actor of one group. Every field below quit is owned by run's goroutine.
type legacyGroup struct {
	c        *LegacyCoordinator
	name     string
	log      zerolog.Logger
	lifetime context.Context // the coordinator's, see LegacyCoordinator.lifetime
	inbox    chan any
	wake     chan struct{} // another actor of this bridge released owner znodes (releases.go)
	// gone is signalled when the owner znode a claim waits for goes away (watchRelease);
	// stopGone ends that watch.
	gone     chan struct{}
	stopGone context.CancelFunc
	quit     chan struct{}  // closed when the actor stops: senders give up
	exited   chan struct{}  // closed when run has returned
	wg       sync.WaitGroup // request goroutines and watch forwarders

	members map[string]*legacyMember
	topics  map[string]*legacyTopic
	// ids watches the children of /consumers/<g>/ids while the group has members (nil
	// otherwise); others watches the data of every registration there that is not one of our
	// members', by consumer id.
	ids    *legacyWatch
	others map[string]*legacyWatch
	// regs is every other registration as the last read of the group saw it: consumer id →
	// legacyRegKey. A registration whose watch shows another key changed since (in place).
	regs map[string]string
	// lastOthers are the other registrations, resolved, as the last read of the group saw them
	// (legacyGroupView.others); nil before the first.
	lastOthers map[string]map[string]int
	// skipped names the registrations the last plan left out, unreadable, for logs.
	skipped string

	// The current assignment: what the last successful Multi wrote to /owners.
	assignment  legacy.Assignment
	owner       map[legacy.TopicPartition]string // partition → consumer id
	committed   map[legacy.TopicPartition]int64  // offsets we know are in /offsets
	offsetNodes map[legacy.TopicPartition]bool   // offset znodes known to exist
	// written are the owner znodes the last successful Multi left, all ours in writtenSession
	// (0: none to trust); see readGroup.
	written        map[legacy.TopicPartition]legacyOwner
	writtenSession int64
	// assignedAt is when the current assignment was written. A PingResponse to a ping sent
	// before it describes the assignment before: its offsets were collected as final offsets
	// (the member was stopped), and checking them against the new owners would only refuse
	// partitions that moved.
	assignedAt time.Time

	phase      legacyPhase
	att        *legacyAttempt
	want       bool      // a trigger is waiting to be served
	wantSince  time.Time // the first trigger not served yet
	trigger    string    // the latest trigger, for logs
	retryAt    time.Time // claim-wait and backoff
	failures   int       // consecutive failed attempts
	claimTries int       // consecutive blocked claims
	// The rebalance being measured, from its first trigger over every attempt.
	since                               time.Time
	attempts                            int
	reads, readRequests, writes, multis int
	foreignLogged                       bool
	claimWaitSince                      time.Time // the first blocked claim of claimTries
	lastRefusalLog                      time.Time
	suppressedRefusalCount              int
}

func (g *legacyGroup) run() {
	defer close(g.exited)
	defer func() {
		if g.stopGone != nil {
			g.stopGone()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		g.step(now)
		if wake := g.nextWake(); !wake.IsZero() {
			timer.Reset(max(time.Until(wake), 0))
		} else {
			timer.Stop()
		}
		select {
		case ev := <-g.inbox:
			g.handle(ev)
		case <-g.wake:
			if g.phase == legacyClaimWait {
				g.retryAt = time.Now() // what we wait for may be free: look now, not at the backoff's end
			}
		case <-g.gone:
			if g.phase == legacyClaimWait {
				g.retryAt = time.Now()
			}
		case <-timer.C:
		case <-g.lifetime.Done():
			g.shutdown()
			return
		}
	}
}

func (g *legacyGroup) handle(ev any) {
	now := time.Now()
	switch ev := ev.(type) {
	case legacyRegisterEv:
		g.onRegister(now, ev)
	case legacyClosedEv:
		if m := g.members[ev.member]; m != nil && m.sess == ev.sess {
			g.remove(now, m, ev.sess.Err())
		}
	case legacyResultEv:
		g.onResult(now, ev)
	case legacyTopicEv:
		g.onTopic(now, ev)
	case legacySessionEv:
		g.onSession(now, ev.ev)
	case legacyIDsEv:
		g.onIDs(now, ev)
	case legacyRegEv:
		g.onRegistration(now, ev)
	}
}

// errLegacyUnvouched closes the members' connections in fenceUnvouched.
var errLegacyUnvouched = errors.New("the coordinator cannot vouch for its ZooKeeper session")

// fenceUnvouched closes every member's connection while the coordinator cannot vouch for its
// ZooKeeper session (zkstate's lease: no reply for nine tenths of the session timeout). Its
// owner znodes may be about to go, and 0.8 consumers take the partitions then. A legacy
// consumer stops consuming when its connection closes (docs §8 "Consumer"), so it stops before
// the server can expire the session. Pings alone need no ZooKeeper: without this a coordinator
// cut from ZooKeeper would keep its members consuming (TestIntegration_MixedBridgeKilled/cut).
// The consumers register again once the session is vouched for (Register refuses them until
// then).
func (g *legacyGroup) fenceUnvouched(now time.Time) {
	if len(g.members) == 0 || g.c.store.Vouched(now) {
		return
	}
	for _, m := range g.members {
		if m.sess.Err() == nil {
			g.log.Warn().Str("consumer", m.id).Msg("closing a legacy member's connection: the ZooKeeper session cannot be vouched for, so it must stop consuming before its partitions are handed to others")
			m.sess.Close(errLegacyUnvouched)
		}
	}
}

// step advances the rebalance as far as it can go now, then sends the pings that are due.
func (g *legacyGroup) step(now time.Time) {
	g.fenceUnvouched(now)
	for range 16 { // each pass moves one phase; a rebalance has fewer than 16
		before, att := g.phase, g.att
		switch g.phase {
		case legacyIdle:
			if g.want && !now.Before(g.wantSince.Add(g.c.cfg.RebalanceDelay)) {
				g.begin(now)
			}
		case legacyStopping, legacyCollecting, legacyStarting:
			if len(g.att.waiting) == 0 {
				g.advance(now)
			}
		case legacyClaimWait:
			if !now.Before(g.retryAt) {
				if g.att.dirty {
					g.begin(now)
				} else {
					g.claim(now)
				}
			}
		case legacyBackoff:
			if !now.Before(g.retryAt) {
				g.begin(now)
			}
		}
		if g.phase == before && g.att == att {
			break
		}
	}
	g.sendPings(now)
}

// nextWake is when step must run again without an event: a delayed rebalance, a retry, a ping.
func (g *legacyGroup) nextWake() time.Time {
	var wake time.Time
	earlier := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	switch g.phase {
	case legacyIdle:
		if g.want {
			earlier(g.wantSince.Add(g.c.cfg.RebalanceDelay))
		}
	case legacyClaimWait, legacyBackoff:
		earlier(g.retryAt)
	}
	for _, m := range g.members {
		if !m.pinging && !m.inAttempt {
			earlier(m.nextPing)
		}
	}
	if len(g.members) > 0 {
		if until := g.c.store.LeaseUntil(); !until.IsZero() {
			earlier(until) // fenceUnvouched, if no probe extends it by then
		}
	}
	return wake
}

// sendPings pings every member that is due and has no request in flight: a Stop, final Ping or
// Start of a rebalance is that member's ping (docs §8 "Coordinator" 1), but a member that has
// answered its part of a slow rebalance phase keeps being pinged, so that neither side takes
// the other for dead while the group waits for its slowest member.
func (g *legacyGroup) sendPings(now time.Time) {
	for _, m := range g.members {
		if m.pinging || m.inAttempt || now.Before(m.nextPing) {
			continue
		}
		m.pinging = true
		g.send(m, legacyReqPing, nil)
	}
}

// send runs one request to m on a goroutine of its own; the answer (or its absence) comes back
// to the actor as a legacyResultEv. A rebalance request is added to the attempt's waiting set.
func (g *legacyGroup) send(m *legacyMember, kind legacyReqKind, parts []legacy.PartitionOffset) {
	if kind != legacyReqPing {
		m.inAttempt = true
		g.att.waiting[m.id] = true
	}
	// num_retries is the number of consecutive missed pings so far (docs §8 "Liveness").
	retries := int16(min(m.missed, math.MaxInt16))
	id, sess := m.id, m.sess
	timeout := g.c.cfg.StartTimeout
	// The time of sending, not the step's now: ZooKeeper calls may have taken a while since.
	sent := time.Now()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		ctx := g.lifetime
		if kind != legacyReqPing && timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, timeout, legacy.ErrTimeout)
			defer cancel()
		}
		res := legacyResultEv{member: id, sess: sess, kind: kind, sent: sent}
		switch kind {
		case legacyReqPing, legacyReqFinalPing:
			res.ping, res.err = sess.Ping(ctx, retries)
		case legacyReqStop:
			var r legacy.StopResponse
			r, res.err = sess.Stop(ctx)
			res.code = r.ErrorCode
		case legacyReqStart:
			var r legacy.StartResponse
			r, res.err = sess.Start(ctx, parts)
			res.code = r.ErrorCode
		}
		select {
		case g.inbox <- res:
		case <-g.quit:
		}
	}()
}

// noteTrigger records a reason to check the group (seed 001 "rebalance (group)" triggers). An
// attempt in progress is marked dirty: it restarts from step 1 if it has not claimed yet, and
// a new rebalance check follows it otherwise.
func (g *legacyGroup) noteTrigger(now time.Time, why string) {
	if !g.want {
		g.want = true
		g.wantSince = now
	}
	g.trigger = why
	if g.att != nil {
		g.att.dirty = true
	}
	g.log.Debug().Str("trigger", why).Stringer("phase", g.phase).Msg("rebalance triggered")
}

// begin starts an attempt: seed steps 1-3, then StopRequests (4.1) when a rebalance is needed.
func (g *legacyGroup) begin(now time.Time) {
	if g.since.IsZero() {
		g.since = g.wantSince
		if g.since.IsZero() {
			g.since = now
		}
	}
	why := g.trigger
	g.want, g.wantSince = false, time.Time{}
	g.attempts++
	g.att = &legacyAttempt{began: time.Now(), why: why, waiting: map[string]bool{}, final: map[legacy.TopicPartition]int64{}}

	// Step 3 is decided without reading when what the actor knows makes the rebalance
	// necessary whatever ZooKeeper holds: the claim reads the group after the Stops anyway.
	if reason := g.certainNeed(); reason != "" {
		g.log.Info().Str("trigger", why).Str("reason", reason).Int("members", len(g.members)).
			Int("attempt", g.attempts).Msg("rebalancing: stopping every member (seed step 4.1)")
		g.stopAll()
		return
	}

	// Step 3 reads the current ownership from ZooKeeper; the offsets wait for the claim.
	readStart := time.Now()
	view, err := g.readGroup(g.lifetime, false)
	if err != nil {
		g.fail(now, fmt.Errorf("reading the owners (seed step 3): %w", err))
		return
	}
	plan, err := legacyPlanRebalance(g.planInput(view, nil))
	if err != nil {
		g.fail(now, err)
		return
	}
	g.regs, g.lastOthers = view.regs, view.others
	if !plan.Needed() {
		// Step 3.5: nothing to do.
		g.log.Debug().Str("trigger", why).Msg("rebalance not necessary (seed step 3.5)")
		g.c.skipped.Add(1)
		g.c.metrics.rebalances.WithLabelValues("unnecessary").Inc()
		g.finish()
		return
	}
	g.log.Info().Str("trigger", why).Str("reason", plan.Why()).Int("members", len(g.members)).
		Int("others", len(view.regs)).Int("attempt", g.attempts).Dur("reading", time.Since(readStart)).Dur("queued", view.queued).
		Msg("rebalancing: stopping every member (seed step 4.1)")
	g.stopAll()
}

// stopAll is step 4.1: a StopRequest to every member.
func (g *legacyGroup) stopAll() {
	g.phase, g.att.stopping = legacyStopping, time.Now()
	for _, m := range g.members {
		// Once a StopRequest is on its way the member is, or soon will be, stopped.
		m.started, m.running = false, nil
		g.send(m, legacyReqStop, nil)
	}
}

// certainNeed says why the rebalance is necessary whatever the owner znodes hold, or "" when
// only reading them can tell (seed step 3):
//   - a member of ours is not started: it must get its StartRequest (legacyPlan.NotRunning),
//     which only a rebalance sends — a member that just registered, or members a failed attempt
//     stopped;
//   - a partition of ours belongs to a member that is gone: its owner znode holds a thread no
//     new assignment can have (step 3.4).
//
// The Stops then go out at once, not after a read of the whole group, which the claim repeats
// after them. It also needs the others' registrations as the last read saw them, to check
// that the assignor does not fail on them (roundrobin over unequal subscriptions): members are
// not stopped for a rebalance that cannot be computed.
func (g *legacyGroup) certainNeed() string {
	if g.lastOthers == nil || len(g.members) == 0 {
		return ""
	}
	reason := ""
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		if !g.members[id].started {
			reason = "member " + id + " not started (seed step 3 needs no read)"
			break
		}
	}
	if reason == "" {
		for _, tp := range legacySortedTPs(g.owner) {
			if id := g.owner[tp]; g.members[id] == nil {
				reason = fmt.Sprintf("3.4 partition %s owned by %s, which left (seed step 3 needs no read)", tp, id)
				break
			}
		}
	}
	if reason == "" {
		return ""
	}
	in := g.planInput(legacyGroupView{session: g.writtenSession, owners: map[legacy.TopicPartition]legacyOwner{}, others: g.lastOthers}, nil)
	if _, err := legacyPlanRebalance(in); err != nil {
		return ""
	}
	return reason
}

// advance moves to the next phase once every answer of the current one is in.
func (g *legacyGroup) advance(now time.Time) {
	att := g.att
	if att.failed != nil {
		g.fail(now, att.failed)
		return
	}
	switch g.phase {
	case legacyStopping:
		if att.dirty {
			g.log.Debug().Msg("group changed while stopping its members: rebalance from step 1")
			g.begin(now)
			return
		}
		// docs §8 "Coordinator" 2: the offsets reported after a StopResponse are final.
		g.phase = legacyCollecting
		for _, m := range g.members {
			if m.reg.AutoCommit {
				g.send(m, legacyReqFinalPing, nil)
			}
		}
	case legacyCollecting:
		if att.dirty {
			g.log.Debug().Msg("group changed while collecting final offsets: rebalance from step 1")
			g.begin(now)
			return
		}
		g.claim(now)
	case legacyStarting:
		g.complete(now)
	}
}

// claim is step 4 between the Stops and the Starts: read the owners and offsets again, wait
// while another session holds an owner znode to claim, then write everything in one Multi and
// send the StartRequests.
func (g *legacyGroup) claim(now time.Time) {
	g.att.claiming = time.Now()
	// Read again: the owners may have changed while the members stopped, and this is the
	// check, right before claiming, that no owner znode to claim is another session's.
	readStart := time.Now()
	// After a wait, only what it waited for is read again: the owner znodes of the foreign
	// partitions and their offsets, which their previous owner committed before releasing
	// them. The rest of the read before the wait still holds as far as a claim can tell:
	// changes of the membership or of the partitions mark the attempt dirty and restart it,
	// our own owner znodes are ours, and a partition someone else took meanwhile makes the
	// Multi's create fail, after which the group is read again in full.
	w, refreshed := g.att.waited, g.att.waited != nil
	g.att.waited = nil
	var (
		view legacyGroupView
		err  error
	)
	if refreshed {
		view, err = g.refreshWaited(w)
	} else {
		view, err = g.readGroup(g.lifetime, true)
	}
	if err != nil {
		g.fail(now, fmt.Errorf("reading the owners and offsets (seed step 4): %w", err))
		return
	}
	reading := time.Since(readStart)
	plan, err := legacyPlanRebalance(g.planInput(view, g.att.final))
	if err != nil {
		g.fail(now, err)
		return
	}
	g.regs = view.regs
	if !refreshed {
		g.lastOthers = view.others
	}
	if len(plan.Foreign) > 0 {
		// Another member (a zk member that has not noticed the change yet, a member of
		// another coordinator, a previous coordinator whose session has not expired) still
		// owns partitions we must claim. 0.8 consumers retry their claims the same way; ours
		// stay stopped, and keep being pinged, meanwhile. What is no longer ours is let go
		// first: whoever we wait for may be waiting for it.
		if len(plan.Release) > 0 {
			if err := g.multi(plan.Release); err != nil {
				g.written, g.writtenSession = nil, 0
				if legacyParentRace(err) && !g.att.reclaimed {
					g.att.reclaimed = true
					g.claim(now)
					return
				}
				g.fail(now, fmt.Errorf("releasing owner znodes before waiting to claim (seed step 4): %w", err))
				return
			}
			g.released(plan, view)
			g.c.releases.released(g.name, g.wake)
		}
		g.att.waited = g.waitedView(plan, view)
		g.claimTries++
		g.c.claimWaits.Add(1)
		wait := g.backoff(g.claimTries)
		if g.claimTries == 1 {
			g.claimWaitSince = now
		}
		// Waiting is routine in a group with other members (they release at their own pace):
		// a warning only when it lasts.
		ev := g.log.Debug()
		switch {
		case g.claimTries == 1:
			ev = g.log.Info()
		case !g.foreignLogged && now.Sub(g.claimWaitSince) >= legacyClaimWarnAfter:
			ev = g.log.Warn().Dur("waiting", now.Sub(g.claimWaitSince))
			g.foreignLogged = true
		}
		first := plan.Foreign[0]
		holder := view.owners[first]
		if holder.Session >= 0 {
			ev = ev.Str("session", fmt.Sprintf("0x%x", holder.Session))
		}
		ev.Int("partitions", len(plan.Foreign)).Stringer("first", first).Str("held_by", holder.Thread).
			Dur("retry_in", wait).Msg("owner znodes held by another member; waiting to claim")
		g.phase, g.retryAt = legacyClaimWait, now.Add(wait)
		g.watchRelease(zkstate.OwnerPath(g.name, first.Topic, first.Partition))
		return
	}
	writeStart := time.Now()
	if err := g.multi(plan.Ops); err != nil {
		// Whatever made it fail (a znode changed under us, the session), trust nothing
		// about the owners until they are read again.
		g.written, g.writtenSession = nil, 0
		if (legacyParentRace(err) || refreshed) && !g.att.reclaimed {
			g.att.reclaimed = true
			g.log.Debug().Err(err).Bool("after_wait", refreshed).
				Msg("the group changed between our read and our Multi; reading it again and claiming")
			g.claim(now)
			return
		}
		g.fail(now, fmt.Errorf("writing ownership and final offsets (seed step 4): %w", err))
		return
	}
	writing := time.Since(writeStart)
	g.c.releases.released(g.name, g.wake) // the Multi deleted what moves to others
	// The Multi is in: this is the current assignment now, and every owner znode of our
	// partitions is ours: created by the Multi (version 0), or read and checked.
	g.written, g.writtenSession = make(map[legacy.TopicPartition]legacyOwner, len(plan.Assignment)), 0
	for tp, thread := range plan.Assignment {
		o := legacyOwner{Thread: thread, Version: 0, Session: view.session}
		if old, ok := view.owners[tp]; ok && old.Session == view.session && old.Thread == thread {
			o = old // unchanged: not rewritten
		}
		g.written[tp] = o
	}
	if g.c.store.SessionID() == view.session {
		g.writtenSession = view.session
	}
	finals := 0
	for tp, off := range g.att.final {
		view.nodes[tp] = true
		if old, ok := view.committed[tp]; !ok || old != off {
			finals++
		}
	}
	g.c.addCommitted(finals)
	g.assignment, g.owner, g.committed, g.offsetNodes = plan.Assignment, plan.Owner, plan.Offsets, view.nodes
	g.assignedAt = time.Now()
	g.claimTries, g.foreignLogged = 0, false

	g.phase, g.att.starting = legacyStarting, time.Now()
	for _, m := range g.members {
		parts := plan.Starts[m.id]
		m.pending = make([]legacy.TopicPartition, len(parts))
		for i, p := range parts {
			m.pending[i] = legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		}
		g.send(m, legacyReqStart, parts)
	}
	g.log.Debug().Int("ops", len(plan.Ops)).Int("partitions", len(plan.Assignment)).
		Dur("reading", reading).Dur("queued", view.queued).Dur("writing", writing).
		Msg("ownership written; starting every member (seed step 4.2)")
}

// legacyParentRace reports whether a Multi failed only because a parent it was creating (an
// owners directory /consumers/<g>/owners/<t>) appeared meanwhile: zkstate checks which parents
// exist before it sends the batch, and in a group with other members, someone else's first
// claim of a topic creates the directory too. The Multi changed nothing (or, split, nothing
// after the failed request), so the claim can be planned again at once, rather than after a
// backoff and a second round of StopRequests.
func legacyParentRace(err error) bool {
	var me *zkstate.MultiError
	return errors.As(err, &me) && me.Parent != "" && errors.Is(err, zkstate.ErrNodeExists)
}

// waitedView is the view a claim that waits keeps for the next one (legacyAttempt.waited): view
// as the plan's Release Multi, if any, left it — the final offsets written, our owner znodes of
// partitions no longer ours gone.
func (g *legacyGroup) waitedView(plan legacyPlan, view legacyGroupView) *legacyWaited {
	if len(plan.Release) > 0 {
		in := g.planInput(view, g.att.final)
		for tp, o := range view.owners {
			if _, keep := plan.Assignment[tp]; !keep && in.ours(o) {
				delete(view.owners, tp)
			}
		}
		for tp, off := range g.att.final {
			view.committed[tp], view.nodes[tp] = off, true
		}
	}
	return &legacyWaited{view: view, foreign: plan.Foreign}
}

// refreshWaited reads again what a claim waited for: the owner znode and the offset of every
// foreign partition, in one batch, into the view kept by the wait.
func (g *legacyGroup) refreshWaited(w *legacyWaited) (legacyGroupView, error) {
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	store, v := g.c.store, w.view
	if err := legacySameSession(store, v.session, "while waiting to claim"); err != nil {
		return v, err
	}
	paths := make([]string, 0, 2*len(w.foreign))
	for _, tp := range w.foreign {
		paths = append(paths, zkstate.OwnerPath(g.name, tp.Topic, tp.Partition), zkstate.OffsetPath(g.name, tp.Topic, tp.Partition))
	}
	reads, err := store.GetMany(ctx, paths)
	g.countReads(len(paths), 1)
	if err != nil {
		return v, err
	}
	for i, tp := range w.foreign {
		owner, offset := reads[2*i], reads[2*i+1]
		switch {
		case errors.Is(owner.Err, zkstate.ErrNoNode):
			delete(v.owners, tp)
		case owner.Err != nil:
			return v, owner.Err
		default:
			thread := string(owner.Data)
			o := legacyOwner{Thread: thread, Version: owner.Stat.Version, Session: owner.Stat.EphemeralOwner}
			if _, other := v.others[legacy.ConsumerOf(thread)]; other {
				o = legacyOwner{Thread: thread, Version: -1, Session: -1} // as readGroup: not ours
			}
			v.owners[tp] = o
		}
		switch {
		case errors.Is(offset.Err, zkstate.ErrNoNode):
			delete(v.committed, tp)
			delete(v.nodes, tp)
		case offset.Err != nil:
			return v, offset.Err
		default:
			v.nodes[tp] = true
			off, err := zkstate.ParseOffset(offset.Data)
			if err != nil {
				delete(v.committed, tp)
				g.warnBadOffset(tp, err)
				continue
			}
			v.committed[tp] = off
		}
	}
	if err := legacySameSession(store, v.session, "while reading the group"); err != nil {
		return v, err
	}
	v.queued = 0
	return v, nil
}

// released records a plan's Release Multi: the final offsets are committed, and the partitions
// whose owner znodes it deleted are no longer ours — their offsets are not taken from pings
// any more (legacyCheckPing), since their next owner may be consuming them already.
func (g *legacyGroup) released(plan legacyPlan, view legacyGroupView) {
	finals := 0
	for tp, off := range g.att.final {
		if old, ok := view.committed[tp]; !ok || old != off {
			finals++
		}
		g.committed[tp], g.offsetNodes[tp] = off, true
	}
	g.c.addCommitted(finals)
	for tp := range g.owner {
		if _, ok := plan.Assignment[tp]; !ok {
			delete(g.owner, tp)
			delete(g.assignment, tp)
			delete(g.written, tp)
		}
	}
	g.log.Debug().Int("ops", len(plan.Release)).Msg("released the owner znodes no longer ours before waiting to claim")
}

// complete ends a rebalance whose every StartResponse came in (seed step 4.3).
func (g *legacyGroup) complete(now time.Time) {
	st := LegacyRebalanceStats{
		Group:          g.name,
		Duration:       now.Sub(g.since),
		Attempts:       g.attempts,
		Members:        len(g.members),
		Partitions:     len(g.assignment),
		ZKReads:        g.reads,
		ZKReadRequests: g.readRequests,
		ZKWrites:       g.writes,
		ZKMultis:       g.multis,
		Checking:       g.att.stopping.Sub(g.att.began),
		Stopping:       g.att.claiming.Sub(g.att.stopping),
		Claiming:       g.att.starting.Sub(g.att.claiming),
		Starting:       now.Sub(g.att.starting),
		Completed:      now,
	}
	g.c.rebalances.Add(1)
	g.c.metrics.rebalances.WithLabelValues("completed").Inc()
	g.c.metrics.duration.Observe(st.Duration.Seconds())
	g.c.mu.Lock()
	g.c.last = st
	g.c.mu.Unlock()
	g.log.Info().Dur("took", st.Duration).Int("attempts", st.Attempts).Int("members", st.Members).
		Int("partitions", st.Partitions).Dur("checking", st.Checking).Dur("stopping", st.Stopping).
		Dur("claiming", st.Claiming).Dur("starting", st.Starting).Int("zk_reads", st.ZKReads).Int("zk_read_requests", st.ZKReadRequests).Int("zk_writes", st.ZKWrites).
		Msg("rebalance complete")
	g.failures = 0
	g.finish()
}

// finish returns to idle and ends the measurement of the rebalance.
func (g *legacyGroup) finish() {
	g.phase, g.att = legacyIdle, nil
	g.since, g.attempts, g.reads, g.readRequests, g.writes, g.multis = time.Time{}, 0, 0, 0, 0, 0
}

// fail is seed step 5: report the failure and retry after a backoff.
func (g *legacyGroup) fail(now time.Time, err error) {
	g.failures++
	wait := g.backoff(g.failures)
	g.c.failures.Add(1)
	g.c.metrics.rebalances.WithLabelValues("failed").Inc()
	l := g.log.Warn()
	if g.lifetime.Err() != nil {
		l = g.log.Debug() // shutting down: the ZooKeeper calls were cut short on purpose
	}
	l.Err(err).Int("attempt", g.attempts).Dur("retry_in", wait).Msg("rebalance attempt failed (seed step 5)")
	g.phase, g.att, g.retryAt = legacyBackoff, nil, now.Add(wait)
	if g.trigger == "" {
		g.trigger = "retry"
	}
}

// backoff is RetryBackoff doubled n-1 times, capped at RetryBackoffMax.
func (g *legacyGroup) backoff(n int) time.Duration {
	d := g.c.cfg.RetryBackoff
	for i := 1; i < n && d < g.c.cfg.RetryBackoffMax; i++ {
		d *= 2
	}
	return min(d, g.c.cfg.RetryBackoffMax)
}

// planInput gathers what legacyPlanRebalance decides on: our members, the others'
// registrations as the read of the group found them, the partitions our watches know.
func (g *legacyGroup) planInput(view legacyGroupView, final map[legacy.TopicPartition]int64) legacyPlanInput {
	in := legacyPlanInput{
		Group:       g.name,
		Strategy:    g.c.cfg.Strategy,
		Session:     view.session,
		Members:     make(map[string]legacyMemberSpec, len(g.members)),
		Others:      view.others,
		Partitions:  make(map[string][]int32, len(g.topics)),
		Owners:      view.owners,
		Committed:   view.committed,
		OffsetNodes: view.nodes,
		Final:       final,
	}
	for id, m := range g.members {
		in.Members[id] = legacyMemberSpec{
			Subscription: m.reg.Subscription,
			AutoCommit:   m.reg.AutoCommit,
			Reset:        m.reg.AutoOffsetReset,
			Started:      m.started,
			Running:      m.running,
		}
	}
	for t, w := range g.topics {
		in.Partitions[t] = w.partitions
	}
	return in
}

// onRegister admits a registered consumer (legacy.Coordinator.Register).
func (g *legacyGroup) onRegister(now time.Time, ev legacyRegisterEv) {
	reg := ev.sess.Register()
	id := reg.ConsumerID
	if old := g.members[id]; old != nil {
		if old.sess.Err() == nil {
			ev.reply <- fmt.Errorf("bridge: legacy group %q: consumer %q is already registered from %s: %w",
				g.name, id, old.sess.RemoteAddr(), legacy.CodeConsumerIDInUse.Err())
			return
		}
		// The old connection is closed but its event is still queued behind this one: the
		// consumer reconnected. Drop the old member first.
		g.remove(now, old, old.sess.Err())
	}
	for _, s := range reg.Subscription {
		if err := g.watchTopic(s.Topic); err != nil {
			g.syncWatches()
			ev.reply <- fmt.Errorf("bridge: legacy group %q: watching topic %q: %w: %w",
				g.name, s.Topic, err, legacy.CodeCoordinatorNotAvailable.Err())
			return
		}
	}
	// The other members of the group: their registrations count in our assignment.
	if err := g.watchIDs(); err != nil {
		g.syncWatches()
		ev.reply <- fmt.Errorf("bridge: legacy group %q: watching %s: %w: %w",
			g.name, zkstate.IDsPath(g.name), err, legacy.CodeCoordinatorNotAvailable.Err())
		return
	}
	sub := make(map[string]int, len(reg.Subscription))
	for _, s := range reg.Subscription {
		sub[s.Topic] = int(s.Threads)
	}
	// The 0.8 registration (exact format), so 0.8 tools and zk consumers of the group see the
	// member, and first its hosted-member znode, so that nobody reading the group takes the
	// registration for a zk member's (zkstate/hosted.go).
	data := zkstate.ConsumerRegistration{Version: 1, Subscription: sub, Pattern: zkstate.PatternStatic, TimestampMs: now.UnixMilli()}.Encode()
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	err := g.createHosted(ctx, id)
	if err == nil {
		err = g.c.store.CreateEphemeral(ctx, zkstate.IDPath(g.name, id), data)
		g.countWrites(1, 0)
		if err != nil {
			g.deleteHosted(ctx, id)
		}
	}
	cancel()
	if err != nil {
		g.syncWatches()
		code := legacy.CodeCoordinatorNotAvailable
		if errors.Is(err, zkstate.ErrNodeExists) {
			// Another ZooKeeper session holds /ids/<id> or the hosted znode: a 0.8 consumer
			// with that id, a member of another bridge, or our previous incarnation whose
			// session has not expired yet; or another coordinator of this bridge hosts a
			// member under that consumer id.
			code = legacy.CodeConsumerIDInUse
		}
		ev.reply <- fmt.Errorf("bridge: legacy group %q: registering consumer %q in ZooKeeper: %w: %w", g.name, id, err, code.Err())
		return
	}
	m := &legacyMember{
		id:        id,
		sess:      ev.sess,
		reg:       reg,
		interval:  ev.sess.PingInterval(),
		maxMissed: max(int(reg.MaxPingRetries), 1),
		nextPing:  now,
	}
	g.members[id] = m
	if w := g.others[id]; w != nil {
		// Seen as another member's registration until now (the children event of our own
		// create, or an earlier owner of the id): it is ours.
		w.cancel()
		delete(g.others, id)
	}
	g.c.members.Add(1)
	g.c.metrics.members.Inc()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		select {
		case <-m.sess.Done():
			select {
			case g.inbox <- legacyClosedEv{member: id, sess: m.sess}:
			case <-g.quit:
			}
		case <-g.quit:
		}
	}()
	ev.reply <- nil
	g.log.Info().Str("consumer", id).Stringer("remote", ev.sess.RemoteAddr()).Bool("auto_commit", reg.AutoCommit).
		Int("members", len(g.members)).Msg("legacy consumer registered")
	// "On Consumer Failover": a new member always triggers a rebalance.
	g.noteTrigger(now, "consumer "+id+" registered")
}

// remove drops a member: its connection is closed, its /ids znode deleted, and the group
// rebalances (a dead member or a closed socket, seed 001 "On Consumer Failover").
func (g *legacyGroup) remove(now time.Time, m *legacyMember, cause error) {
	m.sess.Close(cause)
	delete(g.members, m.id)
	if g.att != nil {
		delete(g.att.waiting, m.id)
	}
	g.c.members.Add(-1)
	g.c.metrics.members.Dec()
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	err := g.c.store.DeleteEphemeral(ctx, zkstate.IDPath(g.name, m.id))
	g.countWrites(1, 0)
	if err != nil && !errors.Is(err, zkstate.ErrNotOwner) && g.lifetime.Err() == nil {
		g.log.Warn().Err(err).Str("consumer", m.id).Msg("deleting the ids znode failed")
	}
	g.deleteHosted(ctx, m.id) // after the registration, which it describes
	cancel()
	g.syncWatches()
	g.log.Info().Str("consumer", m.id).AnErr("cause", cause).Int("members", len(g.members)).Msg("legacy consumer removed")
	g.noteTrigger(now, "consumer "+m.id+" removed")
}

// onResult takes the outcome of one request: liveness first (docs §8 "Liveness"), then what the
// answer means for the ping or the rebalance it belongs to.
func (g *legacyGroup) onResult(now time.Time, r legacyResultEv) {
	m := g.members[r.member]
	if m == nil || m.sess != r.sess {
		return // a member removed meanwhile
	}
	inAttempt := false
	if r.kind == legacyReqPing {
		m.pinging = false
	} else {
		m.inAttempt = false
		if g.att != nil && g.att.waiting[m.id] {
			delete(g.att.waiting, m.id)
			inAttempt = true
		}
	}
	switch {
	case r.err == nil:
		m.missed = 0
		m.nextPing = r.sent.Add(m.interval)
	case errors.Is(r.err, legacy.ErrTimeout) && g.lifetime.Err() == nil:
		m.missed++
		if m.missed >= m.maxMissed {
			g.remove(now, m, fmt.Errorf("consumer %q: %w (%d in a row, ping interval %v)", m.id, legacy.ErrDead, m.missed, m.interval))
			return
		}
		m.nextPing = now // the next ping goes out at once, with num_retries = missed
		if inAttempt && g.att.failed == nil {
			g.att.failed = fmt.Errorf("consumer %q did not answer its %v: %w", m.id, r.kind, r.err)
		}
		return
	default:
		g.remove(now, m, r.err)
		return
	}

	switch r.kind {
	case legacyReqPing:
		if r.sent.Before(g.assignedAt) {
			return // answered for the assignment before; see assignedAt
		}
		g.commitPing(m, r.ping)
	case legacyReqStop, legacyReqStart:
		if r.code != legacy.CodeNone {
			// docs §8 "Coordinator" 5: an error code counts as a failed member.
			g.remove(now, m, fmt.Errorf("consumer %q answered its %v with %w", m.id, r.kind, r.code.Err()))
			return
		}
		if r.kind == legacyReqStart && inAttempt {
			m.started, m.running, m.pending = true, m.pending, nil
		}
	case legacyReqFinalPing:
		if !inAttempt {
			return
		}
		check := legacyCheckPing(m.id, m.reg.AutoCommit, g.owner, g.committed, r.ping)
		g.countRefused(m, check)
		for tp, off := range check.Accepted {
			g.att.final[tp] = off
		}
	}
}

// commitPing writes the offsets of a regular PingResponse in one Multi (issue 4 item 4).
func (g *legacyGroup) commitPing(m *legacyMember, resp legacy.PingResponse) {
	check := legacyCheckPing(m.id, m.reg.AutoCommit, g.owner, g.committed, resp)
	g.countRefused(m, check)
	if len(check.Accepted) == 0 {
		return
	}
	ops := legacyOffsetOps(g.name, check.Accepted, g.offsetNodes)
	err := g.multiPing(ops)
	if errors.Is(err, zkstate.ErrNoNode) || errors.Is(err, zkstate.ErrNodeExists) {
		// Our idea of which offset znodes exist is stale (an operator deleted or created
		// one): look again and retry once.
		if nerr := g.refreshOffsetNodes(check.Accepted); nerr == nil {
			err = g.multiPing(legacyOffsetOps(g.name, check.Accepted, g.offsetNodes))
		}
	}
	if err != nil {
		g.log.Warn().Err(err).Str("consumer", m.id).Int("offsets", len(check.Accepted)).Msg("committing ping offsets failed")
		return
	}
	for tp, off := range check.Accepted {
		g.committed[tp] = off
		g.offsetNodes[tp] = true
	}
	g.c.addCommitted(len(check.Accepted))
}

func (g *legacyGroup) countRefused(m *legacyMember, check legacyPingCheck) {
	if len(check.Refused) == 0 {
		return
	}
	g.c.refused.Add(uint64(len(check.Refused)))
	g.c.metrics.offsets.WithLabelValues("refused").Add(float64(len(check.Refused)))
	// A confused consumer refuses the same offsets at every ping: log once a second at most.
	now := time.Now()
	if now.Sub(g.lastRefusalLog) < time.Second {
		g.suppressedRefusalCount += len(check.Refused)
		return
	}
	first := check.Refused[0]
	g.log.Warn().Str("consumer", m.id).Int("refused", len(check.Refused)).Int("refused_before", g.suppressedRefusalCount).
		Str("first", legacy.TopicPartition{Topic: first.Topic, Partition: first.Partition}.String()).
		Int64("offset", first.Offset).Str("why", check.Why[0]).Msg("ping offsets refused")
	g.lastRefusalLog, g.suppressedRefusalCount = now, 0
}

func (c *LegacyCoordinator) addCommitted(n int) {
	if n > 0 {
		c.committed.Add(uint64(n))
		c.metrics.offsets.WithLabelValues("committed").Add(float64(n))
	}
}

// onTopic takes a firing of the watch on /brokers/topics/<t>: a change of a subscribed topic's
// partitions triggers a rebalance; a session expiry (every owner znode of ours is gone) a check.
func (g *legacyGroup) onTopic(now time.Time, ev legacyTopicEv) {
	w := g.topics[ev.topic]
	if w == nil || w != ev.watch {
		return // unwatched since
	}
	if ev.ev.Type == zkstate.SessionExpired {
		g.noteTrigger(now, "ZooKeeper session expired")
	}
	parts, err := legacyTopicPartitions(ev.ev)
	if err != nil {
		// Keep the partitions we knew: a bad write must not unassign the topic.
		g.log.Warn().Err(err).Str("topic", ev.topic).Msg("topic assignment does not parse; keeping its partitions")
		return
	}
	if !slices.Equal(parts, w.partitions) {
		g.log.Info().Str("topic", ev.topic).Int("from", len(w.partitions)).Int("to", len(parts)).Msg("partitions changed")
		w.partitions = parts
		g.noteTrigger(now, fmt.Sprintf("partitions of topic %s changed to %d", ev.topic, len(parts)))
	}
}

func (g *legacyGroup) onSession(now time.Time, ev zkstate.SessionEvent) {
	switch ev.State {
	case zkstate.Expired:
		g.noteTrigger(now, "ZooKeeper session expired")
	case zkstate.Reclaimed:
		// An /ids znode (or its hosted-member znode) another session took while ours was
		// gone: that consumer id is now someone else's in the group (0.8 would have failed to
		// register it).
		for _, rc := range ev.ReclaimConflicts() {
			for _, m := range g.members {
				if rc.Path == zkstate.IDPath(g.name, m.id) || rc.Path == zkstate.HostedMemberPath(g.c.cfg.Root, g.name, m.id) {
					g.remove(now, m, fmt.Errorf("%s is held by ZooKeeper session 0x%x: %w", rc.Path, rc.Owner, legacy.CodeConsumerIDInUse.Err()))
				}
			}
		}
	}
}

func legacyTopicPartitions(ev zkstate.WatchEvent) ([]int32, error) {
	if !ev.Exists {
		return nil, nil
	}
	a, err := zkstate.ParseTopicAssignment(ev.Data)
	if err != nil {
		return nil, err
	}
	return a.PartitionIDs(), nil
}

// watchTopic starts watching /brokers/topics/<t> unless it is watched already.
func (g *legacyGroup) watchTopic(topic string) error {
	if g.topics[topic] != nil {
		return nil
	}
	wctx, cancel := context.WithCancel(g.lifetime)
	ch, err := g.c.store.WatchData(wctx, zkstate.TopicPath(topic))
	g.countReads(1, 1)
	if err != nil {
		cancel()
		return err
	}
	var first zkstate.WatchEvent
	select {
	case first = <-ch: // the Initial event is delivered at once
	case <-g.lifetime.Done():
		cancel()
		return g.lifetime.Err()
	}
	parts, err := legacyTopicPartitions(first)
	if err != nil {
		g.log.Warn().Err(err).Str("topic", topic).Msg("topic assignment does not parse; no partitions until it does")
	}
	w := &legacyTopic{cancel: cancel, partitions: parts}
	g.topics[topic] = w
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.forward(ch, cancel, func(ev zkstate.WatchEvent) any { return legacyTopicEv{topic: topic, watch: w, ev: ev} })
	}()
	return nil
}

// forward hands every firing of a watch to the group's goroutine as msg(ev), until the watch's
// channel closes (its context ended) or the group quits (then it cancels the watch).
func (g *legacyGroup) forward(ch <-chan zkstate.WatchEvent, cancel context.CancelFunc, msg func(zkstate.WatchEvent) any) {
	for ev := range ch {
		g.c.addReads(1, 1) // every firing re-arms the watch with a read
		select {
		case g.inbox <- msg(ev):
		case <-g.quit:
			cancel()
		}
	}
}

// syncTopics stops the watches of topics no member subscribes to any more.
func (g *legacyGroup) syncTopics() {
	wanted := map[string]bool{}
	for _, m := range g.members {
		for _, s := range m.reg.Subscription {
			wanted[s.Topic] = true
		}
	}
	for t, w := range g.topics {
		if !wanted[t] {
			w.cancel()
			delete(g.topics, t)
		}
	}
}

// syncWatches stops the watches the members no longer need: of unsubscribed topics, and of the
// group's registrations once no member is left.
func (g *legacyGroup) syncWatches() {
	g.syncTopics()
	if len(g.members) > 0 || g.ids == nil {
		return
	}
	g.ids.cancel()
	g.ids = nil
	for id, w := range g.others {
		w.cancel()
		delete(g.others, id)
	}
}

// watchIDs starts watching the children of /consumers/<g>/ids unless it is watched already, and
// the data of every other registration there.
func (g *legacyGroup) watchIDs() error {
	if g.ids != nil {
		return nil
	}
	wctx, cancel := context.WithCancel(g.lifetime)
	ch, err := g.c.store.WatchChildren(wctx, zkstate.IDsPath(g.name))
	g.countReads(1, 1)
	if err != nil {
		cancel()
		return err
	}
	var first zkstate.WatchEvent
	select {
	case first = <-ch: // the Initial event is delivered at once
	case <-g.lifetime.Done():
		cancel()
		return g.lifetime.Err()
	}
	w := &legacyWatch{cancel: cancel}
	g.ids = w
	// No trigger: the Register that started the watch rebalances anyway.
	g.syncOthers(time.Now(), first.Children, false)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.forward(ch, cancel, func(ev zkstate.WatchEvent) any { return legacyIDsEv{watch: w, ev: ev} })
	}()
	return nil
}

// onIDs takes a firing of the watch on /consumers/<g>/ids's children. A 0.8.2 consumer
// rebalances on every change of them (ZCC:561-564); we check the group when the set of other
// registrations changed — our own members' registrations are ours to know, and their Register
// and removal trigger already.
func (g *legacyGroup) onIDs(now time.Time, ev legacyIDsEv) {
	if g.ids == nil || ev.watch != g.ids {
		return // unwatched since
	}
	var children []string
	if ev.ev.Exists {
		children = ev.ev.Children
	}
	g.syncOthers(now, children, true)
}

// syncOthers makes the watched other registrations those of children that are not our
// members', and with trigger, checks the group when they changed.
func (g *legacyGroup) syncOthers(now time.Time, children []string, trigger bool) {
	present := make(map[string]bool, len(children))
	var added, removed []string
	for _, id := range children {
		if g.members[id] != nil {
			continue
		}
		present[id] = true
		if g.others[id] == nil {
			g.others[id] = g.watchRegistration(id)
			added = append(added, id)
		}
	}
	for id, w := range g.others {
		if !present[id] {
			w.cancel()
			delete(g.others, id)
			removed = append(removed, id)
		}
	}
	if !trigger || len(added)+len(removed) == 0 {
		return
	}
	slices.Sort(added)
	slices.Sort(removed)
	g.log.Info().Strs("registered", legacyFirst(added, 10)).Strs("left", legacyFirst(removed, 10)).
		Int("others", len(g.others)).Msg("other members' registrations in /ids changed")
	g.noteTrigger(now, fmt.Sprintf("other registrations in /ids changed (+%d -%d)", len(added), len(removed)))
}

// watchRegistration watches the data of another member's registration, /consumers/<g>/ids/<id>,
// until the returned watch is cancelled: 0.8.2 consumers only watch the children, but a
// registration can change in place (its subscription rewritten), and the assignment depends on
// it. Setting the watch is retried, with backoff, on a goroutine of its own.
func (g *legacyGroup) watchRegistration(id string) *legacyWatch {
	wctx, cancel := context.WithCancel(g.lifetime)
	w := &legacyWatch{cancel: cancel}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer cancel()
		var ch <-chan zkstate.WatchEvent
		for backoff := g.c.cfg.RetryBackoff; ; backoff = min(2*backoff, g.c.cfg.RetryBackoffMax) {
			var err error
			ch, err = g.c.store.WatchData(wctx, zkstate.IDPath(g.name, id))
			if err == nil {
				break
			}
			if wctx.Err() != nil {
				return
			}
			g.log.Debug().Err(err).Str("consumer", id).Dur("retry_in", backoff).Msg("watching a registration failed")
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-wctx.Done():
				t.Stop()
				return
			}
		}
		g.forward(ch, cancel, func(ev zkstate.WatchEvent) any { return legacyRegEv{id: id, watch: w, ev: ev} })
	}()
	return w
}

// onRegistration takes a firing of the watch on another member's registration: a subscription
// other than the one the last read of the group saw changes the assignment.
func (g *legacyGroup) onRegistration(now time.Time, ev legacyRegEv) {
	if g.others[ev.id] != ev.watch || !ev.ev.Exists {
		return // unwatched since, or gone (the children watch tells)
	}
	key := legacyRegKey(zkstate.ParseConsumerRegistration(ev.ev.Data))
	if seen, ok := g.regs[ev.id]; ok && seen != key {
		g.regs[ev.id] = key
		g.log.Info().Str("consumer", ev.id).Bytes("registration", ev.ev.Data).Msg("another member's registration changed")
		g.noteTrigger(now, "registration of "+ev.id+" changed")
	}
}

// legacyRegKey is what of a registration the assignment depends on: the pattern and the
// subscription (its JSON without the timestamp), or that it cannot be read.
func legacyRegKey(reg zkstate.ConsumerRegistration, err error) string {
	if err != nil {
		return "unreadable"
	}
	return string(zkstate.ConsumerRegistration{Version: 1, Subscription: reg.Subscription, Pattern: reg.Pattern}.Encode())
}

// noteSkipped logs the registrations a read of the group could not count, once per change.
func (g *legacyGroup) noteSkipped(skipped []zkstate.Problem) {
	var b strings.Builder
	for _, pr := range skipped {
		b.WriteString(pr.Path)
		b.WriteByte(' ')
	}
	if b.String() == g.skipped {
		return
	}
	g.skipped = b.String()
	for _, pr := range skipped {
		g.log.Warn().Str("path", pr.Path).Err(pr.Err).
			Msg("registration cannot be read: left out of the assignment (the group's zk members fail their rebalance on it)")
	}
}

// createHosted writes the hosted-member znode of consumer id (zkstate/hosted.go), an ephemeral
// re-created after a session expiry like the registration. A hosted znode our session already
// holds is taken over only when it says the same (an earlier member of ours whose delete
// failed); one of another kind or node — another coordinator of this bridge hosting a member
// under that consumer id — is the id in use: an error wrapping ErrNodeExists.
func (g *legacyGroup) createHosted(ctx context.Context, id string) error {
	p := zkstate.HostedMemberPath(g.c.cfg.Root, g.name, id)
	want := zkstate.HostedMember{Kind: zkstate.KindLegacy, Node: g.c.cfg.NodeID, Member: id}
	data, st, err := g.c.store.Get(ctx, p)
	g.countReads(1, 1)
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
	case err != nil:
		return err
	case st.EphemeralOwner == g.c.store.SessionID():
		if h, err := zkstate.ParseHostedMember(data); err != nil || h != want {
			return fmt.Errorf("%s is held by this bridge for another member (%s): %w", p, data, zkstate.ErrNodeExists)
		}
	default:
		return fmt.Errorf("%s is held by ZooKeeper session 0x%x: %w", p, st.EphemeralOwner, zkstate.ErrNodeExists)
	}
	err = g.c.store.CreateEphemeral(ctx, p, want.Encode())
	g.countWrites(1, 0)
	return err
}

// deleteHosted deletes the hosted-member znode of consumer id, if our session holds it.
func (g *legacyGroup) deleteHosted(ctx context.Context, id string) {
	err := g.c.store.DeleteEphemeral(ctx, zkstate.HostedMemberPath(g.c.cfg.Root, g.name, id))
	g.countWrites(1, 0)
	if err != nil && !errors.Is(err, zkstate.ErrNotOwner) && g.lifetime.Err() == nil {
		g.log.Warn().Err(err).Str("consumer", id).Msg("deleting the hosted-member znode failed")
	}
}

func legacyFirst(ids []string, n int) []string {
	if len(ids) > n {
		return append(ids[:n:n], fmt.Sprintf("(%d more)", len(ids)-n))
	}
	return ids
}

// legacyGroupView is what a rebalance reads of its group in ZooKeeper.
type legacyGroupView struct {
	session   int64 // the session the reads ran in
	owners    map[legacy.TopicPartition]legacyOwner
	committed map[legacy.TopicPartition]int64
	nodes     map[legacy.TopicPartition]bool // offset znodes that exist, parsed or not
	// others are the registrations in /ids that are not our members', resolved
	// (legacyResolveOthers); regs holds the legacyRegKey of each, unreadable ones included.
	others map[string]map[string]int
	regs   map[string]string
	queued time.Duration // of the read, waiting for one of the Store's multiRead connections
}

// readGroup reads the group's registrations, owners and, with offsets, its committed offsets
// (only the claim needs those, to start the members; step 3 decides on the owners): one zkstate
// Snapshot (batched
// with ZooKeeper's multiRead, a handful of requests whatever the group's size), then the stat of
// every owner znode that is not one this actor's last Multi left in the current session with the
// same thread id — a previous coordinator's, one an operator edited, one of a member gone — so
// that its ephemeral owner is checked, never assumed (DESIGN §4). Owners of topics nobody
// subscribes to are read too: step 3.3 must see them. Owners holding the thread of another
// registration (a zk member's, a Kafka member's) are not ours whatever their session
// (legacyPlanInput.ours), so their stat is not read.
//
// The owners the last Multi left are not read one by one: they hold the thread written, their
// version is known, and the session that holds them is still ours. Whatever else happened to
// them makes the claim's Multi fail (a create of a taken path, a delete of a changed version),
// after which nothing is trusted until read again.
func (g *legacyGroup) readGroup(ctx context.Context, offsets bool) (legacyGroupView, error) {
	ctx, cancel := context.WithTimeout(ctx, g.c.cfg.ZKTimeout)
	defer cancel()
	store := g.c.store
	v := legacyGroupView{
		session:   store.SessionID(),
		owners:    map[legacy.TopicPartition]legacyOwner{},
		committed: map[legacy.TopicPartition]int64{},
		nodes:     map[legacy.TopicPartition]bool{},
	}
	parts := zkstate.WithOwners
	if offsets {
		parts |= zkstate.WithOffsets
	}
	snap, err := store.SnapshotOf(ctx, g.name, parts)
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
		snap = &zkstate.GroupSnapshot{} // no /consumers/<g> yet
		g.countReads(1, 1)
	case err != nil:
		return v, err
	default:
		g.countReads(snap.Stats.Reads, snap.Stats.Requests)
		v.queued = snap.Stats.Queued
	}
	own := func(id string) bool { return g.members[id] != nil }
	topics := make([]string, 0, len(snap.Partitions))
	for t := range snap.Partitions {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	others, skipped := legacyResolveOthers(g.name, snap.Consumers, snap.Problems, topics, own)
	v.others, v.regs = others, make(map[string]string, len(others)+len(skipped))
	for id, c := range snap.Consumers {
		if !own(id) {
			v.regs[id] = legacyRegKey(c.Registration, nil)
		}
	}
	for _, pr := range skipped {
		if id := path.Base(pr.Path); v.regs[id] == "" {
			v.regs[id] = legacyRegKey(zkstate.ConsumerRegistration{}, pr.Err)
		}
	}
	g.noteSkipped(skipped)

	trusted := v.session != 0 && g.writtenSession == v.session
	var unknown []legacy.TopicPartition
	for ztp, thread := range snap.Owners {
		tp := legacy.TopicPartition(ztp)
		if o, ok := g.written[tp]; trusted && ok && o.Thread == thread {
			v.owners[tp] = o
		} else if _, other := others[legacy.ConsumerOf(thread)]; other {
			v.owners[tp] = legacyOwner{Thread: thread, Version: -1, Session: -1} // not ours: not read
		} else {
			unknown = append(unknown, tp)
		}
	}
	found := make([]legacyOwner, len(unknown))
	exists := make([]bool, len(unknown))
	err = legacyFanOut(ctx, len(unknown), func(ctx context.Context, i int) error {
		data, st, err := store.Get(ctx, zkstate.OwnerPath(g.name, unknown[i].Topic, unknown[i].Partition))
		if errors.Is(err, zkstate.ErrNoNode) {
			return nil // released since the snapshot
		}
		if err != nil {
			return err
		}
		found[i], exists[i] = legacyOwner{Thread: string(data), Version: st.Version, Session: st.EphemeralOwner}, true
		return nil
	})
	g.countReads(len(unknown), len(unknown))
	if err != nil {
		return v, err
	}
	for i, tp := range unknown {
		if exists[i] {
			v.owners[tp] = found[i]
		}
	}
	for ztp, off := range snap.Offsets {
		tp := legacy.TopicPartition(ztp)
		v.committed[tp], v.nodes[tp] = off, true
	}
	prefix := zkstate.OffsetsPath(g.name) + "/"
	for _, pr := range snap.Problems {
		// A malformed offset znode exists: a write must set it, not create it.
		rest, ok := strings.CutPrefix(pr.Path, prefix)
		topic, part, ok2 := strings.Cut(rest, "/")
		if p, err := strconv.ParseInt(part, 10, 32); ok && ok2 && err == nil {
			tp := legacy.TopicPartition{Topic: topic, Partition: int32(p)}
			v.nodes[tp] = true
			g.warnBadOffset(tp, pr.Err)
		}
	}
	if err := legacySameSession(store, v.session, "while reading the group"); err != nil {
		return v, err
	}
	return v, nil
}

// legacySameSession fails when the Store's session is no longer the one a read ran in: what
// that session owned may be gone.
func legacySameSession(store *zkstate.Store, session int64, when string) error {
	if now := store.SessionID(); now != session {
		return fmt.Errorf("ZooKeeper session changed from 0x%x to 0x%x %s", session, now, when)
	}
	return nil
}

// warnBadOffset reports an offset znode whose data does not parse.
func (g *legacyGroup) warnBadOffset(tp legacy.TopicPartition, err error) {
	g.log.Warn().Str("partition", tp.String()).Err(err).Msg("committed offset does not parse; the partition starts from the reset sentinel")
}

// refreshOffsetNodes looks up which offset znodes of tps exist.
func (g *legacyGroup) refreshOffsetNodes(tps map[legacy.TopicPartition]int64) error {
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	list := legacySortedTPs(tps)
	ok := make([]bool, len(list))
	err := legacyFanOut(ctx, len(list), func(ctx context.Context, i int) error {
		var err error
		ok[i], _, err = g.c.store.Exists(ctx, zkstate.OffsetPath(g.name, list[i].Topic, list[i].Partition))
		return err
	})
	g.countReads(len(list), len(list))
	if err != nil {
		return err
	}
	for i, tp := range list {
		g.offsetNodes[tp] = ok[i]
	}
	return nil
}

// multi runs a rebalance's Multi.
func (g *legacyGroup) multi(ops []zkstate.Op) error {
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	g.countWrites(len(ops), 1)
	return g.c.store.Multi(ctx, ops...)
}

// multiPing runs the Multi of a PingResponse's offsets; its operations are not the
// rebalance's.
func (g *legacyGroup) multiPing(ops []zkstate.Op) error {
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	g.c.zkWrites.Add(uint64(len(ops)))
	g.c.zkMultis.Add(1)
	g.c.metrics.zkOps.WithLabelValues("write").Add(float64(len(ops)))
	g.c.metrics.zkOps.WithLabelValues("multi").Inc()
	return g.c.store.Multi(ctx, ops...)
}

// countReads and countWrites count ZooKeeper operations (znodes read and the requests that
// carried them; write ops and multi requests), globally and for the rebalance being measured;
// the actor's goroutine only (watch forwarders call addReads).
func (g *legacyGroup) countReads(znodes, requests int) {
	g.c.addReads(znodes, requests)
	if g.att != nil {
		g.reads += znodes
		g.readRequests += requests
	}
}

func (c *LegacyCoordinator) addReads(znodes, requests int) {
	c.zkReads.Add(uint64(znodes))
	c.zkReadRequests.Add(uint64(requests))
	c.metrics.zkOps.WithLabelValues("read").Add(float64(znodes))
	c.metrics.zkOps.WithLabelValues("read_request").Add(float64(requests))
}

func (g *legacyGroup) countWrites(ops, multis int) {
	g.c.zkWrites.Add(uint64(ops))
	g.c.zkMultis.Add(uint64(multis))
	g.c.metrics.zkOps.WithLabelValues("write").Add(float64(ops))
	g.c.metrics.zkOps.WithLabelValues("multi").Add(float64(multis))
	if g.att != nil {
		g.writes += ops
		g.multis += multis
	}
}

// legacyFanOut runs fn(0..n-1) with at most legacyReadParallelism calls in flight and returns
// the first error. Every call has returned when it returns.
func legacyFanOut(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, legacyReadParallelism)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			errs[i] = ctx.Err()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if errs[i] = fn(ctx, i); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// shutdown ends the actor: every member's connection is closed (the consumers stop fetching and
// look for a coordinator), the goroutines are waited for, and the ids znodes and our owner
// znodes are deleted so that 0.8 tools do not show owners that no longer consume.
// watchRelease signals g.gone when the owner znode p, which a claim waits for, goes away: a zk
// member or another bridge releases at its own pace, and the claim should look again then,
// not at its backoff's end. One watch per group at a time (one request each); a signal that
// comes after the claim went on is ignored by run.
func (g *legacyGroup) watchRelease(p string) {
	if g.stopGone != nil {
		g.stopGone()
	}
	ctx, cancel := context.WithCancel(g.lifetime)
	g.stopGone = cancel
	go func() {
		defer cancel()
		ch, err := g.c.store.WatchData(ctx, p)
		if err != nil {
			return // the backoff still retries
		}
		for ev := range ch {
			if !ev.Exists {
				select {
				case g.gone <- struct{}{}:
				default:
				}
				return
			}
		}
	}()
}

func (g *legacyGroup) shutdown() {
	close(g.quit)
	for _, m := range g.members {
		m.sess.Close(ErrLegacyCoordinatorStopped)
	}
	for _, w := range g.topics {
		w.cancel()
	}
	if g.ids != nil {
		g.ids.cancel()
	}
	for _, w := range g.others {
		w.cancel()
	}
	g.wg.Wait()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(g.lifetime), min(g.c.cfg.ZKTimeout, 5*time.Second))
	defer cancel()
	for _, m := range g.members {
		if err := g.c.store.DeleteEphemeral(ctx, zkstate.IDPath(g.name, m.id)); err != nil && !errors.Is(err, zkstate.ErrNotOwner) {
			g.log.Debug().Err(err).Str("consumer", m.id).Msg("deleting the ids znode at shutdown failed")
		}
		g.deleteHosted(ctx, m.id)
		g.c.members.Add(-1)
		g.c.metrics.members.Dec()
	}
	var ops []zkstate.Op
	if len(g.assignment) > 0 {
		view, err := g.readGroup(ctx, false)
		if err != nil {
			g.log.Debug().Err(err).Msg("reading owner znodes at shutdown failed; they go with the session")
		}
		// Ours only: the bridge's other coordinators hold their members' owners in the same
		// session (legacyPlanInput.ours).
		in := legacyPlanInput{Session: view.session, Others: view.others}
		for _, tp := range legacySortedTPs(view.owners) {
			if o := view.owners[tp]; in.ours(o) && view.session != 0 {
				ops = append(ops, zkstate.DeleteOp(zkstate.OwnerPath(g.name, tp.Topic, tp.Partition), o.Version))
			}
		}
	}
	if err := g.c.store.Multi(ctx, ops...); err != nil {
		g.log.Debug().Err(err).Msg("releasing owner znodes at shutdown failed; they go with the session")
	}
	g.log.Debug().Int("released", len(ops)).Msg("legacy group stopped")
}
