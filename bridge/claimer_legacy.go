package bridge

// The claimer's part for a group's legacy members: what the legacy actor (legacy_group.go) asks
// of it and gets back. The actor keeps the rebalance's orchestration — seed 001 "rebalance
// (group)": Stop every member, the final Pings, and the Starts once the claim is written — and
// hands the claimer everything that writes an ephemeral of the bridge under /consumers/<g>, and
// every other ZooKeeper read or write of the group, so that the actor does no ZooKeeper IO but
// its watches:
//
//	legacyRegisterReq   a member's hosted-member znode, then its registration (Register):
//	                    legacyRegisteredEv back
//	legacyDeregisterReq its registration, then its hosted-member znode (a member removed):
//	                    legacyDeregisteredEv back
//	legacyCheckReq      step 3's read of the group (owners, registrations): legacyCheckEv back
//	legacyCommitReq     the offsets of a regular PingResponse, one Multi: legacyCommitEv back
//	legacyClaimReq      step 4's claim: read, plan (legacyPlanRebalance), release and wait
//	                    while a foreign owner holds a partition to claim, then the one Multi
//	legacyCancelReq     the attempt the claim belongs to is over (restarted from step 1)
//
// A claim answers with legacyClaimEv events on the actor's inbox: waiting (after each blocked
// round: what was released, what is waited for), then written (the Multi is in) or failed.
// Requests are served in the order sent, and their events come back in that order: a ping's
// offsets sent before a claim are written before the claim reads the group.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Requests of the legacy actor to its group's claimer.
type (
	// legacyAttachReq comes first: the coordinator the group's legacy members belong to (its
	// configuration and counters), and the actor's inbox, where events go.
	legacyAttachReq struct {
		c      *LegacyCoordinator
		log    zerolog.Logger
		events chan<- any
	}
	// legacyRegisterReq registers consumer id: its hosted-member znode (zkstate/hosted.go) and
	// its registration data in /consumers/<g>/ids/<id>. measure is the actor's, handed back in
	// the event: whether what it costs counts in the rebalance being measured.
	legacyRegisterReq struct {
		id      string
		data    []byte
		measure bool
	}
	// legacyDeregisterReq deletes the registration of consumer id and its hosted-member znode.
	legacyDeregisterReq struct {
		id      string
		measure bool
	}
	// legacyClaimReq is step 4's claim of one attempt. in is the plan's input without what the
	// read of the group gives (Session, Others, Owners, Committed, OffsetNodes): the members,
	// the partitions, the final offsets.
	legacyClaimReq struct {
		attempt int
		in      legacyPlanInput
	}
	legacyCancelReq struct{ attempt int }
	// legacyCheckReq is seed step 3's read of the group (owners and registrations, not the
	// offsets); own are the consumer ids of the group's legacy members when it was asked for.
	legacyCheckReq struct{ own map[string]bool }
	// legacyCommitReq writes the offsets a regular PingResponse of member reported, which the
	// actor validated (legacyCheckPing); exists says which of their offset znodes are known to
	// exist. finals: they are the final offsets of an attempt that ended before its claim was
	// written (commitFinals); those its claim wrote are skipped (legacyPart.finals).
	legacyCommitReq struct {
		member  string
		offsets map[legacy.TopicPartition]int64
		exists  map[legacy.TopicPartition]bool
		finals  bool
	}
)

// legacyCheckEv answers a legacyCheckReq: the view of the group, the registrations it could not
// read, or the error; count is what it read, took how long.
type legacyCheckEv struct {
	view    legacyGroupView
	skipped []zkstate.Problem
	err     error
	count   legacyZKCount
	took    time.Duration
}

// legacyCommitEv answers a legacyCommitReq: the offsets are in unless err. nodes, when set, is
// which of their offset znodes exist, looked up again after a Multi that found them otherwise
// than known (an operator deleted or created one); count is what that lookup read.
type legacyCommitEv struct {
	member  string
	offsets map[legacy.TopicPartition]int64
	nodes   map[legacy.TopicPartition]bool
	err     error
	count   legacyZKCount
}

