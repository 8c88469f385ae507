package newproto

// OffsetFetch, key 9: versions 0-10.
//
// Version notes:
//   - v0: group and topics with partitions; out: per partition the
//     committed offset, its metadata and an error. (Kafka 0.8.1 read v0
//     from ZooKeeper and v1 from its offsets topic; the bridge has one
//     store, the 0.8 layout in ZooKeeper, and answers both alike.)
//   - v1: no change in the format.
//   - v2: null topics ask for every committed offset of the group; a
//     top-level error code. Before v2 a group error is put into every
//     requested partition, as Kafka's getErrorResponse does.
//   - v3: ThrottleMillis (always 0).
//   - v4: no change in the body (throttle after response, KIP-219).
//   - v5: leader epoch per partition (KIP-320), -1 when unknown.
//   - v6: flexible versions.
//   - v7: require_stable (KIP-447): ignored. It asks the coordinator to
//     answer UNSTABLE_OFFSET_COMMIT while a transaction has offsets
//     pending; the bridge has no transactions, so no offset is ever
//     pending and every fetch is stable.
//   - v8: several groups per request (KIP-709), each with its own topics
//     (null: all) and its own error; the groups are read concurrently.
//   - v9: member id and epoch per group (KIP-848): ignored, as Kafka
//     ignores them for a classic group (ClassicGroup.validateOffsetFetch).
//   - v10: topics by id instead of name. Ids are resolved through Groups
//     when it implements TopicIDs (the ids Metadata v10+ hands out); an id
//     it does not know, the zero id included, gets UNKNOWN_TOPIC_ID on
//     every partition, as Kafka answers it. Asked for all topics, a v10
//     answer leaves out committed topics that have no id: they cannot be
//     named. franz-go asks by id only when Metadata gave it the topic's
//     id, and then needs no Metadata request to read the answer; below
//     v10 it sends one per OffsetFetch to map the names it gets back.
//
// A requested partition with no commit gets offset -1, leader epoch -1,
// metadata "" and no error, as Kafka answers it. Offsets are read straight
// from the store (Groups.FetchOffsets), not through the group's machine:
// Kafka answers OffsetFetch whatever the group's state, and a commit's
// offsets are in the store before the commit is answered.

