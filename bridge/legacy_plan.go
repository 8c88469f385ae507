package bridge

// The decisions of the legacy coordinator, as pure functions: no goroutines, no clock, no IO.
// legacy_coordinator.go gathers the inputs (its members, the partitions watched under
// /brokers/topics, the owners and offsets read from /consumers/<g>) and carries out what comes
// back (one Multi, then StartRequests). Seed 001 "rebalance (group)" is the spec; the steps
// named below are its numbers:
//
//	1   the topics the group is interested in       legacyPlanRebalance: the members' subscriptions
//	2   the new ownership (0.8.2 assignor)           legacyPlanRebalance: legacy.Assign over every
//	                                                 registration in /ids (legacyResolveOthers)
//	3   is a rebalance necessary (3.1-3.5)           legacyPlanRebalance: legacy.RebalanceNeeded,
//	                                                 on our members' part of the group
//	4   Stop, write ownership, Start with offsets    legacyPlan.Ops and legacyPlan.Starts
//	-   offsets reported in PingResponses            legacyCheckPing and legacyOffsetOps
//
// A group may hold other members than ours (DESIGN §1): zk members (unmodified 0.8 consumers that
// rebalance themselves through ZooKeeper), and the members other coordinators host, which they
// register in /consumers/<g>/ids too (the bridge's Kafka members, legacy members of another
// bridge). Toward ZooKeeper this coordinator behaves like the set of 0.8 consumers it hosts
// ("federated 0.8"): its assignment is the 0.8.2 assignment over EVERY registration in /ids —
// the very answer each zk member computes on its own (kafka.consumer.ZookeeperConsumerConnector
// rebalance, ZCC:659-660, with PartitionAssignor's AssignmentContext, PA:42-55, built from all
// of /ids) — and it claims only the partitions of its own members' threads, releases its own
// owner znodes that the assignment gives to others, and neither claims nor waits for the
// partitions of others.
//
// Every identifier of this file starts with "legacy": package bridge is shared with the other
// member kinds' shells. The group engine (bridge/group) runs the legacy members' rebalance and
// asks the actor for the check and the claim, which these functions decide.

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/zkbridge/zkbridge/bridge/ownership"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// legacyMemberSpec is what the plan needs to know of one registered legacy consumer.
type legacyMemberSpec struct {
	// Subscription is the RegisterRequest's topic → threads list (docs/legacy-protocol.md §1
	// row 5): the member's threads on topic t are <consumerID>-0 .. <consumerID>-(n-1), as a
	// 0.8 consumer numbers them.
	Subscription []legacy.TopicThreads
	// AutoCommit: the member reports offsets in its PingResponses.
	AutoCommit bool
	// Reset is the member's auto_offset_reset, legacy.ResetSmallest or legacy.ResetLargest;
	// it picks the Start offset sentinel of a partition with nothing committed.
	Reset string
	// Started says the member acknowledged a StartRequest and has not been stopped since;
	// Running is the part it was started with, sorted. A member that is not running exactly its
	// part of the new assignment needs a Stop and a Start even when the ownership in ZooKeeper
	// is right (a new member, docs §8 "Coordinator" 1; every member after a coordinator
	// restart, since consumers stop fetching when they lose their coordinator).
	Started bool
	Running []legacy.TopicPartition
}

// legacyOwner is one owner znode as read: /consumers/<g>/owners/<t>/<p> (ownership.Owner).
type legacyOwner = ownership.Owner