// legacyRegisteredEv answers a legacyRegisterReq: the registration is written unless err.
type legacyRegisteredEv struct {
	id      string
	err     error
	count   legacyZKCount
	measure bool
}

// legacyDeregisteredEv answers a legacyDeregisterReq with what it cost (a failed delete is
// logged by the claimer: the ephemeral goes with the session).
type legacyDeregisteredEv struct {
	id      string
	count   legacyZKCount
	measure bool
}

// legacyZKCount counts ZooKeeper operations for the attempt being measured (LegacyRebalanceStats):
// znodes read and the requests that carried them, write ops and multi requests.
type legacyZKCount struct{ reads, readRequests, writes, multis int }

func (n *legacyZKCount) add(o legacyZKCount) {
	n.reads += o.reads
	n.readRequests += o.readRequests
	n.writes += o.writes
	n.multis += o.multis
}

// legacyClaimState is what a legacyClaimEv reports.
type legacyClaimState int

const (
	legacyClaimWaiting legacyClaimState = iota // a round found foreign owners; the claim waits
	legacyClaimWritten                         // the Multi is in: start the members
	legacyClaimFailed                          // the attempt fails (seed step 5)
)

// legacyClaimEv is the outcome of a round of a legacy claim, for the actor.
type legacyClaimEv struct {
	attempt int
	state   legacyClaimState
	err     error // failed
	count   legacyZKCount
	// What the read of the group found (nil others: the round read only what it waited for,
	// or did not get that far); skipped are the registrations it could not read.
	regs    map[string]string
	others  map[string]map[string]int
	skipped []zkstate.Problem
	// written and waiting: the plan, and the final offsets it wrote that changed.
	plan   legacyPlan
	finals int
	// waiting: whether the plan's Release Multi ran, the first partition waited for and its
	// holder, and how many blocked rounds so far.
	released bool
	first    legacy.TopicPartition
	holder   legacyOwner
	tries    int
	// written: the offset znodes that exist now, the session of the owner znodes the claimer
	// holds for the members (0 when none is to be trusted), and the times of the read and the
	// Multi.
	nodes            map[legacy.TopicPartition]bool
	writtenSession   int64
	reading, writing time.Duration
	queued           time.Duration
}

// legacyPart is what the claimer holds and does for the group's legacy members.
type legacyPart struct {
	c      *LegacyCoordinator // nil until attached
	log    zerolog.Logger
	events chan<- any
	outbox []any // events not delivered yet: the claimer never blocks on the actor
	// regs are the registrations and hosted-member znodes held, by consumer id.
	regs map[string][]string
	// written are the owner znodes the last successful Multi left, all ours in writtenSession
	// (0: none to trust); see legacyReader.readGroup.
	written        map[legacy.TopicPartition]legacyOwner
	writtenSession int64
	claimed        bool // a claim wrote owner znodes once: the leave reads the group to release them
	run            *legacyClaimRun
	// finals are the final offsets the last claim's Multis wrote, or may have written (a Multi
	// without an answer, but for the partitions our members still hold: noteClaimFinals), since
	// its request. A commit of the final offsets of
	// its attempt, which ended before the claim was written (cancelled after a wait, failed),
	// skips them: the Multi that wrote them may also have let go of the partition's owner znode
	// (the Release before a wait), and the partition's new owner may have committed since.
	finals map[legacy.TopicPartition]int64
}

func newLegacyPart() legacyPart { return legacyPart{regs: map[string][]string{}} }

// legacyClaimRun is a legacy claim in progress on the claimer.
type legacyClaimRun struct {
	claimWait
	req legacyClaimReq
	// waited is what the last round read, as its Release left it, while the claim waits for
	// foreign owner znodes; nil when the next round must read the group.
	waited *legacyWaited
	// reclaimed: the claim was tried again at once after another member created a parent
	// directory the Multi was about to create, or after a Multi that followed a partial read
	// failed (legacyParentRace).
	reclaimed bool
	tries     int
	count     legacyZKCount // since the last event
}

