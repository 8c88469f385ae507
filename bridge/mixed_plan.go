package bridge

// The decisions of server-side assignment for the Kafka members of a mixed group (issue 5 items 3
// and 4), as pure functions; mixed.go gathers the inputs and carries out the result.
//
// The bridge behaves toward ZooKeeper like the 0.8 consumers it stands for: each Kafka member is a
// consumer registered in /consumers/<g>/ids with one thread per subscribed topic (mirror.go), and
// the assignment is Kafka 0.8.2's, computed over every registration in /ids (zk members, legacy
// members, the Kafka members) exactly as every zk member computes it on its own
// (ZookeeperConsumerConnector.rebalance → PartitionAssignor.assign over
// ZkUtils.getConsumersPerTopic). The bridge then claims the owner znodes of its own members'
// partitions, as 0.8.2's reflectPartitionOwnershipDecision does, but only once every one of them
// is free: a partition held by another member (a zk member that has not released it yet, a
// legacy member not yet stopped) is not handed to a Kafka member.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// mixedMember is one Kafka member of the generation as a 0.8 consumer.
type mixedMember struct {
	ID     group.MemberID
	CID    string   // its 0.8 consumer id
	Topics []string // subscribed topics (one thread each), sorted
}

// mixedInput is everything the assignment of one generation depends on.
type mixedInput struct {
	Group    string
	Strategy legacy.Strategy
	Members  []mixedMember
	// Ours lists consumer ids that are the bridge's Kafka members (present or on their way out):
	// their registrations in the snapshot are not others'.
	Ours map[string]bool
	// Held maps the owner znodes the bridge holds for its Kafka members (path → thread).
	Held map[string]string
	Snap *zkstate.GroupSnapshot
}

// mixedPlan is the outcome.
type mixedPlan struct {
	// Assignments maps each member to its part, topic → sorted partitions.
	Assignments map[group.MemberID]map[string][]int32
	// Release are held owner znodes that the new assignment does not give to the same thread.
	Release []string
	// Foreign are owner znodes of our members' new partitions that someone else still holds.
	Foreign []string
	// Claim maps the owner znodes to create to their thread.
	Claim map[string]string
	// Fingerprint identifies what the assignment was computed from besides the Kafka members:
	// the other registrations and the partitions of every subscribed topic. A change means the
	// Kafka members must rebalance.
	Fingerprint string
}

// planMixed computes the 0.8.2 assignment over every registration and what the bridge must
// release, wait for and claim. It fails only when the assignor does (roundrobin over unequal
// subscriptions).
func planMixed(in mixedInput) (mixedPlan, error) {
	ain := legacy.Input{Consumers: map[string]legacy.Subscription{}, Partitions: map[string][]int32{}}
	for _, mm := range in.Members {
		sub := legacy.Subscription{}
		for _, t := range mm.Topics {
			sub[t] = zkstate.ThreadIDs(mm.CID, 1)
		}
		ain.Consumers[mm.CID] = sub
	}
	for cid, sub := range otherThreads(in.Snap, in.Ours) {
		if _, ours := ain.Consumers[cid]; !ours {
			ain.Consumers[cid] = sub
		}
	}
	for _, sub := range ain.Consumers {
		for t := range sub {
			ain.Partitions[t] = in.Snap.Partitions[t]
		}
	}
	next, err := legacy.Assign(in.Strategy, ain)
	if err != nil {
		return mixedPlan{}, fmt.Errorf("bridge: mixed group %q: 0.8.2 assignment: %w", in.Group, err)
	}
	member := map[string]group.MemberID{} // thread → member
	p := mixedPlan{Assignments: map[group.MemberID]map[string][]int32{}, Claim: map[string]string{}}
	for _, mm := range in.Members {
		member[zkstate.ThreadIDs(mm.CID, 1)[0]] = mm.ID
		p.Assignments[mm.ID] = map[string][]int32{}
	}
	want := map[string]string{}
	for tp, th := range next {
		id, ours := member[th]
		if !ours {
			continue
		}
		p.Assignments[id][tp.Topic] = append(p.Assignments[id][tp.Topic], tp.Partition)
		want[zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition)] = th
	}
	for _, parts := range p.Assignments {
		for _, ps := range parts {
			slices.Sort(ps)
		}
	}
	for path, th := range in.Held {
		if want[path] != th {
			p.Release = append(p.Release, path)
		}
	}
	for tp, th := range next {
		if _, ours := member[th]; !ours {
			continue
		}
		path := zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition)
		if in.Held[path] == th {
			continue
		}
		if _, taken := in.Snap.Owners[zkstate.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}]; taken {
			if _, releasing := in.Held[path]; !releasing {
				p.Foreign = append(p.Foreign, path)
				continue
			}
		}
		p.Claim[path] = th
	}
	slices.Sort(p.Release)
	slices.Sort(p.Foreign)
	p.Fingerprint = mixedFingerprint(in.Snap, in.Ours)
	return p, nil
}

// otherThreads reads the threads of every registration that is not one of ours, as 0.8.2's
// ZkUtils.getConsumersPerTopic does: a static subscription's thread counts, a wildcard's matched
// against the topics the snapshot knows.
func otherThreads(snap *zkstate.GroupSnapshot, ours map[string]bool) map[string]legacy.Subscription {
	topics := make([]string, 0, len(snap.Partitions))
	for t := range snap.Partitions {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	out := map[string]legacy.Subscription{}
	for cid, c := range snap.Consumers {
		if ours[cid] {
			continue
		}
		threads, err := zkstate.WildcardThreads(cid, c.Registration, topics)
		if err != nil {
			continue // Snapshot reported it in Problems; 0.8.2 would fail its rebalance on it
		}
		sub := legacy.Subscription{}
		for t, ths := range threads {
			if len(ths) > 0 {
				sub[t] = ths
			}
		}
		out[cid] = sub
	}
	return out
}

// mixedFingerprint says what, besides the Kafka members, a mixed group's assignment depends on:
// every other registration's threads and the partition count of every subscribed topic.
func mixedFingerprint(snap *zkstate.GroupSnapshot, ours map[string]bool) string {
	others := otherThreads(snap, ours)
	var parts []string
	topics := map[string]bool{}
	for cid, sub := range others {
		var ts []string
		for t, ths := range sub {
			ts = append(ts, t+"="+strconv.Itoa(len(ths)))
			topics[t] = true
		}
		slices.Sort(ts)
		parts = append(parts, cid+"{"+strings.Join(ts, ",")+"}")
	}
	for cid, c := range snap.Consumers {
		if ours[cid] {
			for t := range c.Registration.Subscription {
				topics[t] = true
			}
		}
	}
	slices.Sort(parts)
	var ts []string
	for t := range topics {
		ts = append(ts, t+":"+strconv.Itoa(len(snap.Partitions[t])))
	}
	slices.Sort(ts)
	return strings.Join(parts, ";") + "|" + strings.Join(ts, ",")
}

// encodeAssignment writes a member's part as a ConsumerMemberAssignment v0, which every consumer
// client reads.
func encodeAssignment(part map[string][]int32) []byte {
	a := kmsg.NewConsumerMemberAssignment()
	topics := make([]string, 0, len(part))
	for t := range part {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: part[t]})
	}
	return a.AppendTo(nil)
}

// eagerProtocols are the consumer assignors whose members give up every partition before they
// rejoin (the eager rebalance protocol); cooperative-sticky members keep consuming while they
// rejoin (KIP-429), which a revoke-then-assign across kinds cannot allow.
var eagerProtocols = map[string]bool{"range": true, "roundrobin": true, "sticky": true}
