package bridge

// A legacy group's actor: the IO shell of the group's legacy members in the group engine
// (bridge/group, legacy.go). The engine decides — liveness, the phases of a rebalance, the
// rebalance delay and the retry backoff, all from the now it is stepped with; the actor turns
// what happens on the members' connections and in ZooKeeper into engine events, and carries out
// the engine's effects: requests on the connections, the check and the claim (handed to the
// group's claimer, which reads and writes ZooKeeper: legacy_claim.go, claimer_legacy.go), the
// members it drops (legacy_coordinator.go describes the whole).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

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
		kind   group.LegacyRequestKind
		ping   legacy.PingResponse
		code   legacy.ErrorCode // of a StopResponse or StartResponse
		err    error
		// late: a ping or final ping timed out after it went out, and its answer is awaited
		// (the request is still in flight); lateAnswer: that answer, or err when none came.
		late, lateAnswer bool
	}
	// legacyTopicEv: the watch on /brokers/topics/<t> fired.
	legacyTopicEv struct {
		topic string
		watch *legacyTopic
		ev    zkstate.WatchEvent
	}
	legacySessionEv struct{ ev zkstate.SessionEvent }
	// legacyIDsEv: a view of the group's registrations, from the claimer's watch of
	// /consumers/<g>/ids and the other registrations' data (claimer_watch.go).
	legacyIDsEv struct {
		sub  *idsSub
		view idsView
	}
)

// legacyMember is one registered consumer as the actor knows it: its connection and the part it
// runs. Its liveness is the engine's.
type legacyMember struct {
	id   string
	sess *legacy.Session
	reg  legacy.RegisterRequest

	started bool                    // acknowledged a StartRequest, not stopped since
	running []legacy.TopicPartition // the part it was started with
	pending []legacy.TopicPartition // the part of the StartRequest in flight

	// inFlight counts the requests sent whose result has not reached the actor; hungUp says
	// the connection closed meanwhile: the member leaves once those results are in (leaveIfDone).
	inFlight int
	hungUp   bool
	// answered is closed once the result of the last request sent has reached the actor, late
	// answer included: an answer waits for the one before, so that the actor takes them in
	// the order the member gave them, a late answer before the on-time answer that follows it.
	answered chan struct{}
}

// legacyTopic is the watch on one subscribed topic's /brokers/topics/<t>.
type legacyTopic struct {
	cancel     context.CancelFunc
	partitions []int32
}

// legacyWaited is a claim waiting for other members to release partitions (the engine's
// claim-wait; the claimer's legacyClaimRun): what its last round read, as its Release left it.
type legacyWaited struct {
	view    legacyGroupView
	foreign []legacy.TopicPartition
	// moving are our owner znodes that the claim deletes and creates again for another of our
	// threads: read again too, since someone may have deleted one and created it again in the
	// meantime, at the version we read (the ABA of a delete by version).
	moving []legacy.TopicPartition
	// own are the consumer ids of the claim's members. The registrations read before the wait
	// may be stale: an owner znode of our session found by the read after it, holding the
	// thread of a consumer that is neither one of these nor an other known then, is not ours
	// but our other kind's, for a member registered since (refreshOwner).
	own map[string]bool
}

