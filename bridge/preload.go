package bridge

// A crash's takeover prepared before the expiry (docs/several-bridges.md). A bridge killed with
// SIGKILL looks dead to the survivors within a probe or two (peers_down.go, peers_hangup.go), and
// its ZooKeeper session expires a session timeout later: only then may a survivor take its
// groups (their epochs are fenced by its session's registration). The survivors spend that wait
// reading what the takeover needs: each one computes the groups that would map to it with the
// peer gone (the placement is every bridge's same rule), and reads their epochs and records on
// its own session. When the peer's registration goes (the expiry), each prepared group is taken
// in ONE Multi, Set(epoch, the version read) + Check(record, the version read) + the check that
// our own registration exists (as every write of an epoch ends: register_own.go), beside the
// check of the holder's registration: the group's first request is answered one round trip
// after the expiry was seen, where the rescan's read of every epoch, the write, and the record's
// read after it took three.
//
// Why the record need not be read after the write: the Multi applies only if the epoch is at the
// version read (nobody took the group since) and the record at the version read (its holder
// wrote nothing since); after it every write of the holder fails on the epoch's version (each is
// a Multi that checks it first: records.go). So the record as read is the record at the takeover
// and after it. (A version names a record's content within one znode's life: a record deleted
// and made again to the same version between the preparation and the expiry would pass the
// check. That needs the holder to serve a DeleteGroups of an Empty group and as many writes of
// the group again as the record had, all after its listener refused every connection and before
// its session ended: a bridge shutting down, which deregisters first and so is never prepared
// for, as a draining bridge leaves the live set at once.) Offsets are not part of the load (the
// engine reads them from ZooKeeper when asked), so a commit the holder wrote between the
// preparation and the expiry is seen.
//
// Why the holder check stays (takeHinted's: a live registration of the holder that predates the
// epoch's write gets the group back): one check for all the holder's groups, sent as their
// takeovers start, beside their Multis, so it costs no round trip on the way (one a group, each
// sent beside its own Multi, came back behind every Multi sent before it: a session's answers
// come in order), and it is sound in either order of a Multi and the check: it is sent on the
// session that read the epochs, after those reads were answered (GetInSession), so it sees at
// least the state of that read,
// whose epoch write it compares with; a registration made after that state is newer than the
// epoch's write whichever comes first. Without it the argument would lean on the order in which
// the Go side receives a watch event and a read's answer, which the wire orders but the
// goroutines do not.
//
// Nothing is written before the registration's deletion: a peer that looks dead but comes back
// (named again: its listener takes connections) drops its preparation, and one whose
// registration stays past twice the session timeout keeps none. A preparation that was not
// complete at the deletion, a group whose epoch or record moved (the Multi fails), or a session
// that changed in between: the takeover goes today's way (the rescan's hint, takeHinted). No
// peer looking dead: nothing runs.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
)

// preloads is the coordinator's prepared takeovers, by peer that looks dead.
type preloads struct {
	mu     sync.Mutex
	byPeer map[int32]*preparation
}

// preparation is the takeovers prepared for one peer that looks dead.
type preparation struct {
	peer   int32
	cancel context.CancelFunc
	// done: the reads are in; groups holds the groups to take, read on session.
	done    bool
	session int64
	groups  map[string]*preparedTakeover
}

// preparedTakeover is a group's epoch and record as the preparation read them.
type preparedTakeover struct {
	version int32 // the epoch's
	mzxid   int64 // the epoch's write
	record  []byte
	rstat   zkstate.Stat // the record's
	session int64        // the session that read both (GetInSession)
	// holder is the check of the holder's registration, one for every group of the
	// preparation, started as their takeovers start (takePrepared); nil: each its own.
	holder *holderCheck
}

// holderCheck is one Exists of a holder's registration, sent on the session that read the
// prepared epochs, after those reads were answered.
type holderCheck struct {
	done  chan struct{} // closed once the fields are set
	alive bool
	reg   zkstate.Stat
	err   error
	ok    bool // answered in the session that read the epochs
}

// checkHolder starts the check of holder's registration on store, for a preparation read on
// session; ctx bounds it.
func checkHolder(ctx context.Context, store *zkstate.Store, root string, holder int32, session int64) *holderCheck {
	hc := &holderCheck{done: make(chan struct{})}
	go func() {
		defer close(hc.done)
		hc.alive, hc.reg, hc.err = store.Exists(ctx, zkstate.BridgePath(root, holder))
		hc.ok = store.SessionID() == session
	}()
	return hc
}

// lookingDead is the peers of v that look dead: live (registered) but left out of Metadata.
func lookingDead(v *liveView, self int32) map[int32]bool {
	out := map[int32]bool{}
	for _, id := range v.ids {
		if id != self && !slices.Contains(v.named, id) {
			out[id] = true
		}
	}
	return out
}