func (r *legacyClaimRun) waitOf() *claimWait {
	if r == nil {
		return nil
	}
	return &r.claimWait
}

// legacyReq queues a request of the legacy actor; it never blocks.
func (cl *claimer) legacyReq(r any) {
	cl.legacyMu.Lock()
	cl.legacyQ = append(cl.legacyQ, r)
	cl.legacyMu.Unlock()
	select {
	case cl.legacyKick <- struct{}{}:
	default: // kicked already
	}
}

// drainLegacy serves the legacy requests queued, in order, and delivers what events it can.
func (cl *claimer) drainLegacy(ctx context.Context) {
	for {
		cl.legacyMu.Lock()
		q := cl.legacyQ
		cl.legacyQ = nil
		cl.legacyMu.Unlock()
		if len(q) == 0 {
			break
		}
		for i := 0; i < len(q); i++ {
			if _, ok := q[i].(legacyCommitReq); !ok {
				cl.onLegacy(ctx, q[i])
				continue
			}
			var batch []legacyCommitReq
			for ; i < len(q); i++ {
				c, ok := q[i].(legacyCommitReq)
				if !ok {
					break
				}
				batch = append(batch, c)
			}
			i--
			cl.legacyCommits(ctx, batch)
		}
	}
	cl.deliver()
}

// legacyCommits writes the offsets of pings queued one after the other in one Multi, the later
// ping's offset of a partition winning: at a hundred members pinged every second, one Multi
// per ping kept the claimer busy, and a claim queued behind them waited for each.
func (cl *claimer) legacyCommits(ctx context.Context, batch []legacyCommitReq) {
	all := legacyCommitReq{offsets: map[legacy.TopicPartition]int64{}, exists: map[legacy.TopicPartition]bool{}}
	for _, r := range batch {
		for tp, off := range r.offsets {
			if w, ok := cl.legacy.finals[tp]; ok && r.finals && w == off {
				delete(all.offsets, tp) // written by the claim: neither this nor an older one
				continue
			}
			if _, seen := all.offsets[tp]; !seen {
				all.exists[tp] = r.exists[tp]
			}
			all.offsets[tp] = off
		}
	}
	ev := legacyCommitEv{}
	if len(all.offsets) > 0 {
		ev = cl.legacyCommit(ctx, all)
	}
	if len(batch) == 1 {
		ev.member, ev.offsets = batch[0].member, batch[0].offsets
		cl.emit(ev)
		return
	}
	for i, r := range batch {
		one := legacyCommitEv{member: r.member, offsets: r.offsets, err: ev.err}
		if i == 0 {
			one.nodes, one.count = ev.nodes, ev.count
		}
		cl.emit(one)
	}
}

// deliver hands the queued events to the legacy actor as far as its inbox takes them.
func (cl *claimer) deliver() {
	lp := &cl.legacy
	for len(lp.outbox) > 0 {
		select {
		case lp.events <- lp.outbox[0]:
			lp.outbox = lp.outbox[1:]
		default:
			return
		}
	}
}

func (cl *claimer) emit(ev any) {
	cl.legacy.outbox = append(cl.legacy.outbox, ev)
	cl.deliver()
}

// legacyOut is the inbox while an event waits for it, else nil (never ready).
func (cl *claimer) legacyOut() (chan<- any, any) {
	if len(cl.legacy.outbox) == 0 {
		return nil, nil
	}
	return cl.legacy.events, cl.legacy.outbox[0]
}

