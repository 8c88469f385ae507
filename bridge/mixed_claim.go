package bridge

// The claim of one generation of a mixed group's Kafka members, run on the claimer's goroutine:
// steps 1 to 6 of mixed.go's comment, with what they write in /consumers/<g>.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Waits of a claim for owner znodes someone else holds.
const (
	claimBackoff    = 50 * time.Millisecond
	claimBackoffMax = time.Second
	claimWarnAfter  = 10 * time.Second
)

// claim is one generation's server-side assignment, run by the claimer.
type claim struct {
	done    <-chan struct{} // closed when the generation is over
	gen     group.Generation
	in      mixedInput // without Snap, Ours and Held, which the claimer fills in
	ids     map[string][]byte
	results chan<- claimResult
}

type claimResult struct {
	gen         group.Generation
	assignments map[group.MemberID][]byte
	parts       map[group.MemberID]map[string][]int32
	fingerprint string
	took        time.Duration
	rounds      int
	// The steps of the last round, for the log: what a claim spends its time on.
	regs, read, release, write time.Duration
	// queued is the part of read spent waiting for one of the Store's multiRead connections.
	queued time.Duration
	// withheld are the owner znodes kept for cooperative members that still consume partitions
	// moving away from them (planMixed's Withheld), path → thread: the generation's mirror must
	// keep them too.
	withheld map[string][]byte
}

// claimRun is one claim in progress on the claimer (see mixed.go's comment): a round now, then
// after each blocked round a wait of the claimer's one backoff policy, which ends early when
// the owner znode waited for goes away or the group's legacy members let go of some.
type claimRun struct {
	claimWait
	c     *claim
	start time.Time
	round int
	log   zerolog.Logger
}

func (cl *claimer) newClaimRun(c *claim) *claimRun {
	return &claimRun{claimWait: claimWait{backoff: cl.backoff}, c: c, start: time.Now(),
		log: cl.log.With().Int32("generation", int32(c.gen)).Logger()}
}

// waitOf is the run's wait; nil for no run.
func (r *claimRun) waitOf() *claimWait {
	if r == nil {
		return nil
	}
	return &r.claimWait
}

// kafkaRound runs one round of the Kafka members' claim, and hands the result to the actor
// when it is done.
func (cl *claimer) kafkaRound(ctx context.Context, r *claimRun) {
	rctx, cancel := untilClosed(ctx, r.c.done)
	defer cancel()
	r.round++
	res, next := cl.round(rctx, r)
	switch {
	case rctx.Err() != nil:
		cl.kafka.run = nil
	case res != nil:
		cl.kafka.run = nil
		select {
		case r.c.results <- *res:
		case <-rctx.Done():
		}
	case next.now:
		r.due = time.Time{}
	default:
		cl.blocked(ctx, &r.claimWait, next.owner)
	}
}

// claimNext says what a round that did not finish the claim asks for: another round at once
// (now), or after a wait, which ends early when owner, if set, goes away.
type claimNext struct {
	now   bool
	owner string
}

