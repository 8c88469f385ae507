package newproto

// Metadata, key 3: versions 0-12.
//
// Version notes:
//   - v0: brokers (node id, host, port) and topics (error, name,
//     partitions with error, leader, replicas, isr). An empty topic list
//     means all topics.
//   - v1: broker rack, controller id, topic is_internal; from v1 a null
//     topic list means all topics (wildcard subscriptions) and an empty
//     one means none.
//   - v2: cluster id (Config.ClusterID; null when unset, as on a cluster
//     that never had one).
//   - v3: ThrottleMillis (always 0).
//   - v4: AllowAutoTopicCreation. The bridge never creates topics: an
//     unknown topic is UNKNOWN_TOPIC_OR_PARTITION whatever the flag.
//   - v5: offline replicas: replicas whose broker is not in the broker list.
//   - v6: no change in the body (throttle after response, KIP-219).
//   - v7: partition leader epoch (KIP-320): -1, ZooKeeper-era partition
//     state has no epoch a client could use.
//   - v8: authorized operations (KIP-430): not implemented, reported as
//     INT32_MIN ("not provided") even when asked for.
//   - v9: flexible versions.
//   - v10: topic ids (KIP-516): a topic's id when the Cluster knows it
//     (TopicIDs: Kafka 2.8+ writes it to the topic's znode), else the
//     zero Uuid, as a cluster that never ran 2.8 has no ids. A topic asked
//     for by id is answered by name when an id matches, else
//     UNKNOWN_TOPIC_ID.
//   - v11: cluster authorized operations removed (KIP-700).
//   - v12: topic name nullable in the response.
//   - v13 (top-level error code, KIP-1102): not served.
//
// With Config.Authorizer a topic the principal may not DESCRIBE is left out of an all-topics
// answer and answered TOPIC_AUTHORIZATION_FAILED when named (authorize.go), as by a broker.
//
// The broker list holds the Cluster's brokers plus the bridge's own node
// (Config.NodeID, advertised host and port), so that a client that finds
// its coordinator by node id (franz-go does) can resolve it. Our node
// replaces a Cluster broker with the same id: that is the broker the bridge
// stands for. The controller id is the lowest real broker id, or our node
// when the Cluster has no brokers. With several bridges (Config.Peers) the
// other live bridges are listed too, each at its advertised address, and
// replace Cluster brokers with their ids as our node does.
//
// A partition whose leader is not a listed broker gets leader -1 and
// LEADER_NOT_AVAILABLE, as Kafka's metadata cache reports it.
//
// When the Cluster fails (ZooKeeper unreachable and nothing cached) the
// answer is our node alone, every topic asked for LEADER_NOT_AVAILABLE
// (a request for all topics: none), which clients retry after their
// backoff; closing the connection instead made them reconnect in a loop.
//
// Every client asks for Metadata when it starts and again and again while
// a group forms, and a topic may have thousands of partitions: the
// per-topic part of the answer is built once per cluster view (topicCache)
// and shared, read-only, by every response until the topic's partitions or
// the live brokers change.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { regKey(kmsg.Metadata, 0, 12) }

// Cluster is what Metadata needs to know about the Kafka cluster the
// bridge fronts; bridge implements it from ZooKeeper's /brokers. Both
// methods are called for every Metadata request and must be cheap (served
// from a watched cache) and safe for concurrent use.
type Cluster interface {
	// Brokers returns the live brokers.
	Brokers(ctx context.Context) ([]Broker, error)
	// Topics returns every topic's partitions.
	Topics(ctx context.Context) (map[string][]Partition, error)
}

// TopicIDs is implemented by a Cluster whose topics may have ids (KIP-516):
// Kafka 2.8+ in ZooKeeper mode keeps a topic's id in /brokers/topics/<t>.
// Metadata v10+ answers them, so that a client can use the APIs that name
// topics by id (franz-go's OffsetFetch v10 does, which spares it a
// Metadata request per OffsetFetch). Like Topics, it is called for every
// Metadata request and must be cheap.
type TopicIDs interface {
	// TopicIDs returns the id of every topic that has one; a topic not in
	// the map has none (the zero Uuid).
	TopicIDs(ctx context.Context) (map[string][16]byte, error)
}

