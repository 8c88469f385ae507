package bridge

// Group modes (DESIGN §1): per group, which member kinds the bridge admits. The
// mode record lives in ZooKeeper (zkstate/mode.go); this file keeps every group's mode current
// in memory and enforces it at the few places where members come in.
//
// Keeping it current: one children watch on <root>/groups finds every group the bridge keeps
// state for, and one data watch per group follows its mode record, so a change written by any
// process (zkbridge migrate, another bridge) takes effect here within a watch round trip, well
// under a second. Every change is logged, so every running bridge logs every transition.
//
// The first time this bridge serves a group that has no mode record, it persists the group's
// default (zkstate.InitMode; a create is a compare-and-set, so bridges racing on a new group
// agree on one record). It must be persisted, not recomputed: the default rule looks at
// /consumers/<g>, and the bridge's own 0.8 mirror writes there for Kafka groups, so a computed
// default would flip a served Kafka group to legacy. The default is:
//
//   - kafka when the bridge already holds a record or offsets of its own for the group (it
//     served Kafka members before group modes existed: an upgrade must not lock them out);
//   - legacy when the first arrival is a legacy consumer: its registration is exactly the
//     /consumers/<g>/ids entry the rule looks for (and refusing the first legacy consumer of a
//     group an operator pointed at the bridge would help nobody);
//   - otherwise zkstate.DefaultMode: legacy when /consumers/<g> holds ids, owners or offsets,
//     else kafka.
//
// Enforcement, by mode:
//
//   - legacy: a Kafka JoinGroup is answered INCONSISTENT_GROUP_PROTOCOL (23) and the bridge
//     warns (once per group per minute) to run `zkbridge migrate apply --group G --to mixed`.
//     A Kafka member still in the group (the group was rolled back under it) is answered
//     REBALANCE_IN_PROGRESS on its next Heartbeat or SyncGroup, which makes it rejoin; its
//     JoinGroup then removes it from the group (releasing its partitions at once rather than
//     after its session timeout) and is answered 23. Its OffsetCommits keep going to the engine
//     until then, so its last commits are kept; LeaveGroup, Describe and Delete are unaffected.
//   - mixed: every kind is admitted, into one membership (every member the bridge hosts is
//     registered in /consumers/<g>/ids in the 0.8 format) and one 0.8.2 assignment over it,
//     which each zk member computes on its own and the bridge computes for its Kafka and legacy
//     members (mixed.go, legacy_claim.go); a partition changes hands only once its previous
//     owner released its owner znode.
//   - kafka: a legacy Register is refused with GROUP_MODE_REFUSED (the legacy client returns a
//     permanent RegisterRefusedError). zk members found in /consumers/<g>/ids that are not the
//     registrations of a running bridge are reported (the gauge
//     zkbridge_group_foreign_zk_members{group} and a warning): the bridge cannot stop them.
//   - finalized: as kafka, and the ZooKeeper mirror is no longer written: no ids or owners
//     (the ones held are released), no offsets under /consumers/<g>/offsets. Offsets then live
//     only in the bridge's own records (<root>/groups/<g>/offsets), and OffsetFetch reads them
//     there (Bridge.FetchOffsets).
//
// Legacy consumers already registered when their group moves to kafka are not evicted here:
// the migrate command moves a group to kafka only when none remains (its preconditions).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

const (
	// modeWarnEvery bounds the warnings about refused members to one per group per interval.
	modeWarnEvery = time.Minute
	// foreignRecheck is how soon the foreign zk members of a group are counted again after
	// some were found: a bridge whose registration (<root>/bridges/<id>) is not yet visible
	// makes its own mirror's ids look foreign for a moment.
	foreignRecheck = 5 * time.Second
	// modeWatchParallel bounds the mode watches being set up at once when a bridge starts
	// next to thousands of groups.
	modeWatchParallel = 64
)

// memberKind says who asks for a group's mode: it matters for a group's default (see the file
// comment).
type memberKind int

