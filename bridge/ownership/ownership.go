// Package ownership decides who owns which partition of a 0.8 consumer group, for the members a
// bridge hosts, whatever their kind: the bridge's Kafka members (each a 0.8 consumer with one
// thread per subscribed topic) and its legacy members (seed 001 consumers, with their registered
// threads). It is pure: no goroutines, no clock, no IO. The callers read the group in ZooKeeper,
// call Decide, and carry out the Plan.
//
// Toward ZooKeeper the bridge behaves like the set of 0.8 consumers it hosts ("federated 0.8",
// DESIGN §1): the assignment is Kafka 0.8.2's over EVERY registration in /consumers/<g>/ids —
// the very answer each zk member computes on its own (ZookeeperConsumerConnector.rebalance,
// ZCC:659-660, with PartitionAssignor's AssignmentContext, PA:42-55, built from all of /ids) —
// and the bridge claims only its own members' partitions, releases its own owner znodes that
// the assignment gives to others, and waits for the owners of its members' new partitions that
// someone else still holds, as a 0.8.2 consumer retries a taken owner znode (ZCC:769-797).
//
// The scenario files under testdata/ show every rule on examples; each divergence between the
// two claimers this package replaced is decided once there, with the reason.
package ownership

import (
	"cmp"
	"slices"
	"strings"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Owner is one owner znode as read: /consumers/<g>/owners/<t>/<p>.
type Owner struct {
	Thread  string // the znode's data: the owning thread id
	Version int32  // data version, for the version check of the delete; -1 when not read
	// Session is the znode's ephemeral owner: the bridge's session for the owners it wrote,
	// another session's for a 0.8 consumer's (or a previous bridge's whose session has not
	// expired yet), 0 for a persistent node someone wrote by hand, -1 when not read (the znode
	// is then never the bridge's).
	Session int64
}

// Input is everything the ownership of one group depends on.
type Input struct {
	Group    string
	Strategy legacy.Strategy
	// Session is the bridge's ZooKeeper session: only owner znodes it holds are the bridge's to
	// delete (DESIGN §4: never trust an owner znode without checking its ephemeral owner).
	Session int64
	// Members are the bridge's members being assigned, by 0.8 consumer id: topic → thread
	// count. Their threads are <id>-0 .. <id>-(n-1), as a 0.8 consumer numbers them.
	Members map[string]map[string]int
	// Others are the group's other registrations in /ids (zk members, the members of other
	// bridges, the bridge's members of another kind), by consumer id, as Resolve reads them.
	// Their threads count in the assignment; their partitions are theirs to claim.
	Others map[string]map[string]int
	// Partitions maps every topic a member subscribes to → its partitions (a missing topic has
	// none). Topics only others subscribe to are taken when present: with range they are not
	// ours (PA:126 assigns topic by topic), and roundrobin requires every consumer to subscribe
	// to the same topics (PA:74-83).
	Partitions map[string][]int32
	// Owners are the owner znodes under /consumers/<g>/owners as read.
	Owners map[legacy.TopicPartition]Owner
}

// Ours reports whether an owner znode is the bridge's to rewrite or delete for the members of
// in: its session holds it and its thread is not another registration's (the bridge's
// members of another kind write their owners in the same session).
func (in *Input) Ours(o Owner) bool {
	if o.Session != in.Session {
		return false
	}
	_, other := in.Others[legacy.ConsumerOf(o.Thread)]
	return !other
}

// Plan is the ownership decided for the members of an Input.
type Plan struct {
	// Group is the new ownership of the whole group: partition → thread id, the members' and
	// the others' alike, as every zk member computes it. Empty without a member.
	Group legacy.Assignment
	// Assignment is the members' part of Group.
	Assignment legacy.Assignment
	// Member maps each partition of Assignment to the consumer id of its thread.
	Member map[legacy.TopicPartition]string
	// Release lists, sorted, the bridge's owner znodes of partitions no member of the Input
	// keeps: to delete before waiting for anyone, since whoever we wait for may be waiting for
	// them (a 0.8.2 consumer too releases before it claims, ZCC:657 before 684).
	Release []legacy.TopicPartition
	// Move lists, sorted, the bridge's owner znodes of partitions that stay with the members but
	// change thread: deleted and created again in the claim itself, so that the partition never
	// looks free to the others.
	Move []legacy.TopicPartition
	// Foreign lists, sorted, the partitions of Assignment whose owner znode is not the
	// bridge's: the claim waits until they are released. Partitions of others never are.
	Foreign []legacy.TopicPartition
	// Claim lists, sorted, the owner znodes to create: the partitions of Assignment that the
	// bridge does not hold for the same thread (Move included).
	Claim []legacy.TopicPartition
	// Topics maps every topic the assignment counted to its partitions.
	Topics map[string][]int32
}

// Decide computes the 0.8.2 assignment over every registration and what the bridge must
// release, wait for and claim. It fails, with the assignor's error for the caller to name the
// group in, only when the assignor does (roundrobin over unequal subscriptions, an unknown
// strategy), which makes every zk member's rebalance fail too (PA:74-83). Without a member nothing is computed: the bridge's owner znodes are released
// whatever the others' registrations say.
func Decide(in Input) (Plan, error) {
	ain, threadOf := AssignInput(in.Members, in.Others, in.Partitions)
	p := Plan{Group: legacy.Assignment{}, Topics: ain.Partitions}
	if len(in.Members) > 0 {
		var err error
		if p.Group, err = legacy.Assign(in.Strategy, ain); err != nil {
			return Plan{}, err
		}
	}
	// PA:102-106 and PA:136-155 keep, for the consumer computing, only what its own threads
	// got; the bridge is every member of the Input.
	p.Assignment = make(legacy.Assignment, len(p.Group))
	p.Member = make(map[legacy.TopicPartition]string, len(p.Group))
	for tp, th := range p.Group {
		if id, ok := threadOf[th]; ok {
			p.Assignment[tp], p.Member[tp] = th, id
		}
	}
	for tp, th := range p.Assignment {
		o, held := in.Owners[tp]
		switch {
		case held && !in.Ours(o):
			// Even a znode of another session holding the very thread we would write (a
			// previous bridge whose session has not expired yet) is not ours: it disappears
			// with that session, so it must be released and claimed anew.
			p.Foreign = append(p.Foreign, tp)
		case held && o.Thread == th:
			// held for this thread already
		default:
			p.Claim = append(p.Claim, tp)
		}
	}
	for tp, o := range in.Owners {
		if !in.Ours(o) {
			continue // not ours to delete, whoever it is
		}
		if th, kept := p.Assignment[tp]; !kept {
			p.Release = append(p.Release, tp)
		} else if th != o.Thread {
			p.Move = append(p.Move, tp)
		}
	}
	for _, l := range [][]legacy.TopicPartition{p.Release, p.Move, p.Foreign, p.Claim} {
		slices.SortFunc(l, CompareTP)
	}
	return p, nil
}

// Ops is the claim as ZooKeeper ops on owner znodes: the deletes of Release and Move (checked
// against the version read), then the creates of Claim as ephemerals of the session. With
// releaseOnly it is the deletes of Release alone, what the bridge lets go of before it waits
// for Foreign.
func (p *Plan) Ops(in *Input, releaseOnly bool) []zkstate.Op {
	del := p.Release
	if !releaseOnly {
		del = slices.SortedFunc(slices.Values(slices.Concat(p.Release, p.Move)), CompareTP)
	}
	ops := make([]zkstate.Op, 0, len(del)+len(p.Claim))
	for _, tp := range del {
		ops = append(ops, zkstate.DeleteOp(zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition), in.Owners[tp].Version))
	}
	if releaseOnly {
		return ops
	}
	for _, tp := range p.Claim {
		ops = append(ops, zkstate.CreateOp(zkstate.OwnerPath(in.Group, tp.Topic, tp.Partition),
			[]byte(p.Assignment[tp]), zkstate.CreateOptions{Ephemeral: true, Parents: true}))
	}
	return ops
}

