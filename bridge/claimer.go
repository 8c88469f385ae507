package bridge

// The claimer: one per group and bridge, it owns every ephemeral the bridge holds under
// /consumers/<g> for its members of every kind — the Kafka members' registrations, hosted-member
// znodes and owner znodes (the 0.8 mirror, mirror.go, and the claims of a mixed group,
// mixed_claim.go), and the legacy members' registrations, hosted-member znodes and owner znodes
// (claimer_legacy.go) — and writes them on one goroutine; for the legacy members it also makes
// every other read and write of /consumers/<g> (the check's read, the pings' offsets).
//
// It is a goroutine of its own, an IO worker beside the actors rather than part of them, because
// its calls block: ZooKeeper round trips, and claims that wait for foreign owner znodes with
// backoff. An actor that made them would stop stepping its group meanwhile (heartbeats, answers
// of legacy members, Registers). One worker per group keeps the group's calls in the order the
// actors asked (a ping's offsets before the claim that reads them) and lets a release by one
// kind retry the other kind's waiting claim at once; the actors only hand it requests and step
// its results, which come back as events.
//
// The group's Kafka actor and its legacy actor share it (claimers, one registry per bridge):
// each hands it requests and gets results back as events. Both kinds' claims run here, with one
// backoff policy (claimBackoff doubling to claimBackoffMax) and one watch on the first foreign
// owner znode a claim waits for; a release by either kind retries the other's waiting claim at
// once, since it is the same goroutine that released.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
)

// claimers is a bridge's registry of claimers, one per group, shared by the group's Kafka and
// legacy actors. A nil *claimers gives every caller a claimer of its own (actors and
// coordinators built outside a Bridge).
type claimers struct {
	mu sync.Mutex
	m  map[string]*claimer
}

func newClaimers() *claimers { return &claimers{m: map[string]*claimer{}} }

// claimerConfig is what the claimer of a group is built with, by whichever actor comes first.
type claimerConfig struct {
	store   *zkstate.Store
	group   string
	retry   time.Duration // of the 0.8 mirror's failed writes
	log     zerolog.Logger
	metrics *metrics // nil: a coordinator without the Kafka side's metrics
	// backoff and backoffMax bound a blocked claim's wait (claimBackoff, claimBackoffMax when
	// zero).
	backoff, backoffMax time.Duration
}

