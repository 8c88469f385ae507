package bridge

// This bridge's own registration, session by session. A survivor that takes a group checks the
// holder's registration after its write of the epoch, and keeps the group when it finds none,
// or one newer than the holder's epoch (records.go: takeHinted; several-bridges.md): an epoch
// we wrote before our registration existed looks like a dead bridge's, and two bridges would
// answer the group. So a group's load waits until our registration exists in the current
// session (awaitOwn), and every epoch the group's store writes is written in that session
// (groupStore.acquire).
//
// A session ends while the bridge runs when ZooKeeper expires it (the bridge cut off, or paused,
// for longer than the session timeout): the registration goes with it, and the Store re-creates
// it in the new session in the background (zkstate's reclaim, one create after the other in the
// order of the paths, behind every /consumers ephemeral the bridge mirrors). The bridge does not
// wait for that: on every new session register makes its registration again at once
// (registrar.create finds it made if the reclaim came first), and rescans once it exists.
//
// Any client may also delete our registration while our session lives (ZooKeeper lets a session
// delete another's ephemeral: an operator's mistake, a cleanup script), and the Store does not
// make it again in the same session. The others then count us gone and take our groups, so that
// is an expiry for us too: the watch of our registration, set once its create is answered
// (watchOwn), tells its deletion, and ownDeleted fences every group, marks the registration as
// not made in this session (the loads wait) and has register make it again at once, then
// rescan. A load past its wait writes no epoch meanwhile: each write of it checks, in the same
// Multi, that our registration exists (acquire).

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// ownRegistration is the session our registration was last known to exist in.
type ownRegistration struct {
	mu sync.Mutex
	in int64 // 0: not yet
	// changed is closed, and replaced, when in changes.
	changed chan struct{}
	// renew is poked (buffered 1) on every new session: register looks whether the registration
	// is in it.
	renew chan struct{}
	// stop ends the watch of the registration last made (watchOwn); watches is its goroutine.
	stop    context.CancelFunc
	watches sync.WaitGroup
}

func (o *ownRegistration) init() {
	o.changed = make(chan struct{})
	o.renew = make(chan struct{}, 1)
}

// now is the session our registration is known in, and a channel closed when that changes.
func (o *ownRegistration) now() (int64, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.in, o.changed
}

// set records that our registration exists in session sid, and wakes the loads waiting for it.
func (o *ownRegistration) set(sid int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.in == sid {
		return
	}
	o.in = sid
	close(o.changed)
	o.changed = make(chan struct{})
}

// lose forgets that our registration exists in session sid, when it was known there and the
// deleted registration (owned by owner) was that one: reports whether it did. A deletion the
// watch tells late is not one: an older session's registration has another owner, and the one
// of a session that expired is deleted by ZooKeeper after our watches of that session are gone
// (the watch set again in the new session tells a missing node, and sid is the new session).
func (o *ownRegistration) lose(owner, sid int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if owner == 0 || owner != sid || o.in != sid {
		return false
	}
	o.in = 0
	close(o.changed)
	o.changed = make(chan struct{})
	return true
}

// poke tells register that a session was established, or that our registration was deleted.
func (o *ownRegistration) poke() {
	select {
	case o.renew <- struct{}{}:
	default:
	}
}

// awaitOwn waits until our registration exists in store's current session, and returns that
// session; an error when ctx ends first.
func (p *peerSet) awaitOwn(ctx context.Context, store *zkstate.Store) (int64, error) {
	for {
		in, changed := p.own.now()
		if sid := store.SessionID(); sid != 0 && sid == in {
			return sid, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return 0, fmt.Errorf("this bridge's registration is not written in its current ZooKeeper session yet: %w", ctx.Err())
		}
	}
}

// watchOwn follows the registration register has just made in session sid (its create
// answered), until it is gone or the session changes: the watch's first read is sent after the
// create's answer, so a registration missing there, or held by another session, was deleted
// since, however soon (the watch of <root>/bridges' children reads our child only once that
// watch has fired and read the children again, and a deletion before that read went untold). It
// replaces the watch of the registration made before.
func (p *peerSet) watchOwn(ctx context.Context, store *zkstate.Store, path string, sid int64) {
	wctx, cancel := context.WithCancel(ctx)
	p.own.mu.Lock()
	if p.own.stop != nil {
		p.own.stop()
	}
	p.own.stop = cancel
	p.own.mu.Unlock()
	p.own.watches.Go(func() {
		defer cancel()
		events, err := store.WatchData(wctx, path)
		if err != nil {
			return // ctx ended, or the Store closed
		}
		for ev := range events {
			if ev.Type == zkstate.SessionExpired || store.SessionID() != sid {
				return // gone with the session: register makes it in the new one
			}
			if ev.Exists && ev.Stat.EphemeralOwner == sid {
				continue // ours, rewritten or as made
			}
			p.ownDeleted(store, zkstate.Stat{EphemeralOwner: sid})
			return
		}
	})
}