import (
	"context"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { regKey(kmsg.OffsetFetch, 0, 10) }

// OffsetFetch implements Coordinator.
func (gc *GroupCoordinator) OffsetFetch(ctx context.Context, _ *Request, m *kmsg.OffsetFetchRequest) (*kmsg.OffsetFetchResponse, error) {
	resp := kmsg.NewPtrOffsetFetchResponse()
	resp.SetVersion(m.Version)
	if m.Version >= 8 {
		var ids *topicIDMap // v10: topics are named by id
		var idsCode int16
		if m.Version >= 10 {
			var err error
			if ids, err = gc.topicIDs(ctx); err != nil {
				idsCode = gc.errorCode(fmt.Errorf("offset fetch: topic ids: %w", err), kmsg.OffsetFetch, "")
			}
		}
		resp.Groups = make([]kmsg.OffsetFetchResponseGroup, len(m.Groups))
		gc.eachGroup(len(m.Groups), func(i int) {
			rg := &resp.Groups[i]
			*rg = kmsg.NewOffsetFetchResponseGroup()
			rg.Group = m.Groups[i].Group
			if idsCode != 0 {
				rg.ErrorCode = idsCode
				return
			}
			topics, unknown := groupTopics(m.Groups[i].Topics, ids)
			offsets, code := gc.fetch(ctx, m.Groups[i].Group, topics)
			rg.ErrorCode = code
			if code != 0 {
				return
			}
			for _, t := range fetchedTopics(topics, offsets) {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.topic
				if ids != nil {
					if rt.TopicID = ids.byName[t.topic]; rt.TopicID == ([16]byte{}) {
						continue // all topics (v10): one without an id cannot be named
					}
				}
				for _, p := range t.partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p.Partition, p.Offset, p.LeaderEpoch, kmsg.StringPtr(p.Metadata)
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			for _, t := range unknown {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.TopicID = t.TopicID
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p, -1, -1, kmsg.StringPtr(""), int16(ErrUnknownTopicID)
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
		})
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("offset fetch: %w", err)
		}
		return resp, nil
	}

	topics := requestTopics(m.Topics)
	offsets, code := gc.fetch(ctx, m.Group, topics)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("offset fetch: %w", err)
	}
	if code != 0 {
		if m.Version >= 2 {
			resp.ErrorCode = code
			return resp, nil
		}
		// v0-v1 have no top-level error: every partition carries it.
		for _, t := range m.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p, -1, -1, kmsg.StringPtr(""), code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil
	}
	for _, t := range fetchedTopics(topics, offsets) {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.topic
		for _, p := range t.partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p.Partition, p.Offset, p.LeaderEpoch, kmsg.StringPtr(p.Metadata)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp, nil
}

// fetch reads a group's offsets; a failure is the code to answer with.
func (gc *GroupCoordinator) fetch(ctx context.Context, name string, topics *fetchTopics) ([]CommittedOffset, int16) {
	if err := checkGroupID(name); err != nil {
		return nil, int16(ErrInvalidGroupID)
	}
	var want map[string][]int32
	if topics != nil {
		if len(topics.order) == 0 {
			return nil, 0
		}
		want = make(map[string][]int32, len(topics.order))
		for _, t := range topics.order {
			want[t] = topics.partitions[t]
		}
	}
	offsets, err := gc.groups.FetchOffsets(ctx, name, want)
	if err != nil {
		if ctx.Err() != nil {
			return nil, int16(ErrCoordinatorNotAvailable) // not written: the caller returns ctx's error
		}
		return nil, gc.errorCode(fmt.Errorf("fetching offsets of group %q: %w", name, err), kmsg.OffsetFetch, name)
	}
	return offsets, 0
}

// fetchTopics is what a request asks for: topics in request order, each
// with its partitions in request order (duplicates merged). nil means
// every committed offset.
type fetchTopics struct {
	order      []string
	partitions map[string][]int32
}

func (ft *fetchTopics) add(topic string, parts []int32) {
	if len(parts) == 0 {
		// Kafka answers topic-partitions: a topic without partitions
		// asks for nothing and is absent from the answer.
		return
	}
	if _, ok := ft.partitions[topic]; !ok {
		ft.order = append(ft.order, topic)
		ft.partitions[topic] = []int32{}
	}
	for _, p := range parts {
		if !containsInt32(ft.partitions[topic], p) {
			ft.partitions[topic] = append(ft.partitions[topic], p)
		}
	}
}

func containsInt32(s []int32, x int32) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// requestTopics reads v0-v7 topics; nil (v2+) is all of them.
func requestTopics(ts []kmsg.OffsetFetchRequestTopic) *fetchTopics {
	if ts == nil {
		return nil
	}
	ft := &fetchTopics{partitions: map[string][]int32{}}
	for _, t := range ts {
		ft.add(t.Topic, t.Partitions)
	}
	return ft
}

// groupTopics reads one v8+ group's topics; nil is all of them. With ids
// (v10) a topic is named by its id, and those whose id ids does not know
// are returned apart, merged by id.
func groupTopics(ts []kmsg.OffsetFetchRequestGroupTopic, ids *topicIDMap) (*fetchTopics, []kmsg.OffsetFetchRequestGroupTopic) {
	if ts == nil {
		return nil, nil
	}
	ft := &fetchTopics{partitions: map[string][]int32{}}
	var unknown []kmsg.OffsetFetchRequestGroupTopic
	for _, t := range ts {
		name := t.Topic
		if ids != nil {
			var ok bool
			if name, ok = ids.byID[t.TopicID]; !ok || t.TopicID == ([16]byte{}) {
				if len(t.Partitions) > 0 {
					unknown = mergeUnknownTopic(unknown, t)
				}
				continue
			}
		}
		ft.add(name, t.Partitions)
	}
	return ft, unknown
}

func mergeUnknownTopic(ts []kmsg.OffsetFetchRequestGroupTopic, t kmsg.OffsetFetchRequestGroupTopic) []kmsg.OffsetFetchRequestGroupTopic {
	for i := range ts {
		if ts[i].TopicID == t.TopicID {
			for _, p := range t.Partitions {
				if !containsInt32(ts[i].Partitions, p) {
					ts[i].Partitions = append(ts[i].Partitions, p)
				}
			}
			return ts
		}
	}
	parts := make([]int32, 0, len(t.Partitions))
	for _, p := range t.Partitions {
		if !containsInt32(parts, p) {
			parts = append(parts, p)
		}
	}
	t.Partitions = parts
	return append(ts, t)
}

// topicIDMap maps topic ids both ways.
type topicIDMap struct {
	byID   map[[16]byte]string
	byName map[string][16]byte
}

// topicIDs asks Groups for the topic ids when it knows them (TopicIDs);
// without, no id is known.
func (gc *GroupCoordinator) topicIDs(ctx context.Context) (*topicIDMap, error) {
	m := &topicIDMap{byID: map[[16]byte]string{}}
	src, ok := gc.groups.(TopicIDs)
	if !ok {
		return m, nil
	}
	byName, err := src.TopicIDs(ctx)
	if err != nil {
		return nil, err
	}
	m.byName = byName
	for name, id := range byName {
		if id != ([16]byte{}) {
			m.byID[id] = name
		}
	}
	return m, nil
}

type fetchedTopic struct {
	topic      string
	partitions []CommittedOffset
}

// fetchedTopics lays out the answer: for a request that names topics,
// exactly its partitions (-1 where nothing is committed); for all topics,
// every committed offset sorted by topic and partition.
func fetchedTopics(want *fetchTopics, offsets []CommittedOffset) []fetchedTopic {
	if want == nil {
		byTopic := map[string][]CommittedOffset{}
		for _, o := range offsets {
			byTopic[o.Topic] = append(byTopic[o.Topic], o)
		}
		out := make([]fetchedTopic, 0, len(byTopic))
		for t, ps := range byTopic {
			sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
			out = append(out, fetchedTopic{t, ps})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].topic < out[j].topic })
		return out
	}
	type tp struct {
		topic string
		part  int32
	}
	have := make(map[tp]CommittedOffset, len(offsets))
	for _, o := range offsets {
		have[tp{o.Topic, o.Partition}] = o
	}
	out := make([]fetchedTopic, 0, len(want.order))
	for _, t := range want.order {
		ft := fetchedTopic{topic: t, partitions: make([]CommittedOffset, 0, len(want.partitions[t]))}
		for _, p := range want.partitions[t] {
			o, ok := have[tp{t, p}]
			if !ok {
				o = CommittedOffset{Topic: t, Partition: p, Offset: -1, LeaderEpoch: -1}
			}
			ft.partitions = append(ft.partitions, o)
		}
		out = append(out, ft)
	}
	return out
}
