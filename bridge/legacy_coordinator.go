package bridge

// The legacy coordinator: the IO shell that hosts groups of seed-001 consumers (the "legacy"
// member kind of DESIGN §1) on a legacy.Server. It implements legacy.Coordinator: Consult
// answers with this bridge, Register hands each registered consumer to its group's actor.
//
// One goroutine (actor) per group owns all of the group's state: members, the current
// assignment, the partitions of its topics (kept current by ZooKeeper watches on
// /brokers/topics/<t>), the committed offsets it knows, and the group engine (bridge/group) that
// holds the legacy members' liveness and the rebalance in progress (group/legacy.go): the actor
// steps it with every event and the time it happened, and carries out its effects. Sockets never
// block the actor: every request to a consumer (Ping, Stop, Start) runs on a goroutine of its
// own and comes back as an event, so Registers, closed sockets and topic changes are handled
// while a rebalance waits for its answers. The actor makes no ZooKeeper call but arming its
// watches: the group's claimer (claimer.go, claimer_legacy.go) writes every ephemeral of ours
// (registrations, hosted-member znodes, owner znodes), reads the group for the check and the
// claim, and writes the pings' offsets, each call bounded by LegacyConfig.ZKTimeout; its results
// come back to the actor as events. The decisions are the engine's (the
// order of a rebalance, liveness, delay and backoff) and pure functions (legacy_plan.go: the
// ownership); the actor only gathers their inputs and carries out what they return.
//
// A rebalance follows seed 001 "rebalance (group)" with the additions of
// docs/legacy-protocol.md §8 (the engine's phases in brackets):
//
//	steps 1-3   [checking] the claimer reads the group (owners); the actor plans; stop here
//	            when nothing is necessary (3.5). No read when the answer cannot be "not
//	            necessary" (certainNeed: a member of ours not started, a partition of a member
//	            that left)
//	step 4.1    [stopping] StopRequest to every member; wait for every StopResponse
//	§8 Coord. 2 [collecting] PingRequest to every auto_commit member: its final offsets
//	step 4      [claiming, claim-wait] handed to the group's claimer (claimer_legacy.go),
//	            shared with its Kafka members: read the group again (owners, offsets); while
//	            another member holds an owner znode we must claim, let go of what is no longer
//	            ours (final offsets, our owners that moved: legacyPlan.Release) and wait with
//	            backoff, then read again only the partitions waited for; then ONE Multi: final
//	            offsets, released owners deleted, new owners created (a Multi that fails after
//	            such a partial read reads the group in full and tries once more)
//	step 4.2    [starting] StartRequest to every member with its part and starting offsets
//	step 4.3    wait for every StartResponse
//	step 5      [backoff] a member that does not answer in time fails the attempt: log it,
//	            retry after a backoff that doubles up to RetryBackoffMax
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
// members' part. So the actor follows the children of /consumers/<g>/ids — as every 0.8.2
// consumer does (ZCC:896) — and the data of every other registration (a registration can change
// in place), through the group's claimer's one watch of them (claimer_watch.go, shared with the
// group's Kafka members), and checks the group when the other registrations or their subscriptions change;
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
// shared with the Kafka-protocol shell. The legacy members are a kind of the common group engine
// (group.KindLegacy); their actor runs on the group's host (host.go), the one goroutine that also
// runs the group's Kafka members' actor, with a group.Machine of its own for now.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Defaults for the zero values of LegacyConfig.
const (
	// DefaultLegacyListen is the address of the legacy listener (zkbridge serve --legacy-listen).
	DefaultLegacyListen = "127.0.0.1:9190"
	// DefaultLegacyRetryBackoff is the first wait after a failed rebalance attempt (seed 001
	// step 5). (A claim blocked by another session's owner znode waits by the claimer's one
	// backoff policy, claimBackoff doubling to claimBackoffMax, for every member kind.)
	DefaultLegacyRetryBackoff = 100 * time.Millisecond
	// DefaultLegacyRetryBackoffMax caps the doubling of the backoff.
	DefaultLegacyRetryBackoffMax = 5 * time.Second
	// DefaultLegacyZKTimeout bounds each ZooKeeper call made for a legacy group (by its claimer).
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
	// (seed step 5): it starts at RetryBackoff and doubles up to RetryBackoffMax. A claim blocked
	// by another session's owner znode is retried by the group's claimer, with the backoff it
	// uses for every member kind (50 ms doubling to 1 s), and at once when that owner znode
	// goes or another actor of this bridge releases owner znodes of the group.
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
	// OffsetsReread counts offsets a claim read again once its Multi was in: those of the
	// partitions it took from elsewhere whose read came before a wait of the claim.
	OffsetsReread uint64

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
	// claimers holds the groups' claimers (claimer.go), shared with the Kafka members of the
	// same groups; set by Bridge.newLegacy, nil outside a Bridge (each group has its own).
	claimers *claimers
	// hosts holds the groups' hosts (host.go), the one goroutine of each group, shared with
	// the Kafka members of the same groups; nil outside a Bridge (each group has its own).
	hosts *hosts
	// badOffsets logs each malformed offset znode once (limits.go).
	badOffsets onceLog
	// peers places groups on the live bridges (legacy_placement.go); set by Bridge.newLegacy,
	// nil outside a Bridge: every group is this coordinator's.
	peers *peerSet
	// noRelay keeps version 0 consumers from being relayed to their group's owner
	// (legacy_placement.go: ForwardTo): the legacy listener speaks TLS.
	noRelay bool

	rebalances, failures, skipped, claimWaits   atomic.Uint64
	committed, refused, reread                  atomic.Uint64
	zkReads, zkReadRequests, zkWrites, zkMultis atomic.Uint64
	members                                     atomic.Int64

	mu     sync.Mutex
	state  int // legacyNew, legacyRunning, legacyStopped
	groups map[string]*legacyGroup
	// lifetimes ends each group's actor: the group's ctx, which bounds its own work (requests
	// to members, watches), belongs to no caller's request, and ends when Run's ctx ends (Run
	// cancels them all) or the group is handed over (legacy_placement.go). handingOver names
	// the groups being handed over; gathers holds the registrations of groups handed over to
	// us (legacy_placement.go).
	lifetimes   map[string]context.CancelFunc
	handingOver map[string]bool
	gathers     map[string]*legacyGather
	last        LegacyRebalanceStats
	actorWG     sync.WaitGroup
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
		cfg:         cfg,
		log:         cfg.Logger.With().Str("component", "legacy-coordinator").Int32("node_id", cfg.NodeID).Logger(),
		store:       cfg.Store,
		metrics:     m,
		groups:      map[string]*legacyGroup{},
		lifetimes:   map[string]context.CancelFunc{},
		handingOver: map[string]bool{},
		gathers:     map[string]*legacyGather{},
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
	c.state = legacyRunning
	c.mu.Unlock()
	c.log.Info().Str("advertised", c.cfg.AdvertisedHost+":"+strconv.Itoa(int(c.cfg.AdvertisedPort))).
		Str("strategy", string(c.cfg.Strategy)).Msg("legacy coordinator running")

	<-ctx.Done()
	c.mu.Lock()
	c.state = legacyStopped
	for _, stop := range c.lifetimes {
		stop() // the actors end
	}
	c.mu.Unlock()
	c.actorWG.Wait()
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
		OffsetsReread:     c.reread.Load(),
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
// ConsultGroup (legacy_placement.go) answers one that names its group.
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
		// The same list from every bridge.
		slices.SortFunc(brokers, func(a, b legacy.Broker) int { return cmp.Compare(a.ID, b.ID) })
	}
	return legacy.ConsultResponse{ErrorCode: legacy.CodeNone, CoordinatorID: c.cfg.NodeID, Brokers: brokers}
}