func (cl *claimer) onLegacy(ctx context.Context, r any) {
	lp := &cl.legacy
	switch r := r.(type) {
	case legacyAttachReq:
		lp.c, lp.log, lp.events = r.c, r.log, r.events
	case legacyRegisterReq:
		ev := legacyRegisteredEv{id: r.id, measure: r.measure}
		ev.err = cl.legacyRegister(ctx, r.id, r.data, &ev.count)
		cl.emit(ev)
	case legacyDeregisterReq:
		ev := legacyDeregisteredEv{id: r.id, measure: r.measure}
		cl.legacyDeregister(ctx, r.id, &ev.count)
		cl.emit(ev)
	case legacyClaimReq:
		lp.run = &legacyClaimRun{claimWait: claimWait{backoff: cl.backoff}, req: r}
		lp.finals = nil
	case legacyCancelReq:
		if lp.run != nil && lp.run.req.attempt == r.attempt {
			lp.run = nil
		}
	case legacyCheckReq:
		ev := legacyCheckEv{}
		rd := legacyReader{c: lp.c, name: cl.group, log: lp.log, n: &ev.count}
		start := time.Now()
		ev.view, ev.skipped, ev.err = rd.readGroup(ctx, func(id string) bool { return r.own[id] }, lp.written, lp.writtenSession, false)
		ev.took = time.Since(start)
		cl.emit(ev)
	case legacyCommitReq:
		cl.emit(cl.legacyCommit(ctx, r))
	}
}

// legacyCommit writes a PingResponse's offsets in one Multi (seed 001's auto_commit: the offsets
// ride on the ping). When the Multi finds an offset znode missing or present against what the
// actor knew, it looks again which exist and tries once more. Its operations are not the
// rebalance's, but for that lookup's reads (as when the actor ran it).
func (cl *claimer) legacyCommit(ctx context.Context, r legacyCommitReq) legacyCommitEv {
	ev := legacyCommitEv{member: r.member, offsets: r.offsets}
	ev.err = cl.legacyPingMulti(ctx, legacyOffsetOps(cl.group, r.offsets, r.exists))
	if errors.Is(ev.err, zkstate.ErrNoNode) || errors.Is(ev.err, zkstate.ErrNodeExists) {
		rd := legacyReader{c: cl.legacy.c, name: cl.group, log: cl.legacy.log, n: &ev.count}
		nodes, err := rd.offsetNodes(ctx, r.offsets)
		if err == nil {
			ev.nodes = nodes
			ev.err = cl.legacyPingMulti(ctx, legacyOffsetOps(cl.group, r.offsets, nodes))
		}
	}
	return ev
}

// legacyPingMulti runs the Multi of a PingResponse's offsets.
func (cl *claimer) legacyPingMulti(ctx context.Context, ops []zkstate.Op) error {
	ctx, cancel := context.WithTimeout(ctx, cl.legacy.c.cfg.ZKTimeout)
	defer cancel()
	cl.legacy.c.addWrites(len(ops), 1)
	return cl.store.Multi(ctx, ops...)
}

// legacyRegister writes the hosted-member znode of consumer id, then its registration. A hosted
// znode our session already holds is taken over only when it says the same (an earlier member
// of ours whose delete failed); one of another kind or node — another coordinator of this
// bridge hosting a member under that consumer id — is the id in use: an error wrapping
// ErrNodeExists. Both are ephemerals re-created after a session expiry, as a 0.8 consumer
// re-registers.
func (cl *claimer) legacyRegister(ctx context.Context, id string, data []byte, n *legacyZKCount) error {
	lp := &cl.legacy
	ctx, cancel := context.WithTimeout(ctx, lp.c.cfg.ZKTimeout)
	defer cancel()
	hp := zkstate.HostedMemberPath(lp.c.cfg.Root, cl.group, id)
	want := zkstate.HostedMember{Kind: zkstate.KindLegacy, Node: lp.c.cfg.NodeID, Member: id}
	got, st, err := cl.store.Get(ctx, hp)
	lp.c.addReads(1, 1)
	n.reads, n.readRequests = n.reads+1, n.readRequests+1
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
		err = nil
	case err != nil:
	case st.EphemeralOwner == cl.store.SessionID():
		if h, perr := zkstate.ParseHostedMember(got); perr != nil || h != want {
			err = fmt.Errorf("%s is held by this bridge for another member (%s): %w", hp, got, zkstate.ErrNodeExists)
		}
	default:
		err = fmt.Errorf("%s is held by ZooKeeper session 0x%x: %w", hp, st.EphemeralOwner, zkstate.ErrNodeExists)
	}
	if err != nil {
		return err
	}
	err = cl.store.CreateEphemeral(ctx, hp, want.Encode())
	cl.legacyWrites(n, 1, 0)
	if err != nil {
		return err
	}
	ip := zkstate.IDPath(cl.group, id)
	lp.regs[id] = []string{ip, hp}
	cl.publishLegacyOurs()
	err = cl.store.CreateEphemeral(ctx, ip, data)
	cl.legacyWrites(n, 1, 0)
	if err != nil {
		cl.deleteHosted(ctx, id, n)
		delete(lp.regs, id)
		cl.publishLegacyOurs()
		return err
	}
	return nil
}