// round is one round of a claim: registrations, read, plan, release, and the claim of the owner
// znodes once nothing foreign is left. It returns the result when the claim is done.
func (cl *claimer) round(ctx context.Context, r *claimRun) (*claimResult, claimNext) {
	log, held := r.log, &cl.kafka.held
	// Members that left give up their partitions before their registrations go: an owner
	// znode whose consumer is not registered would look like nobody's.
	t0 := time.Now()
	cl.sweepUnsure(ctx, held.ids, held.owners, r.c.ids)
	cl.releaseDeparted(ctx, held, r.c.ids)
	if !cl.claimRegistrations(ctx, held, r.c.ids) {
		return nil, claimNext{}
	}
	t1 := time.Now()
	// The first round claims without reading the owners: the Multi's creates fail if
	// someone holds one of them, and then the next round reads them and waits. In a
	// rebalance that gives the Kafka members nothing another kind still holds (they only
	// lose partitions, or gain free ones), that saves reading every owner znode, and the
	// release of what moves away from them comes that much sooner. It lists their names
	// (in the waves it reads anyway, no request more), which is enough to see a held one gone.
	optimistic := r.round == 1
	parts := zkstate.WithOwners // offsets: see mixed.go
	if optimistic {
		parts = zkstate.WithOwnerNames
	}
	snap, err := cl.store.SnapshotOf(ctx, cl.group, parts)
	if err != nil {
		log.Warn().Err(err).Msg("mixed group: reading the group failed; retrying")
		return nil, claimNext{}
	}
	cl.forgetGoneOwners(held, snap, !optimistic)
	in := r.c.in
	in.Snap, in.Ours, in.Held, in.Session = snap, cl.oursNow(), ownersHeld(held), cl.store.SessionID()
	plan, err := planMixed(in)
	if err != nil {
		log.Error().Err(err).Msg("mixed group: cannot assign; retrying")
		return nil, claimNext{}
	}
	t2 := time.Now()
	cl.releaseOwners(ctx, held, plan.Release)
	t3 := time.Now()
	if len(plan.Foreign) > 0 {
		e := log.Debug()
		if time.Since(r.start) > claimWarnAfter {
			e = log.Warn()
		}
		e.Int("partitions", len(plan.Foreign)).Str("first", plan.Foreign[0]).
			Msg("mixed group: waiting for other members to release partitions of Kafka members")
		return nil, claimNext{owner: plan.Foreign[0]}
	}
	if err := cl.claimOwners(ctx, held, plan.Claim); err != nil {
		if optimistic && errors.Is(err, zkstate.ErrNodeExists) {
			log.Debug().Msg("mixed group: an owner znode to claim is taken; reading the owners")
			return nil, claimNext{now: true}
		}
		e := log.Warn()
		if errors.Is(err, zkstate.ErrNodeExists) || ctx.Err() != nil {
			e = log.Debug() // taken between our read and our write: read again
		}
		e.Err(err).Msg("mixed group: claiming owner znodes failed; retrying")
		return nil, claimNext{}
	}
	res := &claimResult{gen: r.c.gen, assignments: map[group.MemberID][]byte{}, parts: plan.Assignments,
		fingerprint: plan.Fingerprint, took: time.Since(r.start), rounds: r.round,
		regs: t1.Sub(t0), read: t2.Sub(t1), queued: snap.Stats.Queued, release: t3.Sub(t2), write: time.Since(t3)}
	for id, part := range plan.Assignments {
		res.assignments[id] = encodeAssignment(part)
	}
	if len(plan.Withheld) > 0 {
		res.withheld = make(map[string][]byte, len(plan.Withheld))
		for _, p := range plan.Withheld {
			res.withheld[p] = []byte(in.Held[p])
		}
	}
	return res, claimNext{}
}

// forgetGoneOwners drops from held the owner znodes a snapshot shows gone, or, when it read
// them (read), holding another thread or held by another session: someone deleted them behind
// the Kafka side's back (a 0.8.2 consumer deletes every owner it believes its own, ZCC:580-590;
// an operator; a release race), and maybe created them again, with the very thread we wrote
// (a consumer restarted under the same id, a group's next owner adopting our znodes). Held
// counts as ours without a read (planMixed), so such a partition would look unowned to every
// 0.8 tool while a Kafka member consumes it, or owned by a session that takes it along when it
// ends, and nothing would claim it again; dropped, the plan claims it again in this round, or
// waits for whoever holds it now. The snapshot is the round's own read: it costs no request. A
// snapshot that only lists the owner znodes (the optimistic first round) cannot tell one
// created again by someone else: a later round that reads them does.
func (cl *claimer) forgetGoneOwners(held *mirrorState, snap *zkstate.GroupSnapshot, read bool) {
	prefix := zkstate.OwnersPath(cl.group) + "/"
	session := cl.store.SessionID()
	for p, th := range held.owners {
		tp, ok := mixedOwnerTP(prefix, p)
		if !ok {
			continue
		}
		ztp := zkstate.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}
		now, there := snap.Owners[ztp]
		if there && now == string(th) && snap.OwnerSessions[ztp] == session || !read && snap.Listed[ztp] {
			continue
		}
		cl.log.Warn().Str("owner", p).Str("thread", string(th)).
			Msg("mixed group: an owner znode held for a Kafka member is gone or someone else's; claiming it again")
		delete(held.owners, p)
	}
}

// releaseThreads deletes the held owner znodes of the Kafka members' threads given.
func (cl *claimer) releaseThreads(ctx context.Context, threads []string) {
	held := &cl.kafka.held
	var paths []string
	for _, p := range sortedPaths(held.owners) {
		if slices.Contains(threads, string(held.owners[p])) {
			paths = append(paths, p)
		}
	}
	cl.releaseOwners(ctx, held, paths)
}

