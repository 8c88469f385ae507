package zkconsumer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// ErrClosed is returned by Run and CommitOffsets after Close.
var ErrClosed = errors.New("zkconsumer: consumer closed")

// Consumer is one 0.8.2 high-level consumer: a ZookeeperConsumerConnector with one call to
// createMessageStreams.
type Consumer struct {
	cfg      Config
	log      zerolog.Logger
	id       string
	strategy legacy.Strategy
	store    *zkstate.Store

	// rebalanceMu is rebalanceLock (ZCC:88): it serialises rebalances and shutdown.
	rebalanceMu  sync.Mutex
	shuttingDown atomic.Bool // isShuttingDown (ZCC:87)
	running      atomic.Bool

	// trigger is isWatcherTriggered with its condition (ZCC:522-524): one pending rebalance,
	// however many events arrive.
	trigger chan struct{}
	// newSession carries ZKSessionExpireListener.handleNewSession (ZCC:476-490) to the
	// rebalance goroutine.
	newSession chan struct{}
	// listening is set once Run subscribed to the session (ZCC:894): before that a new session
	// is nobody's business.
	listening atomic.Bool
	// session is the ZooKeeper session the consumer last registered in.
	session atomic.Int64

	stopping chan struct{} // closed by Close
	runDone  chan struct{} // closed when Run returns
	closed   chan struct{} // closed when Close is done
	closeErr error

	// stopAutoCommit ends the auto-committer (Close).
	stopAutoCommit context.CancelFunc
	autoCommit     sync.WaitGroup
	watchers       sync.WaitGroup
	// brokerWatch: the rebalance found no broker and watches /brokers/ids (ZCC:645). Only Run's
	// goroutine touches it.
	brokerWatch bool

	// mu guards registry and checkpointed: the application (Commit), the auto-committer and
	// the rebalance all use them.
	mu sync.Mutex
	// registry is topicRegistry (ZCC:91): the partitions owned, each with its thread and
	// consumed offset (PartitionTopicInfo).
	registry map[zkstate.TopicPartition]*partitionInfo
	// checkpointed is checkpointedZkOffsets (ZCC:92): the offset last written or read per
	// partition, to skip writing it again.
	checkpointed map[zkstate.TopicPartition]int64
	// commitMu is offsetsChannelLock (ZCC:102, 294): one commit at a time.
	commitMu sync.Mutex

	stats struct {
		rebalances, attempts, conflicts, failures, commits atomic.Int64
	}
}

type partitionInfo struct {
	thread   string
	consumed int64
}

// New validates cfg, picks the consumer id and opens the consumer's own ZooKeeper session, as
// the 0.8.2 constructor does (ZCC:111-138): ctx bounds the connection. The auto-committer
// starts now, as 0.8.2's scheduler does (ZCC:130-138). Call Run to register and consume, and
// Close in any case.
func New(ctx context.Context, cfg Config) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cfg.Subscription = maps.Clone(cfg.Subscription)
	id, err := consumerID(cfg)
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:          cfg,
		id:           id,
		strategy:     legacy.ParseStrategy(cfg.Strategy),
		trigger:      make(chan struct{}, 1),
		newSession:   make(chan struct{}, 1),
		stopping:     make(chan struct{}),
		runDone:      make(chan struct{}),
		closed:       make(chan struct{}),
		registry:     map[zkstate.TopicPartition]*partitionInfo{},
		checkpointed: map[zkstate.TopicPartition]int64{},
	}
	// ZCC:124: every log line of 0.8.2 names the consumer.
	c.log = cfg.Logger.With().Str("component", "zkconsumer").Str("group", cfg.GroupID).Str("consumer", id).Logger()
	store, err := zkstate.Open(ctx, zkstate.Config{
		Connect:        cfg.Connect,
		SessionTimeout: cfg.SessionTimeout,
		Logger:         cfg.Logger,
		OnSession:      c.onSession,
	})
	if err != nil {
		return nil, fmt.Errorf("zkconsumer: %s: %w", id, err)
	}
	c.store = store
	autoCtx, stop := context.WithCancel(context.Background())
	c.stopAutoCommit = stop
	if !cfg.DisableAutoCommit {
		c.log.Info().Dur("interval", cfg.AutoCommitInterval).Msg("starting auto committer")
		c.autoCommit.Add(1)
		go c.autoCommitLoop(autoCtx)
	}
	return c, nil
}

