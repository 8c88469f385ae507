package zkstate

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
)

// Op is one operation of a Multi; build it with CreateOp, SetOp, DeleteOp or CheckOp.
type Op struct {
	kind    opKind
	path    string
	data    []byte
	version int32
	opts    CreateOptions
	parent  int // for a parent create Multi inserted: index of the caller's op it serves, else -1
}

type opKind int

const (
	opCreate opKind = iota + 1
	opSet
	opDelete
	opCheck
)

// CreateOp creates path. With opts.Parents, Multi adds creates of the missing parents (empty,
// persistent) to the batch just before the op; it checks which parents exist before it sends
// the batch, so a parent created concurrently by someone else fails the batch with
// ErrNodeExists.
func CreateOp(path string, data []byte, opts CreateOptions) Op {
	return Op{kind: opCreate, path: path, data: data, opts: opts, parent: -1}
}

// SetOp writes path's data if its version is still version (-1: any).
func SetOp(path string, data []byte, version int32) Op {
	return Op{kind: opSet, path: path, data: data, version: version, parent: -1}
}

// DeleteOp deletes path if its version is still version (-1: any).
func DeleteOp(path string, version int32) Op {
	return Op{kind: opDelete, path: path, version: version, parent: -1}
}

// CheckOp fails the batch unless path's version is version. Leading CheckOps are the batch's
// guards: see Multi.
func CheckOp(path string, version int32) Op {
	return Op{kind: opCheck, path: path, version: version, parent: -1}
}

// Path is the path the op acts on.
func (o Op) Path() string { return o.path }

func (o Op) String() string {
	switch o.kind {
	case opCreate:
		if o.opts.Ephemeral {
			return "create ephemeral " + o.path
		}
		return "create " + o.path
	case opSet:
		return fmt.Sprintf("set %s@%d", o.path, o.version)
	case opDelete:
		return fmt.Sprintf("delete %s@%d", o.path, o.version)
	case opCheck:
		return fmt.Sprintf("check %s@%d", o.path, o.version)
	}
	return "invalid op"
}

// ErrMultiTooLarge: a batch (MultiAtomic) or a single op does not fit one request.
var ErrMultiTooLarge = errors.New("multi request too large")

// MultiError reports a failed Multi or MultiAtomic.
type MultiError struct {
	// Index is the caller's op that failed (for a parent create that Multi added, the op it was
	// added for); -1 when the request failed as a whole (connection loss).
	Index int
	Op    Op
	// Parent is set when the failing op was a parent create added for Op.
	Parent string
	// Applied counts the caller's ops committed by earlier requests of a split batch: ops
	// [0, Applied) took effect, the rest did not (after a connection loss, the failed request's
	// ops may or may not have).
	Applied int
	Err     error
}

func (e *MultiError) Error() string {
	msg := "zkstate: multi"
	switch {
	case e.Index >= 0 && e.Parent != "":
		msg += fmt.Sprintf(": create parent %s of op %d (%s)", e.Parent, e.Index, e.Op)
	case e.Index >= 0:
		msg += fmt.Sprintf(": op %d (%s)", e.Index, e.Op)
	}
	msg += ": " + e.Err.Error()
	if e.Applied > 0 {
		msg += fmt.Sprintf(" (ops 0-%d were applied by earlier requests)", e.Applied-1)
	}
	return msg
}

func (e *MultiError) Unwrap() error { return e.Err }

// Multi applies ops in order. A batch whose encoding fits Config.MaxMultiBytes and that has at
// most 250 ops (maxMultiOps) is one ZooKeeper multi: all ops or none. A larger batch is split
// into several multis sent one after another, and then atomicity holds per request only: when a
// later request fails, the earlier ones stay applied (MultiError.Applied says how far). To keep
// fencing across the split, the batch's leading CheckOps (its guards) are repeated at the start
// of every request, unless an op of the batch writes the guarded path. Use MultiAtomic when a
// partial batch is worse than none.
func (s *Store) Multi(ctx context.Context, ops ...Op) error {
	return s.multi(ctx, false, ops)
}

// MultiAtomic is Multi for a batch that must be one request: it refuses, with ErrMultiTooLarge
// and nothing applied, a batch that does not fit Config.MaxMultiBytes. The cap on ops per
// request (maxMultiOps) does not apply: the caller chose atomicity.
func (s *Store) MultiAtomic(ctx context.Context, ops ...Op) error {
	return s.multi(ctx, true, ops)
}

