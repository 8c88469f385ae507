package bridge

// Step 4 of a legacy rebalance (seed 001 "rebalance (group)"): the claim between the Stops and
// the Starts, its waits for foreign owners, and the end of an attempt (complete, fail).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// claimReq hands the claim numbered n to the group's claimer: step 4 between the Stops and the
// Starts, which the engine asks for once every member is stopped. The claimer reads the owners
// and offsets again, waits while another session holds an owner znode to claim, then writes
// everything in one Multi (claimer_legacy.go); its events come back to onClaim.
func (g *legacyGroup) claimReq(n uint64) {
	in := g.planInput(legacyGroupView{}, g.final)
	in.Session, in.Others, in.Owners, in.Committed, in.OffsetNodes = 0, nil, nil, nil, nil
	g.claim = n
	g.cl.legacyReq(legacyClaimReq{attempt: int(n), in: in})
}

// cancelClaim tells the claimer that the claim numbered n is over: its attempt starts again
// at the check.
func (g *legacyGroup) cancelClaim(n uint64) {
	if g.claim == n {
		g.cl.legacyReq(legacyCancelReq{attempt: int(n)})
		g.claim = 0
	}
}

// onClaim takes an event of the claim (legacyClaimEv). What it says of ZooKeeper is taken in
// whatever the attempt (an attempt restarted meanwhile replans from it); the engine moves on
// only for the claim it asked for.
func (g *legacyGroup) onClaim(ctx context.Context, now time.Time, ev legacyClaimEv) {
	current := g.claim != 0 && uint64(ev.attempt) == g.claim
	g.countAttempt(ev.count)
	if ev.regs != nil {
		g.regs = ev.regs
	}
	if ev.others != nil {
		g.lastOthers = ev.others
	}
	if ev.skipped != nil {
		g.noteSkipped(ev.skipped)
	}
	res := group.LegacyClaimed{Claim: uint64(ev.attempt)}
	switch ev.state {
	case legacyClaimFailed:
		if ev.writtenSession < 0 {
			g.writtenSession = 0
		}
		res.Outcome, res.Err = group.LegacyClaimFailed, ev.err
		if current {
			g.claim = 0
		}
	case legacyClaimWaiting:
		if current && ev.released {
			g.released(ev.plan, ev.finals)
		}
		g.blocked = ev
		res.Outcome = group.LegacyClaimBlocked
	case legacyClaimWritten:
		g.writtenSession = ev.writtenSession
		g.c.addCommitted(ev.finals)
		g.assignment, g.owner, g.committed, g.offsetNodes = ev.plan.Assignment, ev.plan.Owner, ev.plan.Offsets, ev.nodes
		res.Outcome = group.LegacyClaimWritten
		if current {
			g.claim, g.starts, g.foreignLogged = 0, ev.plan.Starts, false
			g.log.Debug().Int("ops", len(ev.plan.Ops)).Int("partitions", len(ev.plan.Assignment)).
				Dur("reading", ev.reading).Dur("queued", ev.queued).Dur("writing", ev.writing).
				Msg("ownership written; starting every member (seed step 4.2)")
		}
	}
	g.step(ctx, now, res)
}