// legacyPlanInput is everything a rebalance decision depends on.
type legacyPlanInput struct {
	Group    string
	Strategy legacy.Strategy
	// Session is our ZooKeeper session id: only owner znodes it holds are ours to rewrite
	// (DESIGN §4: never trust that an owner znode is ours without checking its ephemeral
	// owner).
	Session int64
	// Members maps consumer id → spec: our members, the only ones we claim partitions for,
	// stop and start.
	Members map[string]legacyMemberSpec
	// Others are the group's other registrations in /consumers/<g>/ids — zk members and the
	// members other coordinators host — by consumer id: topic → thread count, wildcard
	// subscriptions resolved against the topics present (legacyResolveOthers). Their threads
	// <consumerID>-0 .. <consumerID>-(n-1) count in the assignment as every zk member counts
	// them, but their partitions are theirs to claim: not ours to write, nor to wait for.
	Others map[string]map[string]int
	// Partitions maps every topic some member of ours subscribes to → its partitions, from
	// /brokers/topics/<t> (a missing topic has none). Topics only others subscribe to need not
	// be here: with range they are not ours (PA:126 assigns topic by topic), and roundrobin
	// requires every consumer to subscribe to the same topics (PA:74-83).
	Partitions map[string][]int32
	// Owners are all owner znodes under /consumers/<g>/owners. Those of our session hold the
	// threads of our members — or of another coordinator of this bridge, which shares the
	// session: an owner znode is ours only when our session holds it and its thread is not
	// another registration's (legacyPlanInput.ours).
	Owners map[legacy.TopicPartition]legacyOwner
	// Committed holds the offsets under /consumers/<g>/offsets that parse; OffsetNodes says
	// which offset znodes exist at all (a malformed one exists without a committed value), so
	// that a write sets an existing node and creates a missing one.
	Committed   map[legacy.TopicPartition]int64
	OffsetNodes map[legacy.TopicPartition]bool
	// Final holds the offsets the stopped members reported in the PingRequest after their
	// StopResponse (docs §8 "Coordinator" 2), already accepted by legacyCheckPing against the
	// current assignment. They are written in the rebalance's Multi and the partitions start
	// from them.
	Final map[legacy.TopicPartition]int64
}

// ours reports whether an owner znode is this coordinator's to rewrite or delete
// (ownership.Input.Ours): our session holds it, and its thread is not another registration's.
func (in *legacyPlanInput) ours(o legacyOwner) bool {
	oin := ownership.Input{Session: in.Session, Others: in.Others}
	return oin.Ours(o)
}

// ownership is the input of the ownership decision: our members' threads, the others', the
// partitions and the owners.
func (in *legacyPlanInput) ownership() ownership.Input {
	members := make(map[string]map[string]int, len(in.Members))
	for id, m := range in.Members {
		members[id] = legacyThreads(m.Subscription)
	}
	return ownership.Input{Group: in.Group, Strategy: in.Strategy, Session: in.Session, Members: members,
		Others: in.Others, Partitions: in.Partitions, Owners: in.Owners}
}

func legacyThreads(sub []legacy.TopicThreads) map[string]int {
	out := make(map[string]int, len(sub))
	for _, tt := range sub {
		out[tt.Topic] = int(tt.Threads)
	}
	return out
}

// legacyPlan is a rebalance decision.
type legacyPlan struct {
	// Group is the new ownership of the whole group (step 2): partition → thread id, our
	// members' and the others' alike, as every zk member computes it.
	Group legacy.Assignment
	// Assignment is our members' part of Group: what this coordinator owns in ZooKeeper once
	// Ops ran.
	Assignment legacy.Assignment
	// Owner maps each partition of Assignment to the consumer id of its thread.
	Owner map[legacy.TopicPartition]string
	// Reason is step 3's verdict on the ownership in ZooKeeper.
	Reason legacy.Reason
	// NotRunning lists, sorted, the members that do not run exactly their part of Assignment.
	NotRunning []string
	// Foreign lists, sorted, the partitions of Assignment whose owner znode is not ours
	// (another session's, or another member's in ours). The claim must wait until they are
	// released (0.8 consumers retry a taken owner znode the same way, ZCC:769-797); Ops is
	// empty while any is left. Partitions of others never are: whoever holds them, they are
	// not ours to wait for.
	Foreign []legacy.TopicPartition
	// Moving lists, sorted, our owner znodes of partitions that change thread among our
	// members: Ops deletes and creates them again (ownership.Plan.Move).
	Moving []legacy.TopicPartition
	// Release, while Foreign is not empty, is the Multi to run before waiting: the final
	// offsets that changed, then the deletes of our owner znodes of partitions that are no
	// longer ours; empty when there is none to delete. A 0.8.2 consumer too releases before it
	// claims (ZCC:657 before 684): the members we wait for may be waiting for what we hold — the
	// bridge's other coordinators, a legacy coordinator of another bridge — and letting go first
	// is what keeps two such claims from waiting on each other for ever.
	Release []zkstate.Op
	// Ops is the one Multi of step 4, to run after every StopResponse and before the first
	// StartRequest: the final offsets that changed, then our owner znodes of released and
	// reassigned partitions deleted (version-checked) — those the new assignment gives to
	// others included — then the new owners created as ephemerals of our session.
	Ops []zkstate.Op
	// Starts is every member's StartRequest part with its starting offsets: the final offset
	// reported, else the committed one, else the member's reset sentinel (legacy.OffsetSmallest
	// or legacy.OffsetLargest, docs §6 StartRequest). Every member has an entry, possibly empty.
	Starts map[string][]legacy.PartitionOffset
	// Offsets is the committed offsets after Ops: Committed updated with Final.
	Offsets map[legacy.TopicPartition]int64
}

