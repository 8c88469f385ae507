package zkconsumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// ErrRebalanceFailed matches every *RebalanceFailedError.
var ErrRebalanceFailed = errors.New("zkconsumer: rebalance failed")

// ErrOwnershipConflict: an owner znode this consumer had to create was held by another thread;
// the attempt deleted what it had created and failed (ZCC:782-795).
var ErrOwnershipConflict = errors.New("partition ownership conflict")

// errShuttingDown: the attempt saw the shutdown flag after reading offsets (ZCC:669).
var errShuttingDown = errors.New("shutting down")

// RebalanceFailedError is ConsumerRebalanceFailedException (ZCC:633): every attempt of a
// rebalance failed. The consumer owns nothing afterwards but stays registered.
type RebalanceFailedError struct {
	ConsumerID string
	Retries    int
	// Last is why the last attempt failed (0.8.2 only logs it): an error wrapping
	// ErrOwnershipConflict, or the ZooKeeper or assignor error that ended the attempt.
	Last error
}

func (e *RebalanceFailedError) Error() string {
	// The message of ZCC:633, with the cause 0.8.2 only logs.
	msg := fmt.Sprintf("zkconsumer: %s can't rebalance after %d retries", e.ConsumerID, e.Retries)
	if e.Last != nil {
		msg += ": last attempt: " + e.Last.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrRebalanceFailed) true.
func (e *RebalanceFailedError) Is(target error) bool { return target == ErrRebalanceFailed }

// Unwrap returns Last.
func (e *RebalanceFailedError) Unwrap() error { return e.Last }

// syncedRebalance (ZCC:596-634): under the rebalance lock, unless shutting down, up to
// RebalanceMaxRetries attempts; after a failed one the fetchers are stopped again (with a
// commit) and the consumer sleeps RebalanceBackoff.
func (c *Consumer) syncedRebalance(ctx context.Context) error {
	c.rebalanceMu.Lock()
	defer c.rebalanceMu.Unlock()
	if c.shuttingDown.Load() { // ZCC:599-600
		return nil
	}
	c.stats.rebalances.Add(1)
	var last error
	for i := 0; i < c.cfg.RebalanceMaxRetries; i++ { // ZCC:602: 0 until rebalanceMaxRetries
		c.log.Info().Int("try", i).Msg("begin rebalancing consumer")
		c.stats.attempts.Add(1)
		done, err := c.rebalance(ctx)
		if err != nil {
			// ZCC:609-616: any exception fails the attempt; "another rebalance will be
			// triggered".
			c.log.Info().Err(err).Msg("exception during rebalance")
			last = err
			if errors.Is(err, ErrOwnershipConflict) {
				c.stats.conflicts.Add(1)
			}
		}
		c.log.Info().Int("try", i).Msg("end rebalancing consumer")
		if done {
			return nil
		}
		// ZCC:621-623 logs that the cache is cleared, and clears nothing.
		c.log.Info().Msg("rebalancing attempt failed")
		if ctx.Err() != nil {
			// Not in 0.8.2, which has no caller context: Run's ctx ended.
			return ctx.Err()
		}
		// ZCC:625-626, outside the try: a commit failure here ends the rebalance.
		if err := c.closeFetchers(ctx); err != nil {
			return fmt.Errorf("zkconsumer: %s: stopping fetchers after a failed rebalance attempt: %w", c.id, err)
		}
		// ZCC:627: Thread.sleep, which shutdown does not interrupt.
		if err := sleep(ctx, nil, c.cfg.RebalanceBackoff); err != nil {
			return err
		}
	}
	c.stats.failures.Add(1)
	return &RebalanceFailedError{ConsumerID: c.id, Retries: c.cfg.RebalanceMaxRetries, Last: last}
}

// rebalance is one attempt (ZCC:636-704, preceded by getCluster, ZCC:607). It reports true
// when done; false with an error otherwise (0.8.2 returns false for a conflict or a shutdown
// and throws for the rest; both fail the attempt).
func (c *Consumer) rebalance(ctx context.Context) (bool, error) {
	if _, err := c.readBrokers(ctx, false); err != nil { // ZCC:607, getCluster
		return false, err
	}
	// ZCC:637-638: the consumer's own registration, read back from ZooKeeper; its absence
	// (after a session expiry, before the new registration) fails the attempt.
	if _, err := c.topicThreads(ctx, c.id); err != nil {
		return false, err
	}
	brokers, err := c.readBrokers(ctx, true) // ZCC:639, getAllBrokersInCluster
	if err != nil {
		return false, err
	}
	if brokers == 0 {
		// ZCC:640-647: done, without stopping fetchers or releasing anything; a broker
		// change will trigger the next rebalance.
		c.log.Warn().Msg("no brokers found when trying to rebalance")
		c.watchBrokers(ctx) // Run's ctx: the watch lives as long as Run
		return true, nil
	}

	// ZCC:649-655: stop fetching before letting go, so nothing is consumed twice.
	if err := c.closeFetchers(ctx); err != nil {
		return false, err
	}
	if err := c.releasePartitionOwnership(ctx); err != nil { // ZCC:657
		return false, err
	}
	decision, err := c.assign(ctx) // ZCC:659-660
	if err != nil {
		return false, err
	}
	offsets, err := c.fetchOffsets(ctx, decision) // ZCC:664-667
	if err != nil {
		return false, err
	}
	if c.shuttingDown.Load() { // ZCC:669-670
		return false, errShuttingDown
	}
	// ZCC:672-678 and addPartitionTopicInfo (ZCC:799-817): the new registry, and the offsets
	// read count as checkpointed — even if the ownership below fails.
	current := make(map[zkstate.TopicPartition]*partitionInfo, len(decision))
	c.mu.Lock()
	for tp, thread := range decision {
		current[tp] = &partitionInfo{thread: thread, consumed: offsets[tp]}
		c.checkpointed[tp] = offsets[tp]
	}
	c.mu.Unlock()

	// ZCC:680-684: owning the partitions is what makes the attempt a success.
	if err := c.reflectPartitionOwnershipDecision(ctx, decision); err != nil {
		return false, err
	}
	c.mu.Lock()
	c.registry = current // ZCC:696
	c.mu.Unlock()
	c.updateFetcher(offsets) // ZCC:697
	return true, nil
}

// readBrokers counts the registered brokers. getCluster (ZkUtils:483-491) reads every broker
// with readData, so a broker that vanishes after the listing fails the attempt;
// getAllBrokersInCluster (ZkUtils:80-83, 686-691) skips it (maybeNull). A registration Kafka
// cannot parse (Broker.createBroker) fails the attempt either way.
func (c *Consumer) readBrokers(ctx context.Context, maybeNull bool) (int, error) {
	ids, err := childrenParentMayNotExist(ctx, c.store, zkstate.BrokerIDsPath)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range ids {
		id, err := strconv.ParseInt(name, 10, 32) // node.toInt
		if err != nil {
			return 0, fmt.Errorf("broker id %q: %w", name, err)
		}
		data, ok, err := readDataMaybeNull(ctx, c.store, zkstate.BrokerPath(int32(id)))
		if err != nil {
			return 0, err
		}
		if !ok {
			if maybeNull {
				continue
			}
			return 0, fmt.Errorf("broker %d: %w", id, zkstate.ErrNoNode)
		}
		if _, err := zkstate.ParseBrokerRegistration(int32(id), data); err != nil {
			return 0, fmt.Errorf("broker %d: %w", id, err)
		}
		n++
	}
	return n, nil
}

// topicThreads is TopicCount.constructTopicCount(group, consumerId, ...) followed by
// getConsumerThreadIdsPerTopic (TC:59-98): the consumer's registration read with readData (a
// missing one fails), its threads per topic; a wildcard registration is expanded against the
// children of /brokers/topics, internal topics excluded (exclude.internal.topics=true, CC:51).
func (c *Consumer) topicThreads(ctx context.Context, consumer string) (map[string][]string, error) {
	data, _, err := c.store.Get(ctx, zkstate.IDPath(c.cfg.GroupID, consumer))
	if err != nil {
		return nil, err
	}
	reg, err := zkstate.ParseConsumerRegistration(data)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", consumer, err)
	}
	if reg.Pattern == zkstate.PatternStatic {
		return zkstate.ConsumerThreads(consumer, reg), nil
	}
	topics, err := childrenParentMayNotExist(ctx, c.store, zkstate.TopicsPath)
	if err != nil {
		return nil, err
	}
	threads, err := zkstate.WildcardThreads(consumer, reg, topics)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", consumer, err)
	}
	return threads, nil
}

