package bridge

import (
	"context"
	"errors"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// deleteBlocked answers a DeleteGroups of a group with live consumers outside the engine (legacy
// consumers of this or another bridge, 0.8 consumers: all are registered in
// /consumers/<g>/ids) NON_EMPTY_GROUP, and reports whether it answered. The engine only knows
// the group's Kafka members: without this an Empty engine group was "deleted" (its offsets
// removed, success answered) under consumers that still used it. Kafka answers
// NON_EMPTY_GROUP for a group with members, and its 0.8 tool (kafka-consumer-groups --delete
// --zookeeper) refuses a group whose consumers are active.
func (a *actor) deleteBlocked(ctx context.Context, req *request) bool {
	if _, ok := req.ev.(group.Delete); !ok || a.m.State() != group.Empty {
		return false // the engine answers for its own members
	}
	ctx, cancel := context.WithTimeout(ctx, a.c.cfg.LoadTimeout)
	defer cancel()
	a.c.mu.Lock()
	store := a.c.store
	a.c.mu.Unlock()
	ids, _, err := store.Children(ctx, zkstate.IDsPath(a.group))
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
		return false
	case err != nil:
		a.log.Warn().Err(err).Msg("cannot list the group's consumers before deleting it; answering COORDINATOR_NOT_AVAILABLE")
		req.reply <- req.finish(errorReply(a.group, req.ev, group.ErrCoordinatorNotAvailable))
		return true
	case len(ids) == 0:
		return false
	}
	a.log.Info().Strs("consumers", ids).Msg("refusing to delete a group with live consumers (NON_EMPTY_GROUP)")
	req.reply <- req.finish(errorReply(a.group, req.ev, group.ErrNonEmptyGroup))
	return true
}
