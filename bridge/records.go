package bridge

// The bridge's own state under Config.Root, and the one way a group's state reaches
// ZooKeeper: a multi that first checks the group's epoch znode version.
//
// Fencing (the scheme of Kafka's ZooKeeper-to-KRaft migration, which guards every write with
// the controller epoch znode's version): a bridge that loads a group takes it over by writing
// <root>/groups/<g>/epoch with a version check, and remembers the new version. Every later write
// of the group is one multi starting with CheckOp(epoch, that version). A bridge that took the
// group over since has bumped the version, so the stale bridge's write fails as a whole, the
// engine is told PersistFailed, fences itself and answers NOT_COORDINATOR.
//
// A bridge takes a group over only from itself (a restart) or from a bridge that is gone (its
// ephemeral <root>/bridges/<node-id> registration is missing); a group held by a live bridge is
// answered NOT_COORDINATOR.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// The bridge's own paths and record formats are zkstate's (zkstate/records_bridge.go).

// validName checks that a group or topic name can be one znode name: Kafka accepts almost any
// group id, but ZooKeeper refuses control characters and surrogates, and a '/' or a "." would
// change the path.
func validName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty %s name", kind)
	case name == "." || name == "..":
		return fmt.Errorf("%s name %q is a relative path", kind, name)
	case !utf8.ValidString(name):
		return fmt.Errorf("%s name %q is not UTF-8", kind, name)
	}
	for _, r := range name {
		// ZooKeeper's PathUtils.validatePath refuses these.
		if r == '/' || r == 0 || unicode.IsControl(r) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Errorf("%s name %q has a character ZooKeeper paths cannot hold (%U)", kind, name, r)
		}
	}
	return nil
}

// OwnedError says that a live bridge holds the group.
type OwnedError struct {
	Group  string
	NodeID int32
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("bridge: group %q is held by live bridge %d", e.Group, e.NodeID)
}

// ErrFenced: the group's epoch moved under us; another bridge took it over.
var ErrFenced = errors.New("bridge: group taken over by another bridge (epoch changed)")

// errCorruptRecord: the group's record cannot be loaded; the group is not served until an
// operator looks at it (overwriting it could lose members' assignments).
var errCorruptRecord = errors.New("bridge: group record cannot be loaded")

// groupStore is a group's znodes as the bridge knows them. It belongs to one goroutine at a
// time: the actor, or the write the actor started (the actor gets it back with the result).
type groupStore struct {
	store  *zkstate.Store
	root   string
	group  string
	nodeID int32
	log    zerolog.Logger

	epoch  int32 // our version of the epoch znode; -1 until we took the group over
	record int32 // version of the record znode; -1 when there is none
	// known holds offset znodes (0.8 and ours) known to exist, so that a commit is a set, not
	// a create.
	known map[string]bool
	// placed, when set, says whether the group maps to this bridge (handover.go) for a holder
	// that is alive and draining or not: then that holder is waited for rather than refused.
	placed func(draining bool) bool
	// unregistered, when set, says whether a node had no registration at the last read of the
	// live bridges (handover.go: hasRegistration): acquire then takes a held epoch as a rescan's
	// takeover does (takeHinted), where it read the holder's registration first.
	unregistered func(node int32) bool
	// ownOnly leaves the 0.8 offsets (/consumers/<g>/offsets) out of every write: set for a
	// finalized group, whose truth is the bridge's own offset records (modes.go).
	ownOnly bool
	// hint, set for a takeover a rescan decided, is the epoch it read (handover.go); the first
	// acquire uses it.
	hint *takeoverHint
	// assume, set by the load of a group with a record (a restored group, one handed over
	// above all), has a write take the offset znodes it does not know for existing: the group
	// committed them before, and looking first cost the first commit after every handover a
	// round trip. A write that finds one missing clears it (write).
	assume bool
	// missing holds offset znodes a write took for existing (assume) and found missing: the
	// next try creates them at once (missedOffsets).
	missing map[string]bool
	// record0, set by an acquire that read the record beside its write of the epoch
	// (readRecord), is that read, for the load (loading: acquire runs for it).
	record0 <-chan recordRead
	loading bool
	// epoch0, set by a load, is its read of the epoch beside the record's existence, for
	// acquire to start from.
	epoch0 <-chan epochReadErr
	// own, when set, is the session our registration existed in when the load started: every
	// epoch is written in it (register_own.go: acquire).
	own int64
}