// join returns the group's claimer, starting it if needed; every join is matched by a leave.
func (cs *claimers) join(cfg claimerConfig) *claimer {
	if cs == nil {
		cl := newClaimer(cfg)
		cl.refs = 1
		return cl
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cl := cs.m[cfg.group]
	if cl == nil || cl.store != cfg.store {
		cl = newClaimer(cfg)
		cs.m[cfg.group] = cl
	}
	cl.refs++
	return cl
}

// drop ends one join of cl, and stops it after the last.
func (cs *claimers) drop(cl *claimer) {
	last := false
	if cs == nil {
		last = true
	} else {
		cs.mu.Lock()
		cl.refs--
		if last = cl.refs == 0; last && cs.m[cl.group] == cl {
			delete(cs.m, cl.group)
		}
		cs.mu.Unlock()
	}
	if last {
		cl.abandon()
		close(cl.stop)
		<-cl.done
	}
}

// claimer is described in the file comment. Every field below done is owned by run's goroutine.
type claimer struct {
	store   *zkstate.Store
	group   string
	retry   time.Duration
	log     zerolog.Logger
	metrics *metrics
	// backoff doubling to backoffMax is the wait of a blocked claim of either kind.
	backoff, backoffMax time.Duration
	refs                int // guarded by the registry's mu

	// want holds the Kafka actor's latest request, capacity 1: a state to reconcile, a claim of
	// a mixed group, or threads to release. One slot keeps their order: a later request
	// replaces an earlier one that was not taken yet.
	want chan mirrorRequest
	// legacyQ holds the legacy actor's requests (claimer_legacy.go), in order, and legacyKick
	// (capacity 1) says it is not empty: a queue rather than a buffered channel, so that the
	// actor never blocks on the claimer and a group without legacy members pays nothing for it.
	legacyMu   sync.Mutex
	legacyQ    []any
	legacyKick chan struct{}
	// leaves carries a kind's leave: its part released or forgotten, then acknowledged.
	leaves chan claimerLeave
	// adopts carries the Kafka actor's adoption of a previous owner's ephemerals
	// (mixed_adopt.go); it waits for the result.
	adopts chan adoptRequest
	stop   chan struct{} // closed by the last drop
	// abandon cancels the ZooKeeper call in progress, at the last drop.
	abandon context.CancelFunc
	// ours holds the consumer ids of every Kafka registration held or being created (mixed.go
	// reads it to tell the bridge's Kafka members from the other registrations in /ids).
	ours atomic.Pointer[map[string]bool]
	// noZKMembers is set while the mixed group's watcher (mixed.go watchOthers) last counted no
	// zk member: then nobody but the bridge's own claimers deletes its owner znodes, and a
	// release needs no read first (mixed_claim.go releaseOwners).
	noZKMembers atomic.Bool
	// legacyOurs holds the consumer ids of the legacy members' registrations, held or being
	// created (the registrations watch reads no data of the bridge's own).
	legacyOurs atomic.Pointer[map[string]bool]
	// idsMu guards ids, the group's registrations watch while anyone subscribes
	// (claimer_watch.go).
	idsMu sync.Mutex
	ids   *idsWatch
	done  chan struct{}

	kafka  kafkaPart
	legacy legacyPart
	// armed are the waits of claims holding a watch on an owner znode (claimWait.watch).
	armed []*claimWait
}

// kafkaPart is what the claimer holds and does for the group's Kafka members.
type kafkaPart struct {
	held mirrorState
	// unsure are znodes, path → data, whose create reported an error but may have been
	// applied: the connection or the request's deadline went while it was in flight. Neither
	// held nor forgotten: a release would never delete such a znode, and held by our session it
	// would keep its partition from the group's next owner for as long as this bridge lives.
	// sweepUnsure settles them.
	unsure map[string][]byte
	want   *mirrorState // a state still to reconcile
	run    *claimRun    // the claim in progress
}

// claimerLeave is a kind leaving the claimer: with release, what it holds is deleted first
// (bounded by releaseTimeout), else forgotten (it goes with the session). handed, when set,
// receives what the Kafka members held, or may hold (unsure), as it forgets it: the group's
// next owner adopts it (mixed_adopt.go).
//
// also, with release (the Kafka kind's), goes in the Multi that deletes what it holds
// (releaseAll); applied, when set, receives whether it did before ack is closed.
type claimerLeave struct {
	legacy  bool
	release bool
	handed  *mirrorState
	ack     chan struct{}
	also    []zkstate.Op
	applied *bool
}

func newClaimer(cfg claimerConfig) *claimer {
	cl := &claimer{
		store: cfg.store, group: cfg.group, retry: cfg.retry, log: cfg.log, metrics: cfg.metrics,
		backoff: cmp.Or(cfg.backoff, claimBackoff), backoffMax: cmp.Or(cfg.backoffMax, claimBackoffMax),
		want:       make(chan mirrorRequest, 1),
		legacyKick: make(chan struct{}, 1),
		leaves:     make(chan claimerLeave),
		adopts:     make(chan adoptRequest),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		kafka:      kafkaPart{held: mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}, unsure: map[string][]byte{}},
		legacy:     newLegacyPart(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	cl.abandon = cancel
	go cl.run(ctx)
	return cl
}

// mirrorRequest is a state to reconcile, a claim, or the owner znodes of threads to release
// (mixed.go).
type mirrorRequest struct {
	state   *mirrorState
	claim   *claim
	release []string
}

// update replaces the wanted state; it never blocks (the Kafka actor is the only sender).
func (cl *claimer) update(s mirrorState) { cl.request(mirrorRequest{state: &s}) }

func (cl *claimer) request(r mirrorRequest) {
	select {
	case old := <-cl.want:
		if r.release != nil && old.release != nil {
			r.release = append(old.release, r.release...) // releases add up
		}
	default:
	}
	cl.want <- r
}

// leave ends a kind's use of the claimer (see claimerLeave); it returns once done.
// The Kafka kind's release may carry also (claimerLeave): applied says it went with the mirror.
func (cl *claimer) leave(legacy, release bool, also ...zkstate.Op) (applied bool) {
	cl.sendLeave(claimerLeave{legacy: legacy, release: release, ack: make(chan struct{}), also: also, applied: &applied})
	return applied
}

// handOver ends the Kafka actor's use of the claimer, forgetting what its members hold, and
// returns it (mixed_adopt.go).
func (cl *claimer) handOver() mirrorState {
	handed := mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}
	cl.sendLeave(claimerLeave{handed: &handed, ack: make(chan struct{})})
	return handed
}

func (cl *claimer) sendLeave(l claimerLeave) {
	select {
	case cl.leaves <- l:
		<-l.ack
	case <-cl.done:
	}
}

func (cl *claimer) run(ctx context.Context) {
	defer close(cl.done)
	defer cl.sweepWatches(true)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		cl.drainLegacy(ctx) // a cancel must be seen before the claim's next round
		cl.runDue(ctx)
		cl.sweepWatches(false)
		if next := cl.nextDue(); !next.IsZero() {
			due.Reset(max(time.Until(next), 0))
		} else {
			due.Stop()
		}
		out, ev := cl.legacyOut()
		select {
		case out <- ev:
			cl.legacy.outbox = cl.legacy.outbox[1:]
			continue
		case r := <-cl.want:
			if cl.onKafka(ctx, r) {
				continue
			}
		case <-cl.legacyKick:
			cl.drainLegacy(ctx)
			continue
		case l := <-cl.leaves:
			cl.onLeave(l)
			continue
		case r := <-cl.adopts:
			r.result <- cl.adopt(ctx, r)
			continue
		case <-cl.kafkaDone():
			cl.kafka.run = nil // the generation is over
			continue
		case ev, ok := <-cl.kafka.run.waitOf().gone():
			cl.ownerEvent(cl.kafka.run.waitOf(), ev, ok)
			continue
		case ev, ok := <-cl.legacy.run.waitOf().gone():
			cl.ownerEvent(cl.legacy.run.waitOf(), ev, ok)
			continue
		case <-due.C:
			continue
		case <-retry.C:
		case <-cl.stop:
			return
		}
		want := cl.kafka.want
		if want == nil {
			continue
		}
		if cl.reconcile(ctx, &cl.kafka.held, *want) {
			retry.Stop()
		} else {
			retry.Reset(cl.retry)
		}
	}
}

