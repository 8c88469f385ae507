package migrate

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Where a group's committed offsets live (DESIGN §1, bridge/modes.go): until it is finalized,
// in the Kafka 0.8 layout, /consumers/<g>/offsets/<t>/<p> (the bridge writes a Kafka member's
// commit there too, with its own record beside it for what the 0.8 znode cannot hold: leader
// epoch, metadata); once finalized, in the bridge's own records (zkstate.OwnOffsetPath).

// OffsetState is one partition's offset znodes, 0.8 and the bridge's, as read.
type OffsetState struct {
	zkstate.TopicPartition
	// The 0.8 znode: ZKExists when it is there, HasZK when its data parsed.
	ZKExists  bool
	HasZK     bool
	ZK        int64
	ZKVersion int32
	ZKZxid    int64
	// The bridge's record: OwnExists when it is there, HasOwn when its data parsed.
	OwnExists  bool
	HasOwn     bool
	Own        zkstate.OwnOffset
	OwnVersion int32
	OwnZxid    int64
}

// Offset is a committed offset as the group's consumers see it.
type Offset struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	Offset      int64  `json:"offset"`
	LeaderEpoch int32  `json:"leader_epoch"`
	Metadata    string `json:"metadata,omitempty"`
}

// TP returns the offset's partition.
func (o Offset) TP() zkstate.TopicPartition {
	return zkstate.TopicPartition{Topic: o.Topic, Partition: o.Partition}
}

// readAllOffsets reads every offset znode of the group, 0.8 and the bridge's, sorted by
// partition: the topic lists, then the partition lists, then every znode, each wave pipelined.
func readAllOffsets(ctx context.Context, s *zkstate.Store, root, group string) ([]OffsetState, error) {
	dirs := [2]string{zkstate.OffsetsPath(group), zkstate.OwnOffsetsPath(root, group)}
	var topics [2][]string
	var errs [2]error
	parallel(ctx, 2, func(i int) { topics[i], _, errs[i] = s.Children(ctx, dirs[i]) })
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
			return nil, fmt.Errorf("offsets of group %q: %w", group, err)
		}
	}
	var listed, paths []string // topic, and its directory in either place
	for i, d := range dirs {
		for _, t := range topics[i] {
			listed = append(listed, t)
			paths = append(paths, path.Join(d, t))
		}
	}
	// The partition lists in a few multiRead requests (GetMany's fallback pipelines them).
	kids, err := s.ChildrenMany(ctx, paths)
	if err != nil {
		return nil, fmt.Errorf("offsets of group %q: %w", group, err)
	}
	seen := map[zkstate.TopicPartition]bool{}
	var tps []zkstate.TopicPartition
	for i, topic := range listed {
		if err := kids[i].Err; err != nil && !errors.Is(err, zkstate.ErrNoNode) {
			return nil, fmt.Errorf("offsets of group %q: %w", group, err)
		}
		for _, name := range kids[i].Children {
			p, err := strconv.ParseInt(name, 10, 32)
			if err != nil || p < 0 || strconv.FormatInt(p, 10) != name {
				continue // not a partition (0.8 tools never write one; a hand edit might)
			}
			tp := zkstate.TopicPartition{Topic: topic, Partition: int32(p)}
			if !seen[tp] {
				seen[tp] = true
				tps = append(tps, tp)
			}
		}
	}
	return readOffsetStates(ctx, s, root, group, tps)
}