// legacyGroup is the actor of one group. Every field below quit is owned by run's goroutine.
type legacyGroup struct {
	c     *LegacyCoordinator
	name  string
	log   zerolog.Logger
	inbox chan any
	// cl is the group's claimer, shared with the group's Kafka members: it writes every
	// ephemeral of ours under /consumers/<g> (claimer_legacy.go).
	cl     *claimer
	quit   chan struct{} // closed when the actor stops: senders give up
	exited chan struct{} // closed when shutdown is done
	host   *host         // whose goroutine runs the actor (host.go); set before it starts
	// stopped: shutdown has run; the host no longer steps the actor.
	stopped bool
	wg      sync.WaitGroup // request goroutines and watch forwarders

	// m is the group's engine, its host's (host.machine), shared with the group's Kafka
	// members: the legacy members' liveness and rebalance are its legacy part. Every event goes
	// in through host.step, which hands the actor its part of the effects (carry). cfg is the
	// legacy part of its configuration.
	m   *group.Machine
	cfg group.LegacyConfig
	// answer is the answer being stepped, whose content an Accepted effect applies.
	answer *legacyResultEv
	// unmeasured: the ZooKeeper operations being carried out are not the rebalance's (measuring).
	unmeasured bool

	members map[string]*legacyMember
	// registering are the Registers whose registration the claimer is writing, by consumer id;
	// leaving counts the removals (let) of each consumer id the claimer has not answered yet.
	registering map[string]*legacyRegistering
	leaving     map[string]int
	topics      map[string]*legacyTopic
	// ids watches the children of /consumers/<g>/ids while the group has members (nil
	// otherwise); others watches the data of every registration there that is not one of our
	// members', by consumer id.
	ids    *idsSub
	others map[string]bool
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
	// committing are the ping offsets handed to the claimer and not answered yet
	// (legacyCommitReq): an offset equal to one of them is not sent again.
	committing map[legacy.TopicPartition]int64
	// writtenSession is the session of the owner znodes the last claim wrote (0: none to
	// trust); the claimer keeps the owner znodes themselves (legacyPart.written).
	writtenSession int64
	// starts are the StartRequest parts of the last claim written (legacyPlan.Starts).
	starts map[string][]legacy.PartitionOffset

	// The attempt in progress, since the engine's last Check: the check handed to the claimer
	// (nil when none), the final offsets accepted, and the claim handed to the claimer (its
	// number, 0 when none); blocked is the last blocked round's report, for the log.
	checking *group.LegacyCheck
	final    map[legacy.TopicPartition]int64
	claim    uint64
	blocked  legacyClaimEv

	// The ZooKeeper operations of the rebalance being measured (LegacyRebalanceStats).
	reads, readRequests, writes, multis int
	foreignLogged                       bool
	claimWaitSince                      time.Time // the first blocked round of the claims waiting
	lastRefusalLog                      time.Time
	suppressedRefusalCount              int
}

// start sets the actor up on its host's goroutine (host.go), which then steps its events
// (chans): ctx, given at the attach, ends with the group (a handover, the coordinator's Run
// ending), and bounds the group's own work: its requests to members, its watches.
func (g *legacyGroup) start() {
	g.m = g.host.machine(nil, &g.cfg)
}

// legacyChans are the channels the host selects on for the legacy actor (nil: none).
type legacyChans struct {
	inbox chan any
	stop  <-chan struct{}
}

// chans returns the channels to select on (the engine's wake is the host's: host.arm).
func (g *legacyGroup) chans(ctx context.Context) legacyChans {
	if g == nil {
		return legacyChans{}
	}
	return legacyChans{inbox: g.inbox, stop: ctx.Done()}
}

// ended reports whether the actor has stopped (shutdown): the host no longer steps it.
func (g *legacyGroup) ended() bool { return g.stopped }

