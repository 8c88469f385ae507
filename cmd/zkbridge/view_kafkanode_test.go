package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// kafka-node 3.0.1's HighLevelConsumer writes its bare consumer id into the owner znodes (its
// only thread) and creates its ids znode empty before filling it (lib/zookeeper.js). describe
// shows its partitions as owned by it, not as "owners whose consumer is not registered", and a
// registration in progress as a member registering, not as a problem.
func TestBuildGroupViewReadsKafkaNodeOwners(t *testing.T) {
	tp := func(p int32) zkstate.TopicPartition { return zkstate.TopicPartition{Topic: "orders", Partition: p} }
	const kn, late = "g_5b3f0c1e-2f6d-4e8a-9b1c-0123456789ab", "g_0f0e0d0c-1b2a-4c3d-8e9f-a0b1c2d3e4f5"
	snap := &zkstate.GroupSnapshot{
		Group: "g",
		Consumers: map[string]zkstate.Consumer{
			kn: {ID: kn, Registration: zkstate.ConsumerRegistration{Version: 1, Pattern: "white_list", Subscription: map[string]int{"orders": 1}}},
			late: {ID: late, Registering: true,
				Registration: zkstate.ConsumerRegistration{Version: 1, Pattern: "static", Subscription: map[string]int{}}},
		},
		Owners:     map[zkstate.TopicPartition]string{tp(0): kn, tp(1): kn},
		Partitions: map[string][]int32{"orders": {0, 1}},
	}
	v := buildGroupView(snap, fixedKinds{})
	if len(v.StaleOwners) != 0 || len(v.Unowned) != 0 {
		t.Errorf("stale owners %v, unowned %v; want none", v.StaleOwners, v.Unowned)
	}
	byID := map[string]memberView{}
	for _, m := range v.Members {
		byID[m.ID] = m
	}
	if got := byID[kn].Owned; !reflect.DeepEqual(got, []string{"orders/0", "orders/1"}) {
		t.Errorf("kafka-node member owns %v", got)
	}
	if m := byID[late]; !m.Registering || m.Threads != 0 || m.Pattern != "" {
		t.Errorf("member registering: %+v", m)
	}
	var out strings.Builder
	if err := (tablePrinter{}).group(&out, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(registering)") || strings.Contains(out.String(), "not registered") {
		t.Errorf("describe:\n%s", out.String())
	}
}

// The same group through a real ZooKeeper: describe, the migrate census (a kafka-node consumer
// is a zk member, registering or not) and a plan to mixed (not blocked by it).
func TestIntegration_KafkaNodeGroupInDescribeAndMigrate(t *testing.T) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	const g, kn, late = "kn", "kn_5b3f0c1e-2f6d-4e8a-9b1c-0123456789ab", "kn_0f0e0d0c-1b2a-4c3d-8e9f-a0b1c2d3e4f5"
	eph := zkstate.CreateOptions{Parents: true, Ephemeral: true}
	if err := s.Create(ctx, zkstate.IDPath(g, kn), []byte(`{"version":1,"subscription":{"payments": 1},"pattern":"white_list","timestamp":"1764763200000"}`), eph); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, zkstate.IDPath(g, late), nil, eph); err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		if err := s.Create(ctx, zkstate.OwnerPath(g, "payments", p), []byte(kn), eph); err != nil {
			t.Fatal(err)
		}
	}

	r := runCLI(t, "groups", "describe", g, "--zk", zkc, "--output", "json")
	if r.code != exitOK {
		t.Fatalf("describe: exit %d: %s", r.code, r.stderr)
	}
	var v groupView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Members) != 2 || len(v.StaleOwners) != 0 || len(v.Problems) != 0 || len(v.Unowned) != 0 {
		t.Fatalf("describe: %d members, stale %v, problems %v, unowned %v\n%s", len(v.Members), v.StaleOwners, v.Problems, v.Unowned, r.stdout)
	}
	for _, m := range v.Members {
		if m.ID == kn && len(m.Owned) != 4 || m.ID == late && !m.Registering {
			t.Errorf("member %+v", m)
		}
	}

	c, err := migrate.ReadCensus(ctx, s, testRoot, g, migrate.CensusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Count(zkstate.KindZK) != 2 || len(c.Problems) != 0 {
		t.Errorf("census: %d zk members, problems %v; want both kafka-node consumers", c.Count(zkstate.KindZK), c.Problems)
	}
	r = runCLI(t, "migrate", "plan", "--group", g, "--to", "mixed", "--zk", zkc)
	if r.code != exitOK {
		t.Errorf("plan to mixed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
