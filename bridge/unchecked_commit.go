package bridge

// The commits of ZooKeeper-era clients: OffsetCommit v0, and v1 with no
// generation, member id nor instance id (newproto/08_offset_commit.go). Kafka 0.8.2 to 2.x
// brokers wrote them to /consumers/<g>/offsets/<t>/<p> with no member check at all, and the
// clients that still send them (kafka-node's HighLevelConsumer) ignore the error code of a
// refused commit, so refusing one in a group that also has Kafka members loses it. The bridge
// stores them as those brokers did, in every mode where the 0.8 layout is the truth OffsetFetch
// reads (legacy, mixed, kafka). A finalized group's offsets live only in the bridge's own records
// and its 0.8 layout is no longer read for it, so a commit there would be lost silently: it is
// answered UNSUPPORTED_VERSION (what Kafka 4.0 answers v0 and v1 since KIP-896) and logged.
//
// The write is 0.8.2's ZkUtils.updatePersistentPath per partition (set; create with parents
// when missing), outside the group's actor: the actor's own commits find the znode again by
// looking it up (groupStore.ops).

import (
	"context"
	"errors"
	"fmt"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
)

var _ newproto.UncheckedCommits = (*Bridge)(nil)

// CommitUnchecked implements newproto.UncheckedCommits.
func (b *Bridge) CommitUnchecked(ctx context.Context, name string, offs []group.OffsetCommitPartition) ([]newproto.ErrorCode, error) {
	if err := validName("group", name); err != nil {
		return nil, fmt.Errorf("bridge: %w: %w", err, newproto.ErrInvalidGroupID)
	}
	store, err := b.storeForReads()
	if err != nil {
		return nil, err
	}
	codes := make([]newproto.ErrorCode, len(offs))
	if b.modes != nil {
		e, err := b.modes.lookup(ctx, name)
		if err != nil {
			return nil, unavailable("commit offsets of group %q: %w", name, err)
		}
		if e.exists && e.mode == zkstate.ModeFinalized {
			b.modes.refused("offset_commit_unchecked")
			if b.modes.warnOnce("unchecked-commit/" + name) {
				b.log.Warn().Str("group", name).Int("partitions", len(offs)).
					Msg("OffsetCommit v0 (or v1 without a member) to a finalized group refused with UNSUPPORTED_VERSION: " +
						"its offsets would go to /consumers/<group>/offsets, which a finalized group no longer reads; " +
						"move the client to a group-managed consumer, or roll the group back (zkbridge rollback)")
			}
			for i := range codes {
				codes[i] = newproto.ErrUnsupportedVersion
			}
			return codes, nil
		}
	}
	refused, err := b.coord.refusedOffsets(ctx, offs) // limits.go
	if err != nil {
		return nil, unavailable("commit offsets of group %q: %w", name, err)
	}
	maxMeta := b.cfg.Group.MaxOffsetMetadata
	errs := make([]error, len(offs))
	fanOut(ctx, len(offs), func(i int) {
		o := offs[i]
		switch {
		case refused[i] != group.ErrNone:
			codes[i] = newproto.ErrorCode(refused[i])
		case len(o.Metadata) > maxMeta:
			codes[i] = newproto.ErrOffsetMetadataTooLarge
		default:
			errs[i] = writeOffsetZnode(ctx, store, zkstate.OffsetPath(name, o.Topic, o.Partition), zkstate.FormatOffset(o.Offset))
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bridge: commit offsets of group %q: %w", name, err)
	}
	for i, err := range errs {
		if err != nil {
			b.log.Warn().Err(err).Str("group", name).Str("topic", offs[i].Topic).Int32("partition", offs[i].Partition).
				Msg("OffsetCommit v0 not written to ZooKeeper; answered COORDINATOR_NOT_AVAILABLE")
			codes[i] = newproto.ErrCoordinatorNotAvailable
		}
	}
	return codes, nil
}

// writeOffsetZnode sets an offset znode, creating it (and its parents) when missing, as
// Kafka 0.8.2's ZkUtils.updatePersistentPath does.
func writeOffsetZnode(ctx context.Context, store *zkstate.Store, p string, data []byte) error {
	for range 3 {
		_, err := store.Set(ctx, p, data, -1)
		if !errors.Is(err, zkstate.ErrNoNode) {
			return err
		}
		err = store.Create(ctx, p, data, zkstate.CreateOptions{Parents: true})
		if !errors.Is(err, zkstate.ErrNodeExists) {
			return err
		}
		// Created by someone else in between: set it.
	}
	return fmt.Errorf("write %s: created and deleted concurrently, three times", p)
}