// Broker is one Kafka broker as Metadata lists it.
type Broker struct {
	NodeID int32
	Host   string
	Port   int32
	Rack   *string
}

// Partition is one partition's replica state.
type Partition struct {
	ID     int32
	Leader int32 // -1 when there is none
	// Replicas and ISR are broker ids, in the order Kafka stores them
	// (the first replica is the preferred leader).
	Replicas, ISR []int32
}

// PeerSettling, when Peers implements it, lets Metadata wait while a peer that just closed the
// connection this bridge holds open to it is being probed: a killed bridge's clients ask for
// Metadata the moment their connections to it end, and an answer given before the probe says
// the bridge is dead names its addresses until the client's next refresh (franz-go:
// metadata.min.age, 5 s, later). The relay's rewritten Metadata waits the same (relay/rewrite.go).
type PeerSettling interface {
	// Settled returns a channel closed once no such peer awaits its probe (closed already when
	// none does). Called for every Metadata: it must be cheap.
	Settled() <-chan struct{}
}

// MetadataSettleWait bounds Metadata's wait for PeerSettling: a probe's dial times out within it
// (500 ms), and a killed process's listener refuses at once.
const MetadataSettleWait = 500 * time.Millisecond

// AwaitPeersSettled waits until peers, when it implements PeerSettling, has settled, at most
// MetadataSettleWait, or until ctx ends.
func AwaitPeersSettled(ctx context.Context, peers any) {
	s, ok := peers.(PeerSettling)
	if !ok {
		return
	}
	settled := s.Settled()
	select {
	case <-settled:
		return
	default:
	}
	t := time.NewTimer(MetadataSettleWait)
	defer t.Stop()
	select {
	case <-settled:
	case <-t.C:
	case <-ctx.Done():
	}
}

