package newproto

// OffsetCommit, key 8: versions 0-8.
//
// Version notes:
//   - v0: group and, per topic and partition, the next offset to consume
//     and a metadata string. No generation nor member id. Kafka 0.8.2 to
//     2.x brokers wrote v0 commits to ZooKeeper (/consumers/<g>/offsets)
//     without looking at the group at all, and ZooKeeper-era clients
//     (kafka-node, old librdkafka with offset.store.method=broker and
//     api.version.request=false) commit with v0 into groups whose other
//     members use group management. So when Groups also implements
//     UncheckedCommits, a v0 commit goes there and is stored as those
//     brokers stored it, with no member check; otherwise it is a "simple"
//     commit for the engine (accepted while the group is Empty,
//     UNKNOWN_MEMBER_ID while it has members).
//   - v1 with generation -1, no member id and no instance id: the same
//     ZooKeeper-era commit (0.8.2 brokers ignored v1's generation and
//     member id: there was no group coordinator yet), so it takes the
//     same path. Kafka 0.9+ answers it UNKNOWN_MEMBER_ID in a non-empty
//     group; the bridge keeps 0.8.2's rule for v1 because the clients that
//     send it are the ones the 0.8 layout is kept for. From v2 on a simple
//     commit follows Kafka's rule (the engine's).
//   - v1: generation and member id (group management); a commit timestamp
//     per partition, ignored: it only fed Kafka's offset expiry, and
//     offsets in the ZooKeeper layout do not expire.
//   - v2: a retention time for the whole request replaces the timestamps;
//     ignored for the same reason: the bridge keeps offsets until the
//     group is deleted, as the 0.8 layout always did.
//   - v3: ThrottleMillis (always 0).
//   - v4: no change in the body (throttle after response, KIP-219).
//   - v5: the retention time is gone (KIP-211).
//   - v6: leader epoch per partition (KIP-320), stored with the offset.
//   - v7: group instance id (KIP-345): FENCED_INSTANCE_ID when it maps to
//     another member id.
//   - v8: flexible versions.
//   - v9+ (KIP-848 member epochs, topic ids): not served.
//
// A null metadata string is stored as "" (Kafka's NO_METADATA); a longer
// one than the engine's limit gets OFFSET_METADATA_TOO_LARGE for its
// partition alone. A request with no partitions is answered at once
// without touching the group, as Kafka does.
//
// UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have,
// OFFSET_OUT_OF_RANGE for an offset below -1 and INVALID_COMMIT_OFFSET_SIZE
// for a commit of too many partitions are answered by the Groups
// implementation, which knows the cluster (bridge/limits.go).
//
// Not implemented: authorization.

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.OffsetCommit, 0, 8) }

// OffsetCommit implements Coordinator.
func (gc *GroupCoordinator) OffsetCommit(ctx context.Context, _ *Request, m *kmsg.OffsetCommitRequest) (*kmsg.OffsetCommitResponse, error) {
	if err := checkGroupID(m.Group); err != nil {
		return nil, fmt.Errorf("offset commit: %w", err)
	}
	ev := commitEvent(m)
	if len(ev.Offsets) == 0 {
		return commitResponse(m, nil), nil
	}
	if uc, ok := gc.groups.(UncheckedCommits); ok && zooKeeperEraCommit(m) {
		codes, err := uc.CommitUnchecked(ctx, m.Group, ev.Offsets)
		if err != nil {
			return nil, fmt.Errorf("offset commit (v%d, no member) to group %q: %w", m.Version, m.Group, err)
		}
		results := make([]group.OffsetCommitResult, len(ev.Offsets))
		for i, o := range ev.Offsets {
			results[i] = group.OffsetCommitResult{Topic: o.Topic, Partition: o.Partition, Err: group.ErrorCode(ErrUnknownServerError)}
			if i < len(codes) {
				results[i].Err = group.ErrorCode(codes[i])
			}
		}
		return commitResponse(m, results), nil
	}
	r, err := do[group.OffsetCommitReply](ctx, gc.groups, m.Group, func(t group.Token) group.Event {
		ev.Token = t
		return ev
	})
	if err != nil {
		return nil, fmt.Errorf("offset commit to group %q: %w", m.Group, err)
	}
	return commitResponse(m, r.Partitions), nil
}

// UncheckedCommits is what a Groups implements to store the commits of
// ZooKeeper-era clients (v0, and v1 without a member) as Kafka 0.8.2 to 2.x
// brokers did: in /consumers/<g>/offsets, whoever the group's members are.
// CommitUnchecked answers one code per offset, in order; an error wrapping
// an ErrorCode answers the whole request with it.
type UncheckedCommits interface {
	CommitUnchecked(ctx context.Context, group string, offsets []group.OffsetCommitPartition) ([]ErrorCode, error)
}

// zooKeeperEraCommit reports a commit that 0.8.2 brokers stored without a
// member check: v0, or v1 with no generation, member id nor instance id.
func zooKeeperEraCommit(m *kmsg.OffsetCommitRequest) bool {
	switch m.Version {
	case 0:
		return true
	case 1:
		return m.Generation < 0 && m.MemberID == "" && optString(m.InstanceID) == ""
	}
	return false
}

// commitEvent translates the request; Token is the caller's.
func commitEvent(m *kmsg.OffsetCommitRequest) group.OffsetCommit {
	ev := group.OffsetCommit{
		MemberID:   group.MemberID(m.MemberID),
		InstanceID: group.InstanceID(optString(m.InstanceID)),
		Generation: group.Generation(m.Generation),
	}
	if m.Version == 0 {
		ev.MemberID, ev.Generation = "", group.NoGeneration
	}
	for _, t := range m.Topics {
		for _, p := range t.Partitions {
			epoch := p.LeaderEpoch
			if m.Version < 6 {
				epoch = -1
			}
			ev.Offsets = append(ev.Offsets, group.OffsetCommitPartition{
				Topic:       t.Topic,
				Partition:   p.Partition,
				Offset:      p.Offset,
				LeaderEpoch: epoch,
				Metadata:    optString(p.Metadata),
			})
		}
	}
	return ev
}

// commitResponse answers every partition of the request, in its order,
// with the engine's result for it.
func commitResponse(m *kmsg.OffsetCommitRequest, results []group.OffsetCommitResult) *kmsg.OffsetCommitResponse {
	type tp struct {
		topic string
		part  int32
	}
	codes := make(map[tp]int16, len(results))
	for _, res := range results {
		codes[tp{res.Topic, res.Partition}] = wireCode(res.Err)
	}
	resp := kmsg.NewPtrOffsetCommitResponse()
	resp.SetVersion(m.Version)
	for _, t := range m.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			code, ok := codes[tp{t.Topic, p.Partition}]
			if !ok {
				// The engine answers every partition it was given;
				// a missing one is a bug, not a success.
				code = int16(ErrUnknownServerError)
			}
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
