package bridge

// 0.8 consumers left in a kafka or finalized group: nothing stops them but their operator, so
// the bridge counts and reports them. Only the group's owner does: every bridge follows every
// group's mode, but a peer that also watched /consumers/<g>/ids and ran the check at each change
// of it sent as many ZooKeeper requests per join as the owner did (twice a join's requests with
// 3 bridges, for a gauge and a warning the owner gives anyway), and kept two more goroutines per
// idle group.

import (
	"context"
	"errors"
	"path"
	"slices"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// checkForeign counts the zk members of a kafka or finalized group: registrations under
// /consumers/<g>/ids that no running bridge holds (the bridge's own mirror and legacy
// coordinator register their members there as ephemerals of their session; a running bridge's
// session is the ephemeral owner of its <root>/bridges/<id>). It reports whether any was found.
//
// The ids this bridge's claimer registers are ours without asking: a Kafka group's registrations
// change at every join and leave, and an exists per id at each change made a join of n members
// cost ZooKeeper about n²/2 reads for a gauge that stays 0.
func (m *groupModes) checkForeign(ctx context.Context, store *zkstate.Store, g string, ids []string) bool {
	if m.ours != nil {
		ours := m.ours(g) // read only
		var others []string
		for _, id := range ids {
			if !ours[id] {
				others = append(others, id)
			}
		}
		ids = others
	}
	if len(ids) == 0 {
		m.setForeign(g, nil, true)
		return false
	}
	bridges, _, err := store.Children(ctx, zkstate.BridgesPath(m.root))
	if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
		m.log.Debug().Err(err).Str("group", g).Msg("listing bridges for the foreign zk member check")
		return true // try again later
	}
	sessions := map[int64]bool{store.SessionID(): true}
	owners := make([]int64, len(bridges))
	fanOut(ctx, len(bridges), func(i int) {
		if ok, st, err := store.Exists(ctx, path.Join(zkstate.BridgesPath(m.root), bridges[i])); err == nil && ok {
			owners[i] = st.EphemeralOwner
		}
	})
	for _, o := range owners {
		if o != 0 {
			sessions[o] = true
		}
	}
	idOwners := make([]int64, len(ids))
	found := make([]bool, len(ids))
	fanOut(ctx, len(ids), func(i int) {
		if ok, st, err := store.Exists(ctx, zkstate.IDPath(g, ids[i])); err == nil && ok {
			idOwners[i], found[i] = st.EphemeralOwner, true
		}
	})
	if ctx.Err() != nil {
		return false
	}
	var foreign []string
	for i, id := range ids {
		if found[i] && !sessions[idOwners[i]] {
			foreign = append(foreign, id)
		}
	}
	m.setForeign(g, foreign, true)
	return len(foreign) > 0
}

// setForeign records the group's foreign zk members, exports their count and logs a change.
// active false: the group left kafka/finalized mode, its gauge goes away.
func (m *groupModes) setForeign(g string, foreign []string, active bool) {
	m.mu.Lock()
	e := m.entry(g)
	prev := e.foreign
	e.foreign = foreign
	mode := e.mode
	m.mu.Unlock()
	if m.metrics != nil {
		if active {
			m.metrics.foreignZK.WithLabelValues(g).Set(float64(len(foreign)))
		} else {
			m.metrics.foreignZK.DeleteLabelValues(g)
		}
	}
	switch {
	case !active || slices.Equal(prev, foreign):
	case len(foreign) > 0:
		shown := foreign
		if len(shown) > 5 {
			shown = shown[:5]
		}
		m.log.Warn().Str("group", g).Str("mode", string(mode)).Int("zk_members", len(foreign)).Strs("consumer_ids", shown).
			Msgf("group %q is in %s mode but ZooKeeper (0.8) consumers are registered in %s; the bridge cannot stop them and they consume beside its Kafka members: stop them, or roll the group back to mixed", g, mode, zkstate.IDsPath(g))
	case len(prev) > 0:
		m.log.Info().Str("group", g).Msg("no foreign ZooKeeper (0.8) consumer is registered any more")
	}
}

// foreignWatch is a group's watch of /consumers/<g>/ids for the foreign check.
type foreignWatch struct {
	ch   <-chan zkstate.WatchEvent // nil while not watching
	stop context.CancelFunc
}

func (w *foreignWatch) close() {
	if w.stop != nil {
		w.stop()
	}
	w.ch, w.stop = nil, nil
}

// syncIDsWatch keeps the ids watch exactly while the group is in kafka or finalized mode and
// this bridge owns it, and stops reporting the group when it does not.
func (m *groupModes) syncIDsWatch(ctx context.Context, store *zkstate.Store, g string, mode zkstate.Mode, w *foreignWatch, recheck *time.Timer) {
	want := (mode == zkstate.ModeKafka || mode == zkstate.ModeFinalized) && (m.owns == nil || m.owns(g))
	switch {
	case want && w.ch == nil:
		ictx, cancel := context.WithCancel(ctx)
		ch, err := store.WatchChildren(ictx, zkstate.IDsPath(g))
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				m.log.Warn().Err(err).Str("group", g).Msg("cannot watch the group's 0.8 registrations; foreign zk members are not reported")
			}
			return
		}
		w.ch, w.stop = ch, cancel
	case !want && w.ch != nil:
		w.close()
		recheck.Stop()
		m.setForeign(g, nil, false)
	}
}

// placed returns a channel closed at the next change of the live bridges (placementChanged).
func (m *groupModes) placed() <-chan struct{} {
	if p := m.placement.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if m.placement.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *m.placement.Load()
}

// placementChanged wakes every group's watcher to check whether it still owns its group.
func (m *groupModes) placementChanged() {
	ch := make(chan struct{})
	if old := m.placement.Swap(&ch); old != nil {
		close(*old)
	}
}
