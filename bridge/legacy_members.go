package bridge

// A legacy group's members: Register, removal, and the answers to the requests sent to them
// (Ping, Stop, Start), with the offsets their PingResponses report.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// onRegister admits a registered consumer (legacy.Coordinator.Register): its registration in
// ZooKeeper first, by the group's claimer, then the engine takes it in (onRegistered). A
// Register of a consumer id whose registration is being written waits for it: they are decided
// in the order they came.
func (g *legacyGroup) onRegister(ctx context.Context, now time.Time, ev legacyRegisterEv) {
	reg := ev.sess.Register()
	id := reg.ConsumerID
	if p := g.registering[id]; p != nil {
		p.queued = append(p.queued, ev)
		return
	}
	replaced := false
	if old := g.members[id]; old != nil {
		if old.sess.Err() == nil {
			ev.reply <- fmt.Errorf("bridge: legacy group %q: consumer %q is already registered from %s: %w",
				g.name, id, old.sess.RemoteAddr(), legacy.CodeConsumerIDInUse.Err())
			return
		}
		// The old connection is closed but its event is still queued behind this one: the
		// consumer reconnected. Let the old member go first; the engine replaces it.
		g.let(old, old.sess.Err())
		replaced = true
	}
	p := &legacyRegistering{ev: ev, reg: reg, replaced: replaced}
	if err := g.admit(ctx, now, p); err != nil {
		g.refuse(ctx, now, p, err)
	}
}

// legacyRegistering is a Register whose registration the claimer is writing: the event, its
// request, whether it replaces a member whose connection closed, and the Registers of the same
// consumer id that came meanwhile.
type legacyRegistering struct {
	ev       legacyRegisterEv
	reg      legacy.RegisterRequest
	replaced bool
	queued   []legacyRegisterEv
}

// admit watches what the consumer's group follows and hands its registration to the group's
// claimer; an error is the RegisterResponse's.
func (g *legacyGroup) admit(ctx context.Context, now time.Time, p *legacyRegistering) error {
	reg := p.reg
	id := reg.ConsumerID
	// Watched as the group's from now on (syncWatches), whatever comes meanwhile.
	g.registering[id] = p
	for _, s := range reg.Subscription {
		if err := g.watchTopic(ctx, s.Topic); err != nil {
			delete(g.registering, id)
			g.syncWatches()
			return fmt.Errorf("bridge: legacy group %q: watching topic %q: %w: %w",
				g.name, s.Topic, err, legacy.CodeCoordinatorNotAvailable.Err())
		}
	}
	// The other members of the group: their registrations count in our assignment.
	if err := g.watchIDs(ctx, now); err != nil {
		delete(g.registering, id)
		g.syncWatches()
		return fmt.Errorf("bridge: legacy group %q: watching %s: %w: %w",
			g.name, zkstate.IDsPath(g.name), err, legacy.CodeCoordinatorNotAvailable.Err())
	}
	sub := make(map[string]int, len(reg.Subscription))
	for _, s := range reg.Subscription {
		sub[s.Topic] = int(s.Threads)
	}
	// The 0.8 registration (exact format), so 0.8 tools and zk consumers of the group see the
	// member, and first its hosted-member znode, so that nobody reading the group takes the
	// registration for a zk member's (zkstate/hosted.go).
	data := zkstate.ConsumerRegistration{Version: 1, Subscription: sub, Pattern: zkstate.PatternStatic, TimestampMs: now.UnixMilli()}.Encode()
	g.cl.legacyReq(legacyRegisterReq{id: id, data: data, measure: g.measuring()}) // claimer_legacy.go
	return nil
}

// onDeregistered takes the claimer's answer to a member's removal (let).
func (g *legacyGroup) onDeregistered(r legacyDeregisteredEv) {
	g.countIf(r.measure, r.count)
	if g.leaving[r.id]--; g.leaving[r.id] <= 0 {
		delete(g.leaving, r.id)
	}
}

// onRegistered takes the claimer's answer to a registration: the member joins, or its Register
// is refused; then the Registers of the same consumer id that waited for it are decided.
func (g *legacyGroup) onRegistered(ctx context.Context, now time.Time, r legacyRegisteredEv) {
	p := g.registering[r.id]
	if p == nil {
		return
	}
	delete(g.registering, r.id)
	g.countIf(r.measure, r.count)
	if err := r.err; err != nil {
		code := legacy.CodeCoordinatorNotAvailable
		if errors.Is(err, zkstate.ErrNodeExists) {
			// Another ZooKeeper session holds /ids/<id> or the hosted znode: a 0.8 consumer
			// with that id, a member of another bridge, or our previous incarnation whose
			// session has not expired yet; or another coordinator of this bridge hosts a
			// member under that consumer id.
			code = legacy.CodeConsumerIDInUse
		}
		g.syncWatches()
		g.refuse(ctx, now, p, fmt.Errorf("bridge: legacy group %q: registering consumer %q in ZooKeeper: %w: %w", g.name, r.id, err, code.Err()))
	} else {
		g.join(ctx, now, p)
	}
	for _, q := range p.queued {
		g.onRegister(ctx, now, q)
	}
}