// Needed reports whether the group must go through Stop and Start: the ownership in ZooKeeper
// is not the new assignment (seed steps 3.1-3.4), or some member does not run its part.
func (p *legacyPlan) Needed() bool { return p.Reason.Needed() || len(p.NotRunning) > 0 }

// Why says in one line why the group rebalances, for logs.
func (p *legacyPlan) Why() string {
	switch {
	case p.Reason.Needed():
		return p.Reason.String()
	case len(p.NotRunning) > 0:
		return fmt.Sprintf("ownership up to date (3.5), but %d member(s) not running their part: %s",
			len(p.NotRunning), strings.Join(p.NotRunning, ", "))
	}
	return p.Reason.String()
}

// legacyAssignInput is ownership.AssignInput over our members' registered threads (seed steps
// 1-2). threadOf maps our members' thread ids to their consumer ids.
func legacyAssignInput(members map[string]legacyMemberSpec, others map[string]map[string]int,
	partitions map[string][]int32) (in legacy.Input, threadOf map[string]string) {
	threads := make(map[string]map[string]int, len(members))
	for id, m := range members {
		threads[id] = legacyThreads(m.Subscription)
	}
	return ownership.AssignInput(threads, others, partitions)
}

// legacyResolveOthers is ownership.Resolve: the group's registrations that are not our members'
// (legacyPlanInput.Others), and those that cannot be read.
func legacyResolveOthers(group string, consumers map[string]zkstate.Consumer, problems []zkstate.Problem,
	topics []string, own func(id string) bool) (others map[string]map[string]int, skipped []zkstate.Problem) {
	return ownership.Resolve(group, consumers, problems, topics, own)
}

// legacyPlanRebalance decides a rebalance of our members of a group (seed 001 "rebalance
// (group)", steps 1 to 4), counting the others' registrations as every zk member does: the
// ownership (steps 1, 2 and the owner znodes of 4) is ownership.Decide's; what is the legacy
// members' own is added here — step 3's verdict, who must be stopped and started, and the
// offsets they start from and report. It fails only when the assignor does (roundrobin over
// unequal subscriptions, an unknown strategy), which makes every zk member's rebalance fail too
// (PA:74-83).
func legacyPlanRebalance(in legacyPlanInput) (legacyPlan, error) {
	oin := in.ownership()
	own, err := ownership.Decide(oin)
	if err != nil {
		return legacyPlan{}, fmt.Errorf("bridge: legacy group %q: assign (seed step 2): %w", in.Group, err)
	}
	p := legacyPlan{
		Group:      own.Group,
		Assignment: own.Assignment,
		Owner:      own.Member,
		Foreign:    own.Foreign,
		Moving:     own.Move,
		Reason:     legacyStep3(&in, own),
		Starts:     make(map[string][]legacy.PartitionOffset, len(in.Members)),
		Offsets:    make(map[legacy.TopicPartition]int64, len(in.Committed)+len(in.Final)),
	}
	parts := map[string][]legacy.TopicPartition{}
	for tp := range p.Assignment {
		parts[p.Owner[tp]] = append(parts[p.Owner[tp]], tp)
	}
	for id, m := range in.Members {
		part := parts[id]
		slices.SortFunc(part, legacyCompareTP)
		parts[id] = part
		if !m.Started || !slices.Equal(part, m.Running) {
			p.NotRunning = append(p.NotRunning, id)
		}
	}
	slices.Sort(p.NotRunning)

	// Offsets: committed, updated with the final offsets of the stopped members.
	maps.Copy(p.Offsets, in.Committed)
	maps.Copy(p.Offsets, in.Final)
	// Step 4.2's parts, each partition with its starting offset.
	for id, m := range in.Members {
		p.Starts[id] = legacyStarts(m, parts[id], p.Offsets)
	}

	// Step 4's Multi: the final offsets that changed, then the owner znodes (ownership.Plan.Ops:
	// deletes checked against the version read, then ephemeral creates). While a foreign owner
	// is left, only what is no longer ours is let go.
	final := make(map[legacy.TopicPartition]int64, len(in.Final))
	for tp, off := range in.Final {
		if old, ok := in.Committed[tp]; !ok || old != off {
			final[tp] = off
		}
	}
	switch {
	case len(p.Foreign) == 0:
		p.Ops = append(legacyOffsetOps(in.Group, final, in.OffsetNodes), own.Ops(&oin, false)...)
	case len(own.Release) > 0:
		p.Release = append(legacyOffsetOps(in.Group, final, in.OffsetNodes), own.Ops(&oin, true)...)
	}
	return p, nil
}