// readOffsetStates reads both znodes of each partition, sorted by partition.
func readOffsetStates(ctx context.Context, s *zkstate.Store, root, group string, tps []zkstate.TopicPartition) ([]OffsetState, error) {
	tps = slices.Clone(tps)
	slices.SortFunc(tps, cmpTP)
	tps = slices.Compact(tps)
	// Both znodes of every partition in a few multiRead requests: a Get each made an export of
	// a thousand partitions cost two thousand requests.
	paths := make([]string, 0, 2*len(tps))
	for _, tp := range tps {
		paths = append(paths, zkstate.OffsetPath(group, tp.Topic, tp.Partition), zkstate.OwnOffsetPath(root, group, tp.Topic, tp.Partition))
	}
	reads, err := s.GetMany(ctx, paths)
	if err != nil {
		return nil, fmt.Errorf("offsets of group %q: %w", group, err)
	}
	out := make([]OffsetState, 0, len(tps))
	for i, tp := range tps {
		st := OffsetState{TopicPartition: tp}
		zr, or := reads[2*i], reads[2*i+1]
		for _, r := range []zkstate.Read{zr, or} {
			if r.Err != nil && !errors.Is(r.Err, zkstate.ErrNoNode) {
				return nil, fmt.Errorf("offsets of group %q: %w", group, r.Err)
			}
		}
		if zr.Err == nil {
			st.ZKExists, st.ZKVersion, st.ZKZxid = true, zr.Stat.Version, zr.Stat.Mzxid
			if off, err := zkstate.ParseOffset(zr.Data); err == nil {
				st.HasZK, st.ZK = true, off
			}
		}
		if or.Err == nil {
			st.OwnExists, st.OwnVersion, st.OwnZxid = true, or.Stat.Version, or.Stat.Mzxid
			if own, err := zkstate.ParseOwnOffset(or.Data); err == nil {
				st.HasOwn, st.Own = true, own
			}
		}
		if st.ZKExists || st.OwnExists {
			out = append(out, st)
		}
	}
	return out, nil
}

func cmpTP(a, b zkstate.TopicPartition) int {
	if a.Topic != b.Topic {
		return cmpString(a.Topic, b.Topic)
	}
	return int(a.Partition) - int(b.Partition)
}

// Committed computes the offsets a group's consumers see from its offset znodes (pure), by
// the rule the bridge's OffsetFetch applies (zkstate.OffsetPair.Fetch): finalZxid is when the
// group was finalized (its mode record's Mzxid).
func Committed(states []OffsetState, finalized bool, finalZxid int64) []Offset {
	var out []Offset
	for _, st := range states {
		f, ok := st.Pair().Fetch(finalized, finalZxid)
		if !ok {
			continue
		}
		out = append(out, Offset{Topic: st.Topic, Partition: st.Partition, Offset: f.Offset, LeaderEpoch: f.LeaderEpoch, Metadata: f.Metadata})
	}
	return out
}

// Pair returns the partition's offsets as the committed-offset rule reads them.
func (st OffsetState) Pair() zkstate.OffsetPair {
	return zkstate.OffsetPair{HasZK: st.HasZK, ZK: st.ZK, ZKZxid: st.ZKZxid, HasOwn: st.HasOwn, Own: st.Own, OwnZxid: st.OwnZxid}
}

// GroupOffsets is a group's committed offsets with what a write of them needs.
type GroupOffsets struct {
	Census  Census
	States  []OffsetState
	Offsets []Offset // Committed(States, ...)
}

// ReadOffsets reads the group's census and committed offsets, from where its mode keeps them.
func ReadOffsets(ctx context.Context, s *zkstate.Store, root, group string) (GroupOffsets, error) {
	c, err := ReadCensus(ctx, s, root, group, CensusOptions{})
	if err != nil {
		return GroupOffsets{}, err
	}
	states, err := readAllOffsets(ctx, s, root, group)
	if err != nil {
		return GroupOffsets{}, fmt.Errorf("migrate: %w", err)
	}
	fin := c.Mode == zkstate.ModeFinalized
	return GroupOffsets{Census: c, States: states, Offsets: Committed(states, fin, c.ModeZxid)}, nil
}

// Change kinds of an offset diff.
const (
	ChangeNew       = "new"       // no committed offset yet
	ChangeForward   = "forward"   // moves ahead
	ChangeBackward  = "backward"  // moves back: messages are consumed again
	ChangeUnchanged = "unchanged" // the same offset
)

// OffsetChange is one line of an import's diff.
type OffsetChange struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Current   *int64 `json:"current"` // nil: no committed offset
	New       int64  `json:"new"`
	Change    string `json:"change"`
}