func newGroupStore(store *zkstate.Store, root, g string, node int32, log zerolog.Logger) *groupStore {
	return &groupStore{store: store, root: root, group: g, nodeID: node, log: log, epoch: -1, record: -1, known: map[string]bool{}}
}

// takeEpoch takes the group over: it creates the epoch znode, or bumps its version if the
// previous owner is us or a bridge that is gone. Called through acquire (register_own.go).
func (g *groupStore) takeEpoch(ctx context.Context) error {
	p := zkstate.EpochPath(g.root, g.group)
	mine := zkstate.Epoch{NodeID: g.nodeID, AcquiredMs: time.Now().UnixMilli()}.Encode()
	var next *epochRead // read already (by the rescan, or the watch on a holder's release)
	if h := g.hint; h != nil {
		g.hint = nil
		if h.wait {
			next = h.read()
		} else if took, err := g.takeHinted(ctx, p, mine, h); took || err != nil {
			return err
		}
		// The epoch moved since the rescan read it: look at it again.
	}
	if r := g.epoch0; r != nil { // load: read beside the record's existence
		g.epoch0 = nil
		if e := <-r; e.err == nil {
			next = &e.epochRead
		}
	}
	conflicts := 0
	for conflicts < 5 {
		cur := next
		next = nil
		if cur == nil {
			e := g.readEpoch(ctx, p)
			if e.err != nil {
				return fmt.Errorf("take over group %q: %w", g.group, e.err)
			}
			cur = &e.epochRead
		}
		if !cur.exists {
			err := g.createEpoch(ctx, p, mine)
			if errors.Is(err, zkstate.ErrNodeExists) {
				conflicts++
				continue // another bridge created it first: look at it
			}
			if err != nil {
				return fmt.Errorf("take over group %q: %w", g.group, err)
			}
			g.epoch = 0
			return nil
		}
		// An epoch that names no holder (not written by a bridge), or one its holder released
		// (handover.go), is taken over as one of a bridge that is gone.
		if owner, err := zkstate.ParseEpoch(cur.data); err == nil && owner.NodeID != g.nodeID && !owner.Released {
			if !cur.holderKnown && g.unregistered != nil && g.unregistered(owner.NodeID) {
				// The holder's session ended (a crash: its registration went) and a request
				// came before the rescan: take the epoch at the version read and check the
				// holder after, as the rescan's takeover does, a round trip less.
				h := &takeoverHint{version: cur.st.Version, mzxid: cur.st.Mzxid, holder: owner.NodeID}
				if took, err := g.takeHinted(ctx, p, mine, h); took || err != nil {
					return err
				}
				conflicts++
				continue
			}
			alive, draining, err := g.holderAlive(ctx, owner.NodeID, cur)
			if err != nil {
				return fmt.Errorf("take over group %q: %w", g.group, err)
			}
			if alive {
				// A draining holder is out of the live set: with one bridge left, that one is
				// alone, and the holder is handing it the group all the same.
				if g.placed == nil || !g.placed(draining) {
					return &OwnedError{Group: g.group, NodeID: owner.NodeID}
				}
				// The group maps to us and its holder is handing it over (or will, once it
				// sees the bridge set we see): wait for its release, for as long as the load
				// may take. A handover takes longer than a second on a loaded ZooKeeper, and
				// giving up then only made the group unavailable for longer: refused for a
				// second, then loaded again by a later request.
				wctx, cancel := context.WithTimeout(ctx, releaseWait)
				ev, err := g.awaitRelease(wctx, p, cur.st.Version, owner.NodeID)
				cancel()
				if err != nil && ctx.Err() != nil {
					return &OwnedError{Group: g.group, NodeID: owner.NodeID}
				}
				next = ev // the epoch as the watch read it after it moved; nil: read it again
				continue
			}
			g.log.Info().Int32("previous_owner", owner.NodeID).Msg("taking over the group of a bridge that is gone")
		}
		record := g.recordBeside(ctx, cur)
		version, err := g.setEpoch(ctx, p, mine, cur.st.Version)
		if errors.Is(err, zkstate.ErrBadVersion) {
			conflicts++
			continue
		}
		if err != nil {
			return fmt.Errorf("take over group %q: %w", g.group, err)
		}
		g.epoch, g.record0 = version, record
		return nil
	}
	return fmt.Errorf("take over group %q: the epoch keeps changing: %w", g.group, ErrFenced)
}