const (
	kindKafka memberKind = iota
	kindLegacy
)

// mirrorStale is a mirrorKey state no group has: publishing after it rewrites the mirror.
const mirrorStale group.State = -1

// modeEntry is what the bridge knows of one group's mode.
type modeEntry struct {
	known   bool         // the record was read (by a watch or by ensure)
	exists  bool         // the group has a mode record
	mode    zkstate.Mode // "" without a record
	version int32        // of the record znode
	// zxid is the record's Mzxid: when it was last written. For a finalized group that is
	// when the 0.8 offsets stopped being written (finalized is terminal); 0 when unknown.
	zxid     int64
	rec      zkstate.ModeRecord
	watching bool     // a watchGroup goroutine follows the record
	foreign  []string // zk members reported for a kafka or finalized group
}

// groupModes keeps every group's mode current (see the file comment). Its methods are safe on
// a nil *groupModes, which admits everything: the legacy coordinator and the engine shell run
// without modes when they are not part of a Bridge (their own tests).
type groupModes struct {
	root    string
	who     string // recorded as the author of the defaults this bridge persists
	timeout time.Duration
	log     zerolog.Logger
	metrics *metrics
	// onChange is told about every mode change of a group (the coordinator pokes the group's
	// actor). It must not block.
	onChange func(group string)
	// owns says whether this bridge owns a group (placement; nil: alone, every group), and
	// placement is closed and replaced whenever that may have changed (modes_foreign.go).
	owns func(group string) bool
	// ours returns the consumer ids this bridge registers in /consumers/<g>/ids (the group's
	// claimer, a superset of what it holds there; nil or empty: none known; the claimer's own
	// map, read only), so that the foreign check asks ZooKeeper only about the others
	// (modes_foreign.go).
	ours      func(group string) map[string]bool
	placement atomic.Pointer[chan struct{}]

	mu      sync.Mutex
	store   *zkstate.Store // nil until start
	stopped bool           // run has returned: no more watches
	// unwatched holds the groups ensure found without a watch; run, which owns the watches'
	// lifetime, starts theirs (wake).
	unwatched map[string]struct{}
	wake      chan struct{}       // buffered 1
	synced    bool                // the first listing of <root>/groups is in: a group not listed has no record
	listing   map[string]struct{} // the last listing of <root>/groups (limits.go)
	listedN   atomic.Int64        // len(listing); -1 before the first
	groups    map[string]*modeEntry
	warned    map[string]time.Time // group → last warning about a refused member
	// corrupt holds the groups whose mode record does not parse, with the parse error: /readyz
	// names them (corruptNotes) until the record is repaired or removed.
	corrupt map[string]string
	wg      sync.WaitGroup // watchGroup goroutines
	sem     chan struct{}
}

func newGroupModes(cfg Config, log zerolog.Logger, m *metrics) *groupModes {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	gm := &groupModes{
		root:    cfg.Root,
		who:     fmt.Sprintf("zkbridge-%d@%s", cfg.NodeID, host),
		timeout: cfg.LoadTimeout,
		log:     log.With().Str("component", "modes").Logger(),
		metrics: m,
		groups:  map[string]*modeEntry{},
		warned:  map[string]time.Time{},
		corrupt: map[string]string{},
		sem:     make(chan struct{}, modeWatchParallel),

		unwatched: map[string]struct{}{},
		wake:      make(chan struct{}, 1),
	}
	gm.listedN.Store(-1)
	return gm
}

// start gives the watcher its store; run then follows <root>/groups. Requests may call ensure
// from now on.
func (m *groupModes) start(store *zkstate.Store) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.store = store
}