// legacyDeregister deletes the registration of consumer id, then its hosted-member znode, which
// describes it.
func (cl *claimer) legacyDeregister(ctx context.Context, id string, n *legacyZKCount) {
	lp := &cl.legacy
	ctx, cancel := context.WithTimeout(ctx, lp.c.cfg.ZKTimeout)
	defer cancel()
	err := cl.store.DeleteEphemeral(ctx, zkstate.IDPath(cl.group, id))
	cl.legacyWrites(n, 1, 0)
	delete(lp.regs, id)
	cl.publishLegacyOurs()
	if err != nil && !errors.Is(err, zkstate.ErrNotOwner) && ctx.Err() == nil {
		lp.log.Warn().Err(err).Str("consumer", id).Msg("deleting the ids znode failed")
	}
	cl.deleteHosted(ctx, id, n)
}

// deleteHosted deletes the hosted-member znode of consumer id, if our session holds it.
func (cl *claimer) deleteHosted(ctx context.Context, id string, n *legacyZKCount) {
	lp := &cl.legacy
	err := cl.store.DeleteEphemeral(ctx, zkstate.HostedMemberPath(lp.c.cfg.Root, cl.group, id))
	cl.legacyWrites(n, 1, 0)
	if err != nil && !errors.Is(err, zkstate.ErrNotOwner) && ctx.Err() == nil {
		lp.log.Warn().Err(err).Str("consumer", id).Msg("deleting the hosted-member znode failed")
	}
}

// publishLegacyOurs sets legacyOurs to the legacy members' registrations held or being created.
func (cl *claimer) publishLegacyOurs() {
	ours := make(map[string]bool, len(cl.legacy.regs))
	for id := range cl.legacy.regs {
		ours[id] = true
	}
	cl.legacyOurs.Store(&ours)
}

func (cl *claimer) legacyWrites(n *legacyZKCount, ops, multis int) {
	cl.legacy.c.addWrites(ops, multis)
	n.writes += ops
	n.multis += multis
}

// legacyMulti runs a claim's Multi.
func (cl *claimer) legacyMulti(ctx context.Context, ops []zkstate.Op, n *legacyZKCount) error {
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cl.legacy.c.cfg.ZKTimeout)
	defer cancel()
	cl.legacyWrites(n, len(ops), 1)
	return cl.store.Multi(ctx, ops...)
}