// Diff compares the offsets to import with the committed ones (pure), sorted by partition. Every
// incoming partition gets a line; committed partitions the import does not name are left alone.
func Diff(committed, incoming []Offset) []OffsetChange {
	cur := map[zkstate.TopicPartition]int64{}
	for _, o := range committed {
		cur[o.TP()] = o.Offset
	}
	out := make([]OffsetChange, 0, len(incoming))
	for _, o := range incoming {
		ch := OffsetChange{Topic: o.Topic, Partition: o.Partition, New: o.Offset}
		if c, ok := cur[o.TP()]; ok {
			ch.Current = &c
			switch {
			case o.Offset > c:
				ch.Change = ChangeForward
			case o.Offset < c:
				ch.Change = ChangeBackward
			default:
				ch.Change = ChangeUnchanged
			}
		} else {
			ch.Change = ChangeNew
		}
		out = append(out, ch)
	}
	slices.SortFunc(out, func(a, b OffsetChange) int {
		return cmpTP(zkstate.TopicPartition{Topic: a.Topic, Partition: a.Partition}, zkstate.TopicPartition{Topic: b.Topic, Partition: b.Partition})
	})
	return out
}

// ErrOffsetsChanged: a committed offset, or the group's mode, changed between the read and the
// compare-and-set write of an import; nothing was written (except by the earlier requests of an
// import too large for one multi, which the wrapped *zkstate.MultiError counts). Read the diff
// again.
var ErrOffsetsChanged = errors.New("offsets changed while importing")

// WriteOffsets writes the changes (all but the unchanged ones) where the group's mode keeps its
// offsets: the 0.8 znodes, or the bridge's own records for a finalized group. Every write is
// version-checked against go (what ReadOffsets read), and so is the group's mode record when it
// has one, in one atomic multi: a consumer that commits in between, or a mode change, fails the
// whole write with ErrOffsetsChanged. (A group with more offsets than one request holds, about
// 8,000, is written in several, each checked the same way.)
func WriteOffsets(ctx context.Context, s *zkstate.Store, root string, g GroupOffsets, changes []OffsetChange) (int, error) {
	group := g.Census.Group
	fin := g.Census.Mode == zkstate.ModeFinalized
	states := map[zkstate.TopicPartition]OffsetState{}
	for _, st := range g.States {
		states[st.TopicPartition] = st
	}
	var ops []zkstate.Op
	if g.Census.Recorded {
		ops = append(ops, zkstate.CheckOp(zkstate.ModePath(root, group), g.Census.ModeVersion))
	}
	n := 0
	nowMs := time.Now().UnixMilli()
	for _, ch := range changes {
		if ch.Change == ChangeUnchanged {
			continue
		}
		n++
		st := states[zkstate.TopicPartition{Topic: ch.Topic, Partition: ch.Partition}]
		if fin {
			p := zkstate.OwnOffsetPath(root, group, ch.Topic, ch.Partition)
			data := zkstate.OwnOffset{Offset: ch.New, LeaderEpoch: -1, CommittedMs: nowMs}.Encode()
			if st.OwnExists {
				ops = append(ops, zkstate.SetOp(p, data, st.OwnVersion))
			} else {
				ops = append(ops, zkstate.CreateOp(p, data, zkstate.CreateOptions{Parents: true}))
			}
			continue
		}
		p := zkstate.OffsetPath(group, ch.Topic, ch.Partition)
		if st.ZKExists {
			ops = append(ops, zkstate.SetOp(p, zkstate.FormatOffset(ch.New), st.ZKVersion))
		} else {
			ops = append(ops, zkstate.CreateOp(p, zkstate.FormatOffset(ch.New), zkstate.CreateOptions{Parents: true}))
		}
	}
	if n == 0 {
		return 0, nil
	}
	// One request, all or nothing, whatever the number of ops; only a group whose offsets do
	// not fit one request (about 8,000 partitions under the 1 MB limit) is written in several,
	// each guarded by the mode check.
	err := s.MultiAtomic(ctx, ops...)
	if errors.Is(err, zkstate.ErrMultiTooLarge) {
		err = s.Multi(ctx, ops...)
	}
	if err != nil {
		if errors.Is(err, zkstate.ErrBadVersion) || errors.Is(err, zkstate.ErrNodeExists) || errors.Is(err, zkstate.ErrNoNode) {
			return 0, fmt.Errorf("migrate: import offsets of group %q: %w: %w", group, ErrOffsetsChanged, err)
		}
		return 0, fmt.Errorf("migrate: import offsets of group %q: %w", group, err)
	}
	return n, nil
}