func (s *Store) multi(ctx context.Context, atomic bool, ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	for i, op := range ops {
		if op.kind == 0 {
			return &MultiError{Index: i, Op: op, Err: errors.New("zero Op: build ops with CreateOp, SetOp, DeleteOp or CheckOp")}
		}
		if err := validatePath(op.path); err != nil || (op.kind == opCreate && op.path == "/") {
			if err == nil {
				err = errors.New("cannot create the root")
			}
			return &MultiError{Index: i, Op: op, Err: err}
		}
	}
	expanded, err := s.expandParents(ctx, ops)
	if err != nil {
		return err
	}
	chunks, err := s.planChunks(expanded, atomic)
	if err != nil {
		var me *MultiError
		if errors.As(err, &me) && me.Index >= 0 {
			me.Op = ops[me.Index]
		}
		return err
	}
	applied := 0
	for _, ch := range chunks {
		if err := s.runChunk(ctx, ch); err != nil {
			var me *MultiError
			if errors.As(err, &me) {
				if me.Index >= 0 {
					me.Op = ops[me.Index]
				}
				me.Applied = applied
			}
			return err
		}
		applied = ch.lastOrigin + 1
	}
	return nil
}

// expandParents adds, for every create with Parents, creates of its missing ancestors right
// before it. Ancestors created by an op of the batch are left to that op; the others are
// looked up in pipelined waves: first each create's parent, and only above a parent that is
// missing its further ancestors (a znode's ancestors exist, so an existing parent ends its
// chain). The common case, a create under a parent that exists (a group's next partition),
// costs one lookup, not one per ancestor; a parent missing costs a second wave.
func (s *Store) expandParents(ctx context.Context, ops []Op) ([]indexedOp, error) {
	created := map[string]bool{}
	for _, op := range ops {
		if op.kind == opCreate {
			created[op.path] = true
		}
	}
	exists := map[string]bool{} // ancestors looked up, and whether they exist
	seen := map[string]bool{}   // ancestors to look up
	var parents []string
	for _, op := range ops {
		if op.kind != opCreate || !op.opts.Parents {
			continue
		}
		if p := parentOf(op.path); p != "/" && !created[p] && !seen[p] {
			seen[p] = true
			parents = append(parents, p)
		}
	}
	if err := s.lookUpParents(ctx, parents, exists); err != nil {
		return nil, err
	}
	var above []string
	for _, d := range parents {
		if exists[d] {
			continue
		}
		for p := parentOf(d); p != "/" && !created[p]; p = parentOf(p) {
			if ok, looked := exists[p]; looked && ok {
				break
			}
			if !seen[p] {
				seen[p] = true
				above = append(above, p)
			}
		}
	}
	if err := s.lookUpParents(ctx, above, exists); err != nil {
		return nil, err
	}
	out := make([]indexedOp, 0, len(ops))
	for i, op := range ops {
		if op.kind == opCreate && op.opts.Parents {
			var chain []string
			for p := parentOf(op.path); p != "/" && !created[p]; p = parentOf(p) {
				if ok, looked := exists[p]; !looked || ok {
					break
				}
				chain = append(chain, p)
				exists[p] = true // created once, by the first op that needs it
			}
			for j := len(chain) - 1; j >= 0; j-- {
				parent := CreateOp(chain[j], nil, CreateOptions{})
				parent.parent = i
				out = append(out, indexedOp{op: parent, origin: i})
			}
		}
		out = append(out, indexedOp{op: op, origin: i})
	}
	return out, nil
}

// lookUpParents looks paths up in one pipelined wave, into exists.
func (s *Store) lookUpParents(ctx context.Context, paths []string, exists map[string]bool) error {
	found := make([]bool, len(paths))
	errs := make([]error, len(paths))
	if err := s.fanOut(ctx, len(paths), nil, func(i int) {
		s.reqs.add(ReqExists, 1)
		found[i], _, errs[i] = s.conn.Exists(s.full(paths[i]))
	}); err != nil {
		return &MultiError{Index: -1, Err: fmt.Errorf("look up parents: %w", err)}
	}
	for i, p := range paths {
		if errs[i] != nil {
			return &MultiError{Index: -1, Err: fmt.Errorf("look up parent %s: %w", p, mapError(errs[i]))}
		}
		exists[p] = found[i]
	}
	return nil
}

type indexedOp struct {
	op     Op
	origin int // index of the caller's op
}

type chunk struct {
	ops        []indexedOp
	lastOrigin int
}

// Encoded sizes, from go-zookeeper's encoding (structs.go) of ZooKeeper's jute records: a
// length prefix and request header (xid, opcode), then per op a multi header (type, done, err)
// and the op's record, then a closing multi header.
const (
	requestOverhead = 4 + 8 + 9
	opHeader        = 9
)

// opSize is the encoded size of one op in a multi request.
func (s *Store) opSize(op Op) int {
	path := 4 + len(s.full(op.path))
	switch op.kind {
	case opCreate:
		acl := 4
		for _, a := range s.aclFor(op.path) {
			acl += 4 + 4 + len(a.Scheme) + 4 + len(a.ID)
		}
		return opHeader + path + 4 + len(op.data) + acl + 4
	case opSet:
		return opHeader + path + 4 + len(op.data) + 4
	default: // delete, check
		return opHeader + path + 4
	}
}

