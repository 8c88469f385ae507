package bridge

// OffsetFetch's answer by mode: a finalized group's offsets come from the bridge's own records
// and the 0.8 znodes by zkstate's rule (OffsetPair.Fetch), the other modes' from the 0.8 znodes.

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/zkbridge/zkbridge/zkstate"
)

// FetchOffsets implements newproto.Groups: the 0.8 offsets and the bridge's records
// (fetchOffsets), except for a finalized group, whose truth is the bridge's records alone
// (fetchFinalized).
func (b *Bridge) FetchOffsets(ctx context.Context, name string, topics map[string][]int32) ([]CommittedOffset, error) {
	if b.modes == nil || validName("group", name) != nil {
		return b.fetchOffsets(ctx, name, topics)
	}
	store, err := b.storeForReads()
	if err != nil {
		return nil, err
	}
	e, err := b.modes.lookup(ctx, name)
	if err != nil {
		return nil, unavailable("fetch offsets of group %q: %w", name, err)
	}
	if !e.exists || e.mode != zkstate.ModeFinalized {
		return b.fetchOffsets(ctx, name, topics)
	}
	return b.fetchFinalized(ctx, store, name, topics, e.zxid)
}

// fetchFinalized reads the committed offsets of a finalized group: every partition with an
// offset in either place (the 0.8 znode or the bridge's own record), decided by the finalized
// rule of zkstate.OffsetPair.Fetch (the later write wins, except a 0.8 write after
// finalZxid).
//
// (A 0.8 write after finalization to a partition the bridge holds no record of replaces the
// value from before finalization, which is then lost; the migrate command can close that gap
// by copying such offsets into the bridge's records in the multi that finalizes the group.)
func (b *Bridge) fetchFinalized(ctx context.Context, store *zkstate.Store, name string, topics map[string][]int32, finalZxid int64) ([]CommittedOffset, error) {
	root := b.cfg.Root
	type tp = zkstate.TopicPartition
	union := func(a, b []string) []string {
		out := slices.Concat(a, b)
		slices.Sort(out)
		return slices.Compact(out)
	}
	children := func(p string) ([]string, error) {
		c, _, err := store.Children(ctx, p)
		if errors.Is(err, zkstate.ErrNoNode) {
			return nil, nil
		}
		return c, err
	}
	var names []string
	if topics == nil {
		zkTopics, err := children(zkstate.OffsetsPath(name))
		if err != nil {
			return nil, unavailable("fetch offsets of group %q: %w", name, err)
		}
		own, err := children(zkstate.OwnOffsetsPath(root, name))
		if err != nil {
			return nil, unavailable("fetch offsets of group %q: %w", name, err)
		}
		names = union(zkTopics, own)
	} else {
		for t := range topics {
			if validName("topic", t) == nil {
				names = append(names, t)
			}
		}
	}
	var tps []tp
	for _, t := range names {
		if ps := topics[t]; len(ps) > 0 {
			for _, p := range ps {
				if p >= 0 {
					tps = append(tps, tp{Topic: t, Partition: p})
				}
			}
			continue
		}
		zkParts, err := children(zkstate.OffsetsTopicPath(name, t))
		if err != nil {
			return nil, unavailable("fetch offsets of group %q: %w", name, err)
		}
		own, err := children(zkstate.OwnOffsetsTopicPath(root, name, t))
		if err != nil {
			return nil, unavailable("fetch offsets of group %q: %w", name, err)
		}
		for _, s := range union(zkParts, own) {
			p, err := strconv.ParseInt(s, 10, 32)
			if err != nil || p < 0 || strconv.FormatInt(p, 10) != s {
				continue
			}
			tps = append(tps, tp{Topic: t, Partition: int32(p)})
		}
	}

	zkRead, ownRead, err := readOffsetPairs(ctx, store, root, name, tps)
	if err != nil {
		return nil, err
	}
	var out []CommittedOffset
	for i, x := range tps {
		for _, r := range []zkstate.Read{zkRead[i], ownRead[i]} {
			if r.Err != nil && !errors.Is(r.Err, zkstate.ErrNoNode) {
				return nil, unavailable("fetch offsets of group %q: %w", name, r.Err)
			}
		}
		var pair zkstate.OffsetPair
		if r := ownRead[i]; r.Err == nil {
			own, err := zkstate.ParseOwnOffset(r.Data)
			if err == nil {
				pair.HasOwn, pair.Own, pair.OwnZxid = true, own, r.Stat.Mzxid
			} else {
				b.coord.badOffset(zkstate.OwnOffsetPath(root, name, x.Topic, x.Partition), err, "ignored; the 0.8 znode's offset is used") // limits.go
			}
		}
		if r := zkRead[i]; r.Err == nil {
			if off, err := parseCommitted(r.Data); err == nil { // limits.go
				pair.HasZK, pair.ZK, pair.ZKZxid = true, off, r.Stat.Mzxid
			} else {
				b.coord.badOffset(zkstate.OffsetPath(name, x.Topic, x.Partition), err, "ignored; the bridge's own record is used if any")
			}
		}
		f, ok := pair.Fetch(true, finalZxid)
		if !ok {
			continue
		}
		co := CommittedOffset{Topic: x.Topic, Partition: x.Partition, Offset: f.Offset, LeaderEpoch: f.LeaderEpoch, Metadata: f.Metadata}
		out = append(out, co)
	}
	sortCommitted(out)
	return out, nil
}
