package bridge

// A group's actor: the Kafka members' side of a group's host (host.go), which owns the group's
// engine; the actor steps the Kafka requests into it and carries out the Kafka part of the
// effects (coordinator.go's file comment describes the shape).

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

// actor is the Kafka side of one group; see coordinator.go's file comment.
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
	// (handover.go), unless the mirror's release carried releaseOps, the epoch's release, and
	// applied them (withMirror).
	handover   chan string
	released   func(withMirror bool)
	releaseOps []zkstate.Op

	// state and loaded are read by ListGroups from other goroutines.
	state  atomic.Int32
	loaded atomic.Bool
	// claimedFor is, while the Kafka members of a mixed group hold partitions by a claim, the
	// longest session timeout among them (ns); read by fenceAll (fetchgate.go). Set through
	// setClaimed.
	claimedFor atomic.Int64

	// m is the group's engine, its host's (host.machine), shared with the group's legacy
	// members: every event goes in through host.step, which hands the actor its part of the
	// effects (carry).
	m       *group.Machine
	waiting map[group.Token]*request
	idle    *time.Timer
	idleOn  bool
	exists  bool  // the group has a record or offsets (else Describe says Dead)
	version int64 // of the record, as last persisted or loaded

	gs      *groupStore // nil while a write holds it
	writing bool
	writes  chan writeResult // buffered 1: one write at a time
	writeWG sync.WaitGroup
	stopPut context.CancelFunc // cancels the actor's ctx, and with it the write in flight

	mirror   *claimer // the group's, shared with its legacy members (claimer.go)
	mirrored mirrorKey
	seen     map[group.MemberID]int64 // member key → ms first seen, for 0.8 consumer ids
	lastGen  group.Generation

	mx      mixedState // mixed.go
	members int        // last published to zkbridge_group_members
	// handMirror, set by a handover of a mixed group, makes closeMirror leave the Kafka
	// members' ephemerals for the next owner to adopt (mixed_adopt.go).
	handMirror bool

	// loading carries the load's result while the group loads (nil after); hold is armed
	// while a group that could not be loaded is refused with refusal (refuse).
	host    *host // whose goroutine runs the actor (host.go); set before it starts
	loading chan loadResult
	hold    *time.Timer
	refusal group.ErrorCode
	// gating is the request waiting for the group's mode to be read (actor_gate.go), which
	// comes on modeReads (buffered 1); no other request is taken meanwhile.
	gating    *request
	modeReads chan modeRead
	// closing is closed when the releases finish started are done (closed ends the actor then).
	// A fenced group's requests are answered meanwhile with refusal; a group handed over keeps
	// them waiting for the end.
	closing chan struct{}
	// takeover, set before it starts by a rescan that takes the group over, is what the rescan
	// read of its epoch (handover.go).
	takeover *takeoverHint
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
		c:         c,
		group:     name,
		log:       c.log.With().Str("group", name).Logger(),
		reqs:      make(chan *request),
		done:      make(chan struct{}),
		fence:     make(chan error, 1),
		modeCh:    make(chan struct{}, 1),
		handover:  make(chan string, 1),
		waiting:   map[group.Token]*request{},
		writes:    make(chan writeResult, 1),
		modeReads: make(chan modeRead, 1),
		seen:      map[group.MemberID]int64{},
		lastGen:   -1,
		mx:        mixedState{results: make(chan claimResult), others: make(chan string, 1), handoff: make(chan chan struct{}, 1), claimedGen: -1},
	}
}

// start sets the actor up on its host's goroutine (host.go) and starts loading the group; it
// returns the actor's ctx, which ends with the actor too (stopPut, by finish and leave): the
// write in flight, the claim and the watcher it started stop then.
func (a *actor) start(ctx context.Context) context.Context {
	a.c.metrics.groupsLoaded.Inc()
	ctx, a.stopPut = context.WithCancel(ctx)
	a.idle = time.NewTimer(time.Hour)
	a.idle.Stop()

	a.c.mu.Lock()
	store := a.c.store
	a.c.mu.Unlock()
	a.gs = newGroupStore(store, a.c.cfg.Root, a.group, a.c.cfg.NodeID, a.log)
	a.gs.hint = a.takeover
	if p := a.c.peers; p != nil {
		a.gs.placed = func(draining bool) bool { return (draining || !p.alone()) && p.owns(a.group) } // handover.go
		a.gs.unregistered = func(node int32) bool { return !p.hasRegistration(node) }
	}
	a.m = a.host.machine(&a.c.cfg.Group, nil)
	a.mirror = a.c.claimers.join(claimerConfig{store: store, group: a.group, retry: a.c.cfg.MirrorRetry, log: a.log, metrics: a.c.metrics})
	// The load reads ZooKeeper on a goroutine of its own: the host steps the group's other
	// events meanwhile (its legacy members'); requests wait until it is in (chans).
	a.loading = make(chan loadResult, 1)
	gs, loaded, peers := a.gs, a.loading, a.c.peers
	go func() {
		lctx, cancel := context.WithTimeout(ctx, a.c.cfg.LoadTimeout)
		defer cancel()
		if peers != nil {
			// No epoch before our registration exists in the session that writes it
			// (register_own.go); register rescans once it is written, for a load that gave up.
			sid, err := peers.awaitOwn(lctx, store)
			if err != nil {
				loaded <- loadResult{err: err}
				return
			}
			gs.own = sid
		}
		loaded <- loadGroup(lctx, gs, a.group)
	}()
	return ctx
}