// onKafka takes a request of the Kafka actor; it reports whether the request was served (a
// state is left to reconcile).
func (cl *claimer) onKafka(ctx context.Context, r mirrorRequest) bool {
	switch {
	case r.claim != nil:
		// A claim supersedes the state wanted before it, and the claim before it.
		cl.kafka.want = nil
		cl.kafka.run = cl.newClaimRun(r.claim)
		return true
	case r.release != nil:
		// Threads of members that rejoined or left: the claim in progress, if any, goes on
		// (its next round reads the group again).
		cl.kafka.want = nil
		cl.releaseThreads(ctx, r.release)
		return true
	}
	cl.kafka.want = r.state
	cl.kafka.run = nil
	return false
}

func (cl *claimer) kafkaDone() <-chan struct{} {
	if cl.kafka.run == nil {
		return nil
	}
	return cl.kafka.run.c.done
}

func (cl *claimer) onLeave(l claimerLeave) {
	rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if l.legacy {
		// What the legacy actor sent before it left is served first: a ping's offsets written
		// after our owner znodes are released could move back the next owner's.
		cl.drainLegacy(rctx)
		cl.legacyLeave(rctx, l.release)
	} else {
		cl.kafka.run, cl.kafka.want = nil, nil
		if l.release {
			ok, applied := cl.releaseAll(rctx, l.also) // mirror_release.go
			if !ok {
				cl.reconcile(rctx, &cl.kafka.held, mirrorState{})
			}
			if l.applied != nil {
				*l.applied = applied
			}
		}
		if h := l.handed; h != nil {
			maps.Copy(h.ids, cl.kafka.held.ids)
			maps.Copy(h.owners, cl.kafka.held.owners)
			for p, d := range cl.kafka.unsure {
				if strings.HasPrefix(p, zkstate.OwnersPath(cl.group)+"/") {
					h.owners[p] = d
				} else {
					h.ids[p] = d
				}
			}
			clear(cl.kafka.unsure)
			// The store must not make them again if our session expires: the next owner
			// may have deleted them by then.
			for _, m := range []map[string][]byte{h.ids, h.owners} {
				for p := range m {
					if err := cl.store.ForgetEphemeral(rctx, p); err != nil {
						cl.log.Debug().Err(err).Str("path", p).Msg("forgetting a handed-over ephemeral failed")
					}
				}
			}
		}
		cl.kafka.held = mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}
		cl.publishOurs(nil, nil)
	}
	close(l.ack)
}