// consumerID is consumerIdString (ZCC:111-123): the group, "_", then consumer.id or a
// generated <host>-<ms>-<uuid prefix>. The group prefix applies to a configured id too.
func consumerID(cfg Config) (string, error) {
	if cfg.ConsumerID != "" {
		return cfg.GroupID + "_" + cfg.ConsumerID, nil
	}
	host := cfg.Host
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("zkconsumer: host name for the consumer id: %w", err)
		}
		host = h
	}
	var uuid [16]byte
	_, _ = rand.Read(uuid[:])     // never fails (crypto/rand)
	uuid[6] = uuid[6]&0x0f | 0x40 // version 4, as UUID.randomUUID
	uuid[8] = uuid[8]&0x3f | 0x80
	return zkstate.NewConsumerID(cfg.GroupID, host, time.Now().UnixMilli(), uuid), nil
}

// ConsumerID is the registered consumer id, the name of the consumer's znode under ids and the
// prefix of its thread ids.
func (c *Consumer) ConsumerID() string { return c.id }

// SessionID is the id of the consumer's current ZooKeeper session; the owner znodes and the
// registration it creates are ephemerals of that session.
func (c *Consumer) SessionID() int64 { return c.store.SessionID() }

// Run is createMessageStreams (ZCC:218-243) followed by the life of the watcher thread
// (ZCC:535-559): it registers the consumer, subscribes to the session, the group's ids and the
// subscribed topics, rebalances, and then rebalances on every event until ctx ends (it returns
// ctx.Err()) or Close is called (it returns nil). A failed rebalance does not end Run: it is
// reported to Handler.OnError and the consumer waits for the next event, as 0.8.2's watcher
// thread does — except that 0.8.2 throws the first rebalance's failure out of
// createMessageStreams to the application. An error registering the consumer does end Run.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("zkconsumer: Run called twice")
	}
	defer close(c.runDone)
	if c.shuttingDown.Load() {
		return ErrClosed
	}
	// ZCC:239: register first, then subscribe (ZCC:893-902), so the consumer's own
	// registration is not an event for itself; it is one for every other member.
	if err := c.registerConsumerInZK(ctx); err != nil {
		if c.shuttingDown.Load() {
			return nil
		}
		return fmt.Errorf("zkconsumer: %s: register: %w", c.id, err)
	}
	// The watches live as long as Run: they are armed with this ctx, and so is the watch a
	// rebalance adds (watchBrokers). Close ends Run, which cancels it.
	ctx, stopWatches := context.WithCancel(ctx)
	defer func() {
		stopWatches()
		c.watchers.Wait()
	}()
	c.listening.Store(true)
	if err := c.watchIDs(ctx); err != nil {
		return c.runErr(ctx, err)
	}
	for _, topic := range sortedKeys(c.cfg.Subscription) {
		if err := c.watchTopic(ctx, topic); err != nil {
			return c.runErr(ctx, err)
		}
	}
	// ZCC:905: "explicitly trigger load balancing for this consumer".
	c.report(ctx, c.syncedRebalance(ctx))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.stopping:
			return nil
		case <-c.newSession:
			if c.sessionChanged() {
				c.handleNewSession(ctx)
			}
		case <-c.trigger:
			// After an expiry zkclient runs handleNewSession on its event thread before the
			// child and data events it fires for the same expiry (ZkClient:457-460, then
			// 381-386). Our watches and session events travel separately, so a watch event
			// that arrives first finds the session changed and handles it first; the event
			// itself then still rebalances once more, as zkclient's fired events do.
			if c.sessionChanged() {
				c.handleNewSession(ctx)
				c.rebalanceEventTriggered()
				continue
			}
			c.report(ctx, c.syncedRebalance(ctx))
		}
	}
}

// sessionChanged reports whether the Store has a session other than the one the consumer
// registered in: the old one expired, taking the registration and the owners with it.
func (c *Consumer) sessionChanged() bool {
	id := c.store.SessionID()
	return id != 0 && id != c.session.Load()
}

