package bridge

// Groups moving between bridges (DESIGN §7, docs/several-bridges.md), on top of the live view (peers.go):
//
//   - A request for a group that maps to another bridge is answered NOT_COORDINATOR, and no
//     actor is started for it: a group is never loaded twice.
//   - When the live set changes, each loaded group that no longer maps to us is handed over:
//     its actor stops taking requests (they get NOT_COORDINATOR and find the new owner), lets
//     the write in flight finish (persist before reply: everything answered is in ZooKeeper),
//     releases its 0.8 mirror, then releases the epoch (zkstate.Epoch.Released, a write that
//     bumps the version and so fences anything of ours still on its way). A group that maps
//     elsewhere and is not loaded but whose epoch names us is released the same way.
//   - A group that now maps to us and whose epoch names another bridge (released, or gone:
//     its registration vanished when its session expired) is loaded at once, not when a client
//     retries: its record is restored, so members carry on in their generation. A group whose
//     holder is alive and has not released it yet is waited for (groupStore.acquire) until the
//     holder releases it or goes, within the load timeout.
//   - Shutdown with other bridges live drains: the registration is deleted first, then every
//     group is handed over as above, each logged with its new owner.
//   - A bridge that cannot vouch for its session (zkstate.Store.Vouched) while other bridges
//     are live answers its groups' requests COORDINATOR_NOT_AVAILABLE: before the server can
//     expire the session, and so before another bridge can take a group over, it has stopped
//     answering.
//
// A bridge alone never sees its live ids change: none of this runs, and it serves as before.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Handover causes (zkbridge_groups_handovers_total).
const (
	handoverPlacement = "placement" // the group maps to another bridge now (one joined)
	handoverShutdown  = "shutdown"  // this bridge drains
	takeoverReleased  = "takeover_released"
	takeoverFailover  = "takeover_failover" // its holder's registration is gone
)

// placementMetrics are the metrics of several bridges as one service.
type placementMetrics struct {
	live      prometheus.Gauge
	handovers *prometheus.CounterVec // cause
}

func newPlacementMetrics(reg prometheus.Registerer, owned func() float64) (*placementMetrics, error) {
	m := &placementMetrics{
		live: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "bridges", Name: "live",
			Help: "Live bridges of this service (registrations under <root>/bridges, this one included while it serves).",
		}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "handovers_total",
			Help: "Groups that moved to or from this bridge, by cause: placement (handed over: it maps to another bridge now), shutdown (handed over while draining), takeover_released (taken from a bridge that handed it over), takeover_failover (taken from a bridge that is gone).",
		}, []string{"cause"}),
	}
	for _, c := range []string{handoverPlacement, handoverShutdown, takeoverReleased, takeoverFailover} {
		m.handovers.WithLabelValues(c)
	}
	ownedGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "zkbridge", Subsystem: "groups", Name: "owned",
		Help: "Groups this bridge coordinates now (loaded, and mapping to it).",
	}, owned)
	for _, c := range []prometheus.Collector{m.live, m.handovers, ownedGauge} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("bridge: registering metrics: %w", err)
		}
	}
	return m, nil
}

// owns reports whether name maps to this bridge (always, without a peer set).
func (c *coordinator) owns(name string) bool { return c.peers == nil || c.peers.owns(name) }

// owned counts the loaded groups that map to this bridge.
func (c *coordinator) owned() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name, a := range c.actors {
		if a.loaded.Load() && c.owns(name) {
			n++
		}
	}
	return float64(n)
}

// placementChanged is the peer set's subscriber: it hands over the loaded groups that map
// elsewhere now, then (in the background) releases the unloaded ones and takes over those
// that map to us.
func (c *coordinator) placementChanged(_, cur *liveView) {
	if c.pm != nil {
		c.pm.live.Set(float64(len(cur.ids)))
	}
	cause := handoverPlacement
	if !c.peers.serving.Load() {
		cause = handoverShutdown
	}
	c.mu.Lock()
	if c.closed || c.store == nil {
		c.mu.Unlock()
		return
	}
	for name, a := range c.actors {
		if !c.peers.owns(name) {
			a.handOver(cause)
		}
	}
	store := c.store
	c.goLocked(func(ctx context.Context) { c.rescan(ctx, store) })
	c.mu.Unlock()
}

