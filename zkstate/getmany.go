package zkstate

import (
	"context"
	"fmt"
	"math"
)

// Read is the result of one read of GetMany or ChildrenMany. Err is nil, or a *PathError
// wrapping ErrNoNode for a missing znode, or another error of that read alone.
type Read struct {
	Data     []byte   // GetMany
	Children []string // ChildrenMany, unsorted
	Stat     Stat
	Err      error
	// InSession says the read was sent on the Store's own session (pipelined Gets), not on the
	// multiRead connection: ZooKeeper serves a session's requests in order, and a session that
	// reconnects never sees an older state, so every request the Store sends after GetMany
	// returned sees every write this read saw. A multiRead's server may be ahead of the
	// session's.
	InSession bool
}

// GetMany reads the data of many znodes in about one round trip: as multiRead requests when
// the server has them (a few requests for hundreds of znodes, where a Get each costs a request
// each), else pipelined Gets. Like a Snapshot, the reads are not one transaction; each result
// is as fresh as a Get on the Store's own server. The error is ctx's, or ErrClosed; a read's
// own failure is in its Read.
func (s *Store) GetMany(ctx context.Context, paths []string) ([]Read, error) {
	return s.readMany(ctx, paths, false, minMultiReadBatch)
}

// GetBatch reads the data of znodes as GetMany does, but as one multiRead request however few
// they are (pipelined Gets only when the server has no multiRead): for a caller that reads a
// handful of znodes on its way to writing them, where a request each would cost ZooKeeper more
// than the wait for the multiRead connection costs the caller.
func (s *Store) GetBatch(ctx context.Context, paths []string) ([]Read, error) {
	return s.readMany(ctx, paths, false, 1)
}

// ChildrenMany lists the children of many znodes as GetMany reads their data.
func (s *Store) ChildrenMany(ctx context.Context, paths []string) ([]Read, error) {
	return s.readMany(ctx, paths, true, minMultiReadBatch)
}

// minMultiReadBatch is the smallest GetMany or ChildrenMany sent as a multiRead. The multiRead
// connection carries one request at a time, so a thousand consumers each fetching the offsets
// of a partition or two would queue behind each other there, where pipelined reads on the
// Store's own connection run side by side and cost about as few requests.
const minMultiReadBatch = 16

// readMany reads paths, as multiRead requests when there are at least minBatch of them.
func (s *Store) readMany(ctx context.Context, paths []string, children bool, minBatch int) ([]Read, error) {
	op := "get"
	if children {
		op = "children"
	}
	out := make([]Read, len(paths))
	r := &reads{children: children}
	valid := make([]int, 0, len(paths)) // out index of each path in r
	for i, p := range paths {
		if err := validatePath(p); err != nil {
			out[i].Err = pathErr(op, p, err)
			continue
		}
		r.add(p)
		valid = append(valid, i)
	}
	var err error
	if len(r.paths) < minBatch {
		err = s.pipelinedReads(ctx, nil, r)
	} else {
		err = s.runReads(ctx, nil, r)
	}
	if err != nil {
		return nil, fmt.Errorf("zkstate: %s of %d znodes: %w", op, len(r.paths), err)
	}
	if err := ctx.Err(); err != nil {
		// Pipelined reads still in flight when ctx ended write into r; none may be used.
		return nil, fmt.Errorf("zkstate: %s of %d znodes: %w", op, len(r.paths), err)
	}
	for k, i := range valid {
		if err := r.errs[k]; err != nil {
			out[i].Err = pathErr(op, paths[i], err)
			continue
		}
		out[i].Data, out[i].Children, out[i].Stat, out[i].InSession = r.data[k], r.kids[k], statFrom(r.stats[k]), r.inSession
	}
	return out, nil
}

// GetInSession reads the data of znodes as pipelined Gets on the Store's own session, however
// many there are (never on the multiRead connection): every Read that succeeded has InSession
// set. ZooKeeper serves a session's requests in order, so a request the Store sends after
// GetInSession returned sees every write these reads saw, as long as the session is the same
// (SessionID before and after). For a caller that orders a later check after what it read.
func (s *Store) GetInSession(ctx context.Context, paths []string) ([]Read, error) {
	return s.readMany(ctx, paths, false, math.MaxInt)
}
