package bridge

// Table tests of the legacy coordinator's pure decisions. Each case names the step of seed 001
// "rebalance (group)" (or the section of docs/legacy-protocol.md) it checks.

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

const legacyTestSession int64 = 0x100

func legacyTP(t string, p int32) legacy.TopicPartition {
	return legacy.TopicPartition{Topic: t, Partition: p}
}

func legacyPO(t string, p int32, off int64) legacy.PartitionOffset {
	return legacy.PartitionOffset{Topic: t, Partition: p, Offset: off}
}

// legacyOurs is an owner znode of our session.
func legacyOurs(thread string) legacyOwner {
	return legacyOwner{Thread: thread, Version: 0, Session: legacyTestSession}
}

func legacySub(topics ...string) []legacy.TopicThreads {
	var out []legacy.TopicThreads
	for _, t := range topics {
		name, n, _ := strings.Cut(t, ":")
		threads := int32(1)
		if n == "2" {
			threads = 2
		}
		out = append(out, legacy.TopicThreads{Topic: name, Threads: threads})
	}
	return out
}

// legacyRunning is a member started with part.
func legacyRunningSpec(sub []legacy.TopicThreads, part ...legacy.TopicPartition) legacyMemberSpec {
	slices.SortFunc(part, legacyCompareTP)
	return legacyMemberSpec{Subscription: sub, AutoCommit: true, Reset: legacy.ResetSmallest, Started: true, Running: part}
}

func legacyOpStrings(ops []zkstate.Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.String()
	}
	return out
}