// releaseOwners deletes held owner znodes: in one atomic Multi (one request, where one by one
// costs an exists and a delete per znode — 600 requests when a 300-partition group reshuffles),
// or, when that fails, one by one with the ownership check of DeleteEphemeralHolding (our
// session, the thread we wrote).
//
// In a group with zk members each znode is read first, all in one multiRead request (a Get each
// made a Kafka member's leave cost 40 % more requests), and deleted only while it is still ours —
// an ephemeral of our session holding the thread we wrote — checked against the version read: a
// 0.8.2 consumer deletes every owner it believes its own (ZCC:580-590, again on each retry of a
// failed rebalance, with the partitions of its last successful one), and another session may
// have created the znode again since, at version 0 like ours; deleting that one would take its
// partition away from its new owner (mirror_aba_test.go). A znode gone or someone else's is
// simply no longer held. The read cannot be saved by remembering what our create made: a Multi
// can check a znode's data version only, and every create starts at version 0; what tells ours
// from a re-creation (its session, its creation zxid) must be read. Without zk members
// (noZKMembers) nobody else deletes the bridge's owner znodes — the claimers of the bridges
// delete only their own, by session — and the read is saved.
func (cl *claimer) releaseOwners(ctx context.Context, held *mirrorState, paths []string) {
	if len(paths) == 0 {
		return
	}
	defer cl.wakeLegacy() // what it waits for may be among them
	ops := make([]zkstate.Op, 0, len(paths))
	mine := make([]string, 0, len(paths))
	if cl.noZKMembers.Load() {
		for _, p := range paths {
			ops = append(ops, zkstate.DeleteOp(p, -1))
		}
		if err := cl.store.MultiAtomic(ctx, ops...); err == nil {
			for _, p := range paths {
				delete(held.owners, p)
			}
			return
		}
	} else if reads, err := cl.store.GetBatch(ctx, paths); err == nil {
		session := cl.store.SessionID()
		for i, p := range paths {
			r := reads[i]
			switch {
			case r.Err != nil && !errors.Is(r.Err, zkstate.ErrNoNode):
				mine = append(mine, p) // unknown: DeleteEphemeralHolding below checks it
			case r.Err != nil, r.Stat.EphemeralOwner != session, string(r.Data) != string(held.owners[p]):
				delete(held.owners, p) // gone, or someone else's now
			default:
				ops = append(ops, zkstate.DeleteOp(p, r.Stat.Version))
				mine = append(mine, p)
			}
		}
		if len(ops) == len(mine) {
			if len(ops) == 0 {
				return
			}
			if err := cl.store.MultiAtomic(ctx, ops...); err == nil {
				for _, p := range mine {
					delete(held.owners, p)
				}
				return
			}
		}
		paths = mine
	}
	for _, p := range paths {
		if err := cl.store.DeleteEphemeralHolding(ctx, p, held.owners[p]); err != nil && !errors.Is(err, zkstate.ErrNotOwner) {
			cl.failed(err, p, "releasing")
			continue // the next claim releases it
		}
		delete(held.owners, p)
	}
}

// releaseDeparted deletes the held owner znodes of threads whose consumer is not registered in
// want.
func (cl *claimer) releaseDeparted(ctx context.Context, held *mirrorState, want map[string][]byte) {
	var gone []string
	for _, d := range held.owners {
		cid, _, err := zkstate.ParseThreadID(string(d))
		if err != nil || want[zkstate.IDPath(cl.group, cid)] == nil {
			gone = append(gone, string(d))
		}
	}
	if len(gone) > 0 {
		cl.releaseThreads(ctx, gone)
	}
}

// claimRegistrations makes the held registrations (and hosted znodes) exactly want. Owner
// znodes are left alone: those of departed members are released by the plan.
func (cl *claimer) claimRegistrations(ctx context.Context, held *mirrorState, want map[string][]byte) bool {
	ok := true
	for _, p := range sortedPaths(held.ids) {
		if d, still := want[p]; still && string(d) == string(held.ids[p]) {
			continue
		}
		if err := cl.store.DeleteEphemeral(ctx, p); err != nil && !errors.Is(err, zkstate.ErrNotOwner) {
			cl.failed(err, p, "removing")
			ok = false
			continue
		}
		delete(held.ids, p)
	}
	cl.publishOurs(held.ids, want)
	for _, p := range hostedFirst(sortedPaths(want)) {
		if _, there := held.ids[p]; there {
			continue
		}
		err := cl.store.CreateEphemeral(ctx, p, want[p])
		cl.noteCreate(err, map[string][]byte{p: want[p]})
		if err != nil {
			cl.failed(err, p, "creating")
			ok = false
			continue
		}
		held.ids[p] = want[p]
	}
	cl.publishOurs(held.ids, nil)
	return ok
}

// claimOwners creates the owner znodes in one atomic Multi.
func (cl *claimer) claimOwners(ctx context.Context, held *mirrorState, claim map[string]string) error {
	if len(claim) == 0 {
		return nil
	}
	ops := make([]zkstate.Op, 0, len(claim))
	for _, p := range sortedKeys(claim) {
		ops = append(ops, zkstate.CreateOp(p, []byte(claim[p]), zkstate.CreateOptions{Ephemeral: true, Parents: true}))
	}
	err := cl.store.MultiAtomic(ctx, ops...)
	made := make(map[string][]byte, len(claim))
	for p, th := range claim {
		made[p] = []byte(th)
	}
	cl.noteCreate(err, made)
	if err != nil {
		return err
	}
	for p, th := range claim {
		held.owners[p] = []byte(th)
	}
	return nil
}

func ownersHeld(held *mirrorState) map[string]string {
	out := make(map[string]string, len(held.owners))
	for p, d := range held.owners {
		out[p] = string(d)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