// closeFetchers is closeFetchersForQueues (ZCC:706-727, 745-751): stop the fetchers and clear
// the queues (Handler.OnRevoke), then commit when auto-commit is on — while the partitions are
// still owned, so the next owner starts where this one stopped (ZCC:715-722).
func (c *Consumer) closeFetchers(ctx context.Context) error {
	if c.cfg.Handler.OnRevoke != nil {
		c.cfg.Handler.OnRevoke()
	}
	if c.cfg.DisableAutoCommit {
		return nil
	}
	c.log.Info().Msg("committing all offsets after clearing the fetcher queues")
	return c.commitOffsets(ctx)
}

// releasePartitionOwnership (ZCC:580-590, 573-578) deletes the owner znode of every partition
// in the registry, whoever holds it now, topic by topic, forgetting each topic once its
// partitions are deleted.
func (c *Consumer) releasePartitionOwnership(ctx context.Context) error {
	c.log.Info().Msg("releasing partition ownership")
	c.mu.Lock()
	byTopic := map[string][]int32{}
	for tp := range c.registry {
		byTopic[tp.Topic] = append(byTopic[tp.Topic], tp.Partition)
	}
	c.mu.Unlock()
	for _, topic := range sortedKeys(byTopic) {
		parts := byTopic[topic]
		slices.Sort(parts)
		for _, p := range parts {
			if err := deletePath(ctx, c.store, zkstate.OwnerPath(c.cfg.GroupID, topic, p)); err != nil {
				return err
			}
		}
		c.mu.Lock()
		for _, p := range parts {
			delete(c.registry, zkstate.TopicPartition{Topic: topic, Partition: p})
		}
		c.mu.Unlock()
	}
	return nil
}

