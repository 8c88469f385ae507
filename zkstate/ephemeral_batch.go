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

// CreateEphemerals is CreateEphemeral for many nodes in one atomic Multi: one round trip and one
// write of ZooKeeper whatever their number, where one by one they cost a round trip and a write
// each. When a persistent parent is missing, the Multi fails and is sent again with the missing
// parents (looked up in one pipelined wave first, and made in it): three round trips.
// Every node created is remembered as CreateEphemeral remembers it. Each path's ephemeral lock is
// held across the Multi, so that nothing of this process makes or deletes a node in between.
//
// An error means none was made: one is taken (by another session, or by ours already), a parent
// could not be made, or the Multi's answer was lost (then it may have been applied: the nodes
// are ours, which CreateEphemeral one by one finds). The caller may create them one by one then.
// With fewer than two nodes, nothing is sent and ErrBatchTooSmall is returned.
func (s *Store) CreateEphemerals(ctx context.Context, nodes map[string][]byte) error {
	if len(nodes) < 2 {
		return ErrBatchTooSmall
	}
	paths := make([]string, 0, len(nodes))
	for p := range nodes {
		if err := validatePath(p); err != nil || p == "/" {
			if err == nil {
				err = errors.New("cannot create the root")
			}
			return pathErr("create ephemerals", p, err)
		}
		paths = append(paths, p)
	}
	slices.Sort(paths) // every lock taken in one order: no two batches wait for each other
	for i, p := range paths {
		if err := s.eph.lock(ctx, p); err != nil {
			for _, q := range paths[:i] {
				s.eph.unlock(q)
			}
			return pathErr("create ephemerals", p, err)
		}
	}
	defer func() {
		for _, p := range paths {
			s.eph.unlock(p)
		}
	}()
	data := make([][]byte, len(paths))
	for i, p := range paths {
		data[i] = slices.Clone(nodes[p])
	}
	create := func(parents bool) error {
		ops := make([]Op, len(paths))
		for i, p := range paths {
			ops[i] = CreateOp(p, data[i], CreateOptions{Ephemeral: true, Parents: parents})
		}
		return s.MultiAtomic(ctx, ops...)
	}
	before := s.SessionID()
	// The parents are there as a rule (a group's mirror made again): looked up only when the
	// Multi finds one missing.
	err := create(false)
	if errors.Is(err, ErrNoNode) {
		err = create(true)
	}
	if err != nil {
		return err
	}
	after := s.SessionID()
	kick := false
	for i, p := range paths {
		e := &ephemeral{data: data[i]}
		if before == after {
			e.owner, e.versionIn = before, before // made by this call: version 0
		}
		s.eph.set(p, e)
		kick = kick || e.owner == 0
	}
	if kick {
		s.kickReclaim() // the session changed under us: let the reclaimer check the nodes
	}
	return nil
}

// ErrBatchTooSmall: CreateEphemerals was given fewer than two nodes; create them one by one.
var ErrBatchTooSmall = errors.New("zkstate: fewer than two nodes to create in one batch")
