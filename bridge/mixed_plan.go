package bridge

// The decisions of server-side assignment for the Kafka members of a mixed group (one 0.8.2
// assignment over every member of every kind, handed out once each previous owner let go), as
// pure functions; mixed.go gathers the inputs and carries out the result.
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
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/bridge/ownership"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// mixedMember is one Kafka member of the generation as a 0.8 consumer.
type mixedMember struct {
	ID     group.MemberID
	CID    string   // its 0.8 consumer id
	Topics []string // subscribed topics (one thread each), sorted
	// Owned are the partitions the member lists as owned in its JoinGroup metadata (KIP-429):
	// it still consumes them while it rejoins. An eager member lists none.
	Owned []legacy.TopicPartition
}

// mixedInput is everything the assignment of one generation depends on.
type mixedInput struct {
	Group    string
	Strategy legacy.Strategy
	Members  []mixedMember
	// Ours lists consumer ids that are the bridge's Kafka members (present or on their way out):
	// their registrations in the snapshot are not others'.
	Ours map[string]bool
	// Held maps the owner znodes the bridge holds for its Kafka members (path → thread), as
	// ephemerals of Session.
	Held    map[string]string
	Session int64
	Snap    *zkstate.GroupSnapshot
}

// mixedPlan is the outcome.
type mixedPlan struct {
	// Assignments maps each member to its part, topic → sorted partitions.
	Assignments map[group.MemberID]map[string][]int32
	// Release are held owner znodes to delete now: those no Kafka member keeps, and, once
	// nothing foreign is left to wait for, those that move between two Kafka members
	// (ownership.Plan's Release and Move).
	Release []string
	// Foreign are owner znodes of our members' new partitions that someone else still holds.
	Foreign []string
	// Claim maps the owner znodes to create to their thread.
	Claim map[string]string
	// Withheld are held owner znodes of partitions that move away from a Kafka member which
	// still consumes them (it lists them as owned, KIP-429): nobody is given them in this
	// generation, and they stay held until their member rejoins without them.
	Withheld []string
	// Fingerprint identifies what the assignment was computed from besides the Kafka members:
	// the other registrations and the partitions of every subscribed topic. A change means the
	// Kafka members must rebalance.
	Fingerprint string
}

// planMixed is ownership.Decide for the Kafka members: the 0.8.2 assignment over every
// registration, and what the bridge must release, wait for and claim. The owner znodes the
// snapshot shows and the bridge does not hold for its Kafka members count as unread (session
// -1): not theirs, whoever holds them. It fails only when the assignor does (roundrobin over
// unequal subscriptions).
func planMixed(in mixedInput) (mixedPlan, error) {
	oin := ownership.Input{Group: in.Group, Strategy: in.Strategy, Session: in.Session,
		Members:    make(map[string]map[string]int, len(in.Members)),
		Others:     ownership.ResolveSnapshot(in.Snap, in.Ours),
		Partitions: in.Snap.Partitions,
		Owners:     make(map[legacy.TopicPartition]ownership.Owner, len(in.Snap.Owners)+len(in.Held)),
	}
	for _, mm := range in.Members {
		sub := make(map[string]int, len(mm.Topics))
		for _, t := range mm.Topics {
			sub[t] = 1
		}
		oin.Members[mm.CID] = sub
	}
	for tp, th := range in.Snap.Owners {
		oin.Owners[legacy.TopicPartition{Topic: tp.Topic, Partition: tp.Partition}] = ownership.Owner{Thread: th, Version: -1, Session: -1}
	}
	prefix := zkstate.OwnersPath(in.Group) + "/"
	for path, th := range in.Held {
		tp, ok := mixedOwnerTP(prefix, path)
		if !ok {
			continue
		}
		oin.Owners[tp] = ownership.Owner{Thread: th, Version: -1, Session: in.Session}
	}
	own, err := ownership.Decide(oin)
	if err != nil {
		return mixedPlan{}, fmt.Errorf("bridge: mixed group %q: 0.8.2 assignment: %w", in.Group, err)
	}
	p := mixedPlan{Assignments: make(map[group.MemberID]map[string][]int32, len(in.Members)), Claim: map[string]string{},
		Fingerprint: ownership.Fingerprint(in.Snap, in.Ours)}
	member := make(map[string]group.MemberID, len(in.Members)) // consumer id → member
	for _, mm := range in.Members {
		member[mm.CID] = mm.ID
		p.Assignments[mm.ID] = map[string][]int32{}
	}
	kept := stillConsumed(in, oin.Owners, own.Assignment)
	for _, tp := range slices.SortedFunc(maps.Keys(own.Assignment), ownership.CompareTP) {
		if kept[tp] {
			continue // its owner has not revoked it yet: the next generation hands it over
		}
		part := p.Assignments[member[own.Member[tp]]]
		part[tp.Topic] = append(part[tp.Topic], tp.Partition)
	}
	release := own.Release
	if len(own.Foreign) == 0 {
		release = slices.SortedFunc(slices.Values(slices.Concat(own.Release, own.Move)), ownership.CompareTP)
	}
	release = slices.DeleteFunc(release, func(tp legacy.TopicPartition) bool { return kept[tp] })
	for _, tp := range slices.SortedFunc(maps.Keys(kept), ownership.CompareTP) {
		p.Withheld = append(p.Withheld, zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition))
	}
	for _, tp := range release {
		p.Release = append(p.Release, zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition))
	}
	for _, tp := range own.Foreign {
		p.Foreign = append(p.Foreign, zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition))
	}
	for _, tp := range own.Claim {
		if kept[tp] {
			continue
		}
		p.Claim[zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition)] = own.Assignment[tp]
	}
	slices.Sort(p.Release) // as paths, which is how the claimer deletes and logs them
	slices.Sort(p.Foreign)
	return p, nil
}