// takeHinted takes the epoch at the version a rescan read (handover.go: takeoverHint), then
// checks what acquire checks before: that the holder had released it, or that no live session
// of the holder wrote it (its registration is gone, or is newer than the epoch's write, a
// restarted holder's). The check follows our write on our session, so it sees every write
// ordered before ours, the holder's registration and epoch included. A live holder's epoch taken
// this way (a holder that came back while its groups were being taken) is released again at
// once, before anything was answered, and the group refused: its holder loads it again. took is
// false, with no error, when the epoch moved since the read.
//
// A load reads the group's record beside that check, both sent once the write is answered: the
// read then comes after our write as the record read after acquire always did (it sees every
// write of the holder, whose writes after ours fail on the epoch), and the load waits one round
// trip for both where it waited one for each in a row. A record read for a holder found alive is
// dropped with the group.
func (g *groupStore) takeHinted(ctx context.Context, p string, mine []byte, h *takeoverHint) (took bool, err error) {
	if h.prepared != nil {
		took, fallback, err := g.takePrepared(ctx, p, mine, h)
		if !fallback {
			return took, err
		}
		// The record moved since the preparation (its holder wrote it): take the epoch at the
		// version read, and read the record after, as a rescan's takeover does.
	}
	var record <-chan recordRead
	if h.released && h.session != 0 && g.loading {
		record = g.readRecord(ctx, h.session) // handover.go: beside the write
	}
	version, err := g.setEpoch(ctx, p, mine, h.version) // errRegistrationGone is neither below: an error
	if errors.Is(err, zkstate.ErrBadVersion) || errors.Is(err, zkstate.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take over group %q: %w", g.group, err)
	}
	g.epoch = version
	if h.released {
		g.record0 = record
		return true, nil
	}
	if h.holder == g.nodeID {
		return true, nil
	}
	if g.loading {
		g.record0 = g.readRecord(ctx, 0)
	}
	alive, reg, err := g.store.Exists(ctx, zkstate.BridgePath(g.root, h.holder))
	if err != nil {
		return true, fmt.Errorf("take over group %q: %w", g.group, err)
	}
	if alive && reg.Czxid < h.mzxid {
		if err := g.release(ctx); err != nil {
			g.log.Warn().Err(err).Msg("giving a live bridge's group back failed; it takes it again when our session ends")
		}
		return true, &OwnedError{Group: g.group, NodeID: h.holder}
	}
	g.log.Info().Int32("previous_owner", h.holder).Msg("taking over the group of a bridge that is gone")
	return true, nil
}

// releaseWait is how long acquire waits for a live holder's release before it looks again
// whether the group still maps to us and its holder is still alive; the load's own timeout
// (Config.LoadTimeout) bounds the whole wait.
const releaseWait = time.Second

