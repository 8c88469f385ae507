package bridge

// Step 4 of a legacy rebalance (seed 001 "rebalance (group)"): the claim between the Stops and
// the Starts, its waits for foreign owners, and the end of an attempt (complete, fail).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

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
		g.waitForeign(now, plan, view)
		return
	}
	g.writeClaim(now, plan, view, refreshed, reading)
}

// waitForeign is a claim that must wait: another member (a zk member that has not noticed the
// change yet, a member of another coordinator, a previous coordinator whose session has not
// expired) still owns partitions we must claim. 0.8 consumers retry their claims the same way;
// ours stay stopped, and keep being pinged, meanwhile. What is no longer ours is let go first:
// whoever we wait for may be waiting for it.
func (g *legacyGroup) waitForeign(now time.Time, plan legacyPlan, view legacyGroupView) {
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
}

// writeClaim is the claim's one Multi (final offsets, released owners deleted, new owners
// created), then the StartRequests (seed step 4.2). refreshed says the view was read in part
// after a wait; reading is how long the read took, for the log.
func (g *legacyGroup) writeClaim(now time.Time, plan legacyPlan, view legacyGroupView, refreshed bool, reading time.Duration) {
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
	return &legacyWaited{view: view, foreign: plan.Foreign, moving: plan.Moving}
}

// refreshWaited reads again what a claim waited for — the owner znode and the offset of every
// foreign partition — and the owner znodes it is about to delete for a move between our
// threads, in one batch, into the view kept by the wait.
func (g *legacyGroup) refreshWaited(w *legacyWaited) (legacyGroupView, error) {
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	store, v := g.c.store, w.view
	if err := legacySameSession(store, v.session, "while waiting to claim"); err != nil {
		return v, err
	}
	paths := make([]string, 0, 2*len(w.foreign)+len(w.moving))
	for _, tp := range w.foreign {
		paths = append(paths, zkstate.OwnerPath(g.name, tp.Topic, tp.Partition), zkstate.OffsetPath(g.name, tp.Topic, tp.Partition))
	}
	for _, tp := range w.moving {
		paths = append(paths, zkstate.OwnerPath(g.name, tp.Topic, tp.Partition))
	}
	reads, err := store.GetMany(ctx, paths)
	g.countReads(len(paths), 1)
	if err != nil {
		return v, err
	}
	for i, tp := range w.foreign {
		if err := g.refreshOwner(&v, tp, reads[2*i]); err != nil {
			return v, err
		}
		if err := g.refreshOffset(&v, tp, reads[2*i+1]); err != nil {
			return v, err
		}
	}
	for i, tp := range w.moving {
		if err := g.refreshOwner(&v, tp, reads[2*len(w.foreign)+i]); err != nil {
			return v, err
		}
	}
	if err := legacySameSession(store, v.session, "while reading the group"); err != nil {
		return v, err
	}
	v.queued = 0
	return v, nil
}

// refreshOwner puts an owner znode read again into the view: gone, or as read, with its
// session and version (not ours when it holds another registration's thread, as readGroup).
func (g *legacyGroup) refreshOwner(v *legacyGroupView, tp legacy.TopicPartition, owner zkstate.Read) error {
	switch {
	case errors.Is(owner.Err, zkstate.ErrNoNode):
		delete(v.owners, tp)
	case owner.Err != nil:
		return owner.Err
	default:
		thread := string(owner.Data)
		o := legacyOwner{Thread: thread, Version: owner.Stat.Version, Session: owner.Stat.EphemeralOwner}
		if _, other := v.others[legacy.ConsumerOf(thread)]; other {
			o = legacyOwner{Thread: thread, Version: -1, Session: -1} // as readGroup: not ours
		}
		v.owners[tp] = o
	}
	return nil
}

// refreshOffset puts an offset znode read again into the view.
func (g *legacyGroup) refreshOffset(v *legacyGroupView, tp legacy.TopicPartition, offset zkstate.Read) error {
	switch {
	case errors.Is(offset.Err, zkstate.ErrNoNode):
		delete(v.committed, tp)
		delete(v.nodes, tp)
	case offset.Err != nil:
		return offset.Err
	default:
		v.nodes[tp] = true
		off, err := zkstate.ParseOffset(offset.Data)
		if err != nil {
			delete(v.committed, tp)
			g.warnBadOffset(tp, err)
			return nil
		}
		v.committed[tp] = off
	}
	return nil
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