// namedChanged is the subscriber of the named ids (peers.go: subscribeNamed): it prepares the
// takeovers of every peer that starts looking dead and drops those of a peer named again.
func (c *coordinator) namedChanged(_, cur *liveView) {
	dead := lookingDead(cur, c.cfg.NodeID)
	c.pre.mu.Lock()
	defer c.pre.mu.Unlock()
	for id, p := range c.pre.byPeer {
		if !dead[id] {
			p.cancel()
			delete(c.pre.byPeer, id)
			c.log.Info().Int32("peer", id).Msg("a bridge that looked dead is named again: its groups' prepared takeovers dropped")
		}
	}
	for _, id := range slices.Sorted(maps.Keys(dead)) {
		if c.pre.byPeer[id] != nil {
			continue
		}
		c.mu.Lock()
		if c.closed || c.store == nil || !c.peers.serving.Load() {
			c.mu.Unlock()
			return
		}
		store := c.store
		// Kept while the peer looks dead and is registered, for prepareFor at most.
		pctx, cancel := context.WithTimeout(context.Background(), prepareFor(c.zkSessionTimeoutLocked()))
		p := &preparation{peer: id, cancel: cancel}
		if c.pre.byPeer == nil {
			c.pre.byPeer = map[int32]*preparation{}
		}
		c.pre.byPeer[id] = p
		c.goLocked(func(ctx context.Context) {
			stop := context.AfterFunc(ctx, cancel)
			defer stop()
			c.prepare(pctx, store, p)
			<-pctx.Done()
			c.pre.mu.Lock()
			if c.pre.byPeer[id] == p { // still registered (not taken), still looking dead
				p.done, p.groups = false, nil
			}
			c.pre.mu.Unlock()
		})
		c.mu.Unlock()
	}
}

// prepare reads the epoch and record of every group that maps to p.peer now and would map to
// this bridge without it, on our session, and keeps those its epoch names as held by p.peer.
func (c *coordinator) prepare(ctx context.Context, store *zkstate.Store, p *preparation) {
	sid := store.SessionID()
	names, _, err := store.Children(ctx, zkstate.BridgeGroupsPath(c.cfg.Root))
	if err != nil {
		return
	}
	self := c.cfg.NodeID
	ids := c.peers.current().ids
	if !slices.Contains(ids, p.peer) || !slices.Contains(ids, self) {
		return
	}
	without := slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return id == p.peer })
	var moving []string
	for _, name := range names {
		now, _ := placement.Owner(name, ids)
		then, _ := placement.Owner(name, without)
		if now == p.peer && then == self {
			moving = append(moving, name)
		}
	}
	paths := make([]string, 0, 2*len(moving))
	for _, name := range moving {
		paths = append(paths, zkstate.EpochPath(c.cfg.Root, name))
	}
	for _, name := range moving {
		paths = append(paths, zkstate.GroupRecordPath(c.cfg.Root, name))
	}
	reads, err := store.GetInSession(ctx, paths)
	if err != nil || sid == 0 || store.SessionID() != sid {
		return
	}
	groups := map[string]*preparedTakeover{}
	for i, name := range moving {
		e, r := reads[i], reads[len(moving)+i]
		if e.Err != nil || r.Err != nil || !e.InSession || !r.InSession {
			continue // no epoch or no record (nothing to restore): the rescan's way
		}
		if ep, err := zkstate.ParseEpoch(e.Data); err != nil || ep.NodeID != p.peer || ep.Released {
			continue
		}
		groups[name] = &preparedTakeover{version: e.Stat.Version, mzxid: e.Stat.Mzxid, record: r.Data, rstat: r.Stat, session: sid}
	}
	c.pre.mu.Lock()
	ok := c.pre.byPeer[p.peer] == p && ctx.Err() == nil
	if ok {
		p.done, p.session, p.groups = true, sid, groups
	}
	c.pre.mu.Unlock()
	if !ok {
		return
	}
	c.log.Info().Int32("peer", p.peer).Int("groups", len(groups)).Int("moving", len(moving)).
		Msg("a bridge looks dead: the groups that would move here are read, to be taken when its session ends")
}

