package bridge

// The IO shell around the group engine, in kfake's shape (groups.go: one goroutine per group,
// requests in over a channel, timers posting back into the goroutine) with the decisions in the
// pure engine, as raft's node.go wraps its RawNode:
//
//   - Do hands a request to the group's actor and waits for the reply carrying its Token.
//   - The actor owns the group.Machine. It steps each request, delivers the replies of every
//     Step by Token, arms the group's one timer for Effects.WakeAt (stepping Tick when it
//     fires), and runs the write of Effects.Persist and Effects.Offsets on its own goroutine,
//     stepping Persisted or PersistFailed when it ends. The engine holds every reply that
//     depends on a write until that Step (persist before reply), and emits one write at a time.
//   - A fenced machine (lost CAS, lost session), a deleted group and an idle Empty group end
//     their actor; the next request for the group starts a new one, which loads the group from
//     ZooKeeper again.

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

	// ctx is the parent of every actor; cancelled by close.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // one per running actor

	// modes keeps every group's mode current (modes.go); nil admits every request.
	modes *groupModes
	// releases wakes the Kafka members' claims when the legacy coordinator released owner
	// znodes (releases.go); nil without a Bridge.
	releases *ownerReleases

	// gate withholds relayed fetches while the bridge cannot vouch for its mixed groups'
	// owners (fetchgate.go).
	gate fetchGate

	// topics and groups feed the limits (limits.go); nil: not checked.
	topics  topicSource
	groups  groupCounter
	logOnce onceLog

	// peers is the live view that places groups on bridges (peers.go, handover.go); nil: every
	// group is ours. pm counts handovers; scanMu serialises placement rescans.
	peers  *peerSet
	pm     *placementMetrics
	scanMu sync.Mutex

	mu     sync.Mutex
	store  *zkstate.Store // nil until start
	actors map[string]*actor
	closed bool
	lost   *time.Timer // armed while the session is disconnected
}