// run watches <root>/groups until ctx ends, starting a watch of each group's mode record as
// groups appear (or as ensure asks), and returns after every goroutine it started.
func (m *groupModes) run(ctx context.Context) {
	m.mu.Lock()
	store := m.store
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.stopped = true
		m.mu.Unlock()
		m.wg.Wait()
	}()
	ch, err := store.WatchChildren(ctx, zkstate.BridgeGroupsPath(m.root))
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error().Err(err).Msg("cannot watch the groups' modes; each group's mode is read when it is first served, and later changes are not seen")
		}
		return
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return // ctx ended
			}
			listing := make(map[string]struct{}, len(ev.Children))
			for _, g := range ev.Children {
				m.follow(ctx, store, g)
				listing[g] = struct{}{}
			}
			m.mu.Lock()
			m.synced = true
			m.listing = listing
			m.listedN.Store(int64(len(listing)))
			m.mu.Unlock()
		case <-m.wake:
			m.mu.Lock()
			asked := m.unwatched
			m.unwatched = map[string]struct{}{}
			m.mu.Unlock()
			for g := range asked {
				m.follow(ctx, store, g)
			}
		}
	}
}

// listedCount implements groupCounter (limits.go): how many groups <root>/groups listed last;
// -1 before the first listing.
func (m *groupModes) listedCount() int {
	if m == nil {
		return -1
	}
	return int(m.listedN.Load())
}

// listed implements groupCounter: whether g was in the last listing of <root>/groups or is
// known to exist.
func (m *groupModes) listed(g string) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, has := m.listing[g]
	if e := m.groups[g]; e != nil && e.exists {
		has = true
	}
	return has
}

// watch asks run to follow the group's mode record unless it is followed already.
func (m *groupModes) watch(g string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped || m.store == nil || m.entry(g).watching {
		return
	}
	m.unwatched[g] = struct{}{}
	select {
	case m.wake <- struct{}{}:
	default: // run is woken already
	}
}

// follow starts following the group's mode record, with run's ctx, unless it is followed
// already.
func (m *groupModes) follow(ctx context.Context, store *zkstate.Store, g string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	e := m.entry(g)
	if e.watching {
		return
	}
	e.watching = true
	m.wg.Add(1)
	go m.watchGroup(ctx, store, g)
}

// entry returns the group's entry, creating it; m.mu must be held.
func (m *groupModes) entry(g string) *modeEntry {
	e := m.groups[g]
	if e == nil {
		e = &modeEntry{}
		m.groups[g] = e
	}
	return e
}

// watchGroup follows one group's mode record and, while the group is in kafka or finalized
// mode, its /consumers/<g>/ids, until ctx ends.
func (m *groupModes) watchGroup(ctx context.Context, store *zkstate.Store, g string) {
	defer m.wg.Done()
	select { // bound the watches being armed at once (a start next to many groups)
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	modeCh, err := store.WatchData(ctx, zkstate.ModePath(m.root, g))
	<-m.sem
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn().Err(err).Str("group", g).Msg("cannot watch the group's mode; it is read again when the group is next served")
		}
		m.mu.Lock()
		m.entry(g).watching = false
		m.mu.Unlock()
		return
	}
	var ids foreignWatch
	defer ids.close()
	var mode zkstate.Mode
	recheck := time.NewTimer(time.Hour)
	recheck.Stop()
	defer recheck.Stop()
	for {
		placed := m.placed()
		select {
		case ev, ok := <-modeCh:
			if !ok {
				return
			}
			mode = m.applyEvent(g, ev)
			m.syncIDsWatch(ctx, store, g, mode, &ids, recheck)
		case <-placed:
			m.syncIDsWatch(ctx, store, g, mode, &ids, recheck)
		case ev, ok := <-ids.ch:
			if !ok {
				ids.close()
				continue
			}
			if m.checkForeign(ctx, store, g, ev.Children) {
				recheck.Reset(foreignRecheck)
			}
		case <-recheck.C:
			if ids.ch == nil {
				continue
			}
			children, _, err := store.Children(ctx, zkstate.IDsPath(g))
			if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
				recheck.Reset(foreignRecheck)
				continue
			}
			if m.checkForeign(ctx, store, g, children) {
				recheck.Reset(foreignRecheck)
			}
		case <-ctx.Done():
			return
		}
	}
}