// registered rescans once our registration exists: a rescan before it loaded nothing
// (actorWith refuses every group until then).
func (c *coordinator) registered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.store == nil {
		return
	}
	store := c.store
	c.goLocked(func(ctx context.Context) { c.rescan(ctx, store) })
}

// rescan compares every group's epoch with the current placement: it releases the groups that
// name us but map elsewhere and are not loaded, and loads those that map to us but name another
// bridge (or our own released epoch). Scans run one at a time; a change during one is seen by
// the next.
//
// After a change that only removed bridges (a crash's expiry, a drained bridge gone), the
// groups listed before that did not move to us are not read (narrowScan): removing bridges moves
// only the removed ones' groups, so nothing else is ours to take or to release that the last
// complete rescan did not see. Where the takeover of a bridge of 300 groups read 300 epochs, it
// reads its own share of the dead bridge's; the groups made since the last rescan are read all.
func (c *coordinator) rescan(ctx context.Context, store *zkstate.Store) {
	c.scanMu.Lock()
	defer c.scanMu.Unlock()
	view, sid0 := c.peers.current(), store.SessionID()
	own := c.peers.ownRegistered(sid0)
	groups, reads, sid, err := c.scanEpochs(ctx, store, c.narrowScan(view, sid0))
	c.scannedView = nil // set again below once this scan saw everything through
	if err != nil {
		if !errors.Is(err, zkstate.ErrNoNode) && ctx.Err() == nil {
			c.log.Warn().Err(err).Msg("placement: cannot read the groups' epochs; they move when their clients come")
		}
		return
	}
	serving := c.peers.serving.Load()
	complete := own && serving && sid0 != 0 && sid == sid0
	defer func() {
		if complete && ctx.Err() == nil {
			c.scannedView, c.scannedSession = view, sid0
		}
	}()
	for i, r := range reads {
		if ctx.Err() != nil {
			break
		}
		if r.Err != nil {
			if !errors.Is(r.Err, zkstate.ErrNoNode) {
				complete = false
			}
			continue
		}
		if !c.placeGroup(ctx, store, groups[i], r, sid, serving, 0) {
			complete = false // the next rescan reads every group again
		}
	}
}

// placeGroup is a rescan's decision for one group, whose epoch was read as r in session sid (0:
// the session changed during the read), serving telling whether we serve: it takes the group over
// when it maps to us and its epoch names another bridge or our own release, and releases it when
// it maps elsewhere and its epoch names us. A group to take over that has an actor is passed
// over (passOver: its actor's end has it decided again, recheck.go), and one to release that has
// an actor is left to it (leaveTo: it hands the group over, or its failed load has the group
// decided again); the actor of a takeover is followed
// (recheck.go: a failed load is decided again, backing off).
// tries is 0 for a rescan, a recheck's count for a recheck. It reports false when a release
// failed.
func (c *coordinator) placeGroup(ctx context.Context, store *zkstate.Store, name string, r zkstate.Read, sid int64, serving bool, tries int) bool {
	e, err := zkstate.ParseEpoch(r.Data)
	if err != nil {
		return true
	}
	self := c.cfg.NodeID
	mine := c.peers.owns(name) && serving
	switch {
	case mine && (e.NodeID != self || e.Released):
		if c.passOver(name, tries) {
			return true
		}
		cause := takeoverReleased
		if !e.Released && !c.peers.live(e.NodeID) {
			cause = takeoverFailover
		}
		hint := &takeoverHint{version: r.Stat.Version, mzxid: r.Stat.Mzxid, holder: e.NodeID, released: e.Released}
		if r.InSession {
			hint.session = sid
		}
		if !e.Released && c.peers.hasRegistration(e.NodeID) {
			// A live holder handing the group over (a draining bridge is still
			// registered): acquire waits for its release, from this read.
			hint.wait, hint.data, hint.draining = true, r.Data, !c.peers.live(e.NodeID)
		}
		c.log.Info().Str("group", name).Int32("from", e.NodeID).Str("cause", cause).Msg("taking the group over")
		a, _ := c.actorWith(name, hint)
		if a != nil && c.pm != nil {
			c.pm.handovers.WithLabelValues(cause).Inc()
		}
		if a != nil {
			c.follow(a, max(tries, 1))
		}
	case !mine && e.NodeID == self && !e.Released:
		if c.leaveTo(name, tries) {
			return true // its actor hands it over (or, when its load failed, has it decided again)
		}
		released := zkstate.Epoch{NodeID: self, AcquiredMs: time.Now().UnixMilli(), Released: true}.Encode()
		if _, err := store.Set(ctx, zkstate.EpochPath(c.cfg.Root, name), released, r.Stat.Version); err != nil && !errors.Is(err, zkstate.ErrBadVersion) {
			c.log.Warn().Err(err).Str("group", name).Msg("placement: releasing an unloaded group failed")
			return false
		}
	}
	return true
}