// refuse answers a Register with err; a member it was to replace has left.
func (g *legacyGroup) refuse(ctx context.Context, now time.Time, p *legacyRegistering, err error) {
	p.ev.reply <- err
	if p.replaced {
		g.step(ctx, now, group.LegacyLeave{Member: group.MemberID(p.reg.ConsumerID), Cause: err})
	}
}

// join takes a registered consumer in: a member of the group, followed until its connection
// closes, and (seed 001 "On Consumer Failover": a new member always triggers a rebalance) the
// engine's.
func (g *legacyGroup) join(ctx context.Context, now time.Time, p *legacyRegistering) {
	reg, sess, id := p.reg, p.ev.sess, p.reg.ConsumerID
	m := &legacyMember{id: id, sess: sess, reg: reg}
	g.members[id] = m
	// Seen as another member's registration until now (the children event of our own
	// create, or an earlier owner of the id): it is ours.
	delete(g.others, id)
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
	p.ev.reply <- nil
	g.log.Info().Str("consumer", id).Stringer("remote", sess.RemoteAddr()).Bool("auto_commit", reg.AutoCommit).
		Int("members", len(g.members)).Msg("legacy consumer registered")
	g.step(ctx, now, group.LegacyJoin{Member: group.MemberID(id), PingInterval: sess.PingInterval(),
		MaxPingRetries: int(reg.MaxPingRetries), AutoCommit: reg.AutoCommit, Replaced: p.replaced})
}

// drop carries out the engine's LegacyDrop: a dead member (max_ping_retries missed in a row,
// docs §8 "Liveness"), one that broke the protocol or answered with an error code, one whose
// connection closed. The engine has triggered the rebalance (seed 001 "On Consumer Failover").
func (g *legacyGroup) drop(now time.Time, d group.LegacyDrop) {
	m := g.members[string(d.Member)]
	if m == nil {
		return // let go already (onRegister)
	}
	cause := d.Cause
	if d.Dead {
		cause = fmt.Errorf("consumer %q: %w (%d in a row, ping interval %v)", m.id, legacy.ErrDead, d.Missed, d.Interval)
	}
	g.let(m, cause)
}

// let lets a member go: its connection is closed, its /ids znode and hosted-member znode
// deleted by the group's claimer, which answers with a legacyDeregisteredEv (countIf). Anything
// asked of the claimer after this is served after the deletes.
func (g *legacyGroup) let(m *legacyMember, cause error) {
	m.sess.Close(cause)
	delete(g.members, m.id)
	g.c.members.Add(-1)
	g.c.metrics.members.Dec()
	g.cl.legacyReq(legacyDeregisterReq{id: m.id, measure: g.measuring()}) // claimer_legacy.go
	g.leaving[m.id]++
	g.syncWatches()
	g.log.Info().Str("consumer", m.id).AnErr("cause", cause).Int("members", len(g.members)).Msg("legacy consumer removed")
}

// onResult hands the outcome of one request to the engine, which keeps the liveness and the
// rebalance's books (docs §8 "Liveness"), and says whether its content counts (accept).
func (g *legacyGroup) onResult(ctx context.Context, now time.Time, r legacyResultEv) {
	m := g.members[r.member]
	if m == nil || m.sess != r.sess {
		return // a member removed meanwhile
	}
	ans := group.LegacyAnswer{Member: group.MemberID(r.member), Kind: r.kind, Err: r.err, Late: r.lateAnswer}
	switch {
	case r.lateAnswer && r.err != nil:
		ans.Outcome = group.LegacyFailed // no answer came: the engine forgets the ping
	case r.err == nil && r.code != legacy.CodeNone:
		ans.Outcome, ans.Err = group.LegacyRefused, r.code.Err()
	case r.err == nil:
		ans.Outcome = group.LegacyAnswered
	case errors.Is(r.err, legacy.ErrTimeout) && ctx.Err() == nil:
		ans.Outcome = group.LegacyTimedOut
	default:
		ans.Outcome = group.LegacyFailed
	}
	ans.Late = ans.Late || r.late && ans.Outcome == group.LegacyTimedOut
	g.answer = &r
	defer func() { g.answer = nil }()
	if !r.late { // a late answer is still to come
		m.inFlight--
	}
	g.step(ctx, now, ans)
	g.leaveIfDone(ctx, now, m)
}

// leaveIfDone makes a member whose connection closed leave the group, once the results of its
// requests in flight are in (legacyClosedEv).
func (g *legacyGroup) leaveIfDone(ctx context.Context, now time.Time, m *legacyMember) {
	if m.hungUp && m.inFlight == 0 && g.members[m.id] == m {
		g.step(ctx, now, group.LegacyLeave{Member: group.MemberID(m.id), Cause: m.sess.Err()})
	}
}

