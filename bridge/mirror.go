package bridge

// The Kafka 0.8 mirror of a group's ownership: while a group is Stable, every member has a
// registration /consumers/<g>/ids/<consumer-id> and every assigned partition an owner
// /consumers/<g>/owners/<t>/<p> holding the member's thread id, in the exact formats a Kafka
// 0.8.2 high-level consumer writes, so that 0.8-era tools (Burrow, kafka-consumer-groups
// --zookeeper, CMAK) and a rollback see who consumes what. (The offsets half of the 0.8
// layout is written with each commit, in records.go.)
//
// Every znode of the mirror is an ephemeral of the bridge's session (Store.CreateEphemeral):
// a bridge that dies releases them with its session, and a session expiry re-creates them.
//
// Mapping a Kafka member to a 0.8 consumer:
//   - consumer id: <group>_<client host>-<ms>-<8 hex digits>, the shape of 0.8.2's
//     consumerIdString, with the host the member connected from (sanitised for a znode name),
//     the time this bridge first saw the member, and a hash of its member id;
//   - one thread per subscribed topic, so every owner holds <consumer-id>-0 (0.8.2 numbers
//     threads from 0 for every topic, TopicCount.makeConsumerThreadIdsPerTopic), and the
//     registration subscribes {"<topic>":1} for each topic of the member's subscription;
//   - the subscription and assignment come from the consumer protocol (ConsumerMemberMetadata
//     and ConsumerMemberAssignment), read leniently; a member whose bytes cannot be read is
//     logged and left out of the mirror, never failing the group.

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// consumerProtocol is the protocol type of Kafka consumers; other types (connect, streams'
// own) carry other bytes and are not mirrored.
const consumerProtocol = "consumer"

// mirrorKey says which group state a mirror was built from.
type mirrorKey struct {
	state      group.State
	generation group.Generation
	version    int64
}

// mirrorState is the set of ephemerals a group should hold: path → data.
type mirrorState struct {
	ids    map[string][]byte
	owners map[string][]byte
}

// hostedFn gives the hosted-member znode (zkstate/hosted.go) of a member registered as consumer
// cid: its path and data.
type hostedFn func(cid string, mb group.MemberDescription) (string, []byte)

// buildMirror computes the mirror of a Stable group. seen maps member keys (memberKey) to the ms
// they were first seen; it is updated (new members added, departed ones dropped) so that a
// member keeps its consumer id across generations. hosted, when not nil, adds each registration's
// hosted-member znode to the ids.
func buildMirror(name string, d group.Description, seen map[group.MemberID]int64, now time.Time, log zerolog.Logger, hosted hostedFn) mirrorState {
	ms := mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}
	if d.ProtocolType != consumerProtocol {
		if len(d.Members) > 0 {
			log.Debug().Str("protocol_type", d.ProtocolType).Msg("not mirroring a group that is not a consumer group")
		}
		return ms
	}
	markSeen(seen, d.Members, now)
	for _, mb := range d.Members {
		topics, err := subscribedTopics(mb.Metadata)
		if err != nil {
			log.Warn().Err(err).Str("member", string(mb.MemberID)).Msg("cannot read member subscription; left out of the 0.8 mirror")
			continue
		}
		assigned, err := assignedPartitions(mb.Assignment)
		if err != nil {
			log.Warn().Err(err).Str("member", string(mb.MemberID)).Msg("cannot read member assignment; left out of the 0.8 mirror")
			continue
		}
		cid := memberConsumerID(name, mb, seen)
		thread := zkstate.ThreadIDs(cid, 1)[0]
		sub := map[string]int{}
		for _, t := range topics {
			if validName("topic", t) == nil {
				sub[t] = 1
			}
		}
		for _, a := range assigned {
			if validName("topic", a.topic) != nil {
				log.Warn().Str("member", string(mb.MemberID)).Str("topic", a.topic).Msg("assigned topic name cannot be a znode; not mirrored")
				continue
			}
			sub[a.topic] = 1 // an assignment outside the subscription still needs its thread
			for _, p := range a.partitions {
				if p < 0 {
					continue
				}
				op := zkstate.OwnerPath(name, a.topic, p)
				if prev, taken := ms.owners[op]; taken && !bytes.Equal(prev, []byte(thread)) {
					log.Warn().Str("topic", a.topic).Int32("partition", p).Str("owner", string(prev)).
						Str("member", string(mb.MemberID)).Msg("partition assigned to two members; mirroring the first")
					continue
				}
				ms.owners[op] = []byte(thread)
			}
		}
		reg := zkstate.ConsumerRegistration{Version: 1, Subscription: sub, Pattern: zkstate.PatternStatic, TimestampMs: seen[memberKey(mb.MemberID, mb.InstanceID)]}
		ms.ids[zkstate.IDPath(name, cid)] = reg.Encode()
		if hosted != nil {
			p, data := hosted(cid, mb)
			ms.ids[p] = data
		}
	}
	return ms
}