func (c *Consumer) runErr(ctx context.Context, err error) error {
	if c.shuttingDown.Load() {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("zkconsumer: %s: %w", c.id, err)
}

// report hands a rebalance's error to the application (ZCC:552-553 logs it); not when Run's
// ctx ended or Close began, which end the rebalance themselves.
func (c *Consumer) report(ctx context.Context, err error) {
	if err == nil || c.shuttingDown.Load() || ctx.Err() != nil {
		return
	}
	c.log.Error().Err(err).Msg("error during syncedRebalance")
	if c.cfg.Handler.OnError != nil {
		c.cfg.Handler.OnError(err)
	}
}

// registerConsumerInZK writes /consumers/<group>/ids/<id> (ZCC:248-257): an ephemeral with the
// 0.8.2 JSON and the current time, created with the "ZooKeeper bug" retry whose checker
// accepts whatever it finds (ZCC:254-255), backing off one session timeout.
func (c *Consumer) registerConsumerInZK(ctx context.Context) error {
	c.log.Info().Msg("begin registering consumer in ZK")
	reg := zkstate.ConsumerRegistration{
		Version:      1,
		Subscription: c.cfg.Subscription,
		Pattern:      zkstate.PatternStatic,
		TimestampMs:  time.Now().UnixMilli(),
	}
	err := createEphemeralPathExpectConflictHandleZKBug(ctx, c.store, zkstate.IDPath(c.cfg.GroupID, c.id), reg.Encode(),
		func([]byte) bool { return true }, c.cfg.SessionTimeout, c.stopping,
		func(stored []byte) {
			c.log.Info().Bytes("stored", stored).Dur("backoff", c.cfg.SessionTimeout).
				Msg("I wrote this conflicted ephemeral node a while back in a different session; backing off for it to be deleted")
		})
	if err != nil {
		return err
	}
	c.session.Store(c.store.SessionID())
	c.log.Info().Msg("end registering consumer in ZK")
	return nil
}

// rebalanceEventTriggered sets the flag the watcher thread waits on (ZCC:566-571).
func (c *Consumer) rebalanceEventTriggered() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// watchIDs is subscribeChildChanges(consumerRegistryDir, loadBalancerListener) (ZCC:896):
// handleChildChange triggers a rebalance for any change of the children (ZCC:561-564),
// the consumer's own included, and zkclient also fires it when the directory is created or
// deleted (ZkClient:522-526) and after a session expiry (fireAllEvents, ZkClient:381-386).
func (c *Consumer) watchIDs(ctx context.Context) error {
	return c.watch(ctx, zkstate.IDsPath(c.cfg.GroupID), true, func(zkstate.WatchEvent) {
		c.rebalanceEventTriggered()
	})
}

// watchTopic is subscribeDataChanges(/brokers/topics/<t>, topicPartitionChangeListener)
// (ZCC:898-902): handleDataChange triggers a rebalance for any change of the data
// (ZCC:497-507), creation included; handleDataDeleted only warns (ZCC:510-513). After a
// session expiry zkclient reads the node again and calls one or the other
// (ZkClient:537-554).
func (c *Consumer) watchTopic(ctx context.Context, topic string) error {
	return c.watch(ctx, zkstate.TopicPath(topic), false, func(ev zkstate.WatchEvent) {
		if ev.Type == zkstate.Deleted || !ev.Exists {
			c.log.Warn().Str("path", ev.Path).Msg("topic gets deleted, which should not happen at this time")
			return
		}
		c.log.Info().Str("path", ev.Path).Bytes("data", ev.Data).Msg("topic info changed, triggering rebalance")
		c.rebalanceEventTriggered()
	})
}

// watchBrokers is the subscription of the rebalance listener to /brokers/ids when the
// rebalance found no broker (ZCC:645). zkclient keeps listeners in a set, so subscribing again
// changes nothing; the subscription is never removed.
func (c *Consumer) watchBrokers(ctx context.Context) {
	if c.brokerWatch {
		return
	}
	if err := c.watch(ctx, zkstate.BrokerIDsPath, true, func(zkstate.WatchEvent) {
		c.rebalanceEventTriggered()
	}); err != nil {
		c.log.Warn().Err(err).Msg("subscribing to broker changes failed")
		return
	}
	c.brokerWatch = true
}

// watch arms a zkstate watch and forwards its events, except the Initial one: zkclient's
// subscriptions do not call the listener when they are made.
func (c *Consumer) watch(ctx context.Context, p string, children bool, fn func(zkstate.WatchEvent)) error {
	var ch <-chan zkstate.WatchEvent
	var err error
	if children {
		ch, err = c.store.WatchChildren(ctx, p)
	} else {
		ch, err = c.store.WatchData(ctx, p)
	}
	if err != nil {
		return err
	}
	c.watchers.Add(1)
	go func() {
		defer c.watchers.Done()
		for ev := range ch {
			if ev.Type == zkstate.Initial {
				continue
			}
			c.log.Debug().Str("path", ev.Path).Stringer("event", ev.Type).Msg("watch fired")
			fn(ev)
		}
	}()
	return nil
}

// onSession receives the Store's session events. Disconnects are ignored, as
// ZKSessionExpireListener.handleStateChanged ignores them (ZCC:465-467); a new session after an
// expiry is handleNewSession (ZCC:476-490, fired by ZkClient:457-460). Run tells a new session
// from a reconnect of the registered one by its id.
func (c *Consumer) onSession(ev zkstate.SessionEvent) {
	if ev.State != zkstate.Connected || !c.listening.Load() {
		return
	}
	select {
	case c.newSession <- struct{}{}:
	default:
	}
}

// handleNewSession (ZCC:476-490): every ephemeral is gone, so forget the owned partitions
// without committing or deleting anything (resetState, ZCC:592-594), register again and
// rebalance. The watches were set again by the Store, as zkclient re-subscribes by itself.
func (c *Consumer) handleNewSession(ctx context.Context) {
	c.log.Info().Msg("ZK expired; release old broker partition ownership; re-register consumer")
	c.mu.Lock()
	clear(c.registry)
	c.mu.Unlock()
	if err := c.registerConsumerInZK(ctx); err != nil {
		c.report(ctx, fmt.Errorf("zkconsumer: %s: register after session expiry: %w", c.id, err))
		return
	}
	c.report(ctx, c.syncedRebalance(ctx))
}

// autoCommitLoop is the "kafka-consumer-autocommit" task (ZCC:130-138, 268-278): every
// interval, commit and log a failure.
func (c *Consumer) autoCommitLoop(ctx context.Context) {
	defer c.autoCommit.Done()
	t := time.NewTicker(c.cfg.AutoCommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.commitOffsets(ctx); err != nil && ctx.Err() == nil {
			c.log.Error().Err(err).Msg("exception during autoCommit")
		}
	}
}

// Commit records that the application consumed tp up to nextOffset, the next offset it will
// read, as the consumer iterator does after handing out a message (CI:99, 49:
// resetConsumeOffset(item.nextOffset)). It writes nothing: the offset reaches ZooKeeper at the
// next auto-commit, rebalance or Close, or with CommitOffsets. It reports false when tp is not
// owned now; 0.8.2 would update a PartitionTopicInfo no longer in its registry, which is the
// same as nothing.
func (c *Consumer) Commit(tp zkstate.TopicPartition, nextOffset int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.registry[tp]
	if info == nil {
		return false
	}
	info.consumed = nextOffset
	return true
}

// CommitOffsets writes the consumed offsets of the owned partitions to ZooKeeper now, whatever
// the auto-commit setting (ConsumerConnector.commitOffsets, ZCC:380).
func (c *Consumer) CommitOffsets(ctx context.Context) error {
	if c.isClosed() {
		return ErrClosed
	}
	return c.commitOffsets(ctx)
}

// commitOffsets writes, for every owned partition, the consumed offset when it differs from the
// one last written or read (ZCC:289-306, 280-287). The first failure ends it, as the exception
// thrown by updatePersistentPath does.
func (c *Consumer) commitOffsets(ctx context.Context) error {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	type pending struct {
		tp     zkstate.TopicPartition
		offset int64
	}
	var todo []pending
	c.mu.Lock()
	for tp, info := range c.registry {
		// Pool.get gives null for a partition never checkpointed, which differs from any
		// offset (ZCC:281).
		if last, ok := c.checkpointed[tp]; !ok || last != info.consumed {
			todo = append(todo, pending{tp, info.consumed})
		}
	}
	c.mu.Unlock()
	if len(todo) == 0 {
		c.log.Debug().Msg("no updates to offsets since last commit")
		return nil
	}
	slices.SortFunc(todo, func(a, b pending) int { return compareTP(a.tp, b.tp) })
	for _, p := range todo {
		path := zkstate.OffsetPath(c.cfg.GroupID, p.tp.Topic, p.tp.Partition)
		if err := updatePersistentPath(ctx, c.store, path, zkstate.FormatOffset(p.offset)); err != nil {
			return fmt.Errorf("zkconsumer: %s: commit offset: %w", c.id, err)
		}
		c.mu.Lock()
		c.checkpointed[p.tp] = p.offset
		c.mu.Unlock()
		c.stats.commits.Add(1)
	}
	return nil
}

// Assignment returns the partitions the consumer owns now, each with the thread that owns it:
// what it wrote into the owner znodes at its last successful rebalance, until the next attempt
// releases them. Empty after a failed rebalance and after Close.
func (c *Consumer) Assignment() map[zkstate.TopicPartition]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[zkstate.TopicPartition]string, len(c.registry))
	for tp, info := range c.registry {
		out[tp] = info.thread
	}
	return out
}