// load reads the group's record; nil when it has none. A group with a record is taken over
// first and the record read again, so that nothing the previous owner wrote is missed.
func (g *groupStore) load(ctx context.Context) (*group.Record, error) {
	// A takeover a rescan decided takes the epoch without looking for a record first: the
	// group has an epoch already, so taking it creates nothing.
	if g.hint == nil {
		// The epoch is read beside: acquire starts from that read (a round trip less on the
		// way of a request loading a group handed over); dropped when there is no record.
		epoch := make(chan epochReadErr, 1)
		go func() { epoch <- g.readEpoch(ctx, zkstate.EpochPath(g.root, g.group)) }()
		ok, _, err := g.store.Exists(ctx, zkstate.GroupRecordPath(g.root, g.group))
		if err != nil {
			return nil, fmt.Errorf("load group %q: %w", g.group, err)
		}
		if !ok {
			g.record = -1
			return nil, nil
		}
		g.epoch0 = epoch
	}
	g.loading = true
	err := g.acquire(ctx)
	g.loading = false
	if err != nil {
		return nil, err
	}
	rr := recordRead{err: errOutOfSession}
	if r := g.record0; r != nil {
		g.record0 = nil
		rr = <-r
	}
	if errors.Is(rr.err, errOutOfSession) { // none read beside the takeover, or not in its session
		rr.data, rr.st, rr.err = g.store.Get(ctx, zkstate.GroupRecordPath(g.root, g.group))
	}
	data, st, err := rr.data, rr.st, rr.err
	if errors.Is(err, zkstate.ErrNoNode) {
		g.record = -1
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load group %q: %w", g.group, err)
	}
	var rec group.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%w: group %q: %v", errCorruptRecord, g.group, err)
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: group %q: %v", errCorruptRecord, g.group, err)
	}
	if rec.Group != g.group {
		return nil, fmt.Errorf("%w: record at %s names group %q", errCorruptRecord, zkstate.GroupRecordPath(g.root, g.group), rec.Group)
	}
	g.record = st.Version
	g.assume = true
	return &rec, nil
}

// hasOffsets reports whether the group has offsets of ours (a group that only commits, with no
// members, has no record but exists for Describe and Delete).
func (g *groupStore) hasOffsets(ctx context.Context) (bool, error) {
	ok, _, err := g.store.Exists(ctx, zkstate.OwnOffsetsPath(g.root, g.group))
	return ok, err
}

