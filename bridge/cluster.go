package bridge

// What the Kafka listener reads straight from ZooKeeper, without a group's actor: the cluster
// for Metadata (newproto.Cluster), committed offsets for OffsetFetch, and the list of groups.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
)

// CommittedOffset is one committed offset as OffsetFetch returns it (newproto's type, so that
// *Bridge is a newproto.Groups).
type CommittedOffset = newproto.CommittedOffset

// GroupListing is one group as ListGroups returns it.
type GroupListing = newproto.GroupListing

var _ newproto.Groups = (*Bridge)(nil)

// cluster serves newproto.Cluster from /brokers: a cache refreshed when it is older than maxAge
// or when a watch on /brokers/ids or /brokers/topics fires, so that Metadata, which clients send
// often, costs no ZooKeeper round trip most of the time.
type cluster struct {
	store  *zkstate.Store
	maxAge time.Duration
	log    zerolog.Logger

	brokersStale atomic.Bool
	topicsStale  atomic.Bool

	mu        sync.Mutex // serialises refreshes: concurrent callers share one
	brokers   []newproto.Broker
	brokersAt time.Time
	topics    map[string][]newproto.Partition
	topicIDs  map[string][16]byte // the topics that have an id (Kafka 2.8+ writes them)
	topicsAt  time.Time
	// noTopicsNode: /brokers/topics was missing at the last refresh (no Kafka cluster has
	// registered in this ZooKeeper; limits.go).
	noTopicsNode atomic.Bool
	// lastTopics is topics, for CachedTopics, which must not wait for a refresh holding mu.
	lastTopics  atomic.Pointer[map[string][]newproto.Partition]
	staleLogged bool // staleServed logged since the last successful refresh
	// connected reports whether the ZooKeeper session is connected; while it is not, the cached
	// view is served without asking (nil: always ask).
	connected func() bool
}

// clusterRefreshTimeout bounds one refresh of brokers or topics: past it a Metadata request is
// answered from the cache, or LEADER_NOT_AVAILABLE without one.
const clusterRefreshTimeout = 3 * time.Second

func (c *cluster) up() bool { return c.connected == nil || c.connected() }

var _ newproto.Cluster = (*cluster)(nil)

func newCluster(store *zkstate.Store, maxAge time.Duration, log zerolog.Logger) *cluster {
	return &cluster{store: store, maxAge: maxAge, log: log}
}

// Brokers implements newproto.Cluster: the registered brokers that name a PLAINTEXT address.
func (c *cluster) Brokers(ctx context.Context) ([]newproto.Broker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.brokers != nil && (!c.brokersStale.Load() && time.Since(c.brokersAt) < c.maxAge || !c.up()) {
		return c.brokers, nil
	}
	ctx, cancel := context.WithTimeout(ctx, clusterRefreshTimeout)
	defer cancel()
	c.brokersStale.Store(false)
	regs, problems, err := c.store.Brokers(ctx)
	if err != nil {
		if c.brokers != nil {
			// ZooKeeper is away: serve the last view, as a broker serves its metadata cache,
			// and try again at the next request.
			c.brokersStale.Store(true)
			c.staleServed(err)
			return c.brokers, nil
		}
		return nil, fmt.Errorf("bridge: brokers: %w", err)
	}
	for _, p := range problems {
		c.log.Debug().Err(p.Err).Str("path", p.Path).Msg("skipping malformed broker registration")
	}
	out := make([]newproto.Broker, 0, len(regs))
	for _, r := range regs {
		host, port, err := r.Addr()
		if err != nil {
			c.log.Debug().Err(err).Int32("broker", r.ID).Msg("skipping broker without a PLAINTEXT address")
			continue
		}
		b := newproto.Broker{NodeID: r.ID, Host: host, Port: port}
		if r.Rack != "" {
			rack := r.Rack
			b.Rack = &rack
		}
		out = append(out, b)
	}
	c.brokers, c.brokersAt, c.staleLogged = out, time.Now(), false
	return out, nil
}