// loadGroup reads the group's record through gs (taking the group over when it has one), and
// whether it has offsets when it has none.
func loadGroup(ctx context.Context, gs *groupStore, name string) loadResult {
	// Whether the group has offsets is asked with the look for its record, one round trip
	// where one after the other took two (the group's first request waits for the load);
	// only a group with no record needs the answer. A takeover asks after taking the epoch,
	// as before: then it sees all the previous holder wrote.
	type offsets struct {
		ok  bool
		err error
	}
	offs := make(chan offsets, 1)
	ask := func() {
		ok, err := gs.hasOffsets(ctx)
		offs <- offsets{ok, err}
	}
	hinted := gs.hint != nil
	if !hinted {
		go ask()
	}
	var res loadResult
	res.rec, res.err = gs.load(ctx)
	if res.err == nil && res.rec == nil {
		// No record: a new group, or one that only has offsets. Nothing is taken over until
		// the first write, so that looking at a group (Describe) creates nothing.
		if hinted {
			ask()
		}
		o := <-offs
		if res.offsets, res.err = o.ok, o.err; res.err != nil {
			res.err = fmt.Errorf("load group %q: %w", name, res.err)
		}
	}
	return res
}

// loadResult is what the load of a group read.
type loadResult struct {
	rec     *group.Record
	offsets bool
	err     error
}

// onLoaded restores the machine from what the load read, or refuses the group.
func (a *actor) onLoaded(ctx context.Context, res loadResult) {
	a.loading = nil
	if res.err != nil {
		a.closeMirror(false, nil)
		a.refuse(res.err)
		return
	}
	a.loaded.Store(true)
	if res.rec == nil {
		a.exists = res.offsets
		a.publish()
		return
	}
	rec := res.rec
	a.exists = true
	a.log.Info().Int32("generation", int32(rec.Generation)).Int("members", len(rec.Members)).
		Int32("record_version", a.gs.record).Msg("group loaded from zookeeper")
	a.version = int64(a.gs.record)
	a.step(ctx, group.Restore{Record: *rec, Version: a.version})
	actx, cancel := context.WithTimeout(ctx, a.c.cfg.LoadTimeout)
	defer cancel()
	if a.adoptMixed(actx) { // mixed_adopt.go
		// Server-side assignment and the watch of the other kinds at once, not at the first
		// request: what changes meanwhile rebalances the group.
		a.syncAssignMode(ctx)
	}
}

// refuse makes the actor answer every request with the load error for refuseHold, then end
// (endRefusal).
func (a *actor) refuse(err error) {
	a.refusal = group.ErrCoordinatorNotAvailable
	var owned *OwnedError
	if errors.As(err, &owned) || errors.Is(err, ErrFenced) {
		a.refusal = group.ErrNotCoordinator
		a.log.Info().Err(err).Msg("not serving the group")
	} else {
		a.log.Warn().Err(err).Msg("cannot load the group")
	}
	a.hold = time.NewTimer(refuseHold)
}

func (a *actor) endRefusal() {
	a.hold.Stop()
	a.c.remove(a)
	close(a.done)
}

// actorChans are the channels the host selects on for the actor (nil: not now).
type actorChans struct {
	reqs       chan *request
	loaded     chan loadResult
	hold, idle <-chan time.Time
	results    chan claimResult
	others     chan string
	handoff    chan chan struct{}
	writes     chan writeResult
	modeRead   chan modeRead
	fence      chan error
	mode       chan struct{}
	handover   chan string
	stop       <-chan struct{}
	closing    <-chan struct{}
}