func TestLegacyPlanRebalance(t *testing.T) {
	twoMembers := map[string]legacyMemberSpec{
		"a": {Subscription: legacySub("t:2"), AutoCommit: true, Reset: legacy.ResetSmallest},
		"b": {Subscription: legacySub("t"), AutoCommit: true, Reset: legacy.ResetLargest},
	}
	// Range over t-0..t-4 with threads a-0, a-1, b-0 (seed step 2, 0.8.2 RangeAssignor):
	// 5/3 = 1 each, the first 5%3 = 2 threads one more: a-0 {0,1}, a-1 {2,3}, b-0 {4}.
	rangeOwners := map[legacy.TopicPartition]legacyOwner{
		legacyTP("t", 0): legacyOurs("a-0"), legacyTP("t", 1): legacyOurs("a-0"),
		legacyTP("t", 2): legacyOurs("a-1"), legacyTP("t", 3): legacyOurs("a-1"),
		legacyTP("t", 4): legacyOurs("b-0"),
	}
	running := map[string]legacyMemberSpec{
		"a": legacyRunningSpec(legacySub("t:2"), legacyTP("t", 0), legacyTP("t", 1), legacyTP("t", 2), legacyTP("t", 3)),
		"b": legacyRunningSpec(legacySub("t"), legacyTP("t", 4)),
	}
	five := map[string][]int32{"t": {0, 1, 2, 3, 4}}
	six := map[string][]int32{"t": {0, 1, 2, 3, 4, 5}}

	cases := []struct {
		name string
		in   legacyPlanInput
		// want
		step       string // Reason.Step()
		needed     bool
		notRunning []string
		foreign    []legacy.TopicPartition
		ops        []string
		release    []string // Release, run before waiting for foreign owners
		starts     map[string][]legacy.PartitionOffset
		group      legacy.Assignment // the whole group's assignment, when the case spells it out
		err        error
	}{
		{
			// Steps 1-2 and 3.1: a fresh group; every owner is created as an ephemeral of our
			// session, and with nothing committed each member starts from its own reset
			// sentinel (docs §6 StartRequest: -2 smallest, -1 largest).
			name: "3.1 no ownership registered: claim all, start from the reset sentinels",
			in:   legacyPlanInput{Members: twoMembers, Partitions: five},
			step: "3.1", needed: true, notRunning: []string{"a", "b"},
			ops: []string{
				"create ephemeral /consumers/g/owners/t/0", "create ephemeral /consumers/g/owners/t/1",
				"create ephemeral /consumers/g/owners/t/2", "create ephemeral /consumers/g/owners/t/3",
				"create ephemeral /consumers/g/owners/t/4",
			},
			starts: map[string][]legacy.PartitionOffset{
				"a": {legacyPO("t", 0, -2), legacyPO("t", 1, -2), legacyPO("t", 2, -2), legacyPO("t", 3, -2)},
				"b": {legacyPO("t", 4, -1)},
			},
		},
		{
			// Step 4.2: a partition starts from its committed offset when there is one.
			name: "starting offsets: committed, else the member's reset sentinel",
			in: legacyPlanInput{Members: twoMembers, Partitions: five,
				Committed:   map[legacy.TopicPartition]int64{legacyTP("t", 1): 42, legacyTP("t", 4): 7},
				OffsetNodes: map[legacy.TopicPartition]bool{legacyTP("t", 1): true, legacyTP("t", 4): true}},
			step: "3.1", needed: true, notRunning: []string{"a", "b"},
			starts: map[string][]legacy.PartitionOffset{
				"a": {legacyPO("t", 0, -2), legacyPO("t", 1, 42), legacyPO("t", 2, -2), legacyPO("t", 3, -2)},
				"b": {legacyPO("t", 4, 7)},
			},
		},
		{
			// Step 3.5: the owners in ZooKeeper are the new assignment and every member runs
			// its part: nothing to do, nothing to write.
			name: "3.5 ownership matches and every member runs its part",
			in:   legacyPlanInput{Members: running, Partitions: five, Owners: rangeOwners},
			step: "3.5", needed: false, ops: []string{},
		},
		{
			// docs §8 "Coordinator" 1: a new member always triggers a rebalance, even when
			// its threads get nothing and the ownership is right (3.5).
			name: "3.5 but a new member with an empty part still needs Stop and Start",
			in: legacyPlanInput{Partitions: map[string][]int32{"t": {0}},
				Owners: map[legacy.TopicPartition]legacyOwner{legacyTP("t", 0): legacyOurs("a-0")},
				Members: map[string]legacyMemberSpec{
					"a": legacyRunningSpec(legacySub("t"), legacyTP("t", 0)),
					"b": {Subscription: legacySub("t"), Reset: legacy.ResetLargest},
				}},
			step: "3.5", needed: true, notRunning: []string{"b"}, ops: []string{},
			starts: map[string][]legacy.PartitionOffset{"a": {legacyPO("t", 0, -2)}, "b": {}},
		},
		{
			// After a coordinator restart on the same session the owners are right, but the
			// consumers stopped fetching when they lost their coordinator.
			name: "3.5 but members not started (coordinator restart)",
			in: legacyPlanInput{Members: twoMembers, Partitions: five, Owners: rangeOwners,
				Committed: map[legacy.TopicPartition]int64{legacyTP("t", 0): 5}},
			step: "3.5", needed: true, notRunning: []string{"a", "b"}, ops: []string{},
			starts: map[string][]legacy.PartitionOffset{
				"a": {legacyPO("t", 0, 5), legacyPO("t", 1, -2), legacyPO("t", 2, -2), legacyPO("t", 3, -2)},
				"b": {legacyPO("t", 4, -1)},
			},
		},
		{
			// Step 3.2: a partition was added to the topic; range moves t-3 and t-4 too.
			name: "3.2 a new partition is unowned",
			in: legacyPlanInput{Members: running, Partitions: map[string][]int32{"t": {0, 1, 2, 3, 4, 5}},
				Owners: rangeOwners},
			// 6/3 = 2 each: a-0 {0,1}, a-1 {2,3}, b-0 {4,5}: only t-5 is new, and only b's
			// part changes (both are still stopped and started: step 4.1 stops every member).
			step: "3.2", needed: true, notRunning: []string{"b"},
			ops: []string{"create ephemeral /consumers/g/owners/t/5"},
		},
		{
			// Step 3.3: an owner znode (ours) for a partition that no longer exists.
			name: "3.3 an owned partition no longer exists: its owner is deleted",
			in: legacyPlanInput{Members: running, Partitions: five,
				Owners: legacyMerged(rangeOwners, map[legacy.TopicPartition]legacyOwner{
					legacyTP("gone", 0): {Thread: "a-0", Version: 3, Session: legacyTestSession}})},
			step: "3.3", needed: true, notRunning: nil,
			ops: []string{"delete /consumers/g/owners/gone/0@3"},
		},
		{
			// Step 3.4: member b left; its partition moves to a thread of a. A reassigned
			// owner is deleted (version-checked) and created again, as 0.8 releases and claims.
			name: "3.4 a member left: its partitions are released and claimed by the others",
			in: legacyPlanInput{Partitions: five, Owners: rangeOwners,
				Members: map[string]legacyMemberSpec{"a": running["a"]}},
			step: "3.4", needed: true, notRunning: []string{"a"},
			// a-0 {0,1,2}, a-1 {3,4}
			ops: []string{
				"delete /consumers/g/owners/t/2@0", "delete /consumers/g/owners/t/4@0",
				"create ephemeral /consumers/g/owners/t/2", "create ephemeral /consumers/g/owners/t/4",
			},
		},
		{
			// Step 4, before claiming: another session (a 0.8 consumer) holds an owner znode
			// we must claim. Nothing is written until it is released.
			name: "owner held by another session blocks the claim",
			in: legacyPlanInput{Members: running, Partitions: five,
				Owners: legacyMerged(rangeOwners, map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 4): {Thread: "zk-consumer-0", Version: 0, Session: 0x999}})},
			step: "3.4", needed: true, foreign: []legacy.TopicPartition{legacyTP("t", 4)}, ops: []string{},
		},
		{
			// The same thread id in a znode of another session (a previous coordinator whose
			// session lives on) is still not ours.
			name: "our thread in another session's znode is foreign too",
			in: legacyPlanInput{Members: running, Partitions: five,
				Owners: legacyMerged(rangeOwners, map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 4): {Thread: "b-0", Version: 0, Session: 0x999}})},
			step: "3.5", needed: false, foreign: []legacy.TopicPartition{legacyTP("t", 4)}, ops: []string{},
		},
		{
			// Owners of other sessions outside the new assignment are left alone and do not
			// count in step 3 (otherwise every check would call for a rebalance).
			name: "another session's owner of a topic nobody here subscribes to is ignored",
			in: legacyPlanInput{Members: running, Partitions: five,
				Owners: legacyMerged(rangeOwners, map[legacy.TopicPartition]legacyOwner{
					legacyTP("other", 0): {Thread: "x-0", Session: 0x999}})},
			step: "3.5", needed: false, ops: []string{},
		},
		{
			// docs §8 "Coordinator" 2: the final offsets reported after the StopResponses
			// go into the same Multi, before the owners change; an existing offset znode is
			// set, a missing one created, an unchanged one left alone, and the partitions
			// start from them.
			name: "final offsets are written in the claim's Multi and start the partitions",
			in: legacyPlanInput{Partitions: five, Owners: rangeOwners,
				Members:     map[string]legacyMemberSpec{"a": running["a"]},
				Committed:   map[legacy.TopicPartition]int64{legacyTP("t", 0): 10, legacyTP("t", 4): 70},
				OffsetNodes: map[legacy.TopicPartition]bool{legacyTP("t", 0): true, legacyTP("t", 4): true},
				Final:       map[legacy.TopicPartition]int64{legacyTP("t", 0): 10, legacyTP("t", 3): 33, legacyTP("t", 4): 77}},
			step: "3.4", needed: true, notRunning: []string{"a"},
			ops: []string{
				"create /consumers/g/offsets/t/3", "set /consumers/g/offsets/t/4@-1",
				"delete /consumers/g/owners/t/2@0", "delete /consumers/g/owners/t/4@0",
				"create ephemeral /consumers/g/owners/t/2", "create ephemeral /consumers/g/owners/t/4",
			},
			starts: map[string][]legacy.PartitionOffset{
				"a": {legacyPO("t", 0, 10), legacyPO("t", 1, -2), legacyPO("t", 2, -2), legacyPO("t", 3, 33), legacyPO("t", 4, 77)},
			},
		},
		{
			// Everyone left: nobody subscribes to t any more, so its owners are of partitions
			// that no longer belong to the group's topics (3.3); ours are released, nothing
			// is claimed.
			name: "the last member left: every owner of ours is deleted",
			in:   legacyPlanInput{Partitions: map[string][]int32{}, Owners: rangeOwners},
			step: "3.3", needed: true,
			ops: []string{
				"delete /consumers/g/owners/t/0@0", "delete /consumers/g/owners/t/1@0", "delete /consumers/g/owners/t/2@0",
				"delete /consumers/g/owners/t/3@0", "delete /consumers/g/owners/t/4@0",
			},
		},
		{
			// A subscribed topic missing from /brokers/topics has no partitions: nothing to
			// own, so 3.1 does not fire (legacy.RebalanceNeeded's reading of the seed).
			name: "a missing topic: nothing to own",
			in: legacyPlanInput{Partitions: map[string][]int32{},
				Members: map[string]legacyMemberSpec{"a": legacyRunningSpec(legacySub("missing"))}},
			step: "3.5", needed: false, ops: []string{},
		},
		{
			// Step 2 with roundrobin: 0.8.2 requires equal subscriptions.
			name: "roundrobin with unequal subscriptions fails",
			in: legacyPlanInput{Strategy: legacy.StrategyRoundRobin, Partitions: map[string][]int32{"t": {0}, "u": {0}},
				Members: map[string]legacyMemberSpec{
					"a": {Subscription: legacySub("t", "u")},
					"b": {Subscription: legacySub("t")},
				}},
			err: legacy.ErrUnequalSubscriptions,
		},

		// Federated 0.8: seed step 2 computes the ownership "after reading from ZK the number
		// of partitions and number of threads for each topic" — the threads of every
		// registration in /ids, zk members and members of other coordinators alike, counted
		// exactly as every zk member counts them (ZookeeperConsumerConnector.rebalance,
		// ZCC:659-660, over the AssignmentContext of PA:42-55, which reads every
		// registration). Steps 3 and 4 then concern our members' part only.
		{
			// Range (PA:112-161) sorts every thread of the topic as strings: the zk member's
			// b-0 sits between our a-0 and c-0, and takes the middle run. We create only the
			// owners of our threads.
			name: "others count in step 2: a zk member's thread between ours takes the middle run",
			in: legacyPlanInput{Partitions: six,
				Members: map[string]legacyMemberSpec{
					"a": {Subscription: legacySub("t"), Reset: legacy.ResetSmallest},
					"c": {Subscription: legacySub("t"), Reset: legacy.ResetSmallest},
				},
				Others: map[string]map[string]int{"b": {"t": 1}}},
			step: "3.1", needed: true, notRunning: []string{"a", "c"},
			group: legacy.Assignment{
				legacyTP("t", 0): "a-0", legacyTP("t", 1): "a-0", legacyTP("t", 2): "b-0",
				legacyTP("t", 3): "b-0", legacyTP("t", 4): "c-0", legacyTP("t", 5): "c-0",
			},
			ops: []string{
				"create ephemeral /consumers/g/owners/t/0", "create ephemeral /consumers/g/owners/t/1",
				"create ephemeral /consumers/g/owners/t/4", "create ephemeral /consumers/g/owners/t/5",
			},
			starts: map[string][]legacy.PartitionOffset{
				"a": {legacyPO("t", 0, -2), legacyPO("t", 1, -2)},
				"c": {legacyPO("t", 4, -2), legacyPO("t", 5, -2)},
			},
		},
		{
			// A zk member with two threads: 0.8.2 numbers them <consumerId>-0 and -1
			// (TopicCount.makeConsumerThreadIdsPerTopic, TC:33-37), and "a-0" < "zk-0" <
			// "zk-1" as strings: 6/3 = 2 each.
			name: "another member's threads are numbered <consumerId>-<n> as 0.8.2 numbers them",
			in: legacyPlanInput{Partitions: six,
				Members: map[string]legacyMemberSpec{"a": {Subscription: legacySub("t"), Reset: legacy.ResetLargest}},
				Others:  map[string]map[string]int{"zk": {"t": 2}}},
			step: "3.1", needed: true, notRunning: []string{"a"},
			group: legacy.Assignment{
				legacyTP("t", 0): "a-0", legacyTP("t", 1): "a-0", legacyTP("t", 2): "zk-0",
				legacyTP("t", 3): "zk-0", legacyTP("t", 4): "zk-1", legacyTP("t", 5): "zk-1",
			},
			ops:    []string{"create ephemeral /consumers/g/owners/t/0", "create ephemeral /consumers/g/owners/t/1"},
			starts: map[string][]legacy.PartitionOffset{"a": {legacyPO("t", 0, -1), legacyPO("t", 1, -1)}},
		},
		{
			// Step 3 looks at our part only: the zk member's t-2 is owned by its session, its
			// t-3 not yet (it is still rebalancing), and its topic u is none of ours. None of it
			// is a reason to stop our members, nor a partition to wait for.
			name: "the others' partitions, owned or not yet, are not ours to check, claim or wait for",
			in: legacyPlanInput{Partitions: six,
				Members: map[string]legacyMemberSpec{
					"a": legacyRunningSpec(legacySub("t"), legacyTP("t", 0), legacyTP("t", 1)),
					"c": legacyRunningSpec(legacySub("t"), legacyTP("t", 4), legacyTP("t", 5)),
				},
				Others: map[string]map[string]int{"b": {"t": 1, "u": 1}},
				Owners: map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 0): legacyOurs("a-0"), legacyTP("t", 1): legacyOurs("a-0"),
					legacyTP("t", 2): {Thread: "b-0", Session: 0x999},
					legacyTP("t", 4): legacyOurs("c-0"), legacyTP("t", 5): legacyOurs("c-0"),
					legacyTP("u", 0): {Thread: "b-0", Session: 0x999},
				}},
			step: "3.5", needed: false, ops: []string{},
		},
		{
			// A zk member b joined: it releases its own owners before re-reading the group
			// and claims with NodeExists retry (ZCC:657-684, 769-797). Ours of the partitions
			// it now gets (t-2 from a, t-3 from c) are deleted in the claim's Multi, which runs
			// after every StopResponse: b's claim succeeds only once our members stopped.
			name: "a zk member joined: our owners of its new partitions are deleted after the Stop",
			in: legacyPlanInput{Partitions: six,
				Members: map[string]legacyMemberSpec{
					"a": legacyRunningSpec(legacySub("t"), legacyTP("t", 0), legacyTP("t", 1), legacyTP("t", 2)),
					"c": legacyRunningSpec(legacySub("t"), legacyTP("t", 3), legacyTP("t", 4), legacyTP("t", 5)),
				},
				Others: map[string]map[string]int{"b": {"t": 1}},
				Owners: map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 0): legacyOurs("a-0"), legacyTP("t", 1): legacyOurs("a-0"), legacyTP("t", 2): legacyOurs("a-0"),
					legacyTP("t", 3): legacyOurs("c-0"), legacyTP("t", 4): legacyOurs("c-0"), legacyTP("t", 5): legacyOurs("c-0"),
				}},
			step: "3.4", needed: true, notRunning: []string{"a", "c"},
			ops: []string{"delete /consumers/g/owners/t/2@0", "delete /consumers/g/owners/t/3@0"},
			starts: map[string][]legacy.PartitionOffset{
				"a": {legacyPO("t", 0, -2), legacyPO("t", 1, -2)},
				"c": {legacyPO("t", 4, -2), legacyPO("t", 5, -2)},
			},
		},
		{
			// The zk member b left, but its session still holds t-2 and t-3 (its ephemerals go
			// when the session closes). They are ours now: the claim waits (as 0.8.2's does on
			// NodeExists, ZCC:782-795), and starts them from the offsets b committed before
			// releasing (ZCC:715-722 commits while still owning).
			name: "a zk member left: its partitions are ours once its session lets go, from its commits",
			in: legacyPlanInput{Partitions: six,
				Members: map[string]legacyMemberSpec{
					"a": legacyRunningSpec(legacySub("t"), legacyTP("t", 0), legacyTP("t", 1)),
					"c": legacyRunningSpec(legacySub("t"), legacyTP("t", 4), legacyTP("t", 5)),
				},
				Owners: map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 0): legacyOurs("a-0"), legacyTP("t", 1): legacyOurs("a-0"),
					legacyTP("t", 2): {Thread: "b-0", Session: 0x999}, legacyTP("t", 3): {Thread: "b-0", Session: 0x999},
					legacyTP("t", 4): legacyOurs("c-0"), legacyTP("t", 5): legacyOurs("c-0"),
				},
				Committed:   map[legacy.TopicPartition]int64{legacyTP("t", 2): 200, legacyTP("t", 3): 300},
				OffsetNodes: map[legacy.TopicPartition]bool{legacyTP("t", 2): true, legacyTP("t", 3): true}},
			step: "3.4", needed: true, notRunning: []string{"a", "c"},
			foreign: []legacy.TopicPartition{legacyTP("t", 2), legacyTP("t", 3)}, ops: []string{},
			starts: map[string][]legacy.PartitionOffset{
				"a": {legacyPO("t", 0, -2), legacyPO("t", 1, -2), legacyPO("t", 2, 200)},
				"c": {legacyPO("t", 3, 300), legacyPO("t", 4, -2), legacyPO("t", 5, -2)},
			},
		},
		{
			// The bridge's Kafka members are registered (and own their partitions) in the
			// bridge's session, ours: an owner znode holding a registered other's thread is
			// not ours to delete, whatever its session.
			name: "an owner in our session holding another registration's thread is not ours",
			in: legacyPlanInput{Partitions: map[string][]int32{"t": {0, 1}},
				Members: map[string]legacyMemberSpec{"a": legacyRunningSpec(legacySub("t"), legacyTP("t", 0))},
				Others:  map[string]map[string]int{"k": {"t": 1}},
				Owners: map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 0): legacyOurs("a-0"), legacyTP("t", 1): legacyOurs("k-0"),
				}},
			step: "3.5", needed: false, ops: []string{},
		},
		{
			// ... and one that still holds a partition now ours must be released by its
			// coordinator first.
			name: "an owner in our session holding another registration's thread blocks our claim",
			in: legacyPlanInput{Partitions: map[string][]int32{"t": {0, 1}},
				Members: map[string]legacyMemberSpec{"a": {Subscription: legacySub("t")}},
				Others:  map[string]map[string]int{"k": {"t": 1}},
				Owners: map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 0): legacyOurs("k-0"), legacyTP("t", 1): legacyOurs("k-0"),
				}},
			step: "3.4", needed: true, notRunning: []string{"a"},
			foreign: []legacy.TopicPartition{legacyTP("t", 0)}, ops: []string{},
		},
		{
			// A swap: our t-1 now goes to k, k's t-0 to us. We release t-1 (with its final
			// offset) before waiting for t-0, as a 0.8.2 consumer releases before it claims
			// (ZCC:657 before 684): k's coordinator may be waiting for t-1 to release t-0.
			name: "a swap with another coordinator: ours is released before we wait for theirs",
			in: legacyPlanInput{Partitions: map[string][]int32{"t": {0, 1}},
				Members: map[string]legacyMemberSpec{"a": {Subscription: legacySub("t"), AutoCommit: true}},
				Others:  map[string]map[string]int{"k": {"t": 1}},
				Owners: map[legacy.TopicPartition]legacyOwner{
					legacyTP("t", 0): {Thread: "k-0", Session: 0x999}, legacyTP("t", 1): {Thread: "a-0", Version: 2, Session: legacyTestSession},
				},
				Final: map[legacy.TopicPartition]int64{legacyTP("t", 1): 42}},
			step: "3.4", needed: true, notRunning: []string{"a"},
			foreign: []legacy.TopicPartition{legacyTP("t", 0)}, ops: []string{},
			release: []string{"create /consumers/g/offsets/t/1", "delete /consumers/g/owners/t/1@2"},
		},
		{
			// Roundrobin (PA:57-110) deals every thread of the group, ours and the zk
			// member's, the partitions of all topics in hash order; the assertions common to
			// every case check the split.
			name: "roundrobin deals our threads and the others' alike",
			in: legacyPlanInput{Strategy: legacy.StrategyRoundRobin,
				Partitions: map[string][]int32{"t": {0, 1, 2}, "u": {0, 1, 2, 3}},
				Members:    map[string]legacyMemberSpec{"a": {Subscription: legacySub("t", "u")}},
				Others:     map[string]map[string]int{"z": {"t": 1, "u": 1}}},
			step: "3.1", needed: true, notRunning: []string{"a"},
		},
		{
			// PA:74-83: with roundrobin every consumer must subscribe to the same topics with
			// the same threads; the zk members' rebalances fail on it, and so does ours.
			name: "roundrobin with another member's unequal subscription fails like the zk members'",
			in: legacyPlanInput{Strategy: legacy.StrategyRoundRobin, Partitions: map[string][]int32{"t": {0}},
				Members: map[string]legacyMemberSpec{"a": {Subscription: legacySub("t")}},
				Others:  map[string]map[string]int{"z": {"t": 1, "u": 1}}},
			err: legacy.ErrUnequalSubscriptions,
		},
		{
			// No member of ours left: nothing is computed, so the others' registrations (here
			// unequal under roundrobin) cannot keep us from releasing our owners.
			name: "no member of ours: our owners are released whatever the others' registrations",
			in: legacyPlanInput{Strategy: legacy.StrategyRoundRobin, Partitions: map[string][]int32{}, Owners: rangeOwners,
				Others: map[string]map[string]int{"x": {"t": 1}, "y": {"u": 1}}},
			step: "3.3", needed: true,
			ops: []string{
				"delete /consumers/g/owners/t/0@0", "delete /consumers/g/owners/t/1@0", "delete /consumers/g/owners/t/2@0",
				"delete /consumers/g/owners/t/3@0", "delete /consumers/g/owners/t/4@0",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Group, in.Session = "g", legacyTestSession
			if in.Strategy == "" {
				in.Strategy = legacy.StrategyRange
			}
			p, err := legacyPlanRebalance(in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Whatever the case: the group's assignment is the 0.8.2 assignor's over every
			// registration, ours and the others' (seed step 2; PA:42-55 builds the
			// AssignmentContext from all of /ids), and ours is the part of our members'
			// threads.
			ain, threadOf := legacyAssignInput(in.Members, in.Others, in.Partitions)
			want := legacy.Assignment{}
			if len(in.Members) > 0 {
				want, _ = legacy.Assign(in.Strategy, ain)
			}
			if !maps.Equal(p.Group, want) {
				t.Errorf("group assignment %v, want the assignor's %v", p.Group, want)
			}
			ours := legacy.Assignment{}
			for tp, th := range want {
				if _, ok := threadOf[th]; ok {
					ours[tp] = th
				}
			}
			if !maps.Equal(p.Assignment, ours) {
				t.Errorf("assignment %v, want our members' part %v", p.Assignment, ours)
			}
			if tc.group != nil && !maps.Equal(p.Group, tc.group) {
				t.Errorf("group assignment %v, want %v", p.Group, tc.group)
			}
			if got := p.Reason.Step(); got != tc.step {
				t.Errorf("reason %q (step %s), want step %s", p.Reason, got, tc.step)
			}
			if p.Needed() != tc.needed {
				t.Errorf("Needed() = %v, want %v (%s)", p.Needed(), tc.needed, p.Why())
			}
			if !slices.Equal(p.NotRunning, tc.notRunning) {
				t.Errorf("NotRunning %v, want %v", p.NotRunning, tc.notRunning)
			}
			if !slices.Equal(p.Foreign, tc.foreign) {
				t.Errorf("Foreign %v, want %v", p.Foreign, tc.foreign)
			}
			if tc.ops != nil {
				if got := legacyOpStrings(p.Ops); !slices.Equal(got, tc.ops) {
					t.Errorf("ops:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.ops, "\n  "))
				}
			}
			if got := legacyOpStrings(p.Release); !slices.Equal(got, tc.release) {
				t.Errorf("release ops:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.release, "\n  "))
			}
			for id, want := range tc.starts {
				if got := p.Starts[id]; !slices.Equal(got, want) {
					t.Errorf("Starts[%s] = %v, want %v", id, got, want)
				}
			}
			// Every member gets a StartRequest, and the parts are the assignment, disjoint.
			seen := map[legacy.TopicPartition]string{}
			for id := range in.Members {
				parts, ok := p.Starts[id]
				if !ok {
					t.Errorf("no StartRequest for member %s", id)
				}
				for _, po := range parts {
					tp := legacyTP(po.Topic, po.Partition)
					if prev, dup := seen[tp]; dup {
						t.Errorf("%v started on %s and %s", tp, prev, id)
					}
					seen[tp] = id
					if p.Owner[tp] != id || legacy.ConsumerOf(p.Assignment[tp]) != id {
						t.Errorf("%v started on %s, assigned to %s", tp, id, p.Assignment[tp])
					}
				}
			}
			if len(seen) != len(p.Assignment) {
				t.Errorf("started %d partitions, assigned %d", len(seen), len(p.Assignment))
			}
		})
	}
}

func legacyMerged(a, b map[legacy.TopicPartition]legacyOwner) map[legacy.TopicPartition]legacyOwner {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// TestLegacyResolveOthers: the other registrations as the plan counts them, read as 0.8.2 reads
// every registration for the AssignmentContext (PA:51-52 through ZkUtils.getConsumersPerTopic):
// static subscriptions as registered (TopicCount.constructTopicCount, TC:59-98), wildcard ones
// resolved against the topics present (WildcardTopicCount.getConsumerThreadIdsPerTopic:
// white_list keeps the matches, black_list the rest, internal topics excluded), our own members
// left out. Unreadable registrations are left out and reported (a zk member fails on them).
func TestLegacyResolveOthers(t *testing.T) {
	reg := func(pattern string, sub map[string]int) zkstate.Consumer {
		return zkstate.Consumer{Registration: zkstate.ConsumerRegistration{Version: 1, Pattern: pattern, Subscription: sub}}
	}
	consumers := map[string]zkstate.Consumer{
		"mine":  reg(zkstate.PatternStatic, map[string]int{"t1": 1}),
		"zk":    reg(zkstate.PatternStatic, map[string]int{"t1": 2, "missing": 1}),
		"white": reg(zkstate.PatternWhiteList, map[string]int{"t.*": 2}),
		"black": reg(zkstate.PatternBlackList, map[string]int{"t.*": 1}),
		"comma": reg(zkstate.PatternWhiteList, map[string]int{" t1, u ": 1}),
		"bad":   reg(zkstate.PatternWhiteList, map[string]int{"a)|(b": 1}),
	}
	problems := []zkstate.Problem{
		{Path: "/consumers/g/ids/garbage", Err: zkstate.ErrMalformed},
		{Path: "/consumers/g/ids/mine", Err: zkstate.ErrMalformed}, // ours: not a registration we count
		{Path: "/consumers/g/offsets/t1/0", Err: zkstate.ErrMalformed},
	}
	topics := []string{"__consumer_offsets", "t1", "t2", "u"}
	others, skipped := legacyResolveOthers("g", consumers, problems, topics, func(id string) bool { return id == "mine" })
	want := map[string]map[string]int{
		"zk":    {"t1": 2, "missing": 1}, // static: as registered, present or not
		"white": {"t1": 2, "t2": 2},
		"black": {"u": 1},          // __consumer_offsets is internal
		"comma": {"t1": 1, "u": 1}, // TopicFilter: ',' is '|', spaces dropped
	}
	if !maps.EqualFunc(others, want, maps.Equal) {
		t.Errorf("others = %v, want %v", others, want)
	}
	var paths []string
	for _, pr := range skipped {
		paths = append(paths, pr.Path)
		if !errors.Is(pr.Err, zkstate.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", pr.Path, pr.Err)
		}
	}
	if want := []string{"/consumers/g/ids/bad", "/consumers/g/ids/garbage"}; !slices.Equal(paths, want) {
		t.Errorf("skipped %v, want %v", paths, want)
	}
}

// TestLegacyCheckPing: issue 4 item 4 — ping offsets are accepted only for partitions the
// member owns in the current assignment; the rest are refused and counted.
func TestLegacyCheckPing(t *testing.T) {
	owner := map[legacy.TopicPartition]string{legacyTP("t", 0): "a", legacyTP("t", 1): "a", legacyTP("t", 2): "b"}
	committed := map[legacy.TopicPartition]int64{legacyTP("t", 0): 10, legacyTP("t", 2): 50}
	cases := []struct {
		name       string
		member     string
		autoCommit bool
		offsets    []legacy.PartitionOffset
		accepted   map[legacy.TopicPartition]int64
		unchanged  int
		refused    []string // Why of each refusal
	}{
		{
			name:   "owned partitions are accepted; an unchanged offset needs no write",
			member: "a", autoCommit: true,
			offsets:   []legacy.PartitionOffset{legacyPO("t", 0, 10), legacyPO("t", 1, 5)},
			accepted:  map[legacy.TopicPartition]int64{legacyTP("t", 1): 5},
			unchanged: 1,
		},
		{
			// The stale-member case: a's report for b's partition must not move b's offset,
			// backwards (40 < 50) or at all.
			name:   "a partition owned by another member is refused",
			member: "a", autoCommit: true,
			offsets:  []legacy.PartitionOffset{legacyPO("t", 2, 40), legacyPO("t", 0, 11)},
			accepted: map[legacy.TopicPartition]int64{legacyTP("t", 0): 11},
			refused:  []string{"partition owned by b"},
		},
		{
			name:   "a partition nobody owns is refused",
			member: "a", autoCommit: true,
			offsets: []legacy.PartitionOffset{legacyPO("t", 9, 1), legacyPO("nope", 0, 1)},
			refused: []string{"partition not assigned", "partition not assigned"},
		},
		{
			// docs §6 PingResponse: the next offset to consume, never a sentinel.
			name:   "negative offsets are refused",
			member: "a", autoCommit: true,
			offsets: []legacy.PartitionOffset{legacyPO("t", 1, -2)},
			refused: []string{"negative offset"},
		},
		{
			name:   "a partition listed twice: the first counts",
			member: "a", autoCommit: true,
			offsets:  []legacy.PartitionOffset{legacyPO("t", 1, 6), legacyPO("t", 1, 7)},
			accepted: map[legacy.TopicPartition]int64{legacyTP("t", 1): 6},
			refused:  []string{"partition listed twice"},
		},
		{
			// "Handling PingRequest" 1.1: without auto_commit there are no offsets to take.
			name:   "a member without auto_commit commits nothing",
			member: "a", autoCommit: false,
			offsets: []legacy.PartitionOffset{legacyPO("t", 1, 6)},
			refused: []string{"member registered without auto_commit"},
		},
		{
			name:   "a member that owns nothing reports nothing",
			member: "c", autoCommit: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := legacyCheckPing(tc.member, tc.autoCommit, owner, committed,
				legacy.PingResponse{HasOffsets: true, Offsets: tc.offsets})
			if !maps.Equal(c.Accepted, tc.accepted) {
				t.Errorf("accepted %v, want %v", c.Accepted, tc.accepted)
			}
			if c.Unchanged != tc.unchanged {
				t.Errorf("unchanged %d, want %d", c.Unchanged, tc.unchanged)
			}
			if !slices.Equal(c.Why, tc.refused) || len(c.Refused) != len(tc.refused) {
				t.Errorf("refused %v %v, want %v", c.Refused, c.Why, tc.refused)
			}
		})
	}
}

// TestLegacyOffsetOps: offsets are written in the 0.8 format, set when the znode exists and
// created (with parents) when it does not.
func TestLegacyOffsetOps(t *testing.T) {
	ops := legacyOffsetOps("g", map[legacy.TopicPartition]int64{legacyTP("t", 1): 5, legacyTP("a", 0): 1},
		map[legacy.TopicPartition]bool{legacyTP("t", 1): true})
	var got []string
	for _, op := range ops {
		got = append(got, op.String())
	}
	want := []string{"create /consumers/g/offsets/a/0", "set /consumers/g/offsets/t/1@-1"}
	if !slices.Equal(got, want) {
		t.Errorf("ops %v, want %v", got, want)
	}
}

// Seed 001 step 3 decided from memory (legacyGroup.certainNeed): the rebalance is necessary
// whatever the owner znodes hold when a member of ours has not been started (it must get a
// StartRequest) or a partition of ours belongs to a member that left (3.4); otherwise, or before
// the group was ever read, or when the assignor would fail, only a read can tell.
func TestLegacyCertainNeed(t *testing.T) {
	member := func(started bool, topics ...string) *legacyMember {
		return &legacyMember{reg: legacy.RegisterRequest{Subscription: legacySub(topics...)}, started: started}
	}
	for _, tc := range []struct {
		name     string
		strategy legacy.Strategy
		members  map[string]*legacyMember
		owner    map[legacy.TopicPartition]string
		others   map[string]map[string]int
		want     string // a substring of the reason; "" for none
	}{
		{"never read", legacy.StrategyRange, map[string]*legacyMember{"a": member(false, "t")}, nil, nil, ""},
		{"every member running", legacy.StrategyRange,
			map[string]*legacyMember{"a": member(true, "t")},
			map[legacy.TopicPartition]string{legacyTP("t", 0): "a", legacyTP("t", 1): "a"},
			map[string]map[string]int{}, ""},
		{"a member registered", legacy.StrategyRange,
			map[string]*legacyMember{"a": member(true, "t"), "b": member(false, "t")},
			map[legacy.TopicPartition]string{legacyTP("t", 0): "a", legacyTP("t", 1): "a"},
			map[string]map[string]int{"zk": {"t": 1}}, "member b not started"},
		{"a member with partitions left", legacy.StrategyRange,
			map[string]*legacyMember{"a": member(true, "t")},
			map[legacy.TopicPartition]string{legacyTP("t", 0): "a", legacyTP("t", 1): "b"},
			map[string]map[string]int{}, "3.4 partition t-1 owned by b"},
		{"the assignor fails", legacy.StrategyRoundRobin,
			map[string]*legacyMember{"a": member(false, "t")},
			nil, map[string]map[string]int{"zk": {"u": 1}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &legacyGroup{
				c:          &LegacyCoordinator{cfg: LegacyConfig{Strategy: tc.strategy}},
				name:       "g",
				members:    tc.members,
				owner:      tc.owner,
				lastOthers: tc.others,
				topics: map[string]*legacyTopic{
					"t": {partitions: []int32{0, 1}},
					"u": {partitions: []int32{0, 1}},
				},
			}
			got := g.certainNeed()
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("certainNeed() = %q, want %q", got, tc.want)
			}
		})
	}
}
