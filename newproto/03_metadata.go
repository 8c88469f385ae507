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
//   - v10: topic ids (KIP-516): every topic has the zero UUID, the
//     cluster has no topic ids; a topic asked for by id alone is
//     UNKNOWN_TOPIC_ID.
//   - v11: cluster authorized operations removed (KIP-700).
//   - v12: topic name nullable in the response.
//   - v13 (top-level error code, KIP-1102): not served.
//
// The broker list holds the Cluster's brokers plus the bridge's own node
// (Config.NodeID, advertised host and port), so that a client that finds
// its coordinator by node id (franz-go does) can resolve it. Our node
// replaces a Cluster broker with the same id: that is the broker the bridge
// stands for. The controller id is the lowest real broker id, or our node
// when the Cluster has no brokers.
//
// A partition whose leader is not a listed broker gets leader -1 and
// LEADER_NOT_AVAILABLE, as Kafka's metadata cache reports it.

import (
	"context"
	"fmt"
	"sort"
	"strings"

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

func (r *router) metadata(ctx context.Context, req *Request, m *kmsg.MetadataRequest) (kmsg.Response, error) {
	brokers, topics, err := r.clusterState(ctx)
	if err != nil {
		// Metadata (v0-v12) has no top-level error code; a client
		// treats a closed connection as retriable and asks again.
		return nil, err
	}
	self := r.self(req)
	resp := kmsg.NewPtrMetadataResponse()
	resp.SetVersion(m.Version)
	if r.clusterID != "" {
		resp.ClusterID = kmsg.StringPtr(r.clusterID)
	}

	live := make(map[int32]bool, len(brokers)+1)
	resp.ControllerID = -1
	for _, b := range brokers {
		if b.NodeID == self.NodeID {
			continue // our node stands for it
		}
		live[b.NodeID] = true
		if resp.ControllerID < 0 || b.NodeID < resp.ControllerID {
			resp.ControllerID = b.NodeID
		}
		resp.Brokers = append(resp.Brokers, metadataBroker(b))
	}
	live[self.NodeID] = true
	if resp.ControllerID < 0 {
		resp.ControllerID = self.NodeID
	}
	resp.Brokers = append(resp.Brokers, metadataBroker(self))
	sort.Slice(resp.Brokers, func(i, j int) bool { return resp.Brokers[i].NodeID < resp.Brokers[j].NodeID })

	allTopics := m.Topics == nil || (m.Version == 0 && len(m.Topics) == 0)
	if allTopics {
		names := make([]string, 0, len(topics))
		for name := range topics {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			resp.Topics = append(resp.Topics, metadataTopic(name, topics[name], live))
		}
		return resp, nil
	}
	seen := make(map[string]bool, len(m.Topics))
	for _, t := range m.Topics {
		if t.Topic == nil {
			// By id only (v10+): we know no topic ids.
			rt := kmsg.NewMetadataResponseTopic()
			rt.TopicID = t.TopicID
			rt.ErrorCode = int16(ErrUnknownTopicID)
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		name := *t.Topic
		if seen[name] {
			continue // Kafka answers each topic once
		}
		seen[name] = true
		parts, ok := topics[name]
		if !ok {
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic = kmsg.StringPtr(name)
			rt.ErrorCode = int16(ErrUnknownTopicOrPartition)
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		resp.Topics = append(resp.Topics, metadataTopic(name, parts, live))
	}
	return resp, nil
}

// clusterState asks the Cluster; a nil Cluster is an empty one (tests, or a
// bridge that serves groups only).
func (r *router) clusterState(ctx context.Context) ([]Broker, map[string][]Partition, error) {
	if r.cluster == nil {
		return nil, nil, nil
	}
	brokers, err := r.cluster.Brokers(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata: listing brokers: %w", err)
	}
	topics, err := r.cluster.Topics(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata: listing topics: %w", err)
	}
	return brokers, topics, nil
}

func metadataBroker(b Broker) kmsg.MetadataResponseBroker {
	mb := kmsg.NewMetadataResponseBroker()
	mb.NodeID, mb.Host, mb.Port, mb.Rack = b.NodeID, b.Host, b.Port, b.Rack
	return mb
}

func metadataTopic(name string, parts []Partition, live map[int32]bool) kmsg.MetadataResponseTopic {
	t := kmsg.NewMetadataResponseTopic()
	t.Topic = kmsg.StringPtr(name)
	// Kafka's internal topics start with "__" (offsets, transactions);
	// a 0.8 cluster may hold __consumer_offsets already.
	t.IsInternal = strings.HasPrefix(name, "__consumer_offsets") || strings.HasPrefix(name, "__transaction_state")
	sorted := append([]Partition(nil), parts...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	for _, p := range sorted {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader = p.ID, p.Leader
		mp.Replicas, mp.ISR = p.Replicas, p.ISR
		for _, id := range p.Replicas {
			if !live[id] {
				mp.OfflineReplicas = append(mp.OfflineReplicas, id)
			}
		}
		if !live[p.Leader] {
			mp.Leader = -1
			mp.ErrorCode = int16(ErrLeaderNotAvailable)
		}
		t.Partitions = append(t.Partitions, mp)
	}
	return t
}