// endWatch ends watchOwn's watch and waits for it.
func (o *ownRegistration) endWatch() {
	o.mu.Lock()
	if o.stop != nil {
		o.stop()
	}
	o.mu.Unlock()
	o.watches.Wait()
}

// ownDeleted is told by the watch of our registration (watchOwn) that it was deleted, with the
// registration's stat: when that was the registration of our current session, made by us,
// and we serve (not our own deletion at a drain), another client deleted it.
func (p *peerSet) ownDeleted(store *zkstate.Store, last zkstate.Stat) {
	sid := store.SessionID()
	if !p.serving.Load() || !p.own.lose(last.EphemeralOwner, sid) {
		return
	}
	if p.ownGone != nil {
		p.ownGone(sid)
	}
}

// registrationDeleted is peerSet.ownGone: another client deleted our registration while
// session sid lives. The others count us gone and may take our groups: every group is fenced, as
// after an expiry (loaded again once the registration exists: awaitOwn), and register makes it
// again at once.
func (b *Bridge) registrationDeleted(sid int64) {
	if b.stopping.Load() {
		return
	}
	p := zkstate.BridgePath(b.cfg.Root, b.cfg.NodeID)
	b.log.Error().Str("path", p).Str("session", fmt.Sprintf("0x%x", sid)).
		Msg("our registration was deleted by another client while our session lives: the other bridges take our groups; fencing every group and registering again")
	b.metrics.registrationDeleted.Inc()
	b.coord.fenceAll(errRegistrationDeleted)
	b.peers.own.poke()
}

// errRegistrationDeleted fences the groups when another client deleted our registration.
var errRegistrationDeleted = errors.New("this bridge's registration was deleted by another ZooKeeper client")

// registrationReadiness is /readyz's reason while our registration does not exist in the
// current session (every group's load waits for it, and is refused after the load timeout):
// another session holds the path (our previous incarnation's, until it expires, or a bridge
// with our node id), or it is being made (at start, after an expiry or a deletion). "" once it
// exists, or before the Store is open (then "zookeeper: no session" says why).
func (b *Bridge) registrationReadiness() string {
	b.coord.mu.Lock()
	store := b.coord.store
	b.coord.mu.Unlock()
	if store == nil || store.SessionID() == 0 || b.peers.ownRegistered(store.SessionID()) {
		return ""
	}
	return "registration: " + zkstate.BridgePath(b.cfg.Root, b.cfg.NodeID) + " not made in the current ZooKeeper session yet (held by another session, or being made)"
}

// register creates the bridge's ephemeral registration (zkstate.BridgeRegistration: who runs
// where, for operators and for the other bridges, peers.go), and makes it again in every new
// session (keepRegistered), until ctx ends or the bridge drains.
func (b *Bridge) register(ctx context.Context, store *zkstate.Store, host string, port int32) {
	b.registrar.init(b.registration(host, port)) // peers.go: later rewrites keep its fields
	p := zkstate.BridgePath(b.cfg.Root, b.cfg.NodeID)
	defer b.peers.own.endWatch()
	for b.keepRegistered(ctx, store, p) {
		select {
		case <-ctx.Done():
			return
		case <-b.peers.own.renew:
		}
	}
}