// runDue runs the round of every claim that is due, a few passes at most (a round that asks for
// another at once, or that woke the other kind's claim, makes it due again).
func (cl *claimer) runDue(ctx context.Context) {
	for range 8 {
		ran := false
		now := time.Now()
		if r := cl.kafka.run; r != nil && !now.Before(r.due) {
			ran = true
			cl.kafkaRound(ctx, r)
		}
		if r := cl.legacy.run; r != nil && !now.Before(r.due) {
			ran = true
			cl.legacyRound(ctx, r)
		}
		if !ran {
			break
		}
	}
}

// nextDue is when the earliest waiting claim retries; zero when none waits.
func (cl *claimer) nextDue() time.Time {
	var t time.Time
	for _, d := range []*claimWait{cl.kafka.run.waitOf(), cl.legacy.run.waitOf()} {
		if d != nil && (t.IsZero() || d.due.Before(t)) {
			t = d.due
		}
	}
	return t
}

// claimWait is a claim's place in the one backoff policy: its next round is due at due, and a
// blocked round waits backoff (doubled each time, up to the claimer's backoffMax) for the one
// after, or until the owner znode it waits for (watched) goes away.
type claimWait struct {
	due     time.Time
	backoff time.Duration
	watched string
	watch   <-chan zkstate.WatchEvent
	unwatch context.CancelFunc
}

// gone is the watch on the owner znode waited for; nil (never ready) without one.
func (w *claimWait) gone() <-chan zkstate.WatchEvent {
	if w == nil {
		return nil
	}
	return w.watch
}

func (w *claimWait) stopWatch() {
	if w.unwatch != nil {
		w.unwatch()
	}
	w.watched, w.watch, w.unwatch = "", nil, nil
}

// blocked schedules the round after a blocked one, and watches owner, the first foreign owner
// znode it waits for, so that its release retries at once (one watch per waiting claim, the
// same path for every member kind).
func (cl *claimer) blocked(ctx context.Context, w *claimWait, owner string) {
	w.due = time.Now().Add(w.backoff)
	w.backoff = min(2*w.backoff, cl.backoffMax)
	if owner == "" || owner == w.watched {
		return
	}
	w.stopWatch()
	wctx, cancel := context.WithCancel(ctx)
	ch, err := cl.store.WatchData(wctx, owner)
	if err != nil {
		cancel()
		return // the backoff still retries
	}
	w.watched, w.watch, w.unwatch = owner, ch, cancel
	if !slices.Contains(cl.armed, w) {
		cl.armed = append(cl.armed, w)
	}
}

// ownerEvent takes a firing of a waiting claim's watch: the owner znode gone retries every
// waiting claim (what the other kind waits for may have gone with it).
func (cl *claimer) ownerEvent(w *claimWait, ev zkstate.WatchEvent, ok bool) {
	switch {
	case !ok:
		w.watch = nil
	case !ev.Exists:
		w.stopWatch()
		cl.wakeAll()
	}
}

// sweepWatches ends the watches of claims that are over (all of them with all).
func (cl *claimer) sweepWatches(all bool) {
	kept := cl.armed[:0]
	for _, w := range cl.armed {
		live := !all && (w == cl.kafka.run.waitOf() || w == cl.legacy.run.waitOf())
		if live && w.unwatch != nil {
			kept = append(kept, w)
			continue
		}
		w.stopWatch()
	}
	cl.armed = kept
}