// accept applies the content of an answer the engine took: a ping's offsets are committed, a
// final ping's are kept for the claim, a Start's part is what the member runs.
func (g *legacyGroup) accept(now time.Time, r legacyResultEv) {
	m := g.members[r.member]
	if m == nil {
		return
	}
	switch {
	case r.kind == group.LegacyPing, r.lateAnswer:
		// A late final ping's offsets too: its attempt failed on the timeout, no claim took
		// them.
		g.commitPing(now, m, r.ping)
	case r.kind == group.LegacyFinalPing:
		check := legacyCheckPing(m.id, m.reg.AutoCommit, g.owner, g.committed, r.ping)
		g.countRefused(now, m, check)
		for tp, off := range check.Accepted {
			g.final[tp] = off
		}
	case r.kind == group.LegacyStart:
		m.started, m.running, m.pending = true, m.pending, nil
	}
}

// commitPing hands the offsets of a regular PingResponse to the group's claimer, which writes
// them in one Multi (seed 001's auto_commit: the offsets ride on the ping; legacyCheckPing
// validated them); onCommit takes its answer. An offset already committed, or on its way, is
// not sent again.
func (g *legacyGroup) commitPing(now time.Time, m *legacyMember, resp legacy.PingResponse) {
	known := g.committed
	if len(g.committing) > 0 {
		known = maps.Clone(g.committed)
		maps.Copy(known, g.committing)
	}
	check := legacyCheckPing(m.id, m.reg.AutoCommit, g.owner, known, resp)
	g.countRefused(now, m, check)
	g.commitOffsets(m.id, check.Accepted, false)
}

// commitOffsets hands offsets the actor validated to the group's claimer, one Multi; finals:
// the final offsets of an attempt (commitFinals).
func (g *legacyGroup) commitOffsets(member string, offsets map[legacy.TopicPartition]int64, finals bool) {
	if len(offsets) == 0 {
		return
	}
	exists := make(map[legacy.TopicPartition]bool, len(offsets))
	if g.committing == nil {
		g.committing = map[legacy.TopicPartition]int64{}
	}
	for tp, off := range offsets {
		exists[tp] = g.offsetNodes[tp]
		g.committing[tp] = off
	}
	g.cl.legacyReq(legacyCommitReq{member: member, offsets: offsets, exists: exists, finals: finals}) // claimer_legacy.go
}

// commitFinals commits the final offsets of an attempt that ended before its claim was written
// (group.LegacyEffects.Commit: restarted or failed, its claim asked for or not): no claim wrote
// them, and the next check starts over without them. The members are stopped, so they are their
// last offsets (a member that leaves before the next attempt's final Ping takes nothing with
// it); they were validated when accepted (legacyCheckPing). The claim, if asked for, may have
// written them in a Release Multi that also let go of owner znodes, after which a partition's
// new owner may commit: those are skipped, here when its report came in (released), and by the
// claimer for a Multi whose report had not (legacyPart.finals). Their commit goes to the claimer
// ahead of any later claim, whose final offsets are collected later.
func (g *legacyGroup) commitFinals() {
	known := maps.Clone(g.committed)
	maps.Copy(known, g.committing)
	offsets := map[legacy.TopicPartition]int64{}
	for tp, off := range g.final {
		if old, ok := known[tp]; !ok || old != off { // one already committed, or on its way, is not sent again
			offsets[tp] = off
		}
	}
	g.final = map[legacy.TopicPartition]int64{}
	g.commitOffsets("(final offsets)", offsets, true)
}

// onCommit takes the claimer's answer to a commitPing.
func (g *legacyGroup) onCommit(ev legacyCommitEv) {
	g.countAttempt(ev.count)
	for tp, ok := range ev.nodes {
		g.offsetNodes[tp] = ok
	}
	for tp, off := range ev.offsets {
		if g.committing[tp] == off {
			delete(g.committing, tp)
		}
	}
	if ev.err != nil {
		g.log.Warn().Err(ev.err).Str("consumer", ev.member).Int("offsets", len(ev.offsets)).Msg("committing ping offsets failed")
		return
	}
	for tp, off := range ev.offsets {
		g.committed[tp] = off
		g.offsetNodes[tp] = true
	}
	g.c.addCommitted(len(ev.offsets))
}

func (g *legacyGroup) countRefused(now time.Time, m *legacyMember, check legacyPingCheck) {
	if len(check.Refused) == 0 {
		return
	}
	g.c.refused.Add(uint64(len(check.Refused)))
	g.c.metrics.offsets.WithLabelValues("refused").Add(float64(len(check.Refused)))
	// A confused consumer refuses the same offsets at every ping: log once a second at most.
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