// keepRegistered makes sure the registration exists in the current session, retrying while the
// path is held (after a kill -9 the previous incarnation's node lives until its session times
// out), then rescans for the groups refused meanwhile. It reports false when ctx ended or the
// bridge drains.
func (b *Bridge) keepRegistered(ctx context.Context, store *zkstate.Store, p string) bool {
	warned := false
	for {
		if !b.peers.serving.Load() {
			return false // draining (handover.go)
		}
		if in, _ := b.peers.own.now(); in != 0 && in == store.SessionID() {
			return true
		}
		in, err := b.registrar.create(ctx, store, p, b.peers)
		if err == nil && in != 0 {
			b.peers.own.set(in)
			b.peers.watchOwn(ctx, store, p, in)
			b.log.Info().Str("path", p).Str("session", fmt.Sprintf("0x%x", in)).Msg("bridge registered")
			b.coord.registered() // handover.go: the groups refused until now
			return true
		}
		if err == nil {
			continue // the session changed during the create: again, in the new one
		}
		if ctx.Err() != nil {
			return false
		}
		if !warned {
			// Another bridge with our node id, or our own previous incarnation whose session
			// has not expired yet: retry until the node is gone.
			b.log.Warn().Err(err).Str("path", p).Msg("bridge registration failed; retrying")
			warned = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// acquire takes the group's epoch over (takeEpoch), in the session our registration was known
// in when the group's load started (own, set from awaitOwn): an epoch written in a later
// session may precede our registration there. A session that changed before or during the
// write fences the group (its actor is fenced for the expiry anyway, coordinator.onSession),
// and the epoch is not used: the group is loaded again in the new session once registered.
// Within the session, another client may delete our registration after the load's wait: each
// write of the epoch also checks, in the same Multi, that our registration exists
// (createEpoch, setEpoch), so that the epoch is never written while we look gone.
func (g *groupStore) acquire(ctx context.Context) error {
	if g.own == 0 {
		return g.takeEpoch(ctx)
	}
	if sid := g.store.SessionID(); sid != g.own {
		return fmt.Errorf("take over group %q: the ZooKeeper session changed since the load (0x%x, now 0x%x): %w", g.group, g.own, sid, ErrFenced)
	}
	err := g.takeEpoch(ctx)
	if sid := g.store.SessionID(); err == nil && sid != g.own {
		g.epoch = -1
		return fmt.Errorf("take over group %q: the ZooKeeper session changed during the takeover (0x%x, now 0x%x): %w", g.group, g.own, sid, ErrFenced)
	}
	return err
}

// errRegistrationGone: an epoch's write found our registration missing (another client deleted
// it after the load's wait; the watch of it tells us too, and we make it again): the epoch is not
// written, and the group is fenced until it is loaded again once the registration exists.
var errRegistrationGone = fmt.Errorf("this bridge's registration does not exist (deleted by another client): %w", ErrFenced)

// ownCheck is the op an epoch's write ends with when the group's load waited for our
// registration (own): our registration exists. Any version: the registrar rewrites it (proxy
// listeners, draining) and one made again in the same session starts at version 0 again, so its
// version says neither which one it is nor whose; its existence is what the others read of it
// (a takeover checks that the holder's registration exists and is older than the epoch's write),
// and checked with the write it holds at the instant of the write, with no round trip more.
func (g *groupStore) ownCheck() []zkstate.Op {
	if g.own == 0 {
		return nil
	}
	return []zkstate.Op{zkstate.CheckOp(zkstate.BridgePath(g.root, g.nodeID), -1)}
}

// ownGone maps the failure of an epoch's write: the op after the epoch's (ownCheck) failing is
// errRegistrationGone, the epoch's own failure is returned as such (ErrBadVersion, ErrNodeExists,
// ErrNoNode unwrap from it).
func ownGone(err error) error {
	var me *zkstate.MultiError
	if errors.As(err, &me) && me.Index == 1 {
		return errRegistrationGone
	}
	return err
}

// createEpoch creates the group's epoch (with its missing parents) with ownCheck.
func (g *groupStore) createEpoch(ctx context.Context, p string, data []byte) error {
	check := g.ownCheck()
	if check == nil {
		return g.store.Create(ctx, p, data, zkstate.CreateOptions{Parents: true})
	}
	ops := append([]zkstate.Op{zkstate.CreateOp(p, data, zkstate.CreateOptions{})}, check...)
	err := ownGone(g.store.MultiAtomic(ctx, ops...))
	var me *zkstate.MultiError
	if !errors.As(err, &me) || me.Index != 0 || !errors.Is(err, zkstate.ErrNoNode) {
		return err
	}
	// A new group: its parent first (as Create with Parents does after a NoNode), then again.
	if err := g.store.Create(ctx, path.Dir(p), nil, zkstate.CreateOptions{Parents: true}); err != nil && !errors.Is(err, zkstate.ErrNodeExists) {
		return err
	}
	return ownGone(g.store.MultiAtomic(ctx, ops...))
}

// setEpoch writes the group's epoch at version with ownCheck, and returns its new version.
func (g *groupStore) setEpoch(ctx context.Context, p string, data []byte, version int32) (int32, error) {
	check := g.ownCheck()
	if check == nil {
		st, err := g.store.Set(ctx, p, data, version)
		return st.Version, err
	}
	if err := ownGone(g.store.MultiAtomic(ctx, append([]zkstate.Op{zkstate.SetOp(p, data, version)}, check...)...)); err != nil {
		return 0, err
	}
	return version + 1, nil
}