// chans are the channels the host selects on for a (none when a is nil): while it closes, the
// end of its releases (and, fenced, requests, refused); while the group loads, only its result and the end; while it is
// refused, requests, the hold and the end.
func (a *actor) chans(ctx context.Context) actorChans {
	switch {
	case a == nil:
		return actorChans{}
	case a.closing != nil && a.refusal != group.ErrNone:
		return actorChans{reqs: a.reqs, closing: a.closing}
	case a.closing != nil:
		return actorChans{closing: a.closing}
	case a.loading != nil:
		return actorChans{loaded: a.loading, stop: ctx.Done()}
	case a.hold != nil:
		return actorChans{reqs: a.reqs, hold: a.hold.C, stop: ctx.Done()}
	}
	reqs := a.reqs
	if a.gating != nil {
		reqs = nil // requests keep their order behind the one waiting for the mode
	}
	return actorChans{reqs: reqs, idle: a.idle.C, results: a.mx.results, others: a.mx.others,
		handoff: a.mx.handoff, writes: a.writes, modeRead: a.modeReads, fence: a.fence, mode: a.modeCh, handover: a.handover, stop: ctx.Done()}
}

// before runs before each of the host's selects: it ends a fenced or deleted group (finish: the
// actor is closing then), else asks for the rebalances the mixed group's other kinds need and
// keeps the idle timer. It reports false once the actor has ended.
func (a *actor) before(ctx context.Context) bool {
	if a.loading != nil || a.hold != nil || a.closing != nil {
		return true
	}
	switch {
	case a.m.Fenced():
		a.c.metrics.fenced.Inc()
		// Answered at once while the mirror is released: with ZooKeeper slow or away, as it
		// often is at a fence, the release takes seconds. COORDINATOR_NOT_AVAILABLE, as the
		// lease's refusal (unvouched): a fence does not tell whether the group is another
		// bridge's now (a session's end: it maps here again once registered); clients look
		// for the coordinator again on either.
		a.refusal = group.ErrCoordinatorNotAvailable
		a.finish(true)
		return true // closing: the host waits for its end (closed)
	case a.m.State() == group.Dead && !a.writing:
		// Deleted and its deletion persisted: the next request starts a new group.
		a.finish(true)
		return true
	}
	a.checkOthers(ctx) // mixed.go
	a.armIdle()
	return !a.ended()
}

func (a *actor) onRequest(ctx context.Context, req *request) {
	if a.hold != nil || a.closing != nil {
		req.reply <- req.finish(errorReply(a.group, req.ev, a.refusal))
		return
	}
	a.handle(ctx, req)
}

func (a *actor) onFence(ctx context.Context, err error) { a.step(ctx, group.PersistFailed{Err: err}) }

func (a *actor) onIdle() {
	a.idleOn = false
	if a.isIdle() {
		a.log.Debug().Msg("unloading idle group")
		a.finish(true)
	}
}

// onStop ends the actor with its ctx (the bridge stopping).
func (a *actor) onStop() {
	if a.hold != nil {
		a.endRefusal()
		return
	}
	a.finish(false)
}

// ended reports whether the actor takes no more requests.
func (a *actor) ended() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// serving reports whether the actor carries out the engine's effects: not while the group loads
// (the engine has no Kafka part yet), is refused, or closes (finish has reset it).
func (a *actor) serving() bool { return a.loading == nil && a.hold == nil && a.closing == nil }

// exit undoes start once the actor has ended.
func (a *actor) exit() {
	a.setClaimed(0) // a fence by a lost session left the group fenced in the gate already
	a.stopPut()
	a.host.resetKafka() // done by finish already, unless the group was refused
	a.idle.Stop()
	a.c.metrics.groupsLoaded.Dec()
}

// handle steps one request.
func (a *actor) handle(ctx context.Context, req *request) {
	a.c.metrics.event(req.ev)
	// Group modes (modes.go): the group's mode is known (its default persisted on first
	// service) before anything is written under /consumers/<g>; requests the mode refuses are
	// answered by the gate, and a request whose mode must be read is served once it is
	// (actor_gate.go).
	if a.unvouched(req) || a.modeGate(ctx, req) { // handover.go, actor_gate.go
		return
	}
	a.serve(ctx, req)
}

