package zkstate

import (
	"bytes"
	"context"
	"errors"
	"slices"
)

// DeleteEphemerals is DeleteEphemeral and DeleteEphemeralHolding for many nodes in two round
// trips whatever their number, where one by one they cost two each: one read of every node
// (GetMany: pipelined Gets, side by side with other callers', or a multiRead for many nodes),
// then one atomic Multi deleting, at the versions read, every node our
// session holds with the data given (nodes maps a path to the data it must still hold; nil data:
// any, as DeleteEphemeral). Each path's ephemeral lock is held from the read to the Multi, so
// that nothing of this process makes a node again in between, as in the calls one by one.
//
// Missing nodes are fine. The nodes another session holds, or that hold other data, are left
// alone and returned (the one-by-one calls' ErrNotOwner). The remembered ephemerals are
// forgotten as those calls forget them. An error means nothing was deleted (a read failed, or a
// node changed between the read and the Multi, which then failed as a whole): the caller may
// delete one by one instead.
//
// also goes in the same Multi, after the deletes: it applies with them or nothing does (a
// handover releases the group's epoch with its mirror). With no nodes, nothing is sent.
func (s *Store) DeleteEphemerals(ctx context.Context, nodes map[string][]byte, also ...Op) (notOurs []string, err error) {
	paths := make([]string, 0, len(nodes))
	for p := range nodes {
		if err := validatePath(p); err != nil {
			return nil, pathErr("delete ephemerals", p, err)
		}
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return nil, nil
	}
	slices.Sort(paths) // every lock taken in one order: no two batches wait for each other
	for i, p := range paths {
		if err := s.eph.lock(ctx, p); err != nil {
			for _, q := range paths[:i] {
				s.eph.unlock(q)
			}
			return nil, pathErr("delete ephemerals", p, err)
		}
	}
	defer func() {
		for _, p := range paths {
			s.eph.unlock(p)
		}
	}()
	for _, p := range paths {
		s.eph.forget(p, nodes[p])
	}
	reads, err := s.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	id := s.SessionID()
	var ops []Op
	for i, r := range reads {
		p := paths[i]
		switch {
		case errors.Is(r.Err, ErrNoNode):
		case r.Err != nil:
			return nil, r.Err
		case id == 0 || r.Stat.EphemeralOwner != id || (nodes[p] != nil && !bytes.Equal(r.Data, nodes[p])):
			notOurs = append(notOurs, p)
		default:
			ops = append(ops, DeleteOp(p, r.Stat.Version))
		}
	}
	if err := s.MultiAtomic(ctx, append(ops, also...)...); err != nil {
		return nil, err
	}
	return notOurs, nil
}