// legacyRound is one round of a legacy claim: read the owners and offsets again (only what the
// last round waited for, after a wait), plan, and either release what is no longer ours and
// wait while another session holds an owner znode to claim, or write everything in one Multi.
//
// After a wait only what it waited for is read again: the owner znodes of the foreign
// partitions and their offsets, which their previous owner committed before releasing them,
// and our owner znodes the claim moves between our threads (their ABA: one deleted and created
// again by another session meanwhile must be waited for, not deleted). The rest of the read
// before the wait still holds as far as a claim can tell: changes of the membership or of the
// partitions restart the attempt (legacyCancelReq), our own owner znodes are ours, and a
// partition someone else took meanwhile makes the Multi's create fail, after which the group is
// read again in full.
func (cl *claimer) legacyRound(ctx context.Context, r *legacyClaimRun) {
	lp := &cl.legacy
	rd := legacyReader{c: lp.c, name: cl.group, log: lp.log, n: &r.count}
	readStart := time.Now()
	w, refreshed := r.waited, r.waited != nil
	r.waited = nil
	ev := legacyClaimEv{attempt: r.req.attempt}
	var (
		view legacyGroupView
		err  error
	)
	if refreshed {
		view, err = rd.refreshWaited(ctx, w)
	} else {
		// A registration of ours whose member has not joined yet (its Register is being
		// answered) is not another member's either.
		own := func(id string) bool { _, ok := r.req.in.Members[id]; return ok || lp.regs[id] != nil }
		view, ev.skipped, err = rd.readGroup(ctx, own, lp.written, lp.writtenSession, true)
	}
	if err != nil {
		cl.legacyFail(r, ev, fmt.Errorf("reading the owners and offsets (seed step 4): %w", err), false)
		return
	}
	reading := time.Since(readStart)
	in := legacyClaimInput(r.req.in, view)
	in.Final = lp.unwrittenFinals(in)
	plan, err := legacyPlanRebalance(in)
	if err != nil {
		cl.legacyFail(r, ev, err, false)
		return
	}
	ev.regs, ev.plan = view.regs, plan
	if !refreshed {
		ev.others = view.others
	}
	if len(plan.Foreign) > 0 {
		cl.legacyWait(ctx, r, ev, in, view)
		return
	}
	writeStart := time.Now()
	err = cl.legacyMulti(ctx, plan.Ops, &r.count)
	cl.noteClaimFinals(ctx, in, plan, err, &r.count)
	if err != nil {
		// Whatever made it fail (a znode changed under us, the session), trust nothing about
		// the owners until they are read again.
		lp.written, lp.writtenSession = nil, 0
		if (legacyParentRace(err) || refreshed) && !r.reclaimed {
			r.reclaimed, r.due = true, time.Time{}
			lp.log.Debug().Err(err).Bool("after_wait", refreshed).
				Msg("the group changed between our read and our Multi; reading it again and claiming")
			return
		}
		cl.legacyFail(r, ev, fmt.Errorf("writing ownership and final offsets (seed step 4): %w", err), true)
		return
	}
	ev.writing = time.Since(writeStart)
	lp.claimed = true
	cl.wakeKafka() // the Multi deleted what moves to others
	if err := rd.readClaimedOffsets(ctx, in, &plan, view, w); err != nil {
		lp.written, lp.writtenSession = nil, 0
		cl.legacyFail(r, ev, fmt.Errorf("reading the offsets of the partitions claimed (seed step 4): %w", err), true)
		return
	}
	ev.plan = plan
	// The Multi is in: every owner znode of our partitions is ours: created by the Multi
	// (version 0), or read and checked.
	lp.written, lp.writtenSession = make(map[legacy.TopicPartition]legacyOwner, len(plan.Assignment)), 0
	for tp, thread := range plan.Assignment {
		o := legacyOwner{Thread: thread, Version: 0, Session: view.session}
		if old, ok := view.owners[tp]; ok && old.Session == view.session && old.Thread == thread {
			o = old // unchanged: not rewritten
		}
		lp.written[tp] = o
	}
	if cl.store.SessionID() == view.session {
		lp.writtenSession = view.session
	}
	for tp, off := range in.Final {
		view.nodes[tp] = true
		if old, ok := view.committed[tp]; !ok || old != off {
			ev.finals++
		}
	}
	ev.state, ev.nodes, ev.reading, ev.queued = legacyClaimWritten, view.nodes, reading, view.queued
	ev.writtenSession = lp.writtenSession
	cl.legacy.run = nil
	cl.legacyEmit(r, ev)
}

