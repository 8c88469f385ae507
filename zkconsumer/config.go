package zkconsumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Defaults, as in Kafka 0.8.2's ConsumerConfig.
const (
	// DefaultRebalanceMaxRetries is rebalance.max.retries (CC:36).
	DefaultRebalanceMaxRetries = 4
	// DefaultRebalanceBackoff is rebalance.backoff.ms, which defaults to zookeeper.sync.time.ms
	// (CC:138; ZkUtils:749, 2000 ms).
	DefaultRebalanceBackoff = 2 * time.Second
	// DefaultAutoCommitInterval is auto.commit.interval.ms (CC:34).
	DefaultAutoCommitInterval = 60 * time.Second
	// DefaultSessionTimeout is zookeeper.session.timeout.ms (ZkUtils:743, 6000 ms).
	DefaultSessionTimeout = 6 * time.Second
)

// auto.offset.reset values (kafka.api.OffsetRequest.SmallestTimeString/LargestTimeString).
const (
	OffsetResetSmallest = "smallest"
	OffsetResetLargest  = "largest"
)

// The offsets OnAssign reports for a partition with no usable committed offset (none in
// ZooKeeper, or a negative one: PartitionTopicInfo.isOffsetInvalid is offset < 0). 0.8.2 hands
// its fetcher -1 in both cases and the fetcher asks the broker for the earliest or latest
// offset according to auto.offset.reset (AFT:177, CFT:53-64); the values are the ones of that
// request, OffsetRequest.EarliestTime and LatestTime.
const (
	OffsetLatest   int64 = -1
	OffsetEarliest int64 = -2
)

// Strategies, as partition.assignment.strategy names them (CC:52, 182). Any other value selects
// range, as PartitionAssignor.createInstance does (PA:36-39).
const (
	StrategyRange      = "range"
	StrategyRoundRobin = "roundrobin"
)

// Config mirrors the 0.8.2 consumer properties a rebalance depends on.
type Config struct {
	// Connect is zookeeper.connect, e.g. "127.0.0.1:2181/kafka" (required).
	Connect string
	// SessionTimeout is zookeeper.session.timeout.ms (default DefaultSessionTimeout). It is
	// also the backoff of the registration's retry (ZCC:254-255).
	SessionTimeout time.Duration
	// GroupID is group.id (required).
	GroupID string
	// ConsumerID is consumer.id, optional and "for testing only" in 0.8.2 (ZCC:114). The
	// registered id is GroupID + "_" + ConsumerID; without it the id is generated as 0.8.2
	// does (zkstate.NewConsumerID).
	ConsumerID string
	// Host is the host name in a generated consumer id (default os.Hostname).
	Host string
	// Subscription is the topicCountMap of createMessageStreams: topic -> number of streams
	// (threads). Required, every count at least 1 (TC:51).
	Subscription map[string]int
	// Strategy is partition.assignment.strategy: StrategyRoundRobin, or range for anything
	// else, "" included.
	Strategy string
	// RebalanceMaxRetries is rebalance.max.retries, the number of attempts of a rebalance
	// (default DefaultRebalanceMaxRetries). 0 means the default here; in 0.8.2 it makes every
	// rebalance fail at once without an attempt (ZCC:602, 633).
	RebalanceMaxRetries int
	// RebalanceBackoff is rebalance.backoff.ms (default DefaultRebalanceBackoff).
	RebalanceBackoff time.Duration
	// DisableAutoCommit is auto.commit.enable=false. With auto-commit on (the default) the
	// consumed offsets are written to ZooKeeper every AutoCommitInterval, before every
	// rebalance attempt releases its partitions, and at Close; with it off only CommitOffsets
	// writes them.
	DisableAutoCommit bool
	// AutoCommitInterval is auto.commit.interval.ms (default DefaultAutoCommitInterval).
	AutoCommitInterval time.Duration
	// AutoOffsetReset is auto.offset.reset: OffsetResetLargest (default) or
	// OffsetResetSmallest; anything else is refused, as CC:71-78 refuses it.
	AutoOffsetReset string
	// Handler receives the fetcher starts and stops and the failures.
	Handler Handler
	// Logger receives the consumer's logs and those of its ZooKeeper session.
	Logger zerolog.Logger
}

// Handler stands for the application and the fetchers of a 0.8.2 consumer. Every callback is
// optional and runs on Run's goroutine (OnRevoke also on the goroutine calling Close); OnAssign
// and OnRevoke never run concurrently (both run under the rebalance lock). A callback must not
// call Close.
type Handler struct {
	// OnAssign is called when a rebalance succeeded (updateFetcher, ZCC:753-767): the
	// partitions this consumer now owns, each with the offset to consume from — the committed
	// offset, or OffsetLatest/OffsetEarliest when there is none. The map may be empty. The
	// owner znodes exist when it is called.
	OnAssign func(offsets map[zkstate.TopicPartition]int64)
	// OnRevoke is called whenever 0.8.2 stops its fetchers and clears its queues: at the start
	// of every rebalance attempt, after a failed attempt, and at Close (ZCC:655, 626, 196-200).
	// It is called even when nothing is owned. The application must stop consuming before it
	// returns: the owner znodes are deleted right after, and the offsets given to Commit so far
	// are the ones committed (with auto-commit on).
	OnRevoke func()
	// OnError reports a rebalance that failed (a *RebalanceFailedError after the last attempt,
	// or the error that ended it early) and errors of the session handling. 0.8.2 throws them
	// to the thread that ran the rebalance, which logs them (ZCC:552-553).
	OnError func(err error)
}

func (c Config) withDefaults() Config {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.RebalanceMaxRetries == 0 {
		c.RebalanceMaxRetries = DefaultRebalanceMaxRetries
	}
	if c.RebalanceBackoff == 0 {
		c.RebalanceBackoff = DefaultRebalanceBackoff
	}
	if c.AutoCommitInterval == 0 {
		c.AutoCommitInterval = DefaultAutoCommitInterval
	}
	if c.AutoOffsetReset == "" {
		c.AutoOffsetReset = OffsetResetLargest
	}
	return c
}

// Validate reports a Config New cannot use.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Connect == "" {
		errs = append(errs, errors.New("Connect is required"))
	}
	if c.GroupID == "" {
		errs = append(errs, errors.New("GroupID is required"))
	}
	if len(c.Subscription) == 0 {
		errs = append(errs, errors.New("Subscription names no topic"))
	}
	for topic, n := range c.Subscription {
		if topic == "" {
			errs = append(errs, errors.New("Subscription has an empty topic name"))
		}
		if n < 1 {
			errs = append(errs, fmt.Errorf("Subscription of %q has %d streams, want at least 1", topic, n))
		}
	}
	if c.SessionTimeout < 0 || c.RebalanceBackoff < 0 || c.AutoCommitInterval < 0 {
		errs = append(errs, errors.New("negative duration"))
	}
	if c.RebalanceMaxRetries < 0 {
		errs = append(errs, fmt.Errorf("negative RebalanceMaxRetries %d", c.RebalanceMaxRetries))
	}
	switch c.AutoOffsetReset {
	case OffsetResetSmallest, OffsetResetLargest:
	default:
		errs = append(errs, fmt.Errorf("AutoOffsetReset %q, want %q or %q",
			c.AutoOffsetReset, OffsetResetSmallest, OffsetResetLargest))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zkconsumer: invalid config: %w", err)
	}
	return nil
}

// resetOffset is the sentinel OnAssign reports for a partition without a valid offset.
func (c Config) resetOffset() int64 {
	if c.AutoOffsetReset == OffsetResetSmallest {
		return OffsetEarliest
	}
	return OffsetLatest
}