// onBlocked logs a blocked round of the claim, the tries-th in a row: another member (a zk
// member that has not noticed the change yet, a member of another coordinator, a previous
// coordinator whose session has not expired) still owns partitions we must claim. Our members
// stay stopped, and keep being pinged, meanwhile; the claimer retries on its own.
func (g *legacyGroup) onBlocked(now time.Time, tries int) {
	g.c.claimWaits.Add(1)
	if tries == 1 {
		g.claimWaitSince = now
	}
	// Waiting is routine in a group with other members (they release at their own pace):
	// a warning only when it lasts.
	e := g.log.Debug()
	switch {
	case tries == 1:
		e = g.log.Info()
	case !g.foreignLogged && now.Sub(g.claimWaitSince) >= legacyClaimWarnAfter:
		e = g.log.Warn().Dur("waiting", now.Sub(g.claimWaitSince))
		g.foreignLogged = true
	}
	ev := g.blocked
	if ev.holder.Session >= 0 {
		e = e.Str("session", fmt.Sprintf("0x%x", ev.holder.Session))
	}
	e.Int("partitions", len(ev.plan.Foreign)).Stringer("first", ev.first).Str("held_by", ev.holder.Thread).
		Int("round", ev.tries).Msg("owner znodes held by another member; waiting to claim")
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

// refreshWaited reads again what a claim waited for — the owner znode and the offset of every
// foreign partition — and the owner znodes it is about to delete for a move between our
// threads, in one multiRead request, into the view kept by the wait.
func (rd legacyReader) refreshWaited(ctx context.Context, w *legacyWaited) (legacyGroupView, error) {
	ctx, cancel := context.WithTimeout(ctx, rd.c.cfg.ZKTimeout)
	defer cancel()
	store, v := rd.c.store, w.view
	if err := legacySameSession(store, v.session, "while waiting to claim"); err != nil {
		return v, err
	}
	paths := make([]string, 0, 2*len(w.foreign)+len(w.moving))
	for _, tp := range w.foreign {
		paths = append(paths, zkstate.OwnerPath(rd.name, tp.Topic, tp.Partition), zkstate.OffsetPath(rd.name, tp.Topic, tp.Partition))
	}
	for _, tp := range w.moving {
		paths = append(paths, zkstate.OwnerPath(rd.name, tp.Topic, tp.Partition))
	}
	reads, err := store.GetBatch(ctx, paths)
	rd.countReads(len(paths), 1)
	if err != nil {
		return v, err
	}
	for i, tp := range w.foreign {
		if err := rd.refreshOwner(&v, w.own, tp, reads[2*i]); err != nil {
			return v, err
		}
		if err := rd.refreshOffset(&v, tp, reads[2*i+1]); err != nil {
			return v, err
		}
	}
	for i, tp := range w.moving {
		if err := rd.refreshOwner(&v, w.own, tp, reads[2*len(w.foreign)+i]); err != nil {
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
// The registrations are those read before the wait: a znode of our session that holds neither
// the thread it held then nor one of our members' (own) is not ours either. Only the bridge's
// other kind creates such a znode meanwhile, for a member that registered after our read (the
// claimer runs its claim between our rounds); deleting it would take the partition from that
// member, whose claim holds it without reading it again. The new registration restarts our
// attempt; until then the partition is waited for.
func (rd legacyReader) refreshOwner(v *legacyGroupView, own map[string]bool, tp legacy.TopicPartition, owner zkstate.Read) error {
	switch {
	case errors.Is(owner.Err, zkstate.ErrNoNode):
		delete(v.owners, tp)
	case owner.Err != nil:
		return owner.Err
	default:
		thread := string(owner.Data)
		o := legacyOwner{Thread: thread, Version: owner.Stat.Version, Session: owner.Stat.EphemeralOwner}
		cid := legacy.ConsumerOf(thread)
		_, other := v.others[cid]
		before, had := v.owners[tp]
		unknown := o.Session == v.session && !own[cid] && (!had || before.Thread != thread || before.Session != v.session)
		if other || unknown {
			o = legacyOwner{Thread: thread, Version: -1, Session: -1} // as readGroup: not ours
		}
		v.owners[tp] = o
	}
	return nil
}

// refreshOffset puts an offset znode read again into the view.
func (rd legacyReader) refreshOffset(v *legacyGroupView, tp legacy.TopicPartition, offset zkstate.Read) error {
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
			rd.warnBadOffset(tp, err)
			return nil
		}
		v.committed[tp] = off
	}
	return nil
}

// released records a claim's Release Multi: the final offsets are committed, and the partitions
// whose owner znodes it deleted are no longer ours — their offsets are not taken from pings
// any more (legacyCheckPing), since their next owner may be consuming them already.
func (g *legacyGroup) released(plan legacyPlan, finals int) {
	for tp, off := range g.final {
		g.committed[tp], g.offsetNodes[tp] = off, true
	}
	g.c.addCommitted(finals)
	for tp := range g.owner {
		if _, ok := plan.Assignment[tp]; !ok {
			delete(g.owner, tp)
			delete(g.assignment, tp)
		}
	}
	g.log.Debug().Int("ops", len(plan.Release)).Msg("released the owner znodes no longer ours before waiting to claim")
}

// done ends the measurement of a rebalance the engine finished: completed (every StartResponse
// in, seed step 4.3) or found unnecessary (step 3.5).
func (g *legacyGroup) done(now time.Time, d *group.LegacyRebalance) {
	defer func() { g.reads, g.readRequests, g.writes, g.multis = 0, 0, 0, 0 }()
	if d.Unnecessary {
		g.log.Debug().Msg("rebalance not necessary (seed step 3.5)")
		g.c.skipped.Add(1)
		g.c.metrics.rebalances.WithLabelValues("unnecessary").Inc()
		return
	}
	st := LegacyRebalanceStats{
		Group:          g.name,
		Duration:       d.Duration,
		Attempts:       d.Attempts,
		Members:        d.Members,
		Partitions:     len(g.assignment),
		ZKReads:        g.reads,
		ZKReadRequests: g.readRequests,
		ZKWrites:       g.writes,
		ZKMultis:       g.multis,
		Checking:       d.Checking,
		Stopping:       d.Stopping,
		Claiming:       d.Claiming,
		Starting:       d.Starting,
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
}

// failed reports seed step 5: the attempt failed, and the engine retries it after a backoff.
func (g *legacyGroup) failed(ctx context.Context, f *group.LegacyFailure) {
	g.c.failures.Add(1)
	g.c.metrics.rebalances.WithLabelValues("failed").Inc()
	l := g.log.Warn()
	if ctx.Err() != nil {
		l = g.log.Debug() // shutting down: the ZooKeeper calls were cut short on purpose
	}
	l.Err(f.Err).Int("attempt", f.Attempt).Dur("retry_in", f.RetryIn).Msg("rebalance attempt failed (seed step 5)")
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

// legacyStillOurs finds out, after a claim's Multi that may have been applied in part or not at
// all (noteClaimFinals), which partitions of the final offsets it carried our members still
// hold: those whose owner znode is an ephemeral of the session the claim read the group in, for
// the thread it had then or the one the plan gave it. Their final offsets may be written again without moving anything backwards — nobody
// else commits a partition whose owner znode is ours (0.8 consumers commit only what they own,
// and we stopped our members), and if the Multi was applied they are the offsets it wrote — and
// they must be, when it was not: the member's last position would be lost. The others' owner
// znodes are gone or someone else's: the Multi may have let go of them (its deletes are checked
// against the version read, and only our claimer creates an ephemeral of our session, so an
// owner znode of ours at the version read means its delete was not applied), and their next
// owner may have committed since. This holds however the Multi was split into requests.
//
// The reads must come after the Multi's request, if it ever reaches ZooKeeper: a Multi of our
// session first (a check of the group's znode, which writes nothing) goes through the leader
// behind it, or after it was refused (a request that reaches the leader from a server we left
// once reconnected elsewhere is refused, ZooKeeper's SessionMovedException), and the reads, on
// the session's own connection, are answered by a server that has applied everything up to that
// check. Still queued in the client, our Multi goes out before the check; flushed by a lost
// connection, never. When that cannot be done (the session changed, ZooKeeper unreachable for
// ZKTimeout), nothing is known: nil, every final offset counts as written — one lost rather
// than one moved backwards.
func (cl *claimer) legacyStillOurs(ctx context.Context, in legacyPlanInput, plan legacyPlan, n *legacyZKCount) map[legacy.TopicPartition]bool {
	lp := &cl.legacy
	if len(in.Final) == 0 {
		return nil
	}
	tps := legacySortedTPs(in.Final)
	var (
		reads []zkstate.Read
		err   error
	)
	if sid := cl.store.SessionID(); in.Session == 0 || sid != in.Session {
		err = fmt.Errorf("the session changed (0x%x, the claim read the group in 0x%x): its owner znodes are gone", sid, in.Session)
	} else {
		rctx, cancel := context.WithTimeout(ctx, lp.c.cfg.ZKTimeout)
		reads, err = cl.legacyReadAfterWrites(rctx, tps, n)
		cancel()
	}
	if err != nil {
		l := lp.log.Warn()
		if ctx.Err() != nil {
			l = lp.log.Debug() // shutting down
		}
		l.Err(err).Int("offsets", len(tps)).
			Msg("could not tell whether a claim's Multi was applied; its final offsets count as written, and are not committed again")
		return nil
	}
	ours := map[legacy.TopicPartition]bool{}
	for i, tp := range tps {
		r := reads[i]
		if r.Err != nil || r.Stat.EphemeralOwner != in.Session {
			continue
		}
		thread := string(r.Data)
		old, had := in.Owners[tp]
		next, kept := plan.Assignment[tp]
		if (had && in.ours(old) && old.Thread == thread && old.Version == r.Stat.Version) || (kept && next == thread) {
			ours[tp] = true
		}
	}
	lp.log.Info().Int("offsets", len(tps)).Int("still_ours", len(ours)).
		Msg("a claim's Multi failed, maybe applied; the final offsets of partitions still ours will be committed again")
	return ours
}

// legacyReadAfterWrites reads the owner znodes of tps after every write our session sent before
// (legacyStillOurs): a Multi of one check of the group's znode, then a Get each on the session's
// own connection, side by side. A lost connection is waited out, until ctx is done.
func (cl *claimer) legacyReadAfterWrites(ctx context.Context, tps []legacy.TopicPartition, n *legacyZKCount) ([]zkstate.Read, error) {
	for {
		cl.legacyWrites(n, 0, 1)
		err := cl.store.Multi(ctx, zkstate.CheckOp(zkstate.GroupPath(cl.group), -1))
		if err == nil || errors.Is(err, zkstate.ErrNoNode) {
			break // failed or not, it went through the leader behind our writes
		}
		if !errors.Is(err, zkstate.ErrConnLoss) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (the connection was lost)", ctx.Err())
		case <-time.After(legacyReconnectPause):
		}
	}
	reads := make([]zkstate.Read, len(tps))
	var wg sync.WaitGroup
	for i, tp := range tps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reads[i].Data, reads[i].Stat, reads[i].Err = cl.store.Get(ctx, zkstate.OwnerPath(cl.group, tp.Topic, tp.Partition))
		}()
	}
	wg.Wait()
	cl.legacy.c.addReads(len(tps), len(tps))
	n.reads, n.readRequests = n.reads+len(tps), n.readRequests+len(tps)
	for _, r := range reads {
		if r.Err != nil && !errors.Is(r.Err, zkstate.ErrNoNode) {
			return nil, r.Err
		}
	}
	return reads, nil
}

// legacyReconnectPause is the pause between two tries of legacyReadAfterWrites's check while the
// connection is lost: go-zookeeper fails the requests queued while it finds no server.
const legacyReconnectPause = 50 * time.Millisecond

// unwrittenFinals is in.Final less the final offsets an earlier Multi of the claim wrote, or may
// have written (legacyPart.finals), of partitions our members no longer hold as read: a round
// that read the whole group again (the claim tried again at once after its Multi failed) would
// otherwise write them over what the partition's next owner committed since the Multi let go
// of it. Those of partitions still ours are kept: nobody else commits them, and the members
// start from them.
func (lp *legacyPart) unwrittenFinals(in legacyPlanInput) map[legacy.TopicPartition]int64 {
	if len(lp.finals) == 0 {
		return in.Final
	}
	out := make(map[legacy.TopicPartition]int64, len(in.Final))
	for tp, off := range in.Final {
		o, owned := in.Owners[tp]
		if w, ok := lp.finals[tp]; ok && w == off && !(owned && in.ours(o)) {
			continue
		}
		out[tp] = off
	}
	return out
}