// serve steps a request the group's mode admits.
func (a *actor) serve(ctx context.Context, req *request) {
	if a.handingOff(req) { // mixed_handoff.go
		return
	}
	a.syncAssignMode(ctx)          // mixed.go
	if a.deleteBlocked(ctx, req) { // delete.go
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
	if j, ok := req.ev.(group.JoinGroup); ok {
		a.warnMissingTopics(ctx, j) // missing_topics.go
	}
	a.waiting[req.token] = req
	a.step(ctx, req.ev)
	if j, ok := req.ev.(group.JoinGroup); ok && j.MemberID != "" {
		a.rejoined(j) // mixed.go
	}
}

// step steps ev into the group's engine, through the host, which hands every side its part of
// the effects (carry).
func (a *actor) step(_ context.Context, ev group.Event) { a.host.step(time.Now(), ev) }

// carry carries out the Kafka members' part of one Step's effects.
func (a *actor) carry(ctx context.Context, fx group.Effects) {
	for _, l := range fx.Logs {
		if l.Legacy {
			continue // the legacy side's (legacyGroup.carry)
		}
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
		a.startWrite(ctx, fx.Persist, fx.Offsets)
	}
	if fx.Assign != nil {
		a.startClaim(ctx, fx.Assign) // mixed.go
	} else if a.mx.claimStop != nil && a.m.State() != group.CompletingRebalance {
		a.cancelClaim() // the generation is over: its claim must not take partitions
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
func (a *actor) startWrite(ctx context.Context, rec *group.Record, offs []group.OffsetCommitPartition) {
	if a.writing {
		// The engine emits one write at a time; a second one is a bug that would break persist
		// before reply, so stop serving the group rather than guess.
		a.log.Error().Msg("engine emitted a write while one is in flight; fencing the group")
		a.step(ctx, group.PersistFailed{Err: errors.New("bridge: overlapping writes")})
		return
	}
	a.writing = true
	gs := a.gs
	a.gs = nil
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
func (a *actor) written(ctx context.Context, res writeResult) {
	a.writing = false
	a.gs = res.gs
	a.c.metrics.writeSeconds.Observe(res.took.Seconds())
	if res.err != nil {
		if writeFenced(res.err) {
			a.c.metrics.writes.WithLabelValues("fenced").Inc()
			a.log.Warn().Err(res.err).Msg("group write failed: another bridge took the group over; fencing it")
			a.step(ctx, group.PersistFailed{Err: res.err})
			return
		}
		// ZooKeeper slow or away: the requests that waited fail with a retriable error and the
		// group stays (group.WriteFailed). A session lost for good fences every group anyway.
		a.c.metrics.writes.WithLabelValues("error").Inc()
		a.log.Warn().Err(res.err).Msg("group write failed; its requests get COORDINATOR_NOT_AVAILABLE and the group carries on")
		a.step(ctx, group.WriteFailed{Err: res.err})
		return
	}
	a.c.metrics.writes.WithLabelValues("ok").Inc()
	a.c.metrics.offsets.Add(float64(res.offsets))
	a.exists = true
	a.version = res.version
	a.step(ctx, group.Persisted{Version: res.version})
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
		st := buildMirror(a.group, a.m.Describe(), a.seen, time.Now(), a.log, a.hosted)
		a.mirrorUpdate(a.withheldOwners(st, key.generation)) // modes.go: none when finalized; mixed.go
	case group.Empty:
		if a.mirrored.state != group.Empty {
			a.mirrored = key
			clear(a.seen)
			a.mirrorUpdate(mirrorState{})
		}
	}
}

// closeMirror ends the actor's use of the group's claimer: the Kafka members' ephemerals are
// deleted with release, else left to the session.
func (a *actor) closeMirror(release bool, also []zkstate.Op) (applied bool) {
	if a.handMirror {
		handed := a.mirror.handOver()
		a.c.claimers.drop(a.mirror)
		a.c.trackAdoption(a.mirror.store, a.group, handed)
		return false
	}
	applied = a.mirror.leave(false, release, also...)
	a.c.claimers.drop(a.mirror)
	return applied
}

func (a *actor) isIdle() bool {
	return a.m.State() == group.Empty && len(a.waiting) == 0 && a.gating == nil && !a.writing && !a.m.Fenced()
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
//
// The mirror's release (the claimer's leave, which waits for what the claimer is doing in
// ZooKeeper) and a handover's epoch release run on a goroutine of their own: the actor is
// closing until they are done (closed), and the group's host steps its other events meanwhile.
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
	// The group's legacy members carry on in the engine; its Kafka part goes (the requests
	// still waiting are answered by closed).
	a.host.resetKafka()
	closing, released, also := make(chan struct{}), a.released, a.releaseOps
	a.closing = closing
	go func() {
		defer close(closing)
		applied := a.closeMirror(release, also)
		if released != nil {
			released(applied) // handover.go: the epoch, after the mirror or with it
		}
	}()
}

// closed ends the actor once finish's releases are done.
func (a *actor) closed() {
	a.closing = nil
	for tok, req := range a.waiting {
		req.reply <- req.finish(errorReply(a.group, req.ev, group.ErrNotCoordinator))
		delete(a.waiting, tok)
	}
	if req := a.gating; req != nil {
		a.gating = nil
		req.reply <- req.finish(errorReply(a.group, req.ev, group.ErrNotCoordinator))
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
