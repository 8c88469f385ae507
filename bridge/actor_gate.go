package bridge

// The mode gate of a Kafka request (modes.go describes the modes). The group's mode is known
// before a request that may write the group is served; when it must be read from ZooKeeper (the
// group's first service, which also persists its default, or a JoinGroup in legacy mode, which
// reads the mode again in case the watch has not delivered a migration yet), the read runs on a
// goroutine of its own and its result comes back to the group's host as an event (modeRead):
// the host goes on stepping the group's other events meanwhile (its legacy members', the Kafka
// side's writes, claims and timers), so that a slow ZooKeeper never holds the group's goroutine.
// The actor takes no other request while one waits for its mode (chans), so requests are still
// served in their order of arrival: the first request of a new group waits for the default to
// be persisted, and those behind it keep their order (the first to join leads the group, as in
// Kafka).

import (
	"context"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// modeRead is the group's mode as read for the request that waits for it (actor.gating).
type modeRead struct {
	req  *request
	mode zkstate.Mode
	err  error
}

// modeGate makes sure the group's mode is known before a Kafka request that may write the
// group is served (Describe and Delete need no mode: looking at a group creates nothing), and
// answers the requests the mode refuses (gate). It reports whether it took req: answered, or
// waiting for the mode to be read (onModeRead serves it then).
func (a *actor) modeGate(ctx context.Context, req *request) bool {
	m := a.c.modes
	if m == nil {
		return false
	}
	switch req.ev.(type) {
	case group.Describe, group.Delete:
		return false
	}
	_, join := req.ev.(group.JoinGroup)
	if mode, ok := m.modeOf(a.group); ok && (!join || mode != zkstate.ModeLegacy) {
		return a.gate(ctx, req, mode, nil)
	}
	a.gating = req
	reads := a.modeReads
	// In writeWG: the read may persist the group's default, and finish waits for the writes
	// of an actor before the group takes requests again.
	a.writeWG.Add(1)
	go func() {
		defer a.writeWG.Done()
		mode, err := m.ensure(ctx, a.group, kindKafka)
		if err == nil && join && mode == zkstate.ModeLegacy {
			mode = m.confirm(ctx, a.group, mode)
		}
		reads <- modeRead{req: req, mode: mode, err: err}
	}()
	return true
}

// onModeRead serves the request that waited for the group's mode.
func (a *actor) onModeRead(ctx context.Context, r modeRead) {
	if a.gating != r.req {
		return // answered by finish already
	}
	a.gating = nil
	if a.gate(ctx, r.req, r.mode, r.err) {
		return
	}
	a.serve(ctx, r.req)
}

// gate answers req when the group's mode (or the error reading it) refuses it, and reports
// whether it did.
func (a *actor) gate(ctx context.Context, req *request, mode zkstate.Mode, err error) bool {
	m := a.c.modes
	if err != nil {
		a.log.Warn().Err(err).Msg("cannot read the group's mode; answering COORDINATOR_NOT_AVAILABLE")
		req.reply <- req.finish(errorReply(a.group, req.ev, group.ErrCoordinatorNotAvailable))
		return true
	}
	if mode == zkstate.ModeMixed {
		return a.admitMixed(ctx, req) // mixed.go
	}
	if mode != zkstate.ModeLegacy {
		return false
	}
	switch ev := req.ev.(type) {
	case group.JoinGroup:
		m.refused("kafka_join")
		if m.warnOnce(a.group) {
			a.log.Warn().Str("client_id", ev.ClientID).Str("client_host", ev.ClientHost).
				Msgf("refusing Kafka members with INCONSISTENT_GROUP_PROTOCOL: group %q is in legacy mode; to admit them run `zkbridge migrate apply --group %s --to mixed`", a.group, a.group)
		}
		a.removeRefused(ctx, ev)
		req.reply <- req.finish(errorReply(a.group, ev, group.ErrInconsistentGroupProtocol))
		return true
	case group.Heartbeat, group.SyncGroup:
		// A member of the group from before a rollback: make it rejoin, where it is refused.
		req.reply <- req.finish(errorReply(a.group, ev, group.ErrRebalanceInProgress))
		return true
	}
	return false
}
