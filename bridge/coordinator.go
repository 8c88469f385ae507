package bridge

// The IO shell around the group engine, in kfake's shape (groups.go: one goroutine per group,
// requests in over a channel, timers posting back into the goroutine) with the decisions in the
// pure engine, as raft's node.go wraps its RawNode:
//
//   - Do hands a request to the group's actor and waits for the reply carrying its Token.
//   - The actor steps each request into the group.Machine, delivers the replies of every Step
//     by Token, and runs the write of Effects.Persist and Effects.Offsets on its own goroutine,
//     stepping Persisted or PersistFailed when it ends. The engine holds every reply that
//     depends on a write until that Step (persist before reply), and emits one write at a time.
//   - A fenced machine (lost CAS, lost session), a deleted group and an idle Empty group end
//     their actor, which takes the Kafka part out of the engine (Machine.ResetKafka); the next
//     request for the group starts a new one, which loads the group from ZooKeeper again.
//   - The actor runs on the group's host (host.go): the one goroutine of the group on this
//     bridge, which owns the group's one Machine and its one timer (Effects.WakeAt, stepping
//     Tick when it fires), also runs its legacy members' actor, and outlives the actor.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Kafka error codes the shell answers itself; the engine never produces them.
const (
	errUnknownTopicOrPartition group.ErrorCode = 3  // UNKNOWN_TOPIC_OR_PARTITION
	errInvalidGroupID          group.ErrorCode = 24 // INVALID_GROUP_ID
)

// refuseHold is how long an actor that could not load its group keeps answering with its error
// before the next request may try again: it bounds load attempts while ZooKeeper is away or
// another bridge holds the group.
const refuseHold = time.Second

// releaseTimeout bounds the removal of a group's 0.8 mirror when its actor ends.
const releaseTimeout = 5 * time.Second

// Do steps the event built by build (with a Token the bridge assigns) into the named group's
// machine and returns the reply that answers it, after every ZooKeeper write it depends on.
//
// Whatever keeps the bridge from serving the group is answered in the reply, as the error code
// a Kafka client expects: COORDINATOR_NOT_AVAILABLE while ZooKeeper is unreachable or before
// Run is ready, NOT_COORDINATOR when another bridge holds the group or this one is shutting
// down, INVALID_GROUP_ID for a group name ZooKeeper cannot hold, UNKNOWN_TOPIC_OR_PARTITION for
// an offset of a topic name it cannot hold. The error is non-nil only when ctx ended first (the
// request may still take effect) or when build returned something other than a request event.
func (b *Bridge) Do(ctx context.Context, groupName string, build func(group.Token) group.Event) (group.Reply, error) {
	return b.coord.do(ctx, groupName, build)
}

// request is one Do call on its way through a group's actor.
type request struct {
	token group.Token
	ev    group.Event
	reply chan group.Reply // buffered: the actor never blocks delivering
	// fix, when set, completes the engine's reply (offsets screened out before the engine).
	fix func(group.Reply) group.Reply
}

// coordinator finds or starts the actor of a group, and relays ZooKeeper session changes.
type coordinator struct {
	cfg     Config
	log     zerolog.Logger
	metrics *metrics

	tokens    atomic.Uint64
	connected atomic.Bool
	// untold is, while a draining bridge lingers, the members not yet answered NOT_COORDINATOR
	// (handover_linger.go).
	untold atomic.Pointer[untold]

	wg sync.WaitGroup // one per goroutine started by goLocked (the actors, the rescans)
	// adopting counts the handed-over mixed groups whose ephemerals wait for their next owner
	// (mixed_adopt.go): the drain waits for them before the session closes.
	adopting atomic.Int32

	// modes keeps every group's mode current (modes.go); nil admits every request.
	modes *groupModes
	// claimers holds the groups' claimers (claimer.go), shared with the legacy coordinator's
	// groups; nil without a Bridge (each actor has its own).
	claimers *claimers
	// hosts holds one goroutine per group (host.go), shared with the group's legacy members.
	hosts *hosts

	// gate withholds relayed fetches while the bridge cannot vouch for its mixed groups'
	// owners (fetchgate.go).
	gate fetchGate

	// topics and groups feed the limits (limits.go); nil: not checked.
	topics  topicSource
	groups  groupCounter
	logOnce onceLog

	// peers is the live view that places groups on bridges (peers.go, handover.go); nil: every
	// group is ours. pm counts handovers; scanMu serialises placement rescans, and guards
	// scanned, the groups the last one listed (handover.go: scanEpochs).
	peers   *peerSet
	pm      *placementMetrics
	scanMu  sync.Mutex
	scanned []string
	// scannedView is the view the last rescan saw every group through, in scannedSession (nil
	// when it did not): a rescan after a change that only removed bridges reads only what moved
	// (handover.go: narrowScan).
	scannedView    *liveView
	scannedSession int64
	// rescanAll is set by a handover whose release failed: the group names us while it maps
	// elsewhere, which only a rescan that reads every group releases.
	rescanAll atomic.Bool
	// rc follows the actors a rescan relied on, to decide their groups again when they end
	// (recheck.go); under mu.
	rc rechecks
	// pre is the takeovers prepared for the peers that look dead (preload.go).
	pre preloads
	// parked wakes the requests waiting for their group to move here (park.go).
	parked parking

	mu     sync.Mutex
	store  *zkstate.Store // nil until start
	actors map[string]*actor
	closed bool
	lost   *time.Timer // armed while the session is disconnected
	// stops holds the cancel func of every goroutine goLocked started and that still runs: close
	// cancels them all.
	stops  map[uint64]context.CancelFunc
	nextGo uint64
}

