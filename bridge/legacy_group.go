package bridge

// A legacy group's actor: its events, its state, its loop, liveness (docs/legacy-protocol.md §8
// "Liveness") and the phases of a rebalance up to the claim (legacy_coordinator.go describes
// the whole).

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
	// legacyIDsEv: a view of the group's registrations, from the claimer's watch of
	// /consumers/<g>/ids and the other registrations' data (claimer_watch.go).
	legacyIDsEv struct {
		sub  *idsSub
		view idsView
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
	legacyClaiming                      // the claimer has the claim (claimer_legacy.go)
	legacyClaimWait                     // an owner znode to claim is another session's; the claimer retries
	legacyStarting                      // StartRequests sent; waiting for every StartResponse
	legacyBackoff                       // the attempt failed (step 5); retry at retryAt
)

func (p legacyPhase) String() string {
	return [...]string{"idle", "stopping", "collecting", "claiming", "claim-wait", "starting", "backoff"}[p]
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

// legacyAttempt is one rebalance attempt in progress.
type legacyAttempt struct {
	// when each phase began: begin, Stops sent, claim started, Starts sent
	began, stopping, claiming, starting time.Time

	why     string
	waiting map[string]bool // members whose answer the current phase waits for
	failed  error           // the first member that did not answer in time (step 5)
	dirty   bool            // membership or partitions changed since the attempt began
	final   map[legacy.TopicPartition]int64
	// claim numbers the claim handed to the claimer (legacyClaimReq); 0 while none is.
	claim int
}

// legacyWaited is a claim waiting for other members to release partitions (legacyClaimWait):
// what its last round read, as its Release left it.
type legacyWaited struct {
	view    legacyGroupView
	foreign []legacy.TopicPartition
	// moving are our owner znodes that the claim deletes and creates again for another of our
	// threads: read again too, since someone may have deleted one and created it again in the
	// meantime, at the version we read (the ABA of a delete by version).
	moving []legacy.TopicPartition
}

// legacyGroup is the actor of one group. Every field below quit is owned by run's goroutine.
type legacyGroup struct {
	c        *LegacyCoordinator
	name     string
	log      zerolog.Logger
	lifetime context.Context // the coordinator's, see LegacyCoordinator.lifetime
	inbox    chan any
	// cl is the group's claimer, shared with the group's Kafka members: it writes every
	// ephemeral of ours under /consumers/<g> (claimer_legacy.go).
	cl     *claimer
	claims int            // numbers the claims handed to cl
	quit   chan struct{}  // closed when the actor stops: senders give up
	exited chan struct{}  // closed when run has returned
	wg     sync.WaitGroup // request goroutines and watch forwarders

	members map[string]*legacyMember
	topics  map[string]*legacyTopic
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
	retryAt    time.Time // backoff
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
	case legacyClaimEv:
		g.onClaim(now, ev)
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
			if g.att.dirty {
				// The claimer retries on its own; a changed group restarts from step 1.
				g.begin(now)
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
	case legacyBackoff:
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
	g.cancelClaim()
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