// scanEpochs lists the groups and reads their epochs, reads[i] that of groups[i]. The groups
// the last rescan listed are read beside the list, a round trip less on the way of every
// handover (a rescan follows each change of the live bridges); the list is still read, to catch
// the groups made since, whose epochs are read after it, and a group it no longer holds is
// dropped. sid is the session the reads were answered in (0: it changed meanwhile). With moved
// (narrowScan), only the listed groups it reports and the groups made since are read, and
// groups holds only those; the list kept for the next scan is the whole one.
func (c *coordinator) scanEpochs(ctx context.Context, store *zkstate.Store, moved func(string) bool) (groups []string, reads []zkstate.Read, sid int64, err error) {
	epochs := func(names []string) ([]zkstate.Read, error) {
		paths := make([]string, len(names))
		for i, g := range names {
			paths[i] = zkstate.EpochPath(c.cfg.Root, g)
		}
		return store.GetMany(ctx, paths)
	}
	sid = store.SessionID()
	cached, listed := c.scanned, c.scanned
	if moved != nil {
		cached = slices.DeleteFunc(slices.Clone(cached), func(g string) bool { return !moved(g) || c.passOver(g, 0) })
	}
	early := make(chan error, 1)
	var got []zkstate.Read
	go func() {
		var err error
		got, err = epochs(cached)
		early <- err
	}()
	groups, _, err = store.Children(ctx, zkstate.BridgeGroupsPath(c.cfg.Root))
	if rerr := <-early; err == nil {
		err = rerr
	}
	if err != nil {
		return nil, nil, 0, err
	}
	byName := make(map[string]zkstate.Read, len(groups))
	for i, g := range cached {
		byName[g] = got[i]
	}
	var added []string
	for _, g := range groups {
		if _, ok := byName[g]; !ok && (moved == nil || !slices.Contains(listed, g)) {
			added = append(added, g)
		}
	}
	if len(added) > 0 {
		more, err := epochs(added)
		if err != nil {
			return nil, nil, 0, err
		}
		for i, g := range added {
			byName[g] = more[i]
		}
	}
	c.scanned = groups
	if moved != nil {
		groups = slices.DeleteFunc(slices.Clone(groups), func(g string) bool { _, ok := byName[g]; return !ok })
	}
	reads = make([]zkstate.Read, len(groups))
	for i, g := range groups {
		reads[i] = byName[g]
	}
	if store.SessionID() != sid {
		sid = 0
	}
	return groups, reads, sid, nil
}

// narrowScan is, for a rescan with view in session sid, which of the groups listed before it
// can have moved to us since the last rescan that saw every group (scannedView): those that map
// to us in view and did not in that one, when view only removed bridges from it (rendezvous
// hashing moves only the removed bridges' groups: a group that mapped elsewhere still does, one
// that mapped to us still does). nil, every group read, when that does not hold: a bridge
// joined, we do not serve, the session changed, or the last rescan did not see everything
// through (an error, a release that failed, no registration of ours yet), or a loaded group's
// release failed since (rescanAll). scanMu is held.
func (c *coordinator) narrowScan(view *liveView, sid int64) func(string) bool {
	last, self := c.scannedView, c.cfg.NodeID
	if c.rescanAll.Swap(false) || last == nil || sid == 0 || c.scannedSession != sid || !c.peers.serving.Load() ||
		!slices.Contains(view.ids, self) || !slices.Contains(last.ids, self) {
		return nil
	}
	for _, id := range view.ids {
		if !slices.Contains(last.ids, id) {
			return nil
		}
	}
	return func(name string) bool {
		now, _ := placement.Owner(name, view.ids)
		before, _ := placement.Owner(name, last.ids)
		return now == self && before != self
	}
}

// ownRegistered reports whether this bridge's registration exists in session sid
// (register_own.go).
func (p *peerSet) ownRegistered(sid int64) bool {
	in, _ := p.own.now()
	return sid != 0 && in == sid
}