// legacyStep3 compares our part with the owners in ZooKeeper (seed step 3), on our part of the
// group only: the partitions assigned to our members and the owner znodes that are ours. Owner
// znodes of others outside our part (a zk member's, a topic nobody here subscribes to any more)
// are none of our business: we cannot delete them, and counting them would call for a
// rebalance after every rebalance; nor is a partition of another member that is not owned yet
// (a zk member still rebalancing) a reason to stop ours.
//
// Step 3 compares threads, as 0.8 does, not sessions: an assigned partition whose owner znode
// holds our member's thread under another ZooKeeper session (the previous coordinator of a group
// handed over, whose session lives until it lets the znodes go) is owned as planned. Comparing
// sessions would cost a Stop/Start round of every member at each check of every handover. The
// case it gives up, a second consumer running under the same consumer id, cannot arise: /ids/<id>
// is an ephemeral, so a Register of an id another session holds is refused (CONSUMER_ID_IN_USE),
// and the mixed claim, which hands partitions to Kafka members, does compare sessions
// (forgetGoneOwners).
func legacyStep3(in *legacyPlanInput, own ownership.Plan) legacy.Reason {
	next := own.Assignment
	current := make(map[legacy.TopicPartition]string, len(in.Owners))
	for tp, o := range in.Owners {
		_, assigned := next[tp]
		if assigned || in.ours(o) {
			current[tp] = o.Thread
		}
	}
	domain := map[string][]int32{}
	for topic, ids := range own.Topics {
		for _, id := range ids {
			tp := legacy.TopicPartition{Topic: topic, Partition: id}
			_, assigned := next[tp]
			o, owned := in.Owners[tp]
			if assigned || owned && in.ours(o) {
				domain[topic] = append(domain[topic], id)
			}
		}
	}
	return legacy.RebalanceNeeded(current, next, domain)
}