// Register takes a registered consumer into its group (seed 001 "On Consumer Startup"): the
// group's actor refuses a consumer id that a live member already uses (CONSUMER_ID_IN_USE, as
// 0.8 fails to create a second /ids znode), registers the consumer in
// /consumers/<g>/ids/<id> for 0.8 tools, and rebalances.
func (c *LegacyCoordinator) Register(ctx context.Context, s *legacy.Session) error {
	reg := s.Register()
	if owner, elsewhere := c.placedElsewhere(reg.GroupID); elsewhere { // legacy_placement.go
		return fmt.Errorf("bridge: legacy group %q is coordinated by bridge %d: %w", reg.GroupID, owner, legacy.CodeNotCoordinator.Err())
	}
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
	if err := c.awaitPrevious(ctx, s); err != nil { // legacy_placement.go
		return err
	}
	c.gather(ctx, s)
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
	cfg := group.DefaultConfig()
	cfg.Legacy = group.LegacyConfig{RebalanceDelay: c.cfg.RebalanceDelay, RetryBackoff: c.cfg.RetryBackoff, RetryBackoffMax: c.cfg.RetryBackoffMax}
	// The group's own ctx: Run (at its end) and a handover cancel it through lifetimes.
	ctx, stop := context.WithCancel(context.Background())
	c.lifetimes[name] = stop
	g := &legacyGroup{
		c:           c,
		name:        name,
		cfg:         cfg.Legacy,
		log:         c.log.With().Str("group", name).Logger(),
		inbox:       make(chan any, legacyInboxSize),
		quit:        make(chan struct{}),
		exited:      make(chan struct{}),
		members:     map[string]*legacyMember{},
		registering: map[string]*legacyRegistering{},
		leaving:     map[string]int{},
		topics:      map[string]*legacyTopic{},
		others:      map[string]bool{},
		regs:        map[string]string{},
		owner:       map[legacy.TopicPartition]string{},
		committed:   map[legacy.TopicPartition]int64{},
		offsetNodes: map[legacy.TopicPartition]bool{},
	}
	g.cl = c.claimers.join(claimerConfig{store: c.store, group: name, retry: DefaultMirrorRetry, log: g.log})
	g.cl.legacyReq(legacyAttachReq{c: c, log: g.log, events: g.inbox})
	c.groups[name] = g
	c.actorWG.Add(1)
	h := c.hosts.join(name) // host.go: the group's one goroutine, shared with its Kafka members
	h.attachLegacy(ctx, g)
	go func() {
		defer c.actorWG.Done()
		<-g.exited
		c.mu.Lock()
		delete(c.groups, name)
		delete(c.lifetimes, name)
		delete(c.handingOver, name)
		c.mu.Unlock()
		stop()
	}()
	return g, nil
}
