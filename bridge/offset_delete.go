package bridge

// OffsetDelete (API key 47, newproto/47_offset_delete.go) on the bridge: the engine has answered
// for its own members; this file keeps the offsets of the topics that the group's other members
// (0.8 and legacy consumers, registered in /consumers/<g>/ids) subscribe to, as Kafka keeps a
// subscribed topic's offsets, and deletes the rest from both places OffsetFetch may read them
// (the 0.8 znode and the bridge's own record), so that neither brings a deleted offset back.

import (
	"context"
	"errors"
	"fmt"

	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
)

var _ newproto.OffsetDeleter = (*Bridge)(nil)

// DeleteOffsets implements newproto.OffsetDeleter.
func (b *Bridge) DeleteOffsets(ctx context.Context, name string, tps []newproto.TopicPartition) (newproto.ErrorCode, []newproto.ErrorCode, error) {
	if err := validName("group", name); err != nil {
		return 0, nil, fmt.Errorf("bridge: %w: %w", err, newproto.ErrInvalidGroupID)
	}
	store, err := b.storeForReads()
	if err != nil {
		return 0, nil, err
	}
	root := b.cfg.Root
	reads, err := store.GetMany(ctx, []string{zkstate.GroupRecordPath(root, name)})
	if err != nil {
		return 0, nil, unavailable("delete offsets of group %q: %w", name, err)
	}
	hasRecord := reads[0].Err == nil
	known := hasRecord
	for _, p := range []string{zkstate.GroupPath(name), zkstate.OwnOffsetsPath(root, name)} {
		ok, _, err := store.Exists(ctx, p)
		if err != nil {
			return 0, nil, unavailable("delete offsets of group %q: %w", name, err)
		}
		known = known || ok
	}
	if !known {
		return newproto.ErrGroupIDNotFound, nil, nil
	}
	subscribed, err := registeredSubscriptions(ctx, store, name)
	if err != nil {
		return 0, nil, unavailable("delete offsets of group %q: %w", name, err)
	}
	codes := make([]newproto.ErrorCode, len(tps))
	errs := make([]error, len(tps))
	fanOut(ctx, len(tps), func(i int) {
		tp := tps[i]
		switch {
		case subscribed(tp.Topic):
			codes[i] = newproto.ErrGroupSubscribedToTopic
		case validName("topic", tp.Topic) != nil || tp.Partition < 0:
			codes[i] = newproto.ErrUnknownTopicOrPartition
		default:
			for _, p := range []string{zkstate.OffsetPath(name, tp.Topic, tp.Partition), zkstate.OwnOffsetPath(root, name, tp.Topic, tp.Partition)} {
				if err := store.Delete(ctx, p, -1); err != nil && !errors.Is(err, zkstate.ErrNoNode) {
					errs[i] = err
				}
			}
		}
	})
	if err := ctx.Err(); err != nil {
		return 0, nil, fmt.Errorf("bridge: delete offsets of group %q: %w", name, err)
	}
	for i, err := range errs {
		if err != nil {
			b.log.Warn().Err(err).Str("group", name).Str("topic", tps[i].Topic).Int32("partition", tps[i].Partition).
				Msg("OffsetDelete: offset not deleted; answered COORDINATOR_NOT_AVAILABLE")
			codes[i] = newproto.ErrCoordinatorNotAvailable
		}
	}
	if len(tps) > 0 {
		b.log.Info().Str("group", name).Int("partitions", len(tps)).Msg("offsets deleted (OffsetDelete)")
	}
	return 0, codes, nil
}

// registeredSubscriptions reports the topics the consumers registered in /consumers/<g>/ids
// subscribe to. A wildcard subscription (white_list, black_list) or a registration in progress
// or unreadable counts as subscribed to every topic: better to keep an offset than delete one
// a consumer still reads.
func registeredSubscriptions(ctx context.Context, store *zkstate.Store, name string) (func(string) bool, error) {
	ids, _, err := store.Children(ctx, zkstate.IDsPath(name))
	if errors.Is(err, zkstate.ErrNoNode) {
		return func(string) bool { return false }, nil
	}
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(ids))
	for i, id := range ids {
		paths[i] = zkstate.IDPath(name, id)
	}
	reads, err := store.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	topics := map[string]bool{}
	for _, r := range reads {
		if errors.Is(r.Err, zkstate.ErrNoNode) {
			continue // gone since the listing
		}
		reg, err := zkstate.ParseConsumerRegistration(r.Data)
		if r.Err != nil || err != nil || reg.Pattern != zkstate.PatternStatic {
			return func(string) bool { return true }, nil
		}
		for t := range reg.Subscription {
			topics[t] = true
		}
	}
	return func(t string) bool { return topics[t] }, nil
}