// assign builds the AssignmentContext (PA:42-55) and runs the assignor (PA:24-40, ZCC:520,
// 660). The context is read from ZooKeeper: the consumer's own threads, the partitions of its
// own topics only, every member's threads, and the member list once more (used by 0.8.2 only
// in a log line; read for the same ZooKeeper traffic). The share is legacy.Assign over the
// whole group, filtered to this consumer's threads, which is what PA computes for one member.
func (c *Consumer) assign(ctx context.Context) (map[zkstate.TopicPartition]string, error) {
	mine, err := c.topicThreads(ctx, c.id) // PA:43-46
	if err != nil {
		return nil, err
	}
	in := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: map[string][]int32{}}
	for _, topic := range sortedKeys(mine) { // PA:48-49, ZkUtils:529-559
		data, ok, err := readDataMaybeNull(ctx, c.store, zkstate.TopicPath(topic))
		if err != nil {
			return nil, err
		}
		if !ok {
			in.Partitions[topic] = nil // a missing topic has no partitions (ZkUtils:544)
			continue
		}
		ta, err := zkstate.ParseTopicAssignment(data)
		if err != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		}
		in.Partitions[topic] = ta.PartitionIDs()
	}
	// PA:51-52, ZkUtils:660-677: every registered member's threads.
	members, err := childrenParentMayNotExist(ctx, c.store, zkstate.IDsPath(c.cfg.GroupID))
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		threads, err := c.topicThreads(ctx, m)
		if err != nil {
			return nil, err
		}
		in.Consumers[m] = threads
	}
	// PA:54, ZkUtils:655-658: getChildren, which fails when the directory is missing.
	if _, _, err := c.store.Children(ctx, zkstate.IDsPath(c.cfg.GroupID)); err != nil {
		return nil, err
	}

	perTopic := map[string]map[string]bool{}
	for _, sub := range in.Consumers {
		for topic, threads := range sub {
			if perTopic[topic] == nil {
				perTopic[topic] = map[string]bool{}
			}
			for _, t := range threads {
				perTopic[topic][t] = true
			}
		}
	}
	switch c.strategy {
	case legacy.StrategyRoundRobin:
		// PA:75 takes the head of consumersForTopic, which throws when nobody subscribes.
		if len(perTopic) == 0 {
			return nil, errors.New("round-robin assignment: no consumer subscribes to any topic")
		}
	default:
		// PA:137-138: every thread of this consumer must be among the topic's threads, which
		// fails when its registration vanished between the two reads.
		for topic, threads := range mine {
			for _, t := range threads {
				if !perTopic[topic][t] {
					return nil, fmt.Errorf("range assignment: assertion failed: thread %s not among the consumers of topic %s", t, topic)
				}
			}
		}
	}
	all, err := legacy.Assign(c.strategy, in)
	if err != nil {
		return nil, err // PA:78: the round-robin precondition (IllegalArgumentException)
	}
	decision := map[zkstate.TopicPartition]string{}
	for tp, thread := range all {
		if slices.Contains(mine[tp.Topic], thread) {
			decision[zkstate.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = thread
		}
	}
	return decision, nil
}