// AssignInput builds the assignor's input: each registration's threads per subscribed topic —
// the members' and the others' — and the partitions of those topics. threadOf maps the
// members' thread ids to their consumer ids. One registration per consumer id: a member's
// wins over an other of the same id, since the member's is the one the bridge wrote.
func AssignInput(members, others map[string]map[string]int,
	partitions map[string][]int32) (in legacy.Input, threadOf map[string]string) {
	in = legacy.Input{Consumers: make(map[string]legacy.Subscription, len(members)+len(others)), Partitions: map[string][]int32{}}
	threadOf = map[string]string{}
	for id, topics := range members {
		sub := legacy.Subscription{}
		for topic, n := range topics {
			threads := legacy.ThreadIDs(id, n)
			sub[topic] = threads
			for _, th := range threads {
				threadOf[th] = id
			}
			in.Partitions[topic] = partitions[topic]
		}
		in.Consumers[id] = sub
	}
	for id, topics := range others {
		if _, dup := members[id]; dup {
			continue
		}
		sub := legacy.Subscription{}
		for topic, n := range topics {
			sub[topic] = legacy.ThreadIDs(id, n)
			if ps, ok := partitions[topic]; ok {
				in.Partitions[topic] = ps
			}
		}
		in.Consumers[id] = sub
	}
	return in, threadOf
}

// CompareTP orders partitions by topic, then partition.
func CompareTP(a, b legacy.TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}
