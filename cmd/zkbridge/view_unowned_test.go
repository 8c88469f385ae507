package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
)

// A group that no member consumes (all gone, offsets left behind) has every partition without
// an owner unowned: nobody consumes them. It said "0 unowned", because only the topics a member
// subscribes to were counted and there is no member.
func TestBuildGroupViewWithoutMembersCountsEveryPartitionUnowned(t *testing.T) {
	tp := func(p int32) zkstate.TopicPartition { return zkstate.TopicPartition{Topic: "orders", Partition: p} }
	snap := &zkstate.GroupSnapshot{
		Group:      "idle",
		Consumers:  map[string]zkstate.Consumer{},
		Owners:     map[zkstate.TopicPartition]string{},
		Offsets:    map[zkstate.TopicPartition]int64{tp(0): 10, tp(1): 11, tp(2): 12, tp(3): 13},
		Partitions: map[string][]int32{"orders": {0, 1, 2, 3}},
	}
	v := buildGroupView(snap, fixedKinds{})
	if want := []string{"orders/0", "orders/1", "orders/2", "orders/3"}; !reflect.DeepEqual(v.Unowned, want) {
		t.Errorf("unowned = %v, want %v", v.Unowned, want)
	}
	var out strings.Builder
	if err := (tablePrinter{}).group(&out, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Group idle: 0 members, 4 partitions, 4 unowned") ||
		!strings.Contains(out.String(), "Unowned partitions: orders/0-3") {
		t.Errorf("describe of a group without members:\n%s", out.String())
	}
}

// The same through a real ZooKeeper and the CLI: the demo's topic orders with a group that
// only has offsets.
func TestIntegration_DescribeGroupWithoutMembers(t *testing.T) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	for p := range int32(4) {
		if err := s.Create(t.Context(), zkstate.OffsetPath("idle", "payments", p), zkstate.FormatOffset(int64(100+p)), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI(t, "groups", "describe", "idle", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("describe: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "Group idle: 0 members, 4 partitions, 4 unowned") {
		t.Errorf("describe of a group without members:\n%s", r.stdout)
	}
}