// takeoverHint is what a rescan read of the epoch of a group it takes over. When the epoch was
// released or its holder had no registration at the last read of the live bridges, the load
// takes the epoch at that version at once, then checks its holder (groupStore.takeHinted), where
// a load without one reads the epoch and looks its holder up first; the check and the record's
// read go side by side once the write is answered: the load of each group a dead bridge held
// takes two round trips in a row instead of five. A version that moved since
// makes the load look again. A registered holder (alive, or draining: handing its groups over)
// is waited for (wait): acquire starts from this read and the rescan's view of the holder, and
// sets its watch on the release at once, where it read the record's existence, the epoch and
// the holder's registration first.
type takeoverHint struct {
	version  int32
	mzxid    int64 // of the epoch as read: which write of its holder it is
	holder   int32
	released bool

	wait     bool
	data     []byte // the epoch read, with wait
	draining bool   // the holder is registered but out of the live set

	// prepared, set for a takeover prepared while its holder looked dead (preload.go), is the
	// epoch and record read then: the takeover is one Multi that checks both.
	prepared *preparedTakeover

	// session is the session the rescan read the epoch on (zkstate.Read.InSession), 0 when it
	// was read on the multiRead connection or the session changed during the read: for a
	// released epoch the load reads the record beside its write (readRecord).
	session int64
}

// drain hands every group over to the other bridges before shutdown: it stops counting this
// bridge as live, then waits (up to timeout) for every actor to have released its group, and
// logs where each went. deregister runs first, so that the other bridges compute us out at once.
func (c *coordinator) drain(ctx context.Context, timeout time.Duration, deregister func()) *untold {
	c.mu.Lock()
	names := make([]string, 0, len(c.actors))
	for name := range c.actors {
		names = append(names, name)
	}
	store := c.store
	c.mu.Unlock()
	start := time.Now()
	// handover_linger.go: which members will have heard NOT_COORDINATOR before we close (read
	// while the groups are handed over).
	told := c.tellMembers(ctx, timeout, store, names)
	// Stop admitting first (placementChanged hands every loaded group over), then deregister,
	// so that no other bridge takes a group while this one still answers for it.
	c.peers.leave()
	deregister()
	if store != nil {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		c.rescan(ctx, store) // and releases the unloaded ones
		cancel()
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		n := len(c.actors)
		c.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.waitAdoptions(adoptWait + time.Second) // mixed_adopt.go: our session keeps them until then
	to := map[int32][]string{}
	for _, name := range names {
		n, ok := c.peers.ownerOK(name)
		if !ok {
			n = -1
		}
		to[n] = append(to[n], name)
	}
	for n, gs := range to {
		c.log.Info().Int32("to", n).Strs("groups", gs).Msg("drained: groups handed over")
	}
	c.log.Info().Int("groups", len(names)).Dur("took", time.Since(start)).Msg("drained every group to the other bridges")
	return told
}

// handOver asks the actor to hand its group over (it takes no more requests).
func (a *actor) handOver(cause string) {
	select {
	case a.handover <- cause:
	default: // already asked
	}
}

// leave hands the group over: the write in flight is let finish, so that every answer given
// is in ZooKeeper; then finish releases the mirror and the epoch.
func (a *actor) leave(ctx context.Context, cause string) {
	deadline := time.NewTimer(a.c.cfg.WriteTimeout)
	defer deadline.Stop()
wait:
	for a.writing {
		select {
		case res := <-a.writes:
			a.written(ctx, res)
		case <-deadline.C:
			break wait
		}
	}
	if a.writing {
		a.stopPut()
		res := <-a.writes
		a.writing, a.gs = false, res.gs
	}
	gs, gen := a.gs, int32(a.m.Generation())
	// mixed_adopt.go: the Kafka members carry on in their generation; the next owner adopts
	// their ephemerals.
	a.handMirror = a.mixedMode() && a.m.State() != group.Empty
	if !a.handMirror {
		a.releaseOps = gs.releaseOps() // in the mirror's Multi: the epoch a round trip sooner
	}
	a.released = func(withMirror bool) {
		if gs == nil || gs.epoch < 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.c.cfg.WriteTimeout)
		defer cancel()
		if withMirror {
			gs.epoch = -1
		} else if err := gs.release(ctx); errors.Is(err, zkstate.ErrBadVersion) {
			a.log.Info().Str("cause", cause).Msg("group handed over: another bridge had taken it already")
			return
		} else if err != nil {
			a.log.Warn().Err(err).Msg("releasing the group's epoch failed; the next owner waits for it or for our session")
			a.c.rescanAll.Store(true) // the next rescan releases it
			return
		}
		if a.c.pm != nil {
			a.c.pm.handovers.WithLabelValues(cause).Inc()
		}
		to, _ := a.c.peers.ownerOK(a.group)
		a.log.Info().Str("cause", cause).Int32("to", to).Int32("generation", gen).Msg("group handed over")
	}
	a.finish(true)
}

