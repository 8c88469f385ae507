package legacy

// Seed 001, coordinator section, "rebalance (group)" step 3: after step 2
// computed the new ownership, decide from the ownership registered in
// ZooKeeper whether a rebalance (steps 4-5: Stop, Start, wait) is needed.
//
//	3.1 If there is no registered ownership info in ZK, rebalance is necessary
//	3.2 If some partitions are not owned by any threads, rebalance is necessary
//	3.3 If some partitions registered in the ownership map do not exist any
//	    longer, rebalance is necessary
//	3.4 If ownership map do not match with the new one, rebalance is necessary
//	3.5 Otherwise rebalance is not necessary

import (
	"fmt"
	"slices"
	"strings"
)

// Reason says why a rebalance is needed, naming the seed-001 step that
// decided it, e.g. "3.2 unowned partition orders-3"; ReasonNone (step 3.5)
// when none is.
type Reason string

// ReasonNone means no rebalance is necessary (seed 001 step 3.5).
const ReasonNone Reason = ""

// Needed reports whether r calls for a rebalance.
func (r Reason) Needed() bool { return r != ReasonNone }

// Step returns the seed-001 step that produced r: "3.1" to "3.4", or "3.5"
// for ReasonNone. Handy as a metric label.
func (r Reason) Step() string {
	if r == ReasonNone {
		return "3.5"
	}
	step, _, _ := strings.Cut(string(r), " ")
	return step
}

func (r Reason) String() string {
	if r == ReasonNone {
		return "3.5 rebalance not necessary"
	}
	return string(r)
}

// RebalanceNeeded applies seed 001's rebalance step 3. current is the
// ownership registered in ZooKeeper (partition -> owning thread id, as read
// from /consumers/<group>/owners; an empty owner counts as no owner), next
// the assignment computed in step 2, partitions the partitions that exist
// now of the group's topics (the topics at least one member subscribes to).
// The checks run in seed order and the first that fires is reported; within
// one check partitions are visited by topic, then partition, so the answer
// is deterministic.
//
// One reading of the seed is ours: step 3.1 fires only when there is
// something to own (some partition exists or next assigns one). A group
// whose topics have no partitions at all has no ownership to register, and
// 3.1 taken literally would call for a rebalance after every rebalance.
func RebalanceNeeded(current map[TopicPartition]string, next Assignment, partitions map[string][]int32) Reason {
	owned := make(map[TopicPartition]string, len(current))
	for tp, owner := range current {
		if owner != "" {
			owned[tp] = owner
		}
	}
	exists := map[TopicPartition]bool{}
	for topic, ids := range partitions {
		for _, p := range ids {
			exists[TopicPartition{topic, p}] = true
		}
	}

	// 3.1 no registered ownership info.
	if len(owned) == 0 && (len(exists) > 0 || len(next) > 0) {
		return "3.1 no partition ownership registered"
	}
	// 3.2 a partition owned by no thread.
	for _, tp := range sortedKeys(exists) {
		if _, ok := owned[tp]; !ok {
			return Reason(fmt.Sprintf("3.2 unowned partition %s", tp))
		}
	}
	// 3.3 an owned partition that no longer exists.
	for _, tp := range sortedKeys(owned) {
		if !exists[tp] {
			return Reason(fmt.Sprintf("3.3 owned partition %s no longer exists (owner %s)", tp, owned[tp]))
		}
	}
	// 3.4 ownership differs from the new assignment, either way round.
	all := map[TopicPartition]bool{}
	for tp := range owned {
		all[tp] = true
	}
	for tp := range next {
		all[tp] = true
	}
	for _, tp := range sortedKeys(all) {
		was, isOwned := owned[tp]
		will, isNext := next[tp]
		switch {
		case isOwned && !isNext:
			return Reason(fmt.Sprintf("3.4 partition %s owned by %s, unassigned in the new assignment", tp, was))
		case !isOwned && isNext:
			return Reason(fmt.Sprintf("3.4 partition %s unowned, assigned to %s in the new assignment", tp, will))
		case was != will:
			return Reason(fmt.Sprintf("3.4 partition %s owned by %s, assigned to %s in the new assignment", tp, was, will))
		}
	}
	// 3.5
	return ReasonNone
}

func sortedKeys[V any](m map[TopicPartition]V) []TopicPartition {
	out := make([]TopicPartition, 0, len(m))
	for tp := range m {
		out = append(out, tp)
	}
	slices.SortFunc(out, compareTopicPartitions)
	return out
}