// Topics implements newproto.Cluster: every topic's partitions with their replicas from
// /brokers/topics/<t> and leader and ISR from .../partitions/<p>/state (leader -1 when a
// partition has no state).
func (c *cluster) Topics(ctx context.Context) (map[string][]newproto.Partition, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.topics != nil && (!c.topicsStale.Load() && time.Since(c.topicsAt) < c.maxAge || !c.up()) {
		return c.topics, nil
	}
	ctx, cancel := context.WithTimeout(ctx, clusterRefreshTimeout)
	defer cancel()
	c.topicsStale.Store(false)
	assignments, problems, err := c.store.Topics(ctx)
	if err != nil {
		if c.topics != nil {
			c.topicsStale.Store(true) // as Brokers does
			c.staleServed(err)
			return c.topics, nil
		}
		return nil, fmt.Errorf("bridge: topics: %w", err)
	}
	for _, p := range problems {
		c.log.Debug().Err(p.Err).Str("path", p.Path).Msg("skipping malformed topic")
	}
	type tp struct {
		topic string
		part  int32
	}
	var tps []tp
	for t, a := range assignments {
		for _, p := range a.PartitionIDs() {
			tps = append(tps, tp{t, p})
		}
	}
	statePaths := make([]string, len(tps))
	for i, x := range tps {
		statePaths[i] = zkstate.PartitionStatePath(x.topic, x.part)
	}
	// One read of every partition's state: a few multiRead requests, not one Get each.
	reads, err := c.store.GetMany(ctx, statePaths)
	if err != nil {
		if c.topics != nil {
			c.topicsStale.Store(true)
			c.staleServed(err)
			return c.topics, nil
		}
		return nil, fmt.Errorf("bridge: topics: %w", err)
	}
	states := make([]*zkstate.PartitionState, len(tps))
	errs := make([]error, len(tps))
	for i, r := range reads {
		if errors.Is(r.Err, zkstate.ErrNoNode) {
			continue
		}
		if r.Err != nil {
			errs[i] = r.Err
			continue
		}
		st, err := zkstate.ParsePartitionState(r.Data)
		if err != nil {
			c.log.Debug().Err(err).Str("topic", tps[i].topic).Int32("partition", tps[i].part).Msg("malformed partition state")
			continue
		}
		states[i] = &st
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bridge: partition states: %w", err)
	}
	out := make(map[string][]newproto.Partition, len(assignments))
	for i, x := range tps {
		p := newproto.Partition{ID: x.part, Leader: -1, Replicas: assignments[x.topic].Partitions[x.part]}
		if st := states[i]; st != nil {
			p.Leader, p.ISR = st.Leader, st.ISR
		}
		out[x.topic] = append(out[x.topic], p)
	}
	for t := range assignments {
		if _, ok := out[t]; !ok {
			out[t] = nil // a topic without partitions still exists
		}
	}
	if len(assignments) == 0 {
		ok, _, err := c.store.Exists(ctx, zkstate.TopicsPath)
		if err != nil {
			return nil, fmt.Errorf("bridge: topics: %w", err)
		}
		c.noTopicsNode.Store(!ok)
	} else {
		c.noTopicsNode.Store(false)
	}
	ids := make(map[string][16]byte)
	for t, a := range assignments {
		if a.TopicID != ([16]byte{}) {
			ids[t] = a.TopicID
		}
	}
	c.topics, c.topicIDs, c.topicsAt, c.staleLogged = out, ids, time.Now(), false
	c.lastTopics.Store(&out)
	return out, nil
}

// sameTopics reports whether children (sorted) are the topics as last read.
func (c *cluster) sameTopics(children []string) bool {
	t := c.lastTopics.Load()
	if t == nil || len(*t) != len(children) {
		return false
	}
	for _, name := range children {
		if _, ok := (*t)[name]; !ok {
			return false
		}
	}
	return true
}

// CachedTopics is the topics as last read, whatever their age, without waiting for a refresh;
// nil before the first read, and while a refresh is due for topics that came or went (the
// watch) or a read that failed. For the commit check (limits.go): it needs which partitions
// exist, not their leaders, which the age (maxAge) bounds; partitions added to a topic are not
// watched, so a partition it lacks sends the check to Topics.
func (c *cluster) CachedTopics() map[string][]newproto.Partition {
	if c.topicsStale.Load() || c.noTopicsNode.Load() {
		return nil
	}
	if t := c.lastTopics.Load(); t != nil {
		return *t
	}
	return nil
}

// staleServed logs, once until a refresh succeeds again, that Metadata serves a stale view;
// c.mu must be held.
func (c *cluster) staleServed(err error) {
	if !c.staleLogged {
		c.staleLogged = true
		c.log.Warn().Err(err).Msg("cannot refresh brokers and topics from zookeeper; serving the last view")
	}
}

