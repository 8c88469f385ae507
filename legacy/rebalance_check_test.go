package legacy

import (
	"maps"
	"testing"
)

// TestRebalanceNeeded walks seed 001's rebalance step 3, one row per
// sub-step.
func TestRebalanceNeeded(t *testing.T) {
	tp := func(topic string, p int32) TopicPartition { return TopicPartition{topic, p} }
	orders := map[string][]int32{"orders": {0, 1, 2, 3}}
	// The new assignment of step 2: A-0 {0,1}, B-0 {2,3}.
	next := Assignment{tp("orders", 0): "A-0", tp("orders", 1): "A-0", tp("orders", 2): "B-0", tp("orders", 3): "B-0"}
	same := map[TopicPartition]string{tp("orders", 0): "A-0", tp("orders", 1): "A-0", tp("orders", 2): "B-0", tp("orders", 3): "B-0"}
	with := func(edit func(map[TopicPartition]string)) map[TopicPartition]string {
		m := maps.Clone(same)
		edit(m)
		return m
	}

	tests := []struct {
		name       string
		current    map[TopicPartition]string
		next       Assignment
		partitions map[string][]int32
		want       Reason
	}{
		{
			name:    "3.1 no ownership registered in ZK",
			current: nil, next: next, partitions: orders,
			want: "3.1 no partition ownership registered",
		},
		{
			name:    "3.1 owner znodes that are all empty count as none",
			current: map[TopicPartition]string{tp("orders", 0): ""}, next: next, partitions: orders,
			want: "3.1 no partition ownership registered",
		},
		{
			name:    "3.2 a partition owned by no thread",
			current: with(func(m map[TopicPartition]string) { delete(m, tp("orders", 3)) }), next: next, partitions: orders,
			want: "3.2 unowned partition orders-3",
		},
		{
			name:    "3.2 a new partition was added to the topic",
			current: same, next: next, partitions: map[string][]int32{"orders": {0, 1, 2, 3, 4}},
			want: "3.2 unowned partition orders-4",
		},
		{
			name:    "3.2 is checked before 3.3",
			current: with(func(m map[TopicPartition]string) { delete(m, tp("orders", 1)); m[tp("orders", 9)] = "A-0" }), next: next, partitions: orders,
			want: "3.2 unowned partition orders-1",
		},
		{
			name:    "3.3 an owned partition no longer exists",
			current: with(func(m map[TopicPartition]string) { m[tp("orders", 7)] = "B-0" }), next: next, partitions: orders,
			want: "3.3 owned partition orders-7 no longer exists (owner B-0)",
		},
		{
			name:    "3.3 an owned topic was deleted or dropped from the group",
			current: with(func(m map[TopicPartition]string) { m[tp("audit", 0)] = "A-0" }), next: next, partitions: orders,
			want: "3.3 owned partition audit-0 no longer exists (owner A-0)",
		},
		{
			name:    "3.4 ownership differs from the new assignment",
			current: with(func(m map[TopicPartition]string) { m[tp("orders", 1)] = "B-0" }), next: next, partitions: orders,
			want: "3.4 partition orders-1 owned by B-0, assigned to A-0 in the new assignment",
		},
		{
			name:    "3.4 an owned partition is unassigned in the new assignment",
			current: same, next: Assignment{tp("orders", 0): "A-0", tp("orders", 1): "A-0", tp("orders", 2): "B-0"}, partitions: orders,
			want: "3.4 partition orders-3 owned by B-0, unassigned in the new assignment",
		},
		{
			name:    "3.4 the new assignment names a partition missing from partitions",
			current: same, next: func() Assignment { a := maps.Clone(next); a[tp("orders", 5)] = "A-0"; return a }(), partitions: orders,
			want: "3.4 partition orders-5 unowned, assigned to A-0 in the new assignment",
		},
		{
			name:    "3.5 ownership matches the new assignment",
			current: same, next: next, partitions: orders,
			want: ReasonNone,
		},
		{
			name:    "3.5 nothing to own and nothing owned (our reading of 3.1)",
			current: nil, next: Assignment{}, partitions: map[string][]int32{"orders": nil},
			want: ReasonNone,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RebalanceNeeded(tt.current, tt.next, tt.partitions)
			if got != tt.want {
				t.Fatalf("RebalanceNeeded = %q, want %q", got, tt.want)
			}
			if got.Needed() != (tt.want != ReasonNone) {
				t.Errorf("Needed() = %v", got.Needed())
			}
			if step := tt.name[:3]; got.Step() != step {
				t.Errorf("Step() = %q, want %q", got.Step(), step)
			}
		})
	}
	if s := ReasonNone.String(); s != "3.5 rebalance not necessary" {
		t.Errorf("ReasonNone.String() = %q", s)
	}
}

// TestRebalanceNeededAfterAssign runs the check against the assignors: once
// the computed assignment is registered as ownership, no rebalance is needed;
// when a consumer joins, one is.
func TestRebalanceNeededAfterAssign(t *testing.T) {
	for _, c := range assignCases {
		a, err := Assign(c.strategy, c.in)
		if err != nil {
			continue
		}
		subscribed := map[string][]int32{}
		for topic := range threadsPerTopic(c.in) {
			subscribed[topic] = c.in.Partitions[topic]
		}
		if r := RebalanceNeeded(a, a, subscribed); r != ReasonNone {
			t.Errorf("%s: registered == computed, got %v", c.name, r)
		}
	}
	in := caseNamed(t, "range_issue_3x2").in
	before := Range(in)
	in.Consumers = maps.Clone(in.Consumers) // leave the shared case alone
	in.Consumers["D"] = sub("D", "orders", 2)
	after := Range(in)
	if r := RebalanceNeeded(before, after, in.Partitions); r.Step() != "3.4" {
		t.Errorf("consumer D joined: got %v, want a 3.4 reason", r)
	}
}
