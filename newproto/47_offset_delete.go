package newproto

// OffsetDelete, key 47: version 0 (KIP-496; flexible versions never came:
// Kafka's schema stops at v0).
//
// Version notes:
//   - v0: a group and topics with partitions in; a top-level error and one
//     per partition out. kafka-consumer-groups --delete-offsets and
//     AdminClient.deleteConsumerGroupOffsets send it to the coordinator.
//
// Kafka's rule (GroupCoordinator.handleDeleteOffsets): a group it has no
// metadata for is GROUP_ID_NOT_FOUND; an Empty group loses the offsets
// asked for; a group with members keeps those of the topics it is
// subscribed to (GROUP_SUBSCRIBED_TO_TOPIC per partition), and when its
// subscriptions are not known (between generations) every topic counts as
// subscribed; a non-empty group of another protocol type than "consumer"
// is NON_EMPTY_GROUP. The engine's Describe says the group's state and,
// while Stable, its members' subscriptions (their consumer protocol
// metadata); the deletion itself, and the subscriptions of the members
// the engine does not coordinate (0.8 and legacy consumers registered in
// /consumers/<g>/ids), are OffsetDeleter's.
//
// Not implemented: authorization (Group DELETE, Topic READ).

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.OffsetDelete, 0, 0) }

// OffsetDeleter is what a Groups implements to delete committed offsets.
// DeleteOffsets deletes the offsets of tps that no member outside the
// engine subscribes to and answers one code per partition, in order (NONE
// also for a partition that had no offset); top is the request's own code:
// GROUP_ID_NOT_FOUND for a group with neither state nor offsets.
type OffsetDeleter interface {
	DeleteOffsets(ctx context.Context, group string, tps []TopicPartition) (top ErrorCode, codes []ErrorCode, err error)
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// OffsetDelete implements Coordinator.
func (gc *GroupCoordinator) OffsetDelete(ctx context.Context, _ *Request, m *kmsg.OffsetDeleteRequest) (*kmsg.OffsetDeleteResponse, error) {
	if err := checkGroupID(m.Group); err != nil {
		return nil, fmt.Errorf("offset delete: %w", err)
	}
	del, ok := gc.groups.(OffsetDeleter)
	if !ok {
		return nil, fmt.Errorf("offset delete: the group store cannot delete offsets: %w", ErrInvalidRequest)
	}
	r, err := do[group.DescribeReply](ctx, gc.groups, m.Group, func(t group.Token) group.Event {
		return group.Describe{Token: t}
	})
	switch {
	case err != nil && errors.Is(err, ErrGroupIDNotFound), err == nil && r.Err == group.ErrGroupIDNotFound:
		r = group.DescribeReply{Group: group.Description{State: group.Dead}}
	case err != nil:
		return nil, fmt.Errorf("offset delete of group %q: %w", m.Group, err)
	case r.Err != group.ErrNone:
		return nil, fmt.Errorf("offset delete of group %q: %w", m.Group, ErrorCode(wireCode(r.Err)))
	}
	d := r.Group
	resp := kmsg.NewPtrOffsetDeleteResponse()
	resp.SetVersion(m.Version)
	empty := d.State == group.Empty || d.State == group.Dead || len(d.Members) == 0
	if !empty && d.ProtocolType != "consumer" {
		resp.ErrorCode = int16(ErrNonEmptyGroup)
		return resp, nil
	}
	subscribed := func(string) bool { return false }
	if !empty {
		subscribed = engineSubscriptions(d)
	}
	var ask []TopicPartition
	for _, t := range m.Topics {
		if subscribed(t.Topic) {
			continue
		}
		for _, p := range t.Partitions {
			ask = append(ask, TopicPartition{t.Topic, p.Partition})
		}
	}
	top, codes, err := del.DeleteOffsets(ctx, m.Group, ask)
	if err != nil {
		return nil, fmt.Errorf("offset delete of group %q: %w", m.Group, err)
	}
	resp.ErrorCode = int16(top)
	i := 0
	for _, t := range m.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case top != 0:
			case subscribed(t.Topic):
				rp.ErrorCode = int16(ErrGroupSubscribedToTopic)
			case i < len(codes):
				rp.ErrorCode = int16(codes[i])
				i++
			default:
				rp.ErrorCode = int16(ErrUnknownServerError)
				i++
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// engineSubscriptions is Kafka's GroupMetadata.isSubscribedToTopic for the
// engine's members: the topics of their consumer protocol metadata while
// the group is Stable; every topic otherwise (the subscriptions of a
// generation in the making are not known).
func engineSubscriptions(d group.Description) func(string) bool {
	if d.State != group.Stable {
		return func(string) bool { return true }
	}
	topics := map[string]bool{}
	for _, mb := range d.Members {
		var meta kmsg.ConsumerMemberMetadata
		if err := meta.ReadFrom(mb.Metadata); err != nil {
			return func(string) bool { return true } // unreadable: keep everything
		}
		for _, t := range meta.Topics {
			topics[t] = true
		}
	}
	return func(t string) bool { return topics[t] }
}