// takePrepared is the subscriber of the live ids that starts the prepared takeovers of every
// peer gone from them (its registration was deleted: its session ended), before the rescan
// (placementChanged, subscribed after it) reads anything: a rescan skips a group being loaded.
func (c *coordinator) takePrepared(old, cur *liveView) {
	c.pre.mu.Lock()
	var gone []*preparation
	for id, p := range c.pre.byPeer {
		if slices.Contains(old.ids, id) && !slices.Contains(cur.ids, id) {
			gone = append(gone, p)
			p.cancel()
			delete(c.pre.byPeer, id)
		}
	}
	c.pre.mu.Unlock()
	for _, p := range gone {
		if !p.done || len(p.groups) == 0 {
			continue
		}
		c.mu.Lock()
		store := c.store
		c.mu.Unlock()
		if store == nil || store.SessionID() != p.session || !c.peers.serving.Load() {
			continue
		}
		// One check of the holder's registration for all its groups, sent before their
		// Multis: one a group, each sent beside its own Multi, came back behind every Multi
		// sent before it (a session's answers come in order).
		hctx, cancel := context.WithTimeout(context.Background(), c.cfg.LoadTimeout)
		hc := checkHolder(hctx, store, c.cfg.Root, p.peer, p.session)
		go func() {
			<-hc.done
			cancel()
		}()
		taken := 0
		for name, t := range p.groups {
			t.holder = hc
			hint := &takeoverHint{version: t.version, mzxid: t.mzxid, holder: p.peer, prepared: t}
			if a, _ := c.actorWith(name, hint); a != nil && a.takeover == hint {
				taken++
				if c.pm != nil {
					c.pm.handovers.WithLabelValues(takeoverFailover).Inc()
				}
			}
		}
		c.log.Info().Int32("from", p.peer).Int("groups", taken).Str("cause", takeoverFailover).
			Msg("taking over the prepared groups of a bridge whose session ended")
	}
}

// takePrepared takes the epoch prepared in h (h.prepared) in one Multi that also checks the
// record's version, with the holder's check beside it (the file comment says why both are
// sound). took reports the epoch ours; fallback that the record moved since the preparation (the
// epoch did not): the caller takes the group as a rescan's hint does.
func (g *groupStore) takePrepared(ctx context.Context, p string, mine []byte, h *takeoverHint) (took, fallback bool, err error) {
	t := h.prepared
	checked := t.holder
	if checked == nil {
		checked = checkHolder(ctx, g.store, g.root, h.holder, t.session)
	}
	// Ends with the check that our registration exists, as every write of an epoch does
	// (register_own.go: ownCheck).
	ops := append([]zkstate.Op{zkstate.SetOp(p, mine, t.version), zkstate.CheckOp(zkstate.GroupRecordPath(g.root, g.group), t.rstat.Version)}, g.ownCheck()...)
	err = g.store.Multi(ctx, ops...)
	var me *zkstate.MultiError
	switch {
	case err == nil:
	case errors.As(err, &me) && me.Index == 2:
		return false, false, fmt.Errorf("take over group %q: %w", g.group, errRegistrationGone)
	case errors.As(err, &me) && me.Index == 1:
		return false, true, nil // the record moved, the epoch not: take it as a rescan would
	case errors.As(err, &me) && me.Index == 0:
		return false, false, nil // the epoch moved: acquire looks again
	default:
		// Connection loss (the Multi may have been applied: acquire reads our own epoch then)
		// or ctx.
		if ctx.Err() != nil {
			return false, false, fmt.Errorf("take over group %q: %w", g.group, err)
		}
		return false, false, nil
	}
	g.epoch = t.version + 1
	if g.loading {
		r := make(chan recordRead, 1)
		r <- recordRead{data: t.record, st: t.rstat}
		g.record0 = r
	}
	var hc holderCheck
	select {
	case <-checked.done:
		hc = holderCheck{alive: checked.alive, reg: checked.reg, err: checked.err, ok: checked.ok}
	case <-ctx.Done():
		hc.err = ctx.Err()
	}
	if hc.err != nil || !hc.ok {
		// Not answered, or not in the session that read the epoch: look again, after the write.
		hc.alive, hc.reg, hc.err = g.store.Exists(ctx, zkstate.BridgePath(g.root, h.holder))
		if hc.err != nil {
			return true, false, fmt.Errorf("take over group %q: %w", g.group, hc.err)
		}
	}
	if hc.alive && hc.reg.Czxid < h.mzxid {
		g.record0 = nil
		if err := g.release(ctx); err != nil {
			g.log.Warn().Err(err).Msg("giving a live bridge's group back failed; it takes it again when our session ends")
		}
		return true, false, &OwnedError{Group: g.group, NodeID: h.holder}
	}
	g.log.Debug().Int32("previous_owner", h.holder).Msg("taking over the group of a bridge that is gone (prepared)")
	return true, false, nil
}

// prepareFor is how long a preparation is kept for a peer that still looks dead and is still
// registered: twice the session timeout, past which its session is not ending as a kill's does.
func prepareFor(session time.Duration) time.Duration { return 2 * session }