// applyEvent takes one delivery of a group's mode watch into the cache, logs a change, tells
// onChange, and returns the mode now in force ("" without a record).
func (m *groupModes) applyEvent(g string, ev zkstate.WatchEvent) zkstate.Mode {
	var rec zkstate.ModeRecord
	exists := ev.Exists
	var parseErr error
	if exists {
		if rec, parseErr = zkstate.ParseModeRecord(ev.Data); parseErr != nil {
			// Fail closed: with no trustworthy mode the group is not served (ensure reads the
			// record again and fails the same way) until an operator repairs or rewrites it.
			m.log.Error().Err(parseErr).Str("group", g).Str("path", zkstate.ModePath(m.root, g)).
				Msgf("group mode record does not parse; the group is not served until it is repaired (zkbridge repair --group %s --mode M)", g)
			exists = false
		}
	}
	m.mu.Lock()
	m.markCorrupt(g, parseErr)
	e := m.entry(g)
	old := e.mode
	wasKnown := e.known
	switch {
	case exists:
		e.known, e.exists, e.rec = true, true, rec
		e.mode, e.version, e.zxid = rec.Mode, ev.Stat.Version, ev.Stat.Mzxid
	case ev.Exists:
		// Malformed: unknown, so that ensure reads it again and refuses to serve the group.
		e.known, e.exists, e.rec = false, false, zkstate.ModeRecord{}
		e.mode, e.version, e.zxid = "", zkstate.NoModeVersion, 0
	default:
		// No record (deleted by hand): the next request persists the default again.
		e.known, e.exists, e.rec = true, false, zkstate.ModeRecord{}
		e.mode, e.version, e.zxid = "", zkstate.NoModeVersion, 0
	}
	mode := e.mode
	m.countMode(old, wasKnown, mode)
	m.mu.Unlock()

	if mode == old {
		return mode
	}
	if ev.Type != zkstate.Initial || wasKnown {
		l := m.log.Info().Str("group", g).Str("from", string(old)).Str("to", string(mode))
		if exists {
			l = l.Str("recorded_from", string(rec.From)).Str("by", rec.UpdatedBy).Int32("seq", rec.Seq).
				Time("at", time.UnixMilli(rec.UpdatedAtMs))
		}
		l.Msg("group mode changed")
	}
	if m.onChange != nil {
		m.onChange(g)
	}
	return mode
}

// countMode keeps zkbridge_groups_by_mode in step with one entry's change; m.mu is held.
func (m *groupModes) countMode(old zkstate.Mode, wasKnown bool, now zkstate.Mode) {
	if m.metrics == nil || (old == now && wasKnown) {
		return
	}
	if wasKnown && old != "" {
		m.metrics.groupModes.WithLabelValues(string(old)).Dec()
	}
	if now != "" {
		m.metrics.groupModes.WithLabelValues(string(now)).Inc()
	}
}