// memberKey identifies a member across generations: a static member by its instance id (a
// restarted static member gets a new member id but keeps its partitions, KIP-345, so it keeps
// its consumer id and owner znodes too), a dynamic one by its member id.
func memberKey(member group.MemberID, instance group.InstanceID) group.MemberID {
	if instance != "" {
		return "instance:" + group.MemberID(instance)
	}
	return member
}

// markSeen records when each member was first seen and forgets departed members.
func markSeen(seen map[group.MemberID]int64, members []group.MemberDescription, now time.Time) {
	present := map[group.MemberID]bool{}
	for _, mb := range members {
		k := memberKey(mb.MemberID, mb.InstanceID)
		present[k] = true
		if _, ok := seen[k]; !ok {
			seen[k] = now.UnixMilli()
		}
	}
	for id := range seen {
		if !present[id] {
			delete(seen, id)
		}
	}
}

// memberConsumerID is a member's 0.8 consumer id, once markSeen has seen it.
func memberConsumerID(name string, mb group.MemberDescription, seen map[group.MemberID]int64) string {
	k := memberKey(mb.MemberID, mb.InstanceID)
	return consumerID(name, mb.ClientHost, seen[k], k)
}

// consumerID derives a member's 0.8 consumer id (see the file comment).
func consumerID(name, clientHost string, firstSeenMs int64, member group.MemberID) string {
	h := fnv.New32a()
	h.Write([]byte(member))
	return name + "_" + sanitizeHost(clientHost) + "-" + strconv.FormatInt(firstSeenMs, 10) + "-" + fmt.Sprintf("%08x", h.Sum32())
}

// sanitizeHost turns Kafka's client host ("/10.0.0.1", an IPv6 address) into the host part of a
// consumer id: letters, digits, '.', '-' and '_' only, as host names have.
func sanitizeHost(host string) string {
	host = strings.TrimPrefix(host, "/")
	var b strings.Builder
	for _, r := range host {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

// subscribedTopics reads the topics of a ConsumerMemberMetadata. Leniently: kafka-go writes
// version 1 without the owned partitions that version 1 adds, so bytes that do not read at
// their version are read again as version 0, which ends after the user data.
func subscribedTopics(b []byte) ([]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var md kmsg.ConsumerMemberMetadata
	if err := md.ReadFrom(b); err == nil {
		return md.Topics, nil
	} else if v0 := asVersion0(b); v0 != nil && md.ReadFrom(v0) == nil {
		return md.Topics, nil
	} else {
		return nil, fmt.Errorf("consumer member metadata: %w", err)
	}
}

type topicPartitions struct {
	topic      string
	partitions []int32
}

// assignedPartitions reads a ConsumerMemberAssignment, as leniently as subscribedTopics. An
// empty assignment (a member given nothing) has no partitions.
func assignedPartitions(b []byte) ([]topicPartitions, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var a kmsg.ConsumerMemberAssignment
	err := a.ReadFrom(b)
	if err != nil {
		v0 := asVersion0(b)
		if v0 == nil || a.ReadFrom(v0) != nil {
			return nil, fmt.Errorf("consumer member assignment: %w", err)
		}
	}
	out := make([]topicPartitions, 0, len(a.Topics))
	for _, t := range a.Topics {
		out = append(out, topicPartitions{topic: t.Topic, partitions: t.Partitions})
	}
	return out, nil
}

// asVersion0 returns a copy of b with its version field (the first int16) set to 0; nil when b
// is too short or already version 0.
func asVersion0(b []byte) []byte {
	if len(b) < 2 || (b[0] == 0 && b[1] == 0) {
		return nil
	}
	c := slices.Clone(b)
	c[0], c[1] = 0, 0
	return c
}

// hostedFirst orders paths to create: hosted-member znodes before the registrations they
// describe, so that a registration of a bridge's member is never seen without its kind (it
// would count as a zk member meanwhile). Deletions go in sorted order, registrations
// (/consumers/...) before their hosted znodes (<root>/...), which keeps the same rule.
func hostedFirst(paths []string) []string {
	slices.SortStableFunc(paths, func(a, b string) int {
		ca, cb := strings.HasPrefix(a, zkstate.ConsumersPath+"/"), strings.HasPrefix(b, zkstate.ConsumersPath+"/")
		switch {
		case ca == cb:
			return 0
		case cb:
			return -1
		}
		return 1
	})
	return paths
}

func sortedPaths(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