// stillConsumed applies KIP-429's rule to the Kafka members: the partitions that the new
// assignment takes away from a member which still consumes them — it lists them as owned in its
// JoinGroup metadata, and the bridge holds their owner znodes for its thread — move in two
// generations (Kafka's CooperativeStickyAssignor, and franz-go's, leave such a partition
// unassigned until its owner revoked it and rejoined). The member's word counts only for owner
// znodes the bridge holds for it: a member cannot keep what it does not own.
func stillConsumed(in mixedInput, owners map[legacy.TopicPartition]ownership.Owner, assignment legacy.Assignment) map[legacy.TopicPartition]bool {
	kept := map[legacy.TopicPartition]bool{}
	for _, mm := range in.Members {
		for _, tp := range mm.Owned {
			o, held := owners[tp]
			if !held || o.Session != in.Session || legacy.ConsumerOf(o.Thread) != mm.CID {
				continue
			}
			if th, stays := assignment[tp]; stays && th == o.Thread {
				continue // it stays with the member
			}
			kept[tp] = true
		}
	}
	return kept
}

// mixedOwnerTP reads the partition of an owner znode's path, prefix being the group's
// /consumers/<g>/owners/.
func mixedOwnerTP(prefix, path string) (legacy.TopicPartition, bool) {
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return legacy.TopicPartition{}, false
	}
	topic, part, ok := strings.Cut(rest, "/")
	if !ok {
		return legacy.TopicPartition{}, false
	}
	n, err := strconv.ParseInt(part, 10, 32)
	if err != nil {
		return legacy.TopicPartition{}, false
	}
	return legacy.TopicPartition{Topic: topic, Partition: int32(n)}, true
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

// ownedPartitions reads the partitions a member lists as owned (ConsumerMemberMetadata v1+,
// KIP-429) in any of the protocols it offers, sorted: what a cooperative member still consumes
// while it rejoins. An eager member revoked everything before its JoinGroup and lists none (the
// Java client empties its assignment first; franz-go's eager balancers and kafkajs never write
// the field). Metadata that does not parse lists none.
func ownedPartitions(protocols []group.Protocol) []legacy.TopicPartition {
	seen := map[legacy.TopicPartition]bool{}
	for _, p := range protocols {
		var md kmsg.ConsumerMemberMetadata
		if len(p.Metadata) == 0 || md.ReadFrom(p.Metadata) != nil {
			continue
		}
		for _, o := range md.OwnedPartitions {
			for _, part := range o.Partitions {
				seen[legacy.TopicPartition{Topic: o.Topic, Partition: part}] = true
			}
		}
	}
	return slices.SortedFunc(maps.Keys(seen), ownership.CompareTP)
}