// HasTopicsNode reports whether /brokers/topics existed at the last refresh of Topics.
func (c *cluster) HasTopicsNode() bool { return !c.noTopicsNode.Load() }

// TopicIDs implements newproto.TopicIDs: the ids of the topics whose znode has one, read with
// their partitions (Topics).
func (c *cluster) TopicIDs(ctx context.Context) (map[string][16]byte, error) {
	if _, err := c.Topics(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.topicIDs, nil
}

// warm reads brokers and topics once, so that Metadata has a view to serve even if ZooKeeper
// goes away before the first client asks.
func (c *cluster) warm(ctx context.Context) {
	if _, err := c.Brokers(ctx); err != nil {
		c.log.Debug().Err(err).Msg("reading brokers at start")
	}
	if _, err := c.Topics(ctx); err != nil {
		c.log.Debug().Err(err).Msg("reading topics at start")
	}
}

// watch marks the cache stale whenever brokers or topics come or go, until ctx ends.
func (c *cluster) watch(ctx context.Context) {
	brokers, err := c.store.WatchChildren(ctx, zkstate.BrokerIDsPath)
	if err != nil {
		c.log.Warn().Err(err).Msg("cannot watch brokers; Metadata relies on its maximum age")
		return
	}
	topics, err := c.store.WatchChildren(ctx, zkstate.TopicsPath)
	if err != nil {
		c.log.Warn().Err(err).Msg("cannot watch topics; Metadata relies on its maximum age")
		for range brokers {
		}
		return
	}
	for brokers != nil || topics != nil {
		select {
		case _, ok := <-brokers:
			if !ok {
				brokers = nil
				continue
			}
			c.brokersStale.Store(true)
		case ev, ok := <-topics:
			if !ok {
				topics = nil
				continue
			}
			if ev.Type == zkstate.Initial && c.sameTopics(ev.Children) {
				continue // the topics warm read: nothing came or went before the watch was set
			}
			c.topicsStale.Store(true)
		}
	}
}

// FetchOffsets returns the committed offsets of a group (topics nil: all of them; a topic with
// no partitions listed: all of its partitions). A partition with no commit is absent. The
// offset is the 0.8 znode's, which 0.8 consumers share; metadata and leader epoch come from
// the bridge's own record when it holds the same offset (else a 0.8 consumer committed since,
// and they are "" and -1).
func (b *Bridge) fetchOffsets(ctx context.Context, groupName string, topics map[string][]int32) ([]CommittedOffset, error) {
	if err := validName("group", groupName); err != nil {
		return nil, fmt.Errorf("bridge: %w: %w", err, newproto.ErrInvalidGroupID)
	}
	store, err := b.storeForReads()
	if err != nil {
		return nil, err
	}
	tps, err := offsetPartitions(ctx, store, groupName, topics)
	if err != nil || len(tps) == 0 {
		return nil, err
	}

	zkReads, ownReads, err := readOffsetPairs(ctx, store, b.cfg.Root, groupName, tps)
	if err != nil {
		return nil, err
	}
	zkData := make([][]byte, len(tps))
	ownData := make([][]byte, len(tps))
	for i := range tps {
		for _, r := range []zkstate.Read{zkReads[i], ownReads[i]} {
			if r.Err != nil && !errors.Is(r.Err, zkstate.ErrNoNode) {
				return nil, unavailable("fetch offsets of group %q: %w", groupName, r.Err)
			}
		}
		zkData[i], ownData[i] = zkReads[i].Data, ownReads[i].Data
	}
	var out []CommittedOffset
	for i, x := range tps {
		if zkData[i] == nil {
			continue
		}
		off, err := parseCommitted(zkData[i]) // limits.go
		if err != nil {
			b.coord.badOffset(zkstate.OffsetPath(groupName, x.Topic, x.Partition), err, "reported as no commit")
			continue
		}
		pair := zkstate.OffsetPair{HasZK: true, ZK: off}
		if ownData[i] != nil {
			pair.Own, err = zkstate.ParseOwnOffset(ownData[i])
			pair.HasOwn = err == nil
			if err != nil {
				b.coord.badOffset(zkstate.OwnOffsetPath(b.cfg.Root, groupName, x.Topic, x.Partition), err, "leader epoch and metadata not reported") // limits.go
			}
		}
		f, _ := pair.Fetch(false, 0)
		out = append(out, CommittedOffset{Topic: x.Topic, Partition: x.Partition, Offset: f.Offset, LeaderEpoch: f.LeaderEpoch, Metadata: f.Metadata})
	}
	sortCommitted(out)
	return out, nil
}

// offsetPartitions lists the partitions of a group's 0.8 offsets that a fetch of topics reads:
// the partitions listed, or every partition with an offset znode for a topic listed without any
// (every topic when topics is nil).
func offsetPartitions(ctx context.Context, store *zkstate.Store, groupName string, topics map[string][]int32) ([]zkstate.TopicPartition, error) {
	var err error
	type tp = zkstate.TopicPartition
	var tps []tp
	names := make([]string, 0, len(topics))
	for t := range topics {
		if validName("topic", t) == nil {
			names = append(names, t)
		}
	}
	if topics == nil {
		names, _, err = store.Children(ctx, zkstate.OffsetsPath(groupName))
		if errors.Is(err, zkstate.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, unavailable("fetch offsets of group %q: %w", groupName, err)
		}
	}
	// Topics whose partitions were not listed: look them up.
	var open []string
	for _, t := range names {
		if ps := topics[t]; len(ps) > 0 {
			for _, p := range ps {
				if p >= 0 {
					tps = append(tps, tp{Topic: t, Partition: p})
				}
			}
		} else {
			open = append(open, t)
		}
	}
	openPaths := make([]string, len(open))
	for i, t := range open {
		openPaths[i] = zkstate.OffsetsTopicPath(groupName, t)
	}
	kids, err := store.ChildrenMany(ctx, openPaths)
	if err != nil {
		return nil, readManyErr(ctx, groupName, err)
	}
	for i, t := range open {
		if err := kids[i].Err; err != nil && !errors.Is(err, zkstate.ErrNoNode) {
			return nil, unavailable("fetch offsets of group %q: %w", groupName, err)
		}
		for _, name := range kids[i].Children {
			p, err := strconv.ParseInt(name, 10, 32)
			if err != nil || p < 0 || strconv.FormatInt(p, 10) != name {
				continue
			}
			tps = append(tps, tp{Topic: t, Partition: int32(p)})
		}
	}
	return tps, nil
}

// ListGroups lists the groups this bridge knows: those with a record under its root (with the
// live state of the ones it has loaded, else the state a load would give: Stable with members,
// Empty without), and the Kafka 0.8 groups under /consumers (protocol type "", Stable while a
// 0.8 consumer is registered, else Empty), sorted by name.
func (b *Bridge) ListGroups(ctx context.Context) ([]GroupListing, error) {
	store, err := b.storeForReads()
	if err != nil {
		return nil, err
	}
	own, _, err := store.Children(ctx, zkstate.BridgeGroupsPath(b.cfg.Root))
	if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
		return nil, unavailable("list groups: %w", err)
	}
	zkNames, err := store.Groups(ctx)
	if err != nil {
		return nil, unavailable("list groups: %w", err)
	}
	live := b.coord.states()

	records := make([][]byte, len(own))
	errs := make([]error, len(own))
	fanOut(ctx, len(own), func(i int) {
		records[i], _, errs[i] = store.Get(ctx, zkstate.GroupRecordPath(b.cfg.Root, own[i]))
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bridge: list groups: %w", err)
	}
	listed := map[string]bool{}
	var out []GroupListing
	for i, name := range own {
		if errors.Is(errs[i], zkstate.ErrNoNode) {
			continue // offsets only, or deleted: /consumers lists it if it has offsets
		}
		if errs[i] != nil {
			return nil, unavailable("list groups: %w", errs[i])
		}
		var rec group.Record
		if err := json.Unmarshal(records[i], &rec); err != nil {
			b.log.Warn().Err(err).Str("group", name).Msg("unreadable group record; not listed")
			continue
		}
		st := group.Empty
		if len(rec.Members) > 0 {
			st = group.Stable
		}
		if s, ok := live[name]; ok {
			st = s
		}
		listed[name] = true
		out = append(out, GroupListing{Group: name, ProtocolType: rec.ProtocolType, State: st.String()})
	}
	for name, st := range live {
		if !listed[name] && st != group.Empty && st != group.Dead {
			// Loaded and rebalancing before its first record write.
			listed[name] = true
			out = append(out, GroupListing{Group: name, ProtocolType: consumerProtocol, State: st.String()})
		}
	}
	var zkGroups []string
	for _, name := range zkNames {
		if !listed[name] && validName("group", name) == nil {
			zkGroups = append(zkGroups, name)
		}
	}
	ids := make([][]string, len(zkGroups))
	errs = make([]error, len(zkGroups))
	fanOut(ctx, len(zkGroups), func(i int) {
		ids[i], _, errs[i] = store.Children(ctx, zkstate.IDsPath(zkGroups[i]))
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bridge: list groups: %w", err)
	}
	for i, name := range zkGroups {
		if errs[i] != nil && !errors.Is(errs[i], zkstate.ErrNoNode) {
			return nil, unavailable("list groups: %w", errs[i])
		}
		st := group.Empty
		if len(ids[i]) > 0 {
			st = group.Stable
		}
		out = append(out, GroupListing{Group: name, State: st.String()})
	}
	if !b.peers.alone() {
		// A broker lists the groups it coordinates, and admin clients ask every broker and
		// concatenate: with other bridges live, list only the groups placement gives us.
		out = slices.DeleteFunc(out, func(l GroupListing) bool { return !b.peers.owns(l.Group) })
	}
	slices.SortFunc(out, func(a, b GroupListing) int {
		switch {
		case a.Group < b.Group:
			return -1
		case a.Group > b.Group:
			return 1
		}
		return 0
	})
	return out, nil
}

// storeForReads returns the store while the bridge can read ZooKeeper.
func (b *Bridge) storeForReads() (*zkstate.Store, error) {
	b.coord.mu.Lock()
	store, closed := b.coord.store, b.coord.closed
	b.coord.mu.Unlock()
	switch {
	case closed:
		return nil, fmt.Errorf("bridge: shutting down: %w", newproto.ErrNotCoordinator)
	case store == nil || !b.coord.connected.Load():
		return nil, fmt.Errorf("bridge: no zookeeper session: %w", newproto.ErrCoordinatorNotAvailable)
	}
	return store, nil
}

// unavailable wraps a ZooKeeper failure as COORDINATOR_NOT_AVAILABLE, which clients retry.
func unavailable(format string, args ...any) error {
	return fmt.Errorf("bridge: %w (%w)", fmt.Errorf(format, args...), newproto.ErrCoordinatorNotAvailable)
}

// readOffsetPairs reads both offsets of every partition in one GetMany — the 0.8 znode, which
// 0.8 consumers share, and the bridge's own record — so that an OffsetFetch costs a few
// multiRead requests for a whole assignment, not a Get per znode (which made OffsetFetch the
// bulk of a mixed rebalance's ZooKeeper load). zk[i] and own[i] are those of tps[i]; a read's
// own failure (ErrNoNode included) is in it. The error is the caller's deadline, or else the
// Store's (COORDINATOR_NOT_AVAILABLE).
func readOffsetPairs(ctx context.Context, store *zkstate.Store, root, group string, tps []zkstate.TopicPartition) (zk, own []zkstate.Read, err error) {
	paths := make([]string, 0, 2*len(tps))
	for _, x := range tps {
		paths = append(paths, zkstate.OffsetPath(group, x.Topic, x.Partition), zkstate.OwnOffsetPath(root, group, x.Topic, x.Partition))
	}
	reads, err := store.GetMany(ctx, paths)
	if err != nil {
		return nil, nil, readManyErr(ctx, group, err)
	}
	zk, own = make([]zkstate.Read, len(tps)), make([]zkstate.Read, len(tps))
	for i := range tps {
		zk[i], own[i] = reads[2*i], reads[2*i+1]
	}
	return zk, own, nil
}

// readManyErr is the error of an offset fetch whose GetMany or ChildrenMany failed as a whole:
// the caller's deadline, or else a Store that cannot answer (COORDINATOR_NOT_AVAILABLE).
func readManyErr(ctx context.Context, group string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("bridge: fetch offsets of group %q: %w", group, err)
	}
	return unavailable("fetch offsets of group %q: %w", group, err)
}

// sortCommitted orders offsets by topic, then partition, as OffsetFetch answers them.
func sortCommitted(out []CommittedOffset) {
	slices.SortFunc(out, func(a, b CommittedOffset) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
}
