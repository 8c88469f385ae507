package bridge

// Limits like a broker's on what clients may make the bridge write into the ZooKeeper the Kafka
// cluster depends on, so that no client can fill it:
//
//   - An offset for a topic or partition the cluster does not have (/brokers/topics) is answered
//     UNKNOWN_TOPIC_OR_PARTITION and not written, as Kafka's coordinator answers it
//     (KafkaApis.handleOffsetCommitRequest checks the metadata cache before the group
//     coordinator sees the request). Once that holds, a group holds at most one offset per
//     partition of the cluster: the cluster's size bounds every group's offsets.
//   - A commit of more than Config.MaxCommitPartitions partitions is answered
//     INVALID_COMMIT_OFFSET_SIZE for every partition, which is what Kafka answers a commit whose
//     record is too large for its offsets topic.
//   - A negative offset other than -1 (Kafka's "no offset", which OffsetFetch also answers for a
//     partition without a commit) is answered OFFSET_OUT_OF_RANGE: stored, it would read back as
//     an invalid offset, which a 0.8 consumer (and a Kafka client) resolves with its
//     auto.offset.reset policy, skipping records with "largest".
//   - A group this bridge does not know yet is refused with GROUP_MAX_SIZE_REACHED once
//     <root>/groups holds Config.MaxGroups groups (the cap is checked against the watched
//     listing: two new groups at the same instant may both pass).
//
// Each refusal counts in zkbridge_limits_refusals_total{limit}.
//
// A ZooKeeper without /brokers/topics has never had a Kafka cluster registered in it (a test,
// a demo): there is nothing to check topics against, so offsets of any topic are accepted, and
// the bridge says so in its log and in zkbridge_limits_topic_check.

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Defaults of the limits.
const (
	// DefaultMaxGroups bounds the groups under <root>/groups a bridge creates new ones next to.
	DefaultMaxGroups = 10000
	// DefaultMaxCommitPartitions bounds the partitions of one OffsetCommit request.
	DefaultMaxCommitPartitions = 10000
)

// Kafka error codes of the limits; the engine never produces them.
const (
	errOffsetOutOfRange        group.ErrorCode = 1  // OFFSET_OUT_OF_RANGE
	errInvalidCommitOffsetSize group.ErrorCode = 28 // INVALID_COMMIT_OFFSET_SIZE
)

// Refusal reasons (the limit label of zkbridge_limits_refusals_total).
const (
	limitUnknownTopic     = "unknown_topic_or_partition"
	limitNegativeOffset   = "negative_offset"
	limitCommitPartitions = "commit_partitions"
	limitGroups           = "groups"
)

// topicSource is what the commit check needs of the cluster: every topic's partitions, and
// whether ZooKeeper lists topics at all. cluster implements it.
type topicSource interface {
	Topics(ctx context.Context) (map[string][]newproto.Partition, error)
	// HasTopicsNode reports whether /brokers/topics exists, as of the last Topics call.
	HasTopicsNode() bool
}

// groupCounter is what the groups cap needs: how many groups <root>/groups lists (-1 before the
// first listing; without a lock: it is asked for every request), and whether it lists this one.
// groupModes implements it.
type groupCounter interface {
	listedCount() int
	listed(g string) bool
}

// commitCode decides one partition of a commit before the engine sees it: ErrNone to pass it
// on, else the code it is answered and the refusal's limit label.
type commitCode func(o group.OffsetCommitPartition) (group.ErrorCode, string)

// commitCheck returns the checks of a commit: nil when nothing of it is refused by a limit.
// An error means the cluster's topics could not be read: the commit is answered
// COORDINATOR_NOT_AVAILABLE (ZooKeeper is away; its write would fail too).
func (c *coordinator) commitCheck(ctx context.Context, ev group.OffsetCommit) (commitCode, error) {
	if max := c.cfg.MaxCommitPartitions; max > 0 && len(ev.Offsets) > max {
		return func(group.OffsetCommitPartition) (group.ErrorCode, string) {
			return errInvalidCommitOffsetSize, limitCommitPartitions
		}, nil
	}
	var topics map[string][]newproto.Partition
	if cs, ok := c.topics.(interface {
		CachedTopics() map[string][]newproto.Partition
	}); ok {
		// A view older than its maximum age will do when it holds every partition (cluster.go);
		// a new owner's first commit after a handover waited for a read of every topic.
		if t := cs.CachedTopics(); t != nil && !slices.ContainsFunc(ev.Offsets, func(o group.OffsetCommitPartition) bool {
			return !hasPartition(t[o.Topic], o.Partition)
		}) {
			topics = t
		}
	}
	if src := c.topics; src != nil && topics == nil {
		t, err := src.Topics(ctx)
		if err != nil {
			return nil, err
		}
		if src.HasTopicsNode() {
			topics = t
		} else {
			c.warnNoTopics()
		}
	}
	return func(o group.OffsetCommitPartition) (group.ErrorCode, string) {
		switch {
		case validName("topic", o.Topic) != nil || o.Partition < 0:
			return errUnknownTopicOrPartition, limitUnknownTopic
		case o.Offset < -1:
			return errOffsetOutOfRange, limitNegativeOffset
		case topics != nil && !hasPartition(topics[o.Topic], o.Partition):
			return errUnknownTopicOrPartition, limitUnknownTopic
		}
		return group.ErrNone, ""
	}, nil
}