// legacyStarts is a member's StartRequest part: each partition from the final offset reported,
// else the committed one, else the member's reset sentinel (docs §6 StartRequest).
func legacyStarts(m legacyMemberSpec, part []legacy.TopicPartition, offsets map[legacy.TopicPartition]int64) []legacy.PartitionOffset {
	reset, ok := legacy.ResetOffset(m.Reset)
	if !ok {
		reset = legacy.OffsetLargest // 0.8's default auto.offset.reset; the server validated it anyway
	}
	starts := make([]legacy.PartitionOffset, 0, len(part))
	for _, tp := range part {
		off, ok := offsets[tp]
		if !ok || off < 0 {
			off = reset
		}
		starts = append(starts, legacy.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
	}
	return starts
}

// legacyRestart computes the plan's Starts again from its Offsets (after they were read again,
// readClaimedOffsets): the same parts, each partition from its offset now.
func legacyRestart(in legacyPlanInput, plan *legacyPlan) {
	for id, starts := range plan.Starts {
		part := make([]legacy.TopicPartition, len(starts))
		for i, po := range starts {
			part[i] = legacy.TopicPartition{Topic: po.Topic, Partition: po.Partition}
		}
		plan.Starts[id] = legacyStarts(in.Members[id], part, plan.Offsets)
	}
}

// legacyOffsetOps writes offsets to /consumers/<g>/offsets/<t>/<p> as decimal text (the 0.8
// format, zkstate.FormatOffset): a set of an existing znode, a create (with its parents) of a
// missing one, in partition order.
func legacyOffsetOps(group string, offsets map[legacy.TopicPartition]int64, exists map[legacy.TopicPartition]bool) []zkstate.Op {
	ops := make([]zkstate.Op, 0, len(offsets))
	for _, tp := range legacySortedTPs(offsets) {
		p := zkstate.OffsetPath(group, tp.Topic, tp.Partition)
		data := zkstate.FormatOffset(offsets[tp])
		if exists[tp] {
			ops = append(ops, zkstate.SetOp(p, data, -1))
		} else {
			ops = append(ops, zkstate.CreateOp(p, data, zkstate.CreateOptions{Parents: true}))
		}
	}
	return ops
}

// legacyPingCheck is the verdict on the offsets of one PingResponse.
type legacyPingCheck struct {
	// Accepted are the offsets to write: partitions the member owns in the current assignment,
	// with an offset that differs from the committed one.
	Accepted map[legacy.TopicPartition]int64
	// Unchanged counts accepted offsets equal to the committed ones (nothing to write).
	Unchanged int
	// Refused are the offsets not accepted, in the order received, with Why naming the rule.
	Refused []legacy.PartitionOffset
	Why     []string
}

// legacyCheckPing validates the offsets of a PingResponse: with auto_commit,
// an offset is accepted only for a partition the member owns in the current assignment
// (owner: partition → consumer id of the assignment last written to ZooKeeper). That is what
// keeps a stale member — one whose partitions moved while its ping was in flight, or that
// missed a Start — from moving a new owner's offset, backwards or forwards. Also refused:
// negative offsets (docs §6 PingResponse: the next offset to consume, never a sentinel), a
// partition listed twice in one response (the first is kept), and every offset of a member that
// registered without auto_commit.
func legacyCheckPing(member string, autoCommit bool, owner map[legacy.TopicPartition]string,
	committed map[legacy.TopicPartition]int64, resp legacy.PingResponse) legacyPingCheck {
	var c legacyPingCheck
	seen := make(map[legacy.TopicPartition]bool, len(resp.Offsets))
	refuse := func(po legacy.PartitionOffset, why string) {
		c.Refused = append(c.Refused, po)
		c.Why = append(c.Why, why)
	}
	for _, po := range resp.Offsets {
		tp := legacy.TopicPartition{Topic: po.Topic, Partition: po.Partition}
		switch {
		case !autoCommit:
			refuse(po, "member registered without auto_commit")
		case seen[tp]:
			refuse(po, "partition listed twice")
		case po.Offset < 0:
			refuse(po, "negative offset")
		case owner[tp] != member:
			if owner[tp] == "" {
				refuse(po, "partition not assigned")
			} else {
				refuse(po, "partition owned by "+owner[tp])
			}
		default:
			seen[tp] = true
			if old, ok := committed[tp]; ok && old == po.Offset {
				c.Unchanged++
				continue
			}
			if c.Accepted == nil {
				c.Accepted = map[legacy.TopicPartition]int64{}
			}
			c.Accepted[tp] = po.Offset
		}
		// Refused or not, a partition counts once: a second entry for it is refused.
		seen[tp] = true
	}
	return c
}

func legacyCompareTP(a, b legacy.TopicPartition) int { return ownership.CompareTP(a, b) }

func legacySortedTPs[V any](m map[legacy.TopicPartition]V) []legacy.TopicPartition {
	out := make([]legacy.TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	slices.SortFunc(out, legacyCompareTP)
	return out
}