func newCoordinator(cfg Config, log zerolog.Logger, m *metrics) *coordinator {
	return &coordinator{cfg: cfg, log: log, metrics: m, actors: map[string]*actor{}, stops: map[uint64]context.CancelFunc{}}
}

// goLocked runs fn on a goroutine of its own with a ctx that close cancels; c.mu must be held
// and the coordinator not closed.
func (c *coordinator) goLocked(fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	c.nextGo++
	id := c.nextGo
	c.stops[id] = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.stops, id)
			c.mu.Unlock()
		}()
		defer cancel()
		fn(ctx)
	}()
}

// zkSessionTimeout is how long the bridge's ephemerals outlive it: the session timeout the
// server granted (the asked-for one before the store is open). c.mu must not be held.
func (c *coordinator) zkSessionTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zkSessionTimeoutLocked()
}

func (c *coordinator) zkSessionTimeoutLocked() time.Duration {
	if c.store == nil {
		return c.cfg.ZKSessionTimeout
	}
	return c.store.SessionTimeout()
}

// start lets requests in: the store is open.
func (c *coordinator) start(store *zkstate.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store = store
	c.gate.lease.Store(voucher(store))
}

// close unloads every group (their parked requests are answered NOT_COORDINATOR) and waits for
// every actor to end. Later requests are answered NOT_COORDINATOR.
func (c *coordinator) close() {
	c.mu.Lock()
	c.closed = true
	if c.lost != nil {
		c.lost.Stop()
		c.lost = nil
	}
	for _, cancel := range c.stops {
		cancel()
	}
	c.mu.Unlock()
	c.parked.wakeAll() // park.go: answered NOT_COORDINATOR now
	c.wg.Wait()
}

func (c *coordinator) do(ctx context.Context, name string, build func(group.Token) group.Event) (group.Reply, error) {
	tok := group.Token(c.tokens.Add(1))
	ev := build(tok)
	if !isRequest(ev) {
		return nil, fmt.Errorf("bridge: group %q: %T is not a request event", name, ev)
	}
	if err := validName("group", name); err != nil {
		return errorReply(name, ev, errInvalidGroupID), nil
	}
	req := &request{token: tok, ev: ev, reply: make(chan group.Reply, 1)}
	if c.groupRefused(name, ev) { // limits.go
		return errorReply(name, ev, group.ErrGroupMaxSizeReached), nil
	}
	if oc, ok := ev.(group.OffsetCommit); ok && len(oc.Offsets) > 0 {
		check, err := c.commitCheck(ctx, oc) // limits.go
		if err != nil {
			c.log.Debug().Err(err).Str("group", name).Msg("cannot check a commit's topics")
			return errorReply(name, ev, group.ErrCoordinatorNotAvailable), nil
		}
		valid, fix := c.screenOffsets(oc, check)
		if len(valid.Offsets) == 0 {
			return fix(group.OffsetCommitReply{Token: tok}), nil
		}
		req.ev, req.fix = valid, fix
	}
	var parked time.Time // when the request first waited for its group to move here
	for {
		a, code := c.actorFor(name)
		if a == nil {
			if code == group.ErrNotCoordinator {
				if c.park(ctx, name, &parked) { // park.go: a group moving here from a dead bridge
					continue
				}
				c.parkedFor(parked, "refused")
				if e := c.log.Debug(); e.Enabled() {
					e.Str("group", name).Bool("parked", !parked.IsZero()).Msg("another bridge's group: answered NOT_COORDINATOR")
				}
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("bridge: group %q: %w", name, err)
				}
				c.refusedElsewhere(name, req.ev) // handover_linger.go
			}
			return req.finish(errorReply(name, req.ev, code)), nil
		}
		c.parkedFor(parked, "served")
		parked = time.Time{}
		select {
		case a.reqs <- req:
		case <-a.done:
			continue // the actor ended before taking it: the next one will
		case <-ctx.Done():
			return nil, fmt.Errorf("bridge: group %q: %w", name, ctx.Err())
		}
		select {
		case r := <-req.reply:
			if notCoordinator(r) {
				c.refusedElsewhere(name, req.ev) // handover_linger.go
			}
			return r, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("bridge: group %q: %w", name, ctx.Err())
		}
	}
}