// write makes one engine write durable: the record (or its deletion) and the accepted offsets
// in one multi guarded by the epoch, retried on connection loss and on conflicts that reading
// back explains, until ctx ends. It returns the record's version after the write. An error
// wrapping ErrFenced or an *OwnedError (writeFenced) means another bridge holds the group; any
// other error (a timeout wraps ctx's error) leaves the group ours.
//
// A large write (a commit of a thousand partitions is two thousand ops) goes to ZooKeeper as
// several multis of a few hundred ops (zkstate's Multi), each guarded by the epoch: a write
// that fails part way has committed some partitions' offsets and not others, which a retry of
// the same commit completes.
func (g *groupStore) write(ctx context.Context, rec *group.Record, offs []group.OffsetCommitPartition, now time.Time) (int64, error) {
	if g.epoch < 0 {
		if err := g.acquire(ctx); err != nil {
			return 0, err
		}
	}
	var recData []byte
	if rec != nil && !rec.Deleted {
		var err error
		if recData, err = json.Marshal(rec); err != nil {
			return 0, fmt.Errorf("encode record of group %q: %w", g.group, err)
		}
	}
	recDone := rec == nil
	backoff := 50 * time.Millisecond
	for {
		ops, newRecord, err := g.ops(ctx, rec, recData, recDone, offs, now)
		if err == nil {
			err = g.store.Multi(ctx, ops...)
			if err == nil {
				if !recDone {
					g.record = newRecord
				}
				for _, o := range ops {
					g.known[o.Path()] = true
				}
				clear(g.missing)
				if rec != nil && rec.Deleted {
					g.cleanupDeleted(ctx)
				}
				return int64(g.record), nil
			}
		}
		if isFenced(err) {
			return 0, fmt.Errorf("write group %q: %w", g.group, ErrFenced)
		}
		if g.missedOffsets(err, offs) {
			continue
		}
		g.assume = false // a missing offset znode taken for existing, among other failures
		if ctx.Err() != nil || errors.Is(err, zkstate.ErrSessionExpired) || errors.Is(err, zkstate.ErrClosed) || errors.Is(err, zkstate.ErrMultiTooLarge) {
			return 0, fmt.Errorf("write group %q: %w", g.group, err)
		}
		g.log.Debug().Err(err).Dur("retry_in", backoff).Msg("group write failed; reading back and retrying")
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("write group %q: %w (after %v)", g.group, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
		// Connection loss (the multi may have been applied) or a conflict on an op other than
		// the epoch check (a 0.8 consumer created an offset znode, a split batch applied in
		// part): learn the truth and build the ops again.
		done, err := g.reconcile(ctx, rec, recData)
		if err != nil {
			if errors.Is(err, ErrFenced) {
				return 0, fmt.Errorf("write group %q: %w", g.group, err)
			}
			continue
		}
		recDone = recDone || done
	}
}

// missedOffsets reports whether err is a write's Multi that failed, with nothing applied, on the
// set of an offset znode it took for existing (assume) and that is missing: a partition the group
// never committed. Every op before it passed (the epoch's check first: the group is still ours),
// so the write is tried again at once with that partition's znodes (the 0.8 one and ours, which
// its first commit makes together) created, where reading everything back first cost the first
// commit of a new partition after a handover four round trips and a pause more.
func (g *groupStore) missedOffsets(err error, offs []group.OffsetCommitPartition) bool {
	var me *zkstate.MultiError
	if !g.assume || !errors.As(err, &me) || me.Index <= 0 || me.Applied > 0 || me.Parent != "" || !errors.Is(me.Err, zkstate.ErrNoNode) {
		return false
	}
	p := me.Op.Path()
	if g.known[p] || g.missing[p] {
		return false
	}
	for _, o := range offs {
		old, own := zkstate.OffsetPath(g.group, o.Topic, o.Partition), zkstate.OwnOffsetPath(g.root, g.group, o.Topic, o.Partition)
		if p != old && p != own {
			continue
		}
		if g.missing == nil {
			g.missing = map[string]bool{}
		}
		g.missing[own] = !g.known[own]
		if !g.ownOnly {
			g.missing[old] = !g.known[old]
		}
		return true
	}
	return false
}

// writeFenced reports whether a failed write (of write) means another bridge holds the group:
// its epoch moved (ErrFenced) or a live bridge owns it (*OwnedError). Only then must the engine
// fence itself. Every other failure, a write that outlived its context above all, says nothing
// about ownership: ZooKeeper was slow or away, the epoch is still ours, and the group can be
// written again once ZooKeeper answers (the write may even have been applied: a multi that
// timed out on our side can still commit; the session's requests are applied in order, so it
// commits before anything written after it, and no offset moves backwards).
func writeFenced(err error) bool {
	var owned *OwnedError
	return errors.Is(err, ErrFenced) || errors.As(err, &owned)
}

// isFenced reports a multi that failed on its first op, the epoch check (repeated at the start
// of every request when zkstate splits the multi).
func isFenced(err error) bool {
	var me *zkstate.MultiError
	return errors.As(err, &me) && me.Index == 0 &&
		(errors.Is(me.Err, zkstate.ErrBadVersion) || errors.Is(me.Err, zkstate.ErrNoNode))
}

// ops builds the multi of one write and returns the record version it leads to.
func (g *groupStore) ops(ctx context.Context, rec *group.Record, recData []byte, recDone bool, offs []group.OffsetCommitPartition, now time.Time) ([]zkstate.Op, int32, error) {
	ops := []zkstate.Op{zkstate.CheckOp(zkstate.EpochPath(g.root, g.group), g.epoch)}
	newRecord := g.record
	rp := zkstate.GroupRecordPath(g.root, g.group)
	switch {
	case recDone:
	case rec.Deleted:
		if g.record >= 0 {
			ops = append(ops, zkstate.DeleteOp(rp, g.record))
		}
		newRecord = -1
	case g.record < 0:
		ops = append(ops, zkstate.CreateOp(rp, recData, zkstate.CreateOptions{Parents: true}))
		newRecord = 0
	default:
		ops = append(ops, zkstate.SetOp(rp, recData, g.record))
		newRecord = g.record + 1
	}
	if len(offs) == 0 {
		return ops, newRecord, nil
	}
	nowMs := now.UnixMilli()
	type write struct {
		path string
		data []byte
	}
	writes := make([]write, 0, 2*len(offs))
	for _, o := range offs {
		own := zkstate.OwnOffset{Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata, CommittedMs: nowMs}.Encode()
		if !g.ownOnly {
			writes = append(writes, write{zkstate.OffsetPath(g.group, o.Topic, o.Partition), zkstate.FormatOffset(o.Offset)})
		}
		writes = append(writes, write{zkstate.OwnOffsetPath(g.root, g.group, o.Topic, o.Partition), own})
	}
	var unknown []string
	for _, w := range writes {
		if !g.known[w.path] && !g.assume && !g.missing[w.path] {
			unknown = append(unknown, w.path)
		}
	}
	exists := make([]bool, len(unknown))
	errs := make([]error, len(unknown))
	fanOut(ctx, len(unknown), func(i int) { exists[i], _, errs[i] = g.store.Exists(ctx, unknown[i]) })
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	for i, p := range unknown {
		if errs[i] != nil {
			return nil, 0, errs[i]
		}
		if exists[i] {
			g.known[p] = true
		}
	}
	for _, w := range writes {
		if g.missing[w.path] {
			// Found missing by the last try: its parent is there, as the group's other
			// offsets are (a write that finds it missing too goes the long way).
			ops = append(ops, zkstate.CreateOp(w.path, w.data, zkstate.CreateOptions{}))
			continue
		}
		if g.known[w.path] || g.assume {
			ops = append(ops, zkstate.SetOp(w.path, w.data, -1))
		} else {
			ops = append(ops, zkstate.CreateOp(w.path, w.data, zkstate.CreateOptions{Parents: true}))
		}
	}
	return ops, newRecord, nil
}

// reconcile reads back what a failed write may have changed: the epoch (ErrFenced when it is
// no longer ours), the record (done reports that it already holds what we write) and which
// offset znodes exist (forgotten, so ops looks again).
func (g *groupStore) reconcile(ctx context.Context, rec *group.Record, recData []byte) (done bool, err error) {
	ok, st, err := g.store.Exists(ctx, zkstate.EpochPath(g.root, g.group))
	if err != nil {
		return false, err
	}
	if !ok || st.Version != g.epoch {
		return false, ErrFenced
	}
	clear(g.known)
	clear(g.missing)
	data, st, err := g.store.Get(ctx, zkstate.GroupRecordPath(g.root, g.group))
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
		g.record = -1
		return rec != nil && rec.Deleted, nil
	case err != nil:
		return false, err
	}
	g.record = st.Version
	return rec != nil && !rec.Deleted && bytes.Equal(data, recData), nil
}