// maxMultiOps caps the ops of one request of a split Multi (guards included).
//
// ZooKeeper keeps its last zookeeper.commitLogCount (500) transactions in memory, whole, for
// followers that fall behind. A 1,000-partition offset commit is ~2,000 ops and ~300 KB in one
// transaction: a few hundred of those filled the 256 MB heap of a test server, which then spent
// its time in full GCs until every multi outlived its caller's timeout (and in the end ran out
// of memory). The same writes in requests of at most 250 ops keep what the server retains about
// 8 times smaller, for a round trip per request (a 1,000-partition group write is 9 requests);
// BenchmarkOffsetCommit's figures are in docs/benchmarks.md.
const maxMultiOps = 250

// planChunks splits the batch into requests of at most maxMulti bytes and maxMultiOps ops (one,
// or an error, when atomic).
func (s *Store) planChunks(ops []indexedOp, atomic bool) ([]chunk, error) {
	return s.splitChunks(ops, atomic, maxMultiOps)
}

// splitChunks is planChunks with a cap of maxOps ops per request (at least the guards and one
// op), ignored when atomic.
func (s *Store) splitChunks(ops []indexedOp, atomic bool, maxOps int) ([]chunk, error) {
	total := requestOverhead
	for _, o := range ops {
		total += s.opSize(o.op)
	}
	if total <= s.maxMulti && (atomic || len(ops) <= maxOps) {
		return []chunk{{ops: ops, lastOrigin: ops[len(ops)-1].origin}}, nil
	}
	if atomic {
		return nil, &MultiError{Index: -1, Err: fmt.Errorf("%w: %d ops encode to %d bytes, over the %d-byte limit; split it or use Multi",
			ErrMultiTooLarge, len(ops), total, s.maxMulti)}
	}
	// The guards: leading checks on paths that no op of the batch writes (a write would change
	// the version the check expects, so repeating it would fail the later requests).
	written := map[string]bool{}
	for _, o := range ops {
		if o.op.kind != opCheck {
			written[o.op.path] = true
		}
	}
	var guards []indexedOp
	for _, o := range ops {
		if o.op.kind != opCheck {
			break
		}
		if !written[o.op.path] {
			guards = append(guards, o)
		}
	}
	guardSize := 0
	for _, g := range guards {
		guardSize += s.opSize(g.op)
	}
	maxOps = max(maxOps, len(guards)+1)

	var chunks []chunk
	cur := chunk{}
	size := requestOverhead
	for _, o := range ops {
		n := s.opSize(o.op)
		if len(cur.ops) > 0 && (size+n > s.maxMulti || len(cur.ops) >= maxOps) {
			chunks = append(chunks, cur)
			cur = chunk{ops: append([]indexedOp(nil), guards...)}
			size = requestOverhead + guardSize
		}
		if size+n > s.maxMulti {
			return nil, &MultiError{Index: o.origin, Err: fmt.Errorf("%w: op encodes to %d bytes, a request holding it to %d, over the %d-byte limit",
				ErrMultiTooLarge, n, size+n, s.maxMulti)}
		}
		cur.ops = append(cur.ops, o)
		cur.lastOrigin = o.origin
		size += n
	}
	chunks = append(chunks, cur)
	return chunks, nil
}

// runChunk sends one multi request and names the op that failed.
func (s *Store) runChunk(ctx context.Context, ch chunk) error {
	reqs := make([]any, len(ch.ops))
	paths := make([]string, 0, len(ch.ops))
	for i, o := range ch.ops {
		full := s.full(o.op.path)
		if o.op.kind != opCheck {
			paths = append(paths, full)
		}
		switch o.op.kind {
		case opCreate:
			reqs[i] = &zk.CreateRequest{Path: full, Data: o.op.data, Acl: s.aclFor(o.op.path), Flags: o.op.opts.flags()}
		case opSet:
			reqs[i] = &zk.SetDataRequest{Path: full, Data: o.op.data, Version: o.op.version}
		case opDelete:
			reqs[i] = &zk.DeleteRequest{Path: full, Version: o.op.version}
		case opCheck:
			reqs[i] = &zk.CheckVersionRequest{Path: full, Version: o.op.version}
		}
	}
	res, err := doWrite(ctx, s, paths, func() ([]zk.MultiResponse, error) {
		s.reqs.add(ReqMulti, 1)
		return s.conn.Multi(reqs...)
	})
	if err == nil {
		return nil
	}
	// ZooKeeper answers a failed multi with one result per op: OK before the failing op, its
	// error for it, and "runtime inconsistency" after it; go-zookeeper turns OK into nil.
	for i, r := range res {
		if r.Error != nil && i < len(ch.ops) {
			o := ch.ops[i]
			me := &MultiError{Index: o.origin, Err: mapError(r.Error)}
			if o.op.parent >= 0 {
				me.Parent = o.op.path
			}
			return me
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &MultiError{Index: -1, Err: err}
	}
	return &MultiError{Index: -1, Err: mapError(err)}
}