// finish applies the request's fix to a reply.
func (r *request) finish(rep group.Reply) group.Reply {
	if r.fix != nil {
		return r.fix(rep)
	}
	return rep
}

// actorFor returns the group's actor, starting one if needed; nil and the error to answer when
// the bridge cannot serve groups now.
func (c *coordinator) actorFor(name string) (*actor, group.ErrorCode) { return c.actorWith(name, nil) }

// actorWith is actorFor for a takeover: a new actor's load starts from hint (handover.go).
func (c *coordinator) actorWith(name string, hint *takeoverHint) (*actor, group.ErrorCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, group.ErrNotCoordinator
	case c.store == nil:
		return nil, group.ErrCoordinatorNotAvailable
	}
	if !c.owns(name) {
		// Another bridge coordinates the group (handover.go): never a second copy of it.
		return nil, group.ErrNotCoordinator
	}
	if a := c.actors[name]; a != nil {
		return a, group.ErrNone
	}
	if !c.connected.Load() {
		// Loading would only wait for a session; say so at once.
		return nil, group.ErrCoordinatorNotAvailable
	}
	a := newActor(c, name)
	a.takeover = hint
	c.actors[name] = a
	h := c.hosts.join(name) // host.go: the group's one goroutine, shared with its legacy members
	c.goLocked(func(ctx context.Context) {
		h.attachKafka(ctx, a)
		<-a.done
	})
	return a, group.ErrNone
}

// remove forgets an actor that has stopped taking requests.
func (c *coordinator) remove(a *actor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.actors[a.group] == a {
		delete(c.actors, a.group)
	}
	c.actorEndedLocked(a) // recheck.go
}

// states returns the state of every loaded group.
func (c *coordinator) states() map[string]group.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]group.State, len(c.actors))
	for name, a := range c.actors {
		if a.loaded.Load() {
			out[name] = group.State(a.state.Load())
		}
	}
	return out
}

// onSession is zkstate's session callback. An expired session, or a connection lost for longer
// than the session timeout (the server has expired it by then), fences every group: the
// bridge can no longer prove it owns them, and its ephemerals are gone (DESIGN.md §4).
func (c *coordinator) onSession(ev zkstate.SessionEvent) {
	switch ev.State {
	case zkstate.Connected:
		c.connected.Store(true)
		c.mu.Lock()
		if c.lost != nil {
			c.lost.Stop()
			c.lost = nil
		}
		c.mu.Unlock()
	case zkstate.Disconnected:
		c.connected.Store(false)
		c.mu.Lock()
		if c.lost == nil && !c.closed {
			c.lost = time.AfterFunc(min(c.cfg.ZKSessionTimeout, c.zkSessionTimeoutLocked()), func() {
				c.fenceAll(errors.New("zookeeper unreachable for longer than the session timeout"))
			})
		}
		c.mu.Unlock()
	case zkstate.Expired:
		c.connected.Store(false)
		c.fenceAll(zkstate.ErrSessionExpired)
	case zkstate.Reclaimed:
		if ev.Err != nil {
			c.log.Warn().Err(ev.Err).Msg("some ephemerals could not be re-created in the new session")
		}
	case zkstate.AuthFailed:
		c.log.Error().Msg("zookeeper refused our credentials")
	}
	if c.connected.Load() {
		c.metrics.zkConnected.Set(1)
	} else {
		c.metrics.zkConnected.Set(0)
	}
}

// fenceAll tells every actor that its writes can no longer be trusted.
func (c *coordinator) fenceAll(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if len(c.actors) > 0 {
		c.log.Warn().Err(err).Int("groups", len(c.actors)).Msg("fencing every group")
	}
	now := time.Now()
	for _, a := range c.actors {
		if d := a.claimedFor.Load(); d > 0 {
			// Its Kafka members hold partitions the other kinds may take now (fetchgate.go).
			c.gate.fence(a.group, now.Add(time.Duration(d)))
		}
		select {
		case a.fence <- err:
		default: // already told
		}
	}
}