func newCoordinator(cfg Config, log zerolog.Logger, m *metrics) *coordinator {
	ctx, cancel := context.WithCancel(context.Background())
	return &coordinator{cfg: cfg, log: log, metrics: m, ctx: ctx, cancel: cancel, actors: map[string]*actor{}}
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
	c.mu.Unlock()
	c.cancel()
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
	for {
		a, code := c.actorFor(name)
		if a == nil {
			return req.finish(errorReply(name, req.ev, code)), nil
		}
		select {
		case a.reqs <- req:
		case <-a.done:
			continue // the actor ended before taking it: the next one will
		case <-ctx.Done():
			return nil, fmt.Errorf("bridge: group %q: %w", name, ctx.Err())
		}
		select {
		case r := <-req.reply:
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
func (c *coordinator) actorFor(name string) (*actor, group.ErrorCode) {
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
	c.actors[name] = a
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		a.run(c.ctx)
	}()
	return a, group.ErrNone
}

// remove forgets an actor that has stopped taking requests.
func (c *coordinator) remove(a *actor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.actors[a.group] == a {
		delete(c.actors, a.group)
	}
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

// actor owns one group's machine; see the file comment.
type actor struct {
	c     *coordinator
	group string
	log   zerolog.Logger

	reqs  chan *request // unbuffered: a request is taken only by a running actor
	done  chan struct{} // closed once the actor takes no more requests
	fence chan error    // session loss, from the coordinator
	// modeCh is poked when the group's mode changes (modes.go); buffered 1.
	modeCh chan struct{}
	// handover asks the actor to hand its group to another bridge, with the cause; buffered 1.
	// released, set by the handover, releases the epoch once the mirror is released
	// (handover.go).
	handover chan string
	released func()

	// state and loaded are read by ListGroups from other goroutines.
	state  atomic.Int32
	loaded atomic.Bool
	// claimedFor is, while the Kafka members of a mixed group hold partitions by a claim, the
	// longest session timeout among them (ns); read by fenceAll (fetchgate.go). Set through
	// setClaimed.
	claimedFor atomic.Int64

	m       *group.Machine
	waiting map[group.Token]*request
	timer   *time.Timer
	idle    *time.Timer
	idleOn  bool
	exists  bool  // the group has a record or offsets (else Describe says Dead)
	version int64 // of the record, as last persisted or loaded

	gs       *groupStore // nil while a write holds it
	writing  bool
	writes   chan writeResult // buffered 1: one write at a time
	writeWG  sync.WaitGroup
	stopPut  context.CancelFunc // cancels the write in flight
	writeCtx context.Context

	mirror   *mirrorer
	mirrored mirrorKey
	seen     map[group.MemberID]int64 // member key → ms first seen, for 0.8 consumer ids
	lastGen  group.Generation

	mx      mixedState // mixed.go
	members int        // last published to zkbridge_group_members
}

type writeResult struct {
	gs      *groupStore
	version int64
	err     error
	took    time.Duration
	offsets int
}

func newActor(c *coordinator, name string) *actor {
	return &actor{
		c:        c,
		group:    name,
		log:      c.log.With().Str("group", name).Logger(),
		reqs:     make(chan *request),
		done:     make(chan struct{}),
		fence:    make(chan error, 1),
		modeCh:   make(chan struct{}, 1),
		handover: make(chan string, 1),
		waiting:  map[group.Token]*request{},
		writes:   make(chan writeResult, 1),
		seen:     map[group.MemberID]int64{},
		lastGen:  -1,
		mx:       mixedState{results: make(chan claimResult), others: make(chan string, 1), handoff: make(chan chan struct{}, 1), claimedGen: -1},
	}
}

func (a *actor) run(ctx context.Context) {
	a.c.metrics.groupsLoaded.Inc()
	defer a.c.metrics.groupsLoaded.Dec()
	defer a.setClaimed(0) // a fence by a lost session left the group fenced in the gate already
	a.writeCtx, a.stopPut = context.WithCancel(ctx)
	defer a.stopPut()
	a.timer = time.NewTimer(time.Hour)
	a.timer.Stop()
	a.idle = time.NewTimer(time.Hour)
	a.idle.Stop()
	defer a.timer.Stop()
	defer a.idle.Stop()

	a.c.mu.Lock()
	store := a.c.store
	a.c.mu.Unlock()
	a.gs = newGroupStore(store, a.c.cfg.Root, a.group, a.c.cfg.NodeID, a.log)
	if p := a.c.peers; p != nil {
		a.gs.placed = func() bool { return !p.alone() && p.owns(a.group) } // handover.go
	}
	a.m = group.New(a.c.cfg.Group, a.group)
	a.mirror = newMirrorer(store, a.group, a.c.cfg.MirrorRetry, a.log, a.c.metrics, a.c.releases)

	if err := a.load(ctx); err != nil {
		a.mirror.close(false)
		a.refuse(ctx, err)
		return
	}
	a.loaded.Store(true)
	a.loop(ctx)
}

// load reads the group from ZooKeeper and restores the machine.
func (a *actor) load(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, a.c.cfg.LoadTimeout)
	defer cancel()
	rec, err := a.gs.load(lctx)
	if err != nil {
		return err
	}
	if rec == nil {
		// No record: a new group, or one that only has offsets. Nothing is taken over until
		// the first write, so that looking at a group (Describe) creates nothing.
		ok, err := a.gs.hasOffsets(lctx)
		if err != nil {
			return fmt.Errorf("load group %q: %w", a.group, err)
		}
		a.exists = ok
		a.publish()
		return nil
	}
	a.exists = true
	a.log.Info().Int32("generation", int32(rec.Generation)).Int("members", len(rec.Members)).
		Int32("record_version", a.gs.record).Msg("group loaded from zookeeper")
	a.version = int64(a.gs.record)
	a.step(group.Restore{Record: *rec, Version: a.version})
	return nil
}

// refuse answers every request with the load error for refuseHold, then ends the actor.
func (a *actor) refuse(ctx context.Context, err error) {
	code := group.ErrCoordinatorNotAvailable
	var owned *OwnedError
	if errors.As(err, &owned) || errors.Is(err, ErrFenced) {
		code = group.ErrNotCoordinator
		a.log.Info().Err(err).Msg("not serving the group")
	} else {
		a.log.Warn().Err(err).Msg("cannot load the group")
	}
	hold := time.NewTimer(refuseHold)
	defer hold.Stop()
	for {
		select {
		case req := <-a.reqs:
			req.reply <- req.finish(errorReply(a.group, req.ev, code))
		case <-hold.C:
			a.c.remove(a)
			close(a.done)
			return
		case <-ctx.Done():
			a.c.remove(a)
			close(a.done)
			return
		}
	}
}

func (a *actor) loop(ctx context.Context) {
	for {
		switch {
		case a.m.Fenced():
			a.c.metrics.fenced.Inc()
			a.finish(true)
			return
		case a.m.State() == group.Dead && !a.writing:
			// Deleted and its deletion persisted: the next request starts a new group.
			a.finish(true)
			return
		}
		a.checkOthers() // mixed.go
		a.armIdle()
		select {
		case req := <-a.reqs:
			a.handle(req)
		case res := <-a.mx.results:
			a.claimed(res) // mixed.go
		case fp := <-a.mx.others:
			a.mx.othersFP = fp // mixed.go: checked at the top of the loop
		case done := <-a.mx.handoff:
			a.startHandoff(done) // mixed.go
		case <-a.timer.C:
			a.step(group.Tick{})
		case res := <-a.writes:
			a.written(res)
		case err := <-a.fence:
			a.step(group.PersistFailed{Err: err})
		case <-a.modeCh:
			a.onModeChange() // modes.go
		case cause := <-a.handover:
			a.leave(cause) // handover.go
			return
		case <-a.idle.C:
			a.idleOn = false
			if a.isIdle() {
				a.log.Debug().Msg("unloading idle group")
				a.finish(true)
				return
			}
		case <-ctx.Done():
			a.finish(false)
			return
		}
	}
}

// handle steps one request.
func (a *actor) handle(req *request) {
	a.c.metrics.event(req.ev)
	// Group modes (modes.go): the group's mode is known (its default persisted on first
	// service) before anything is written under /consumers/<g>; requests the mode refuses are
	// answered here.
	if a.unvouched(req) || a.modeGate(req) || a.handingOff(req) { // handover.go, modes.go, mixed.go
		return
	}
	a.syncAssignMode()        // mixed.go
	if a.deleteBlocked(req) { // delete.go
		return
	}
	if !a.exists {
		// Kafka answers a group it does not know without creating it.
		switch req.ev.(type) {
		case group.Describe:
			req.reply <- errorReply(a.group, req.ev, group.ErrNone)
			return
		case group.Delete:
			req.reply <- errorReply(a.group, req.ev, group.ErrGroupIDNotFound)
			return
		}
	}
	a.waiting[req.token] = req
	a.step(req.ev)
	if j, ok := req.ev.(group.JoinGroup); ok && j.MemberID != "" {
		a.rejoined(j.MemberID) // mixed.go
	}
}

// step steps ev and carries out its effects.
func (a *actor) step(ev group.Event) {
	fx := a.m.Step(time.Now(), ev)
	for _, l := range fx.Logs {
		if l.Cause != "" {
			a.c.metrics.rebalances.WithLabelValues(string(l.Cause)).Inc()
		}
		e := a.log.Info()
		if l.Member != "" {
			e = e.Str("member", string(l.Member))
		}
		if l.Reason != "" {
			e = e.Str("reason", l.Reason)
		}
		e.Msg(l.Msg)
	}
	for _, r := range fx.Replies {
		a.deliver(r)
	}
	if fx.NeedsWrite() {
		a.startWrite(fx.Persist, fx.Offsets)
	}
	if fx.Assign != nil {
		a.startClaim(fx.Assign) // mixed.go
	} else if a.mx.claimCancel != nil && a.m.State() != group.CompletingRebalance {
		a.cancelClaim() // the generation is over: its claim must not take partitions
	}
	if fx.WakeAt.IsZero() {
		a.timer.Stop()
	} else {
		a.timer.Reset(time.Until(fx.WakeAt))
	}
	a.publish()
}

// deliver hands a reply to the request with its Token.
func (a *actor) deliver(r group.Reply) {
	req, ok := a.waiting[r.RequestToken()]
	if !ok {
		a.log.Error().Uint64("token", uint64(r.RequestToken())).Msgf("engine answered an unknown request with %T", r)
		return
	}
	delete(a.waiting, r.RequestToken())
	req.reply <- req.finish(r)
}

// startWrite runs the write of one Step's effects on its own goroutine.
func (a *actor) startWrite(rec *group.Record, offs []group.OffsetCommitPartition) {
	if a.writing {
		// The engine emits one write at a time; a second one is a bug that would break persist
		// before reply, so stop serving the group rather than guess.
		a.log.Error().Msg("engine emitted a write while one is in flight; fencing the group")
		a.step(group.PersistFailed{Err: errors.New("bridge: overlapping writes")})
		return
	}
	a.writing = true
	gs := a.gs
	a.gs = nil
	ctx := a.writeCtx
	timeout := a.c.cfg.WriteTimeout
	// modes.go: a finalized group's offsets are no longer written to /consumers.
	gs.ownOnly = a.c.modes.mirrorOff(a.group)
	a.writeWG.Add(1)
	go func() {
		defer a.writeWG.Done()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		v, err := gs.write(wctx, rec, offs, start)
		a.writes <- writeResult{gs: gs, version: v, err: err, took: time.Since(start), offsets: len(offs)}
	}()
}

// written steps the outcome of the write in flight.
func (a *actor) written(res writeResult) {
	a.writing = false
	a.gs = res.gs
	a.c.metrics.writeSeconds.Observe(res.took.Seconds())
	if res.err != nil {
		if writeFenced(res.err) {
			a.c.metrics.writes.WithLabelValues("fenced").Inc()
			a.log.Warn().Err(res.err).Msg("group write failed: another bridge took the group over; fencing it")
			a.step(group.PersistFailed{Err: res.err})
			return
		}
		// ZooKeeper slow or away: the requests that waited fail with a retriable error and the
		// group stays (group.WriteFailed). A session lost for good fences every group anyway.
		a.c.metrics.writes.WithLabelValues("error").Inc()
		a.log.Warn().Err(res.err).Msg("group write failed; its requests get COORDINATOR_NOT_AVAILABLE and the group carries on")
		a.step(group.WriteFailed{Err: res.err})
		return
	}
	a.c.metrics.writes.WithLabelValues("ok").Inc()
	a.c.metrics.offsets.Add(float64(res.offsets))
	a.exists = true
	a.version = res.version
	a.step(group.Persisted{Version: res.version})
}

// publish exposes the state to ListGroups and keeps the 0.8 mirror in step: each Stable
// generation (and each persisted change within it, such as a static member's new id) is
// mirrored; an Empty group holds nothing.
func (a *actor) publish() {
	st := a.m.State()
	a.state.Store(int32(st))
	if st == group.Empty && a.claimedFor.Load() > 0 {
		a.setClaimed(0)
		a.c.gate.clear(a.group) // no member left to fetch what it no longer owns
	}
	if n := a.m.Members(); n != a.members {
		a.members = n
		a.c.metrics.members.WithLabelValues(a.group, zkstate.KindKafka).Set(float64(n))
	}
	key := mirrorKey{state: st, generation: a.m.Generation(), version: a.version}
	switch st {
	case group.Stable:
		if key == a.mirrored {
			return
		}
		a.mirrored = key
		if key.generation != a.lastGen {
			a.lastGen = key.generation
			a.c.metrics.generations.Inc()
		}
		if a.unclaimedMixed(key.generation) {
			return
		}
		a.mirrorUpdate(buildMirror(a.group, a.m.Describe(), a.seen, time.Now(), a.log, a.hosted)) // modes.go: none when finalized
	case group.Empty:
		if a.mirrored.state != group.Empty {
			a.mirrored = key
			clear(a.seen)
			a.mirrorUpdate(mirrorState{})
		}
	}
}

func (a *actor) isIdle() bool {
	return a.m.State() == group.Empty && len(a.waiting) == 0 && !a.writing && !a.m.Fenced()
}

// armIdle keeps the idle timer armed exactly while the group is idle.
func (a *actor) armIdle() {
	idle := a.isIdle()
	switch {
	case idle && !a.idleOn:
		a.idle.Reset(a.c.cfg.GroupIdleTimeout)
		a.idleOn = true
	case !idle && a.idleOn:
		a.idle.Stop()
		a.idleOn = false
	}
}

// finish ends the actor. The write in flight is abandoned (a multi is all or nothing, and its
// requests are answered NOT_COORDINATOR, which clients retry), the 0.8 mirror released when
// release is set (not at shutdown: closing the session drops it at once), every request still
// waiting answered NOT_COORDINATOR, and only then does the group take requests again, through
// a new actor, so that two actors of one group never write at the same time.
func (a *actor) finish(release bool) {
	a.c.metrics.members.DeleteLabelValues(a.group, zkstate.KindKafka)
	a.c.metrics.mixedCrashUnsafe.DeleteLabelValues(a.group)
	a.cancelClaim()
	if a.mx.watchCancel != nil {
		a.mx.watchCancel()
	}
	a.stopPut()
	a.writeWG.Wait()
	select {
	case <-a.writes:
	default:
	}
	a.mirror.close(release)
	if a.released != nil {
		a.released() // handover.go: the epoch, after the mirror
	}
	for tok, req := range a.waiting {
		req.reply <- req.finish(errorReply(a.group, req.ev, group.ErrNotCoordinator))
		delete(a.waiting, tok)
	}
	a.c.remove(a)
	close(a.done)
}

// isRequest reports whether ev is answered by a Reply (and so may go through Do).
func isRequest(ev group.Event) bool {
	switch ev.(type) {
	case group.JoinGroup, group.SyncGroup, group.Heartbeat, group.ReleaseHeartbeat, group.LeaveGroup, group.OffsetCommit, group.Describe, group.Delete:
		return true
	}
	return false
}

// errorReply answers a request event with code, in the shape of its reply (the engine's
// replyError, for the answers the shell gives itself). A Describe answered ErrNone describes a
// group that does not exist: Dead, as Kafka's DescribeGroups reports it.
func errorReply(name string, ev group.Event, code group.ErrorCode) group.Reply {
	switch ev := ev.(type) {
	case group.JoinGroup:
		return group.JoinReply{Token: ev.Token, Err: code, MemberID: ev.MemberID, Generation: group.NoGeneration}
	case group.SyncGroup:
		return group.SyncReply{Token: ev.Token, Err: code}
	case group.Heartbeat:
		return group.HeartbeatReply{Token: ev.Token, Err: code}
	case group.ReleaseHeartbeat:
		return group.HeartbeatReply{Token: ev.Token, Err: code}
	case group.LeaveGroup:
		return group.LeaveReply{Token: ev.Token, Err: code}
	case group.OffsetCommit:
		r := group.OffsetCommitReply{Token: ev.Token, Partitions: make([]group.OffsetCommitResult, len(ev.Offsets))}
		for i, o := range ev.Offsets {
			r.Partitions[i] = group.OffsetCommitResult{Topic: o.Topic, Partition: o.Partition, Err: code}
		}
		return r
	case group.Describe:
		return group.DescribeReply{Token: ev.Token, Err: code, Group: group.Description{Group: name, State: group.Dead, Generation: group.NoGeneration}}
	case group.Delete:
		return group.DeleteReply{Token: ev.Token, Err: code}
	}
	return nil
}

// screenOffsets takes out of a commit the partitions check refuses (limits.go: a topic name
// that is not a znode name, a negative partition, a topic or partition the cluster does not
// have, an invalid offset), which Kafka answers before its coordinator sees the request, so
// that one bad entry cannot fail the group's write. fix merges the engine's reply for the rest
// back into request order, with each refused partition's code.
func (c *coordinator) screenOffsets(ev group.OffsetCommit, check commitCode) (group.OffsetCommit, func(group.Reply) group.Reply) {
	var bad []group.ErrorCode // nil while every partition passes
	for i, o := range ev.Offsets {
		code, limit := check(o)
		if code == group.ErrNone {
			continue
		}
		if bad == nil {
			bad = make([]group.ErrorCode, len(ev.Offsets))
		}
		bad[i] = code
		c.metrics.limitRefusals.WithLabelValues(limit).Inc()
	}
	if bad == nil {
		return ev, nil
	}
	valid := ev
	valid.Offsets = nil
	for i, o := range ev.Offsets {
		if bad[i] == group.ErrNone {
			valid.Offsets = append(valid.Offsets, o)
		}
	}
	fix := func(r group.Reply) group.Reply {
		in, _ := r.(group.OffsetCommitReply)
		out := group.OffsetCommitReply{Token: ev.Token, Partitions: make([]group.OffsetCommitResult, len(ev.Offsets))}
		j := 0
		for i, o := range ev.Offsets {
			res := group.OffsetCommitResult{Topic: o.Topic, Partition: o.Partition, Err: bad[i]}
			if bad[i] == group.ErrNone {
				if j < len(in.Partitions) {
					res.Err = in.Partitions[j].Err
				}
				j++
			}
			out.Partitions[i] = res
		}
		return out
	}
	return valid, fix
}