// readClaimedOffsets reads again, once the claim's Multi is in, the offsets of the partitions
// it took from elsewhere (free or another member's when read) whose read came before a wait of
// the claim, and starts the members from them. A read before a wait may be stale: while a claim
// waits for one partition, a zk member may take another one the claim saw free, consume it,
// commit and release it, and the Multi's create then succeeds. Once our owner znode exists,
// nobody else commits the partition (0.8 consumers commit only what they own, before releasing
// it), so this read is its last commit. Partitions that stay with our members are ours already,
// and those read in the round that wrote the Multi (every one when the claim did not wait;
// after a wait, the ones waited for, which refreshWaited read again) were read just before it:
// no read. waited is what the round read again after a wait, nil when it read the whole group.
func (rd legacyReader) readClaimedOffsets(ctx context.Context, in legacyPlanInput, plan *legacyPlan, view legacyGroupView, waited *legacyWaited) error {
	if waited == nil {
		return nil
	}
	var taken []legacy.TopicPartition
	for _, tp := range legacySortedTPs(plan.Assignment) {
		if o, ok := view.owners[tp]; (!ok || !in.ours(o)) && !slices.Contains(waited.foreign, tp) {
			taken = append(taken, tp)
		}
	}
	if len(taken) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, rd.c.cfg.ZKTimeout)
	defer cancel()
	paths := make([]string, len(taken))
	for i, tp := range taken {
		paths[i] = zkstate.OffsetPath(rd.name, tp.Topic, tp.Partition)
	}
	reads, err := rd.c.store.GetBatch(ctx, paths)
	rd.countReads(len(paths), 1)
	rd.c.reread.Add(uint64(len(paths)))
	if err != nil {
		return err
	}
	for i, tp := range taken {
		if err := rd.refreshOffset(&view, tp, reads[i]); err != nil {
			return err
		}
		if off, ok := view.committed[tp]; ok {
			plan.Offsets[tp] = off
		} else {
			delete(plan.Offsets, tp)
		}
	}
	legacyRestart(in, plan)
	return nil
}

// legacyWait is a round that must wait: another member (a zk member that has not noticed the
// change yet, the bridge's Kafka members, a member of another coordinator, a previous
// coordinator whose session has not expired) still owns partitions we must claim. 0.8
// consumers retry their claims the same way; the members stay stopped, and keep being pinged,
// meanwhile. What is no longer ours is let go first: whoever we wait for may be waiting for it.
func (cl *claimer) legacyWait(ctx context.Context, r *legacyClaimRun, ev legacyClaimEv, in legacyPlanInput, view legacyGroupView) {
	lp, plan := &cl.legacy, ev.plan
	if len(plan.Release) > 0 {
		err := cl.legacyMulti(ctx, plan.Release, &r.count)
		cl.noteClaimFinals(ctx, in, plan, err, &r.count)
		if err != nil {
			lp.written, lp.writtenSession = nil, 0
			if legacyParentRace(err) && !r.reclaimed {
				r.reclaimed, r.due = true, time.Time{}
				return
			}
			cl.legacyFail(r, ev, fmt.Errorf("releasing owner znodes before waiting to claim (seed step 4): %w", err), true)
			return
		}
		ev.released, lp.claimed = true, true
		for tp, off := range in.Final {
			if old, ok := view.committed[tp]; !ok || old != off {
				ev.finals++
			}
		}
		for tp := range lp.written {
			if _, keep := plan.Assignment[tp]; !keep {
				delete(lp.written, tp)
			}
		}
		cl.wakeKafka()
	}
	ev.first = plan.Foreign[0]
	ev.holder = view.owners[ev.first]
	r.waited = legacyWaitedView(in, plan, view)
	r.tries++
	ev.tries = r.tries
	ev.state = legacyClaimWaiting
	cl.legacyEmit(r, ev)
	cl.blocked(ctx, &r.claimWait, zkstate.OwnerPath(cl.group, ev.first.Topic, ev.first.Partition))
}

// noteClaimFinals records the final offsets a claim's Multi carried (legacyPart.finals) unless
// it failed with nothing applied: an op of it failed before any request of it was committed.
// Any other failure may have applied some of it: nobody knows whether it was applied (the
// connection was lost or the call timed out before its answer: zkstate.MultiError.Index -1), or
// a later request of a split Multi failed after the first ones were applied (Applied > 0; which
// ops the split put in which request is zkstate's). Then ZooKeeper is asked which of their
// partitions our members still hold (legacyStillOurs): their final offsets are not recorded, so
// that a commit of them writes them. The others count as written, as a Multi that was applied.
func (cl *claimer) noteClaimFinals(ctx context.Context, in legacyPlanInput, plan legacyPlan, err error, n *legacyZKCount) {
	var me *zkstate.MultiError
	if err != nil && errors.As(err, &me) && me.Index >= 0 && me.Applied == 0 {
		return
	}
	var ours map[legacy.TopicPartition]bool
	if err != nil {
		ours = cl.legacyStillOurs(ctx, in, plan, n)
	}
	if cl.legacy.finals == nil {
		cl.legacy.finals = make(map[legacy.TopicPartition]int64, len(in.Final))
	}
	for tp, off := range in.Final {
		if !ours[tp] {
			cl.legacy.finals[tp] = off
		}
	}
}