// unvouched answers req COORDINATOR_NOT_AVAILABLE when other bridges are live and this one
// cannot vouch for its ZooKeeper session: another bridge may take the group over once the
// session expires, and by then this one has stopped answering for it.
func (a *actor) unvouched(req *request) bool {
	c := a.c
	if c.peers == nil || c.peers.alone() || a.gs == nil || a.gs.store == nil {
		return false
	}
	if _, ok := req.ev.(group.Describe); ok {
		return false
	}
	if a.gs.store.Vouched(time.Now()) {
		return false
	}
	req.reply <- req.finish(errorReply(a.group, req.ev, group.ErrCoordinatorNotAvailable))
	return true
}

// release writes the group's epoch as released by us, with our version: the next owner may take
// it at once, and any write of ours still on its way fails.
func (g *groupStore) release(ctx context.Context) error {
	if g.epoch < 0 {
		return nil
	}
	data := zkstate.Epoch{NodeID: g.nodeID, AcquiredMs: time.Now().UnixMilli(), Released: true}.Encode()
	_, err := g.store.Set(ctx, zkstate.EpochPath(g.root, g.group), data, g.epoch)
	g.epoch = -1
	if err != nil {
		return fmt.Errorf("release group %q: %w", g.group, err)
	}
	return nil
}

// releaseOps is release as an op of the Multi that deletes the group's 0.8 mirror
// (mirror_release.go), so that both go in one round trip and the epoch still no earlier than
// the mirror; none when the group is not ours. A Multi that fails leaves the epoch to release.
func (g *groupStore) releaseOps() []zkstate.Op {
	if g == nil || g.epoch < 0 {
		return nil
	}
	data := zkstate.Epoch{NodeID: g.nodeID, AcquiredMs: time.Now().UnixMilli(), Released: true}.Encode()
	return []zkstate.Op{zkstate.SetOp(zkstate.EpochPath(g.root, g.group), data, g.epoch)}
}