// cleanupDeleted removes the offsets of a deleted group once the fenced deletion of its record
// is done, as Kafka's DeleteGroups removes a group's offsets: the bridge's offset records, and
// the 0.8 subtree /consumers/<g> unless a 0.8 consumer is registered there (then it is theirs,
// as kafka-consumer-groups --zookeeper --delete refuses a group with live consumers). Best
// effort: what fails is logged and stays.
func (g *groupStore) cleanupDeleted(ctx context.Context) {
	if err := g.store.DeleteRecursive(ctx, zkstate.OwnOffsetsPath(g.root, g.group)); err != nil {
		g.log.Warn().Err(err).Msg("deleted group: removing its offset records")
	}
	g.known = map[string]bool{}
	ids, _, err := g.store.Children(ctx, zkstate.IDsPath(g.group))
	if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
		g.log.Warn().Err(err).Msg("deleted group: listing its 0.8 consumers")
		return
	}
	if len(ids) > 0 {
		g.log.Info().Int("consumers", len(ids)).Msg("deleted group: 0.8 consumers are registered; leaving /consumers alone")
		return
	}
	if err := g.store.DeleteRecursive(ctx, zkstate.GroupPath(g.group)); err != nil {
		g.log.Warn().Err(err).Msg("deleted group: removing /consumers subtree")
	}
}

// fanOut runs fn(0..n-1) with a bounded number in flight and waits for all of them: one
// ZooKeeper connection pipelines concurrent requests, so n reads cost about one round trip.
func fanOut(ctx context.Context, n int, fn func(i int)) {
	const limit = 64
	if n == 0 {
		return
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}