func (g *legacyGroup) handle(ctx context.Context, now time.Time, ev any) {
	switch ev := ev.(type) {
	case legacyRegisterEv:
		g.onRegister(ctx, now, ev)
	case legacyClosedEv:
		if m := g.members[ev.member]; m != nil && m.sess == ev.sess {
			// The answers read before the hang-up come on other goroutines and may be queued
			// behind this event: the last PingResponse of a consumer that leaves carries its last
			// offsets (the protocol has no leave). The member leaves once they are in.
			m.hungUp = true
			g.leaveIfDone(ctx, now, m)
		}
	case legacyResultEv:
		g.onResult(ctx, now, ev)
	case legacyTopicEv:
		g.onTopic(ctx, now, ev)
	case legacySessionEv:
		g.onSession(ctx, now, ev.ev)
	case legacyIDsEv:
		g.onIDs(ctx, now, ev)
	case legacyClaimEv:
		g.onClaim(ctx, now, ev)
	case legacyCheckEv:
		g.onCheck(ctx, now, ev)
	case legacyCommitEv:
		g.onCommit(ev)
	case legacyRegisteredEv:
		g.onRegistered(ctx, now, ev)
	case legacyDeregisteredEv:
		g.onDeregistered(ev)
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

// step feeds one event to the group's engine at now, through the host, which hands every side
// its part of the effects (carry) and feeds a check decided without reading (certainNeed) back
// at once.
func (g *legacyGroup) step(_ context.Context, now time.Time, ev group.Event) { g.host.step(now, ev) }

// carry carries out the legacy members' part of one Step's effects in the order
// group.LegacyEffects gives, and returns the result of the check when it needs no read (else
// the claimer reads, legacyCheckReq).
func (g *legacyGroup) carry(ctx context.Context, now time.Time, fx group.Effects) group.Event {
	for _, l := range fx.Logs {
		if !l.Legacy {
			continue // the Kafka side's (actor.carry)
		}
		g.log.Debug().Str("member", string(l.Member)).Str("reason", l.Reason).Stringer("phase", g.m.LegacyPhase()).Msg(l.Msg)
	}
	lx := fx.Legacy
	if lx.Accepted && g.answer != nil {
		g.accept(now, *g.answer)
	}
	if lx.Commit {
		g.commitFinals()
	}
	// A drop that made the engine begin an attempt in this Step came before it, as the member's
	// removal did before the engine: its ZooKeeper operations are not the attempt's.
	g.unmeasured = lx.Check != nil
	for _, d := range lx.Drops {
		g.drop(now, d)
	}
	g.unmeasured = false
	for _, r := range lx.Requests {
		g.send(ctx, r)
	}
	if lx.Blocked != nil {
		g.onBlocked(now, lx.Blocked.Tries)
	}
	if lx.Failed != nil {
		g.failed(ctx, lx.Failed)
	}
	if lx.Done != nil {
		g.done(now, lx.Done)
	}
	if lx.Cancel != 0 {
		g.cancelClaim(lx.Cancel)
	}
	switch {
	case lx.Check != nil:
		return g.check(now, lx.Check)
	case lx.Claim != nil:
		g.claimReq(lx.Claim.Claim)
	}
	return nil
}

// leaseWake is when the host must run for the legacy members without an event, besides the
// engine's timers: the end of the session's lease (fenceUnvouched, if no probe extends it by
// then); zero when there is no member.
func (g *legacyGroup) leaseWake() time.Time {
	if len(g.members) == 0 {
		return time.Time{}
	}
	return g.c.store.LeaseUntil()
}

// noteTrigger hands the engine a reason to check the group (seed 001 "rebalance (group)"
// triggers).
func (g *legacyGroup) noteTrigger(ctx context.Context, now time.Time, why string) {
	g.step(ctx, now, group.LegacyTrigger{Reason: why})
}

// send runs one request to a member on a goroutine of its own; the answer (or its absence)
// comes back to the actor as a legacyResultEv. A Stop means the member no longer runs its part;
// a Start carries the member's part of the last claim.
func (g *legacyGroup) send(ctx context.Context, r group.LegacyRequest) {
	m := g.members[string(r.Member)]
	if m == nil {
		return
	}
	var parts []legacy.PartitionOffset
	switch r.Kind {
	case group.LegacyStop:
		// Once a StopRequest is on its way the member is, or soon will be, stopped.
		m.started, m.running = false, nil
	case group.LegacyStart:
		parts = g.starts[m.id]
		m.pending = make([]legacy.TopicPartition, len(parts))
		for i, p := range parts {
			m.pending[i] = legacy.TopicPartition{Topic: p.Topic, Partition: p.Partition}
		}
	}
	// num_retries is the number of consecutive missed pings so far (docs §8 "Liveness").
	retries := int16(min(r.Retries, math.MaxInt16))
	id, sess, kind := m.id, m.sess, r.Kind
	m.inFlight++
	timeout := g.c.cfg.StartTimeout
	before, answered := m.answered, make(chan struct{})
	m.answered = answered
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer close(answered)
		rctx := ctx
		if kind != group.LegacyPing && timeout > 0 {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeoutCause(ctx, timeout, legacy.ErrTimeout)
			defer cancel()
		}
		res := legacyResultEv{member: id, sess: sess, kind: kind}
		var late *legacy.LateError
		switch kind {
		case group.LegacyPing, group.LegacyFinalPing:
			res.ping, res.err = sess.Ping(rctx, retries)
			res.late = errors.As(res.err, &late)
		case group.LegacyStop:
			var r legacy.StopResponse
			r, res.err = sess.Stop(rctx)
			res.code = r.ErrorCode
		case group.LegacyStart:
			var r legacy.StartResponse
			r, res.err = sess.Start(rctx, parts)
			res.code = r.ErrorCode
		}
		if !g.result(res, before) || late == nil {
			return
		}
		msg, err := late.Wait(ctx)
		res = legacyResultEv{member: id, sess: sess, kind: kind, lateAnswer: true, err: err}
		if err == nil {
			res.ping = *msg.(*legacy.PingResponse)
		}
		g.result(res, before)
	}()
}

// result hands a request's result to the actor once the result of the request sent before it
// is in (before), late answer included, as the member gave them; a timeout goes at once (the
// request before may wait for an answer that never comes, and the misses are what finds the
// member dead). It reports false when the group is stopping.
func (g *legacyGroup) result(res legacyResultEv, before chan struct{}) bool {
	if before != nil && !errors.Is(res.err, legacy.ErrTimeout) {
		select {
		case <-before:
		case <-g.quit:
			return false
		}
	}
	select {
	case g.inbox <- res:
		return true
	case <-g.quit:
		return false
	}
}

// check is seed steps 1-3, which the engine asks for at the start of each attempt: is a
// rebalance necessary? It is decided without reading when what the actor knows makes it
// necessary whatever ZooKeeper holds (certainNeed): the claim reads the group after the Stops
// anyway. Otherwise the group's claimer reads the current ownership (the offsets wait for the
// claim) and onCheck decides.
func (g *legacyGroup) check(now time.Time, c *group.LegacyCheck) group.Event {
	g.final = map[legacy.TopicPartition]int64{}
	if reason := g.certainNeed(); reason != "" {
		g.log.Info().Str("trigger", c.Trigger).Str("reason", reason).Int("members", len(g.members)).
			Int("attempt", c.Attempt).Msg("rebalancing: stopping every member (seed step 4.1)")
		return group.LegacyChecked{Needed: true, Reason: reason}
	}
	own := make(map[string]bool, len(g.members)+len(g.registering))
	for id := range g.members {
		own[id] = true
	}
	for id := range g.registering {
		own[id] = true // not a member yet, but its registration is ours, not another's
	}
	g.checking = c
	g.cl.legacyReq(legacyCheckReq{own: own}) // claimer_legacy.go
	return nil
}

// onCheck decides seed step 3 on the claimer's read of the group. Events may have come in
// while it read (the engine marks the attempt dirty for a change of the group); a member that
// registered meanwhile is ours, not another registration.
func (g *legacyGroup) onCheck(ctx context.Context, now time.Time, ev legacyCheckEv) {
	c := g.checking
	if c == nil {
		return
	}
	g.checking = nil
	g.countAttempt(ev.count)
	if ev.err != nil {
		g.step(ctx, now, group.LegacyChecked{Err: fmt.Errorf("reading the owners (seed step 3): %w", ev.err)})
		return
	}
	g.noteSkipped(ev.skipped)
	view := ev.view
	for id := range view.others {
		if g.ours(id) {
			delete(view.others, id)
		}
	}
	for id := range view.regs {
		if g.ours(id) {
			delete(view.regs, id)
		}
	}
	plan, err := legacyPlanRebalance(g.planInput(view, nil))
	if err != nil {
		g.step(ctx, now, group.LegacyChecked{Err: err})
		return
	}
	g.regs, g.lastOthers = view.regs, view.others
	if !plan.Needed() {
		g.step(ctx, now, group.LegacyChecked{Reason: plan.Why()})
		return
	}
	g.log.Info().Str("trigger", c.Trigger).Str("reason", plan.Why()).Int("members", len(g.members)).
		Int("others", len(view.regs)).Int("attempt", c.Attempt).Dur("reading", ev.took).Dur("queued", view.queued).
		Msg("rebalancing: stopping every member (seed step 4.1)")
	g.step(ctx, now, group.LegacyChecked{Needed: true, Reason: plan.Why()})
}