// awaitRelease waits until the epoch znode at p moves from version v (its holder released it,
// or another bridge took it) or the holder's registration is gone, or ctx ends. It returns the
// epoch as the watch read it once it moved (the watch reads it as it sets itself again, so the
// caller need not read it once more: a round trip less between the release and the takeover),
// nil when the holder went or ctx ended.
func (g *groupStore) awaitRelease(ctx context.Context, p string, v int32, holder int32) (*epochRead, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := g.store.WatchData(wctx, p)
	if err != nil {
		return nil, err
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, ctx.Err()
			}
			if !ev.Exists || ev.Stat.Version != v {
				return &epochRead{data: ev.Data, st: ev.Stat, exists: ev.Exists, watched: true}, nil
			}
		case <-tick.C:
			alive, _, err := g.store.Exists(ctx, zkstate.BridgePath(g.root, holder))
			if err == nil && !alive {
				return nil, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// epochRead is a group's epoch znode as read: by acquire, by a rescan (takeoverHint.read) or by
// the watch on its holder's release. holderKnown says the rescan's view of the bridges told
// whether its holder is registered (alive) and draining, so acquire need not read it.
type epochRead struct {
	data   []byte
	st     zkstate.Stat
	exists bool
	// watched: read by the release's watch, on our session, after the release.
	watched bool
	// session: read by a Get answered in that session (readEpoch), not 0.
	session int64

	holderKnown, registered, draining bool
}

// epochReadErr is a read of a group's epoch by readEpoch; err is not that of a missing epoch.
type epochReadErr struct {
	epochRead
	err error
}

// readEpoch reads the group's epoch at p on our session.
func (g *groupStore) readEpoch(ctx context.Context, p string) epochReadErr {
	before := g.store.SessionID()
	data, st, err := g.store.Get(ctx, p)
	if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
		return epochReadErr{err: err}
	}
	e := epochReadErr{epochRead: epochRead{data: data, st: st, exists: err == nil}}
	if before != 0 && g.store.SessionID() == before {
		e.session = before
	}
	return e
}

// recordBeside starts the record's read beside the takeover's write of the epoch cur, when
// that is safe (readRecord): an epoch the release's watch read, or a released epoch read on
// our session; nil otherwise, and the load reads the record after the write.
func (g *groupStore) recordBeside(ctx context.Context, cur *epochRead) <-chan recordRead {
	if !g.loading {
		return nil
	}
	if cur.watched {
		return g.readRecord(ctx, 0)
	}
	if e, err := zkstate.ParseEpoch(cur.data); cur.session != 0 && err == nil && e.Released {
		return g.readRecord(ctx, cur.session)
	}
	return nil
}

// recordRead is a read of a group's record.
type recordRead struct {
	data []byte
	st   zkstate.Stat
	err  error
}

// readRecord reads the group's record beside the takeover's write of the epoch, for an epoch
// the release's watch read (epochRead.watched): a round trip less between a release and the
// group loaded. The read is sent after that one was answered, on the same session, so it sees
// every write the release saw, the previous owner's last write of the record among them (its
// session wrote the record before it released); and if the takeover's write succeeds, nobody
// wrote the record between the release and it (every write of the group is checked against
// the epoch's version). Whether ZooKeeper serves the read before or after the write, it reads
// the record the write takes over; a read whose write failed is dropped.
//
// A takeover of a released epoch a rescan read on our session (takeoverHint.session) reads the
// record beside its write too, on the same grounds: the read is sent after the rescan's read was
// answered, on that session. It is used only if it was answered in that session (session is
// not 0): a new session may start on a server behind the one the rescan read from, and the load
// then reads the record again after the write. An epoch read on the multiRead connection (a
// rescan of many groups) orders nothing on our session: its server may be ahead of ours, and
// our read could miss the record its holder wrote before the release; and an epoch still held
// (not released) orders nothing either: its holder may write the record until our write of the
// epoch, so the record is read after it.
func (g *groupStore) readRecord(ctx context.Context, session int64) <-chan recordRead {
	out := make(chan recordRead, 1)
	go func() {
		before := g.store.SessionID()
		data, st, err := g.store.Get(ctx, zkstate.GroupRecordPath(g.root, g.group))
		r := recordRead{data: data, st: st, err: err}
		if session != 0 && (before != session || g.store.SessionID() != session) {
			r.err = errOutOfSession
		}
		out <- r
	}()
	return out
}

// errOutOfSession: a record read beside a takeover was not answered in the session that read
// the epoch; the load reads the record again.
var errOutOfSession = errors.New("bridge: the record was read outside the session that read the epoch")

// holderAlive reports whether the holder of the epoch read has a registration (alive) and
// whether it is draining: from the rescan's view when it knew, else read.
func (g *groupStore) holderAlive(ctx context.Context, holder int32, e *epochRead) (alive, draining bool, err error) {
	if e.holderKnown {
		return e.registered, e.draining, nil
	}
	reg, _, err := g.store.Get(ctx, zkstate.BridgePath(g.root, holder))
	if errors.Is(err, zkstate.ErrNoNode) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	r, perr := zkstate.ParseBridgeRegistration(reg)
	return true, perr == nil && r.Draining, nil
}

// read is the epoch as the rescan read it, for a takeover that waits for a registered holder.
func (h *takeoverHint) read() *epochRead {
	return &epochRead{data: h.data, st: zkstate.Stat{Version: h.version, Mzxid: h.mzxid}, exists: true,
		holderKnown: true, registered: true, draining: h.draining}
}

// ownerOK is the owner of group in the current view; false when no bridge is live.
func (p *peerSet) ownerOK(group string) (int32, bool) {
	v := p.view.Load()
	if len(v.ids) == 0 {
		return 0, false
	}
	return p.owner(group), true
}

// hasRegistration reports whether node had a registration, draining or not, at the last read of the
// live bridges (false before the first).
func (p *peerSet) hasRegistration(node int32) bool {
	c := p.children.Load()
	return c != nil && slices.Contains(*c, strconv.Itoa(int(node)))
}

// live reports whether node is in the current view.
func (p *peerSet) live(node int32) bool {
	_, ok := p.view.Load().others[node]
	return ok || (node == p.self && p.serving.Load())
}