func (cl *claimer) legacyFail(r *legacyClaimRun, ev legacyClaimEv, err error, untrusted bool) {
	ev.state, ev.err = legacyClaimFailed, err
	if untrusted {
		ev.writtenSession = -1 // the actor forgets its copy of written too
	}
	cl.legacy.run = nil
	cl.legacyEmit(r, ev)
}

func (cl *claimer) legacyEmit(r *legacyClaimRun, ev legacyClaimEv) {
	ev.count, r.count = r.count, legacyZKCount{}
	cl.emit(ev)
}

// legacyLeave ends the legacy members' use of the claimer: with release, their registrations
// and hosted znodes are deleted, then every owner znode of ours that holds no other
// registration's thread (the Kafka members' owners share the session), checked against the
// version read, so that 0.8 tools do not show owners that no longer consume.
func (cl *claimer) legacyLeave(ctx context.Context, release bool) {
	lp := &cl.legacy
	defer func() {
		c := lp.c
		*lp = newLegacyPart()
		lp.c = c
		cl.publishLegacyOurs()
	}()
	if !release || lp.c == nil {
		return
	}
	var n legacyZKCount
	for id := range lp.regs {
		cl.legacyDeregister(ctx, id, &n)
	}
	var ops []zkstate.Op
	if lp.claimed {
		rd := legacyReader{c: lp.c, name: cl.group, log: lp.log, n: &n}
		view, _, err := rd.readGroup(ctx, func(string) bool { return false }, lp.written, lp.writtenSession, false)
		if err != nil {
			lp.log.Debug().Err(err).Msg("reading owner znodes at shutdown failed; they go with the session")
		}
		in := legacyPlanInput{Session: view.session, Others: view.others}
		for _, tp := range legacySortedTPs(view.owners) {
			if o := view.owners[tp]; in.ours(o) && view.session != 0 {
				ops = append(ops, zkstate.DeleteOp(zkstate.OwnerPath(cl.group, tp.Topic, tp.Partition), o.Version))
			}
		}
	}
	if err := cl.store.Multi(ctx, ops...); err != nil {
		lp.log.Debug().Err(err).Msg("releasing owner znodes at shutdown failed; they go with the session")
	}
	cl.wakeKafka()
	lp.log.Debug().Int("released", len(ops)).Msg("legacy group stopped")
}

// legacyClaimInput is the claim's plan input: the actor's part (members, partitions, final
// offsets) and what the read of the group gave.
func legacyClaimInput(in legacyPlanInput, view legacyGroupView) legacyPlanInput {
	in.Session, in.Others, in.Owners, in.Committed, in.OffsetNodes = view.session, view.others, view.owners, view.committed, view.nodes
	return in
}

// legacyWaitedView is the view a claim that waits keeps for its next round: view as the plan's
// Release Multi, if any, left it — the final offsets written, our owner znodes of partitions no
// longer ours gone.
func legacyWaitedView(in legacyPlanInput, plan legacyPlan, view legacyGroupView) *legacyWaited {
	if len(plan.Release) > 0 {
		for tp, o := range view.owners {
			if _, keep := plan.Assignment[tp]; !keep && in.ours(o) {
				delete(view.owners, tp)
			}
		}
		for tp, off := range in.Final {
			view.committed[tp], view.nodes[tp] = off, true
		}
	}
	own := make(map[string]bool, len(in.Members))
	for id := range in.Members {
		own[id] = true
	}
	return &legacyWaited{view: view, foreign: plan.Foreign, moving: plan.Moving, own: own}
}