// fetchOffsets reads the committed offset of every partition of the decision
// (ZCC:391-396, 382-389): a missing znode gives OffsetAndMetadata.InvalidOffset, -1; a value
// that is not a number fails the attempt (offsetStr.toLong).
func (c *Consumer) fetchOffsets(ctx context.Context, decision map[zkstate.TopicPartition]string) (map[zkstate.TopicPartition]int64, error) {
	out := make(map[zkstate.TopicPartition]int64, len(decision))
	for _, tp := range sortedTPs(decision) {
		data, ok, err := readDataMaybeNull(ctx, c.store, zkstate.OffsetPath(c.cfg.GroupID, tp.Topic, tp.Partition))
		if err != nil {
			return nil, err
		}
		if !ok {
			out[tp] = -1
			continue
		}
		off, err := zkstate.ParseOffset(data)
		if err != nil {
			return nil, fmt.Errorf("offset of %s-%d: %w", tp.Topic, tp.Partition, err)
		}
		out[tp] = off
	}
	return out, nil
}

// reflectPartitionOwnershipDecision (ZCC:769-797) creates the owner znode of every partition of
// the decision, holding its thread id. Every create is tried; if any met an existing znode,
// the ones created now are deleted and the attempt fails with ErrOwnershipConflict. Another
// error ends it at once and leaves the created znodes in place (ZCC:786).
func (c *Consumer) reflectPartitionOwnershipDecision(ctx context.Context, decision map[zkstate.TopicPartition]string) error {
	var owned []zkstate.TopicPartition
	var conflicts []string
	for _, tp := range sortedTPs(decision) {
		thread := decision[tp]
		p := zkstate.OwnerPath(c.cfg.GroupID, tp.Topic, tp.Partition)
		err := createEphemeralPathExpectConflict(ctx, c.store, p, []byte(thread))
		switch {
		case err == nil:
			c.log.Info().Str("thread", thread).Str("topic", tp.Topic).Int32("partition", tp.Partition).
				Msg("successfully owned partition")
			owned = append(owned, tp)
		case errors.Is(err, zkstate.ErrNodeExists):
			// "The node hasn't been deleted by the original owner. So wait a bit and retry."
			c.log.Info().Str("topic", tp.Topic).Int32("partition", tp.Partition).
				Msg("waiting for the partition ownership to be deleted")
			conflicts = append(conflicts, err.Error())
		default:
			return err
		}
	}
	if len(conflicts) == 0 {
		return nil
	}
	// ZCC:791-794: remove every path this attempt owned.
	for _, tp := range owned {
		if err := deletePath(ctx, c.store, zkstate.OwnerPath(c.cfg.GroupID, tp.Topic, tp.Partition)); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %s", ErrOwnershipConflict, strings.Join(conflicts, "; "))
}

// updateFetcher (ZCC:753-767) starts fetching the new share: Handler.OnAssign, with the
// auto.offset.reset sentinel for partitions without a valid offset (PartitionTopicInfo
// isOffsetInvalid: offset < 0, resolved by AFT:177 and CFT:53-64).
func (c *Consumer) updateFetcher(offsets map[zkstate.TopicPartition]int64) {
	out := make(map[zkstate.TopicPartition]int64, len(offsets))
	parts := make([]string, 0, len(offsets))
	for _, tp := range slices.SortedFunc(maps.Keys(offsets), compareTP) {
		off := offsets[tp]
		if off < 0 {
			off = c.cfg.resetOffset()
		}
		out[tp] = off
		parts = append(parts, fmt.Sprintf("%s-%d@%d", tp.Topic, tp.Partition, off))
	}
	c.log.Info().Strs("partitions", parts).Msg("selected partitions")
	if c.cfg.Handler.OnAssign != nil {
		c.cfg.Handler.OnAssign(out)
	}
}

func sortedTPs[V any](m map[zkstate.TopicPartition]V) []zkstate.TopicPartition {
	return slices.SortedFunc(maps.Keys(m), compareTP)
}