// wakeAll retries every waiting claim now.
func (cl *claimer) wakeAll() {
	cl.wakeKafka()
	cl.wakeLegacy()
}

// wakeKafka and wakeLegacy retry that kind's waiting claim now: the other kind let go of owner
// znodes, which may be what it waits for.
func (cl *claimer) wakeKafka() {
	if w := cl.kafka.run.waitOf(); w != nil {
		w.due = time.Time{}
	}
}

func (cl *claimer) wakeLegacy() {
	if w := cl.legacy.run.waitOf(); w != nil {
		w.due = time.Time{}
	}
}

// untilClosed is ctx, also cancelled when any of chs closes; its cancel must be called.
func untilClosed(ctx context.Context, chs ...<-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	for _, ch := range chs {
		if ch == nil {
			continue
		}
		go func() {
			select {
			case <-ch:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// reconcile moves held towards want: owners and registrations that go are deleted first (so a
// partition that moves to another member is free for it), then registrations and owners that
// come are created, as a 0.8 consumer registers before it claims. It reports whether held
// equals want.
func (cl *claimer) reconcile(ctx context.Context, held *mirrorState, want mirrorState) bool {
	cl.sweepUnsure(ctx, held.ids, held.owners, want.ids, want.owners)
	ok := true
	// An owner znode is deleted only while it holds the thread we wrote: our legacy side may
	// have made it again in this session after someone deleted ours.
	drop := func(have, keep map[string][]byte, owners bool) {
		for _, p := range sortedPaths(have) {
			if d, still := keep[p]; still && bytes.Equal(d, have[p]) {
				continue
			}
			var err error
			if owners {
				err = cl.store.DeleteEphemeralHolding(ctx, p, have[p])
			} else {
				err = cl.store.DeleteEphemeral(ctx, p)
			}
			if err != nil && !errors.Is(err, zkstate.ErrNotOwner) {
				cl.failed(err, p, "removing")
				ok = false
				continue
			}
			delete(have, p)
		}
	}
	add := func(have, wanted map[string][]byte) {
		for _, p := range hostedFirst(sortedPaths(wanted)) {
			if _, there := have[p]; there {
				continue
			}
			err := cl.store.CreateEphemeral(ctx, p, wanted[p])
			cl.noteCreate(err, map[string][]byte{p: wanted[p]})
			if err != nil {
				cl.failed(err, p, "creating")
				ok = false
				continue
			}
			have[p] = wanted[p]
		}
	}
	released := len(held.owners)
	drop(held.owners, want.owners, true)
	if len(held.owners) < released {
		cl.wakeLegacy()
	}
	drop(held.ids, want.ids, false)
	cl.publishOurs(held.ids, want.ids)
	cl.addBatch(ctx, held, want)
	add(held.ids, want.ids)
	add(held.owners, want.owners)
	cl.publishOurs(held.ids, nil)
	return ok
}

// addBatch creates every registration, hosted-member and owner znode of want that held lacks in
// one Multi (zkstate.CreateEphemerals), when there are several: a group's mirror is a dozen
// znodes or more, which one by one cost as many round trips in a row and as many writes of
// ZooKeeper; a crash's survivors restore every group of the dead bridge at once, and those writes
// queued their own session's reads and commits behind them. When the Multi fails (a znode is held,
// by another session or ours already, or the answer was lost), the creates one by one follow, as
// before: they tell which is whose.
func (cl *claimer) addBatch(ctx context.Context, held *mirrorState, want mirrorState) {
	nodes := map[string][]byte{}
	for _, kind := range [][2]map[string][]byte{{held.ids, want.ids}, {held.owners, want.owners}} {
		for p, d := range kind[1] {
			if _, there := kind[0][p]; !there {
				nodes[p] = d
			}
		}
	}
	if len(nodes) < 2 {
		return
	}
	err := cl.store.CreateEphemerals(ctx, nodes)
	if err != nil {
		cl.log.Debug().Err(err).Int("znodes", len(nodes)).Msg("mirror: the batch of creates failed; creating one by one")
		return
	}
	cl.noteCreate(nil, nodes)
	for p, d := range nodes {
		if _, ok := want.ids[p]; ok {
			held.ids[p] = d
		} else {
			held.owners[p] = d
		}
	}
}

// createUnsettled reports whether a create that failed with err may have been applied all the
// same: the request was sent, and its answer lost or given up on. A session that expired took
// any ephemeral it made with it.
func createUnsettled(err error) bool {
	return errors.Is(err, zkstate.ErrConnLoss) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled)
}

// noteCreate records the outcome of creating the znodes made (path → data).
func (cl *claimer) noteCreate(err error, made map[string][]byte) {
	for p, d := range made {
		switch {
		case err == nil:
			delete(cl.kafka.unsure, p)
		case createUnsettled(err):
			if cl.kafka.unsure == nil {
				cl.kafka.unsure = map[string][]byte{}
			}
			cl.kafka.unsure[p] = d
		}
	}
}

// sweepUnsure deletes the znodes of unsettled creates that nothing in keep holds or wants any
// more, if they are there as we wrote them: our session's, with our data (an owner znode of the
// same path may be another kind's or another session's since). One still kept stays unsure: the
// create that comes next settles it (CreateEphemeral takes a node of our session as made).
func (cl *claimer) sweepUnsure(ctx context.Context, keep ...map[string][]byte) {
	for _, p := range sortedPaths(cl.kafka.unsure) {
		if slices.ContainsFunc(keep, func(m map[string][]byte) bool { _, in := m[p]; return in }) {
			continue
		}
		data, st, err := cl.store.Get(ctx, p)
		switch {
		case errors.Is(err, zkstate.ErrNoNode):
		case err != nil:
			continue // settled on a later pass
		case st.EphemeralOwner != cl.store.SessionID() || !bytes.Equal(data, cl.kafka.unsure[p]):
			// not ours: never applied, or gone and made again by someone else
		default:
			if err := cl.store.Delete(ctx, p, st.Version); err != nil && !errors.Is(err, zkstate.ErrNoNode) {
				cl.failed(err, p, "removing the unsettled")
				continue
			}
		}
		delete(cl.kafka.unsure, p)
	}
}

// publishOurs sets ours to the consumer ids registered in have or about to be in want: a superset
// of the bridge's Kafka registrations in ZooKeeper at every instant, since a registration enters
// it before its create and leaves it after its delete.
func (cl *claimer) publishOurs(have, want map[string][]byte) {
	prefix := zkstate.IDsPath(cl.group) + "/"
	ours := map[string]bool{}
	for _, m := range []map[string][]byte{have, want} {
		for p := range m {
			if cid, ok := strings.CutPrefix(p, prefix); ok {
				ours[cid] = true
			}
		}
	}
	cl.ours.Store(&ours)
}

// oursNow returns a copy of ours.
func (cl *claimer) oursNow() map[string]bool {
	p := cl.ours.Load()
	if p == nil {
		return map[string]bool{}
	}
	return maps.Clone(*p)
}

// ours returns the consumer ids of the Kafka registrations that group's claimer holds or is
// creating, none when the group has no claimer on this bridge. The map is the one published,
// not a copy (publishOurs makes a new one each time and never writes it again): the caller
// reads it only. The foreign check calls this at every change of /consumers/<g>/ids, and a
// copy of n ids at each of a join's n changes was a cost of order n² per join.
func (cs *claimers) ours(group string) map[string]bool {
	if cs == nil {
		return nil
	}
	cs.mu.Lock()
	cl := cs.m[group]
	cs.mu.Unlock()
	if cl == nil {
		return nil
	}
	if p := cl.ours.Load(); p != nil {
		return *p
	}
	return nil
}

func (cl *claimer) failed(err error, p, doing string) {
	if cl.metrics != nil {
		cl.metrics.mirrorErrors.Inc()
	}
	e := cl.log.Warn()
	if errors.Is(err, zkstate.ErrNodeExists) || errors.Is(err, context.Canceled) {
		e = cl.log.Debug() // held by a session that is going away, or we are: retried
	}
	e.Err(err).Str("path", p).Msgf("0.8 mirror: %s znode failed", doing)
}