func (r *router) metadata(ctx context.Context, req *Request, m *kmsg.MetadataRequest) (kmsg.Response, error) {
	if r.peers != nil {
		AwaitPeersSettled(ctx, r.peers)
	}
	brokers, topics, ids, err := r.clusterState(ctx)
	unavailable := err != nil
	if unavailable {
		// The Cluster cannot say (ZooKeeper away, and nothing cached):
		// Metadata (v0-v12) has no top-level error code, and a closed
		// connection makes clients reconnect in a loop, so the answer is
		// our node alone with every topic asked for LEADER_NOT_AVAILABLE,
		// which clients retry after their backoff (retry.backoff.ms).
		if ctx.Err() != nil {
			return nil, err
		}
		r.log.Debug().Err(err).Uint64("conn", req.Conn.ID).Msg("cluster unavailable; Metadata answers LEADER_NOT_AVAILABLE")
		brokers, topics, ids = nil, nil, nil
	}
	self := r.self(req)
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(m.Version)
	if r.clusterID != "" {
		resp.ClusterID = kmsg.StringPtr(r.clusterID)
	}

	live := r.metadataBrokers(resp, brokers, self)
	r.topics.prune(len(topics))

	allTopics := m.Topics == nil || (m.Version == 0 && len(m.Topics) == 0)
	if allTopics {
		names := make([]string, 0, len(topics))
		for name := range topics {
			names = append(names, name)
		}
		sort.Strings(names)
		resp.Topics = make([]kmsg.MetadataResponseTopic, 0, len(names))
		for _, name := range names {
			resp.Topics = append(resp.Topics, r.topics.get(name, ids[name], topics[name], live))
		}
		return r.describableTopics(req, m, resp, true), nil // authorize.go
	}
	var names map[[16]byte]string // id -> topic, for topics asked for by id
	seen := make(map[string]bool, len(m.Topics))
	for _, t := range m.Topics {
		if t.Topic == nil && names == nil {
			names = make(map[[16]byte]string, len(ids))
			for name, id := range ids {
				names[id] = name
			}
		}
		var name string
		switch {
		case t.Topic != nil:
			name = *t.Topic
		case t.TopicID != [16]byte{} && names[t.TopicID] != "":
			name = names[t.TopicID]
		default:
			// By an id we do not know (v10+).
			rt := kmsg.NewMetadataResponseTopic()
			rt.TopicID = t.TopicID
			rt.ErrorCode = int16(ErrUnknownTopicID)
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		if seen[name] {
			continue // Kafka answers each topic once
		}
		seen[name] = true
		parts, ok := topics[name]
		if !ok {
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic = kmsg.StringPtr(name)
			rt.ErrorCode = int16(ErrUnknownTopicOrPartition)
			if unavailable {
				rt.ErrorCode = int16(ErrLeaderNotAvailable)
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		resp.Topics = append(resp.Topics, r.topics.get(name, ids[name], parts, live))
	}
	return r.describableTopics(req, m, resp, false), nil // authorize.go
}

// clusterState asks the Cluster, and for topic ids when it has them (asked
// whatever the version: the cached answers carry them, and are shared by
// every version); a nil Cluster is an empty one (tests, or a bridge that
// serves groups only).
func (r *router) clusterState(ctx context.Context) ([]Broker, map[string][]Partition, map[string][16]byte, error) {
	if r.cluster == nil {
		return nil, nil, nil, nil
	}
	brokers, err := r.cluster.Brokers(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("metadata: listing brokers: %w", err)
	}
	topics, err := r.cluster.Topics(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("metadata: listing topics: %w", err)
	}
	var ids map[string][16]byte
	if c, ok := r.cluster.(TopicIDs); ok {
		if ids, err = c.TopicIDs(ctx); err != nil {
			return nil, nil, nil, fmt.Errorf("metadata: listing topic ids: %w", err)
		}
	}
	return brokers, topics, ids, nil
}

// metadataBrokers fills resp's brokers and controller: the upstream brokers
// no bridge stands for, then this bridge and the others (peers.go), sorted
// by node id. It returns the live broker ids, sorted.
func (r *router) metadataBrokers(resp *kmsg.MetadataResponse, brokers []Broker, self Broker) []int32 {
	resp.ControllerID = -1
	others := r.otherBridges(self) // peers.go
	resp.Brokers = make([]kmsg.MetadataResponseBroker, 0, len(brokers)+1+len(others))
	for _, b := range brokers {
		if b.NodeID == self.NodeID || slices.ContainsFunc(others, func(o Broker) bool { return o.NodeID == b.NodeID }) {
			continue // our node, or another bridge's, stands for it
		}
		if resp.ControllerID < 0 || b.NodeID < resp.ControllerID {
			resp.ControllerID = b.NodeID
		}
		resp.Brokers = append(resp.Brokers, metadataBroker(b))
	}
	if resp.ControllerID < 0 {
		// The lowest bridge: the same answer from every bridge of one service.
		resp.ControllerID = self.NodeID
		for _, o := range others {
			resp.ControllerID = min(resp.ControllerID, o.NodeID)
		}
	}
	resp.Brokers = append(resp.Brokers, metadataBroker(self))
	for _, o := range others {
		resp.Brokers = append(resp.Brokers, metadataBroker(o))
	}
	sort.Slice(resp.Brokers, func(i, j int) bool { return resp.Brokers[i].NodeID < resp.Brokers[j].NodeID })
	live := make([]int32, 0, len(resp.Brokers))
	for _, b := range resp.Brokers {
		if n := len(live); n == 0 || live[n-1] != b.NodeID {
			live = append(live, b.NodeID)
		}
	}
	return live
}

func metadataBroker(b Broker) kmsg.MetadataResponseBroker {
	mb := kmsg.NewMetadataResponseBroker()
	mb.NodeID, mb.Host, mb.Port, mb.Rack = b.NodeID, b.Host, b.Port, b.Rack
	return mb
}

// metadataTopic builds a topic's answer from its id (zero: none) and the
// Cluster's partitions; live is the sorted ids of the listed brokers.
func metadataTopic(name string, id [16]byte, parts []Partition, live []int32) kmsg.MetadataResponseTopic {
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = kmsg.StringPtr(name)
	t.TopicID = id
	// Kafka's internal topics start with "__" (offsets, transactions);
	// a 0.8 cluster may hold __consumer_offsets already.
	t.IsInternal = strings.HasPrefix(name, "__consumer_offsets") || strings.HasPrefix(name, "__transaction_state")
	t.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, len(parts))
	isLive := func(id int32) bool { _, ok := slices.BinarySearch(live, id); return ok }
	for _, p := range parts {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader = p.ID, p.Leader
		mp.Replicas, mp.ISR = p.Replicas, p.ISR
		for _, id := range p.Replicas {
			if !isLive(id) {
				mp.OfflineReplicas = append(mp.OfflineReplicas, id)
			}
		}
		if !isLive(p.Leader) {
			mp.Leader = -1
			mp.ErrorCode = int16(ErrLeaderNotAvailable)
		}
		t.Partitions = append(t.Partitions, mp)
	}
	slices.SortFunc(t.Partitions, func(a, b kmsg.MetadataResponseTopicPartition) int { return int(a.Partition) - int(b.Partition) })
	return t
}

// topicCache keeps each topic's Metadata answer with what it was built
// from: its id, a copy of the Cluster's partitions and the live broker ids.
// An answer is used again while all three are equal, which costs a
// comparison per partition instead of building (allocating, sorting) the
// answer for every request. The answer's partition list (and the Replicas and ISR slices in
// it) is shared by every response that uses it and never modified. The
// zero value is ready to use; it is safe for concurrent use.
type topicCache struct {
	mu     sync.Mutex
	topics map[string]*cachedTopic
}

type cachedTopic struct {
	id    [16]byte
	parts []Partition // deep copy of what the answer was built from
	live  []int32
	topic kmsg.MetadataResponseTopic
}

// get returns the answer for topic name with id (zero: none) and
// partitions parts, live being the sorted ids of the listed brokers.
func (c *topicCache) get(name string, id [16]byte, parts []Partition, live []int32) kmsg.MetadataResponseTopic {
	c.mu.Lock()
	e := c.topics[name]
	c.mu.Unlock()
	if e != nil && e.id == id && slices.Equal(e.live, live) && samePartitions(e.parts, parts) {
		return e.topic
	}
	e = &cachedTopic{id: id, parts: clonePartitions(parts), live: slices.Clone(live)}
	// Built from our copy, so that a Cluster that reuses its slices cannot
	// change an answer after the fact.
	e.topic = metadataTopic(name, id, e.parts, e.live)
	c.mu.Lock()
	if c.topics == nil {
		c.topics = map[string]*cachedTopic{}
	}
	c.topics[name] = e
	c.mu.Unlock()
	return e.topic
}

// prune empties the cache when it holds far more topics than the cluster
// has (topics deleted since), so that it stays bounded by the cluster's
// size; the next requests fill it again.
func (c *topicCache) prune(clusterTopics int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.topics) > 2*clusterTopics+64 {
		clear(c.topics)
	}
}

func samePartitions(a, b []Partition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.ID != y.ID || x.Leader != y.Leader || !slices.Equal(x.Replicas, y.Replicas) || !slices.Equal(x.ISR, y.ISR) {
			return false
		}
	}
	return true
}

func clonePartitions(parts []Partition) []Partition {
	out := make([]Partition, len(parts))
	for i, p := range parts {
		out[i] = Partition{ID: p.ID, Leader: p.Leader, Replicas: slices.Clone(p.Replicas), ISR: slices.Clone(p.ISR)}
	}
	return out
}