// modeOf returns the group's mode as last seen; ok is false while the bridge has not read it
// (or the group has no record, in which case ensure persists its default).
func (m *groupModes) modeOf(g string) (zkstate.Mode, bool) {
	if m == nil {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.groups[g]; e != nil && e.known && e.exists {
		return e.mode, true
	}
	return "", false
}

// ensure returns the group's mode for a member of kind that wants to be served, persisting the
// group's default first when it has no mode record (see the file comment).
func (m *groupModes) ensure(ctx context.Context, g string, kind memberKind) (zkstate.Mode, error) {
	if mode, ok := m.modeOf(g); ok {
		return mode, nil
	}
	m.mu.Lock()
	store := m.store
	m.mu.Unlock()
	if store == nil {
		return "", errors.New("bridge: no zookeeper session yet")
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	rec, v, exists, err := zkstate.ReadMode(ctx, store, m.root, g)
	if err != nil {
		if errors.Is(err, zkstate.ErrMalformed) {
			m.mu.Lock()
			m.markCorrupt(g, err)
			m.mu.Unlock()
		}
		return "", fmt.Errorf("bridge: mode of group %q: %w", g, err)
	}
	if !exists {
		def, why, err := m.defaultFor(ctx, store, g, kind)
		if err != nil {
			return "", fmt.Errorf("bridge: default mode of group %q: %w", g, err)
		}
		if rec, v, err = zkstate.InitMode(ctx, store, m.root, g, def, m.who, why); err != nil {
			return "", fmt.Errorf("bridge: persisting the default mode of group %q: %w", g, err)
		}
		if rec.UpdatedBy == m.who && rec.From == "" {
			m.log.Info().Str("group", g).Str("mode", string(rec.Mode)).Str("why", why).Msg("group mode initialised to its default")
		}
	}
	mode, _ := m.cacheRead(g, rec, v)
	m.watch(g)
	return mode, nil
}

// cacheRead takes a mode record read from ZooKeeper (version v) into the cache when the watch
// has not delivered that version yet (it will, and then it is the truth), and returns the mode
// now cached and the one it replaced.
func (m *groupModes) cacheRead(g string, rec zkstate.ModeRecord, v int32) (mode, old zkstate.Mode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(g)
	old = e.mode
	if !e.known || !e.exists || v > e.version {
		wasKnown := e.known
		e.known, e.exists, e.rec, e.mode, e.version = true, true, rec, rec.Mode, v
		e.zxid = 0 // unknown here: lookup reads it when it needs it
		m.countMode(old, wasKnown, rec.Mode)
	}
	return e.mode, old
}

// confirm re-reads the mode of group g from ZooKeeper before the bridge refuses a member on the
// strength of its cached mode: a refusal is final for the client (legacy consumers stop and
// report GROUP_MODE_REFUSED, Kafka clients fail on INCONSISTENT_GROUP_PROTOCOL), and a member
// that joins right after `zkbridge migrate` or `rollback` changed the mode can arrive before the
// watch has delivered the change. A newer version read here updates the cache and tells
// onChange, as the watch would have (the watch then finds nothing new); on a failed read the
// cached mode stands.
func (m *groupModes) confirm(ctx context.Context, g string, cached zkstate.Mode) zkstate.Mode {
	m.mu.Lock()
	store := m.store
	m.mu.Unlock()
	if store == nil {
		return cached
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	rec, v, exists, err := zkstate.ReadMode(ctx, store, m.root, g)
	if err != nil || !exists {
		return cached
	}
	mode, old := m.cacheRead(g, rec, v)
	if mode != old {
		m.log.Info().Str("group", g).Str("from", string(old)).Str("to", string(mode)).
			Msg("group mode changed (read before refusing a member; the watch had not delivered it yet)")
		if m.onChange != nil {
			m.onChange(g)
		}
	}
	return mode
}

// defaultFor decides the mode of a group served for the first time (see the file comment).
func (m *groupModes) defaultFor(ctx context.Context, store *zkstate.Store, g string, kind memberKind) (zkstate.Mode, string, error) {
	// Both looked at in one round trip (a group's first service waits for them), weighed in
	// this order.
	paths := [2]string{zkstate.GroupRecordPath(m.root, g), zkstate.OwnOffsetsPath(m.root, g)}
	var found [2]bool
	var errs [2]error
	var wg sync.WaitGroup
	for i := range paths {
		wg.Go(func() { found[i], _, errs[i] = store.Exists(ctx, paths[i]) })
	}
	wg.Wait()
	for i, p := range paths {
		if errs[i] != nil {
			return "", "", errs[i]
		}
		if found[i] {
			return zkstate.ModeKafka, p + " exists: the group was served to Kafka members before group modes existed", nil
		}
	}
	if kind == kindLegacy {
		return zkstate.ModeLegacy, "its first member is a legacy consumer, registered under " + zkstate.IDsPath(g), nil
	}
	return zkstate.DefaultMode(ctx, store, g)
}

// lookup returns what is known of the group's mode, reading the record when the watch has not
// delivered it yet. A group that has no record gives a zero entry.
func (m *groupModes) lookup(ctx context.Context, g string) (modeEntry, error) {
	m.mu.Lock()
	e, listed := m.groups[g]
	store, synced := m.store, m.synced
	var cp modeEntry
	if listed {
		cp = *e
	}
	m.mu.Unlock()
	switch {
	case listed && cp.known && (!cp.exists || cp.mode != zkstate.ModeFinalized || cp.zxid != 0):
		return cp, nil
	case !listed && synced:
		return modeEntry{}, nil // not under <root>/groups: no record
	case store == nil:
		return modeEntry{}, errors.New("bridge: no zookeeper session yet")
	}
	data, st, err := store.Get(ctx, zkstate.ModePath(m.root, g))
	if errors.Is(err, zkstate.ErrNoNode) {
		return modeEntry{}, nil
	}
	if err != nil {
		return modeEntry{}, fmt.Errorf("bridge: mode of group %q: %w", g, err)
	}
	rec, err := zkstate.ParseModeRecord(data)
	if err != nil {
		return modeEntry{}, fmt.Errorf("bridge: mode of group %q: %w", g, err)
	}
	return modeEntry{known: true, exists: true, mode: rec.Mode, version: st.Version, zxid: st.Mzxid, rec: rec}, nil
}

// mirrorOff reports whether the group's ZooKeeper mirror (ids, owners, offsets under
// /consumers/<g>) must not be written: the group is finalized.
func (m *groupModes) mirrorOff(g string) bool {
	mode, ok := m.modeOf(g)
	return ok && mode == zkstate.ModeFinalized
}

// warnOnce reports whether a warning about group g is due (one per modeWarnEvery).
func (m *groupModes) warnOnce(g string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if last, ok := m.warned[g]; ok && now.Sub(last) < modeWarnEvery {
		return false
	}
	m.warned[g] = now
	return true
}

func (m *groupModes) refused(request string) {
	if m.metrics != nil {
		m.metrics.modeRefusals.WithLabelValues(request).Inc()
	}
}

// admitLegacy is the legacy coordinator's check of a RegisterRequest: kafka and finalized
// groups refuse legacy members with GROUP_MODE_REFUSED, which the legacy client reports as a
// permanent RegisterRefusedError.
func (m *groupModes) admitLegacy(ctx context.Context, g string) error {
	if m == nil {
		return nil
	}
	if err := validName("group", g); err != nil {
		return fmt.Errorf("bridge: legacy group: %w: %w", err, legacy.CodeInvalidRequest.Err())
	}
	mode, err := m.ensure(ctx, g, kindLegacy)
	if err != nil {
		return fmt.Errorf("%w: %w", err, legacy.CodeCoordinatorNotAvailable.Err())
	}
	if mode == zkstate.ModeKafka || mode == zkstate.ModeFinalized {
		mode = m.confirm(ctx, g, mode)
	}
	if mode != zkstate.ModeKafka && mode != zkstate.ModeFinalized {
		return nil
	}
	m.refused("legacy_register")
	if m.warnOnce(g) {
		m.log.Warn().Str("group", g).Str("mode", string(mode)).
			Msgf("refusing legacy consumers: group %q is in %s mode, which admits Kafka members only; to take legacy consumers again run `zkbridge rollback --group %s --to mixed`", g, mode, g)
	}
	return fmt.Errorf("bridge: group %q is in %s mode, which refuses legacy consumers: %w", g, mode, legacy.CodeGroupModeRefused.Err())
}

// modeChanged pokes the group's actor, if it is loaded, after a change of the group's mode.
func (c *coordinator) modeChanged(name string) {
	c.mu.Lock()
	a := c.actors[name]
	c.mu.Unlock()
	if a == nil {
		return
	}
	select {
	case a.modeCh <- struct{}{}:
	default: // a poke is pending already
	}
}

// removeRefused takes the member a refused JoinGroup came from out of the group, if it is in
// it, so that its partitions are released now rather than after its session timeout. The leave
// is stepped like a request whose answer nobody waits for.
func (a *actor) removeRefused(ctx context.Context, ev group.JoinGroup) {
	if ev.MemberID == "" && ev.InstanceID == "" {
		return
	}
	var leave group.LeaveMember
	found := false
	for _, mb := range a.m.Describe().Members {
		switch {
		case ev.MemberID != "" && mb.MemberID == ev.MemberID:
			leave, found = group.LeaveMember{MemberID: mb.MemberID, InstanceID: mb.InstanceID}, true
		case ev.MemberID == "" && ev.InstanceID != "" && mb.InstanceID == ev.InstanceID:
			leave, found = group.LeaveMember{InstanceID: mb.InstanceID}, true // by instance id alone (KIP-345)
		}
		if found {
			break
		}
	}
	if !found {
		return
	}
	leave.Reason = "group is in legacy mode"
	tok := group.Token(a.c.tokens.Add(1))
	req := &request{token: tok, ev: group.LeaveGroup{Token: tok, Members: []group.LeaveMember{leave}}, reply: make(chan group.Reply, 1)}
	a.waiting[tok] = req
	a.step(ctx, req.ev)
}

// onModeChange re-evaluates what the actor publishes after its group's mode changed: the 0.8
// mirror is released when the group is finalized (and written again should it ever leave that
// mode).
func (a *actor) onModeChange(ctx context.Context) {
	a.syncAssignMode(ctx) // mixed.go
	if a.c.modes.mirrorOff(a.group) {
		// Now, not at the next Stable generation: a rebalance may be in progress.
		a.cancelClaim()
		a.mirror.update(mirrorState{})
	}
	a.mirrored = mirrorKey{state: mirrorStale}
	a.publish()
}

// mirrorUpdate hands the wanted 0.8 mirror to the claimer, or an empty one (release
// everything) when the group's mirror is off.
func (a *actor) mirrorUpdate(s mirrorState) {
	if a.c.modes.mirrorOff(a.group) {
		s = mirrorState{}
	}
	a.cancelClaim() // mixed.go: a state of the group after the claim's generation replaces it
	a.mirror.update(s)
}

// markCorrupt records whether group g's mode record parses (err nil: it does, or there is
// none); m.mu must be held.
func (m *groupModes) markCorrupt(g string, err error) {
	if err == nil {
		delete(m.corrupt, g)
		return
	}
	m.corrupt[g] = err.Error()
}

// maxCorruptNotes bounds the /readyz lines about corrupt mode records: a ZooKeeper full of them
// must not make the probe's answer unbounded.
const maxCorruptNotes = 20

// corruptNotes are /readyz notes naming the groups whose mode record does not parse. They do
// not make the bridge unready: the other groups are served, and the record is shared by every
// bridge, so no other bridge could serve the group either; a load balancer that took this
// bridge out would only stop the healthy groups.
func (m *groupModes) corruptNotes() []string {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	groups := make([]string, 0, len(m.corrupt))
	for g := range m.corrupt {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	var notes []string
	for i, g := range groups {
		if i == maxCorruptNotes {
			notes = append(notes, fmt.Sprintf("and %d more groups whose mode record does not parse (see the log)", len(groups)-i))
			break
		}
		notes = append(notes, fmt.Sprintf("group %s: mode record %s does not parse (%s): the group is not served; zkbridge repair --group %s --mode M",
			g, zkstate.ModePath(m.root, g), m.corrupt[g], g))
	}
	return notes
}