// refusedOffsets screens the offsets of a commit that does not go through a group's actor (a
// ZooKeeper-era commit, unchecked_commit.go) with the same limits: per offset ErrNone to write
// it, else the code it is answered; each refusal counted.
func (c *coordinator) refusedOffsets(ctx context.Context, offs []group.OffsetCommitPartition) ([]group.ErrorCode, error) {
	check, err := c.commitCheck(ctx, group.OffsetCommit{Offsets: offs})
	if err != nil {
		return nil, err
	}
	codes := make([]group.ErrorCode, len(offs))
	for i, o := range offs {
		code, limit := check(o)
		if code != group.ErrNone {
			codes[i] = code
			c.metrics.limitRefusals.WithLabelValues(limit).Inc()
		}
	}
	return codes, nil
}

func hasPartition(parts []newproto.Partition, p int32) bool {
	if p >= 0 && int(p) < len(parts) && parts[p].ID == p {
		return true // partitions are numbered 0..n-1, and usually listed in order
	}
	for _, x := range parts {
		if x.ID == p {
			return true
		}
	}
	return false
}

// groupRefused reports whether a request for group name must be refused because the bridge
// holds Config.MaxGroups groups already and this one is not among them. Describe and Delete
// never create a group, so they pass.
func (c *coordinator) groupRefused(name string, ev group.Event) bool {
	switch ev.(type) {
	case group.Describe, group.Delete:
		return false
	}
	max := c.cfg.MaxGroups
	if max <= 0 || c.groups == nil {
		return false
	}
	if n := c.groups.listedCount(); n < max || c.groups.listed(name) {
		return false
	}
	c.logOnce.do("group:"+name, func() {
		c.log.Warn().Str("group", name).Int("max_groups", max).
			Msg("refusing a new group: the bridge holds --max-groups groups already (GROUP_MAX_SIZE_REACHED)")
	})
	c.metrics.limitRefusals.WithLabelValues(limitGroups).Inc()
	return true
}

// warnNoTopics says, once per bridge until topics appear, that commits are not checked.
func (c *coordinator) warnNoTopics() {
	c.metrics.topicCheck.Set(0)
	c.logOnce.do("no-topics", func() {
		c.log.Warn().Msg("zookeeper has no /brokers/topics (no Kafka cluster registered): offsets of any topic are accepted")
	})
}

// parseCommitted reads a 0.8 offset znode as the bridge serves it: decimal text, and not below
// -1 (Kafka's "no offset"). A more negative value is not an offset any Kafka consumer wrote
// (ZookeeperConsumerConnector commits only positions it fetched from): reading it as one would
// make a consumer reset, skipping records with "largest".
func parseCommitted(data []byte) (int64, error) {
	off, err := zkstate.ParseOffset(data)
	if err != nil {
		return 0, err
	}
	if off < -1 {
		return 0, fmt.Errorf("%w: offset %d is negative (only -1, no offset, is a sentinel)", zkstate.ErrMalformed, off)
	}
	return off, nil
}

// badOffset logs, once per znode, that an offset znode or the bridge's own offset record could
// not be used and what was done instead.
func (c *coordinator) badOffset(path string, err error, fallback string) {
	c.logOnce.do("offset:"+path, func() {
		c.log.Warn().Err(err).Str("path", path).Str("fallback", fallback).Msg("malformed offset")
	})
}

// onceLog runs a log function once per key, keeping at most onceLogMax keys (then it starts
// over: a bounded memory, and a repeated problem is logged again now and then).
type onceLog struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const onceLogMax = 4096

func (o *onceLog) do(key string, fn func()) {
	o.mu.Lock()
	if o.seen == nil || len(o.seen) >= onceLogMax {
		o.seen = map[string]struct{}{}
	}
	_, done := o.seen[key]
	o.seen[key] = struct{}{}
	o.mu.Unlock()
	if !done {
		fn()
	}
}

// forget lets key be logged again (the problem went away).
func (o *onceLog) forget(key string) {
	o.mu.Lock()
	delete(o.seen, key)
	o.mu.Unlock()
}