// Stats counts what the consumer did.
type Stats struct {
	Rebalances int64 // syncedRebalance runs that got past the shutdown check
	Attempts   int64 // rebalance attempts
	Conflicts  int64 // attempts that failed on an existing owner znode
	Failures   int64 // rebalances that ran out of attempts
	Commits    int64 // offsets written
}

// Stats returns the counters.
func (c *Consumer) Stats() Stats {
	return Stats{
		Rebalances: c.stats.rebalances.Load(),
		Attempts:   c.stats.attempts.Load(),
		Conflicts:  c.stats.conflicts.Load(),
		Failures:   c.stats.failures.Load(),
		Commits:    c.stats.commits.Load(),
	}
}

func (c *Consumer) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// Close is shutdown (ZCC:184-216): it marks the consumer as shutting down, waits for a rebalance
// in progress (rebalanceLock; 0.8.2 checks the flag only at the start of a rebalance and after
// reading offsets, so this may take the remaining attempts and backoffs), stops the
// auto-committer and the fetchers (Handler.OnRevoke), commits the consumed offsets when
// auto-commit is on, and closes the ZooKeeper session — which deletes the registration and the
// owner znodes, ephemerals of that session; 0.8.2 deletes neither itself. ctx bounds the
// commit. Close waits for Run to return. Calling it again returns the first call's result.
func (c *Consumer) Close(ctx context.Context) error {
	if !c.shuttingDown.CompareAndSwap(false, true) {
		<-c.closed
		return c.closeErr
	}
	c.log.Info().Msg("ZKConsumerConnector shutting down")
	start := time.Now()
	close(c.stopping)

	c.rebalanceMu.Lock()
	// ZCC:194-195: the scheduler stops first and waits for a commit in progress.
	c.stopAutoCommit()
	c.autoCommit.Wait()
	// ZCC:196-200: stopConnections and sendShutdownToAllQueues.
	if c.cfg.Handler.OnRevoke != nil {
		c.cfg.Handler.OnRevoke()
	}
	var errs []error
	if !c.cfg.DisableAutoCommit { // ZCC:201-202
		if err := c.commitOffsets(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	// ZCC:203-206: closing the client ends the session and with it every ephemeral.
	if err := c.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("zkconsumer: %s: close ZooKeeper: %w", c.id, err))
	}
	c.mu.Lock()
	clear(c.registry)
	c.mu.Unlock()
	c.rebalanceMu.Unlock()

	if c.running.Load() {
		<-c.runDone
	}
	c.watchers.Wait()
	c.closeErr = errors.Join(errs...)
	c.log.Info().Dur("took", time.Since(start)).Msg("ZKConsumerConnector shutdown completed")
	close(c.closed)
	return c.closeErr
}

func compareTP(a, b zkstate.TopicPartition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return int(a.Partition) - int(b.Partition)
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
