package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/zkstate"
)

func TestInterspersedMovesPositionalsAfterFlags(t *testing.T) {
	app := newApp(&env{})
	for _, tc := range []struct{ in, want string }{
		{"zkbridge groups describe billing --zk h:1", "zkbridge groups describe --zk h:1 -- billing"},
		{"zkbridge --log-level debug groups describe billing -o json", "zkbridge --log-level debug groups describe -o json -- billing"},
		{"zkbridge groups list --zk=h:1", "zkbridge groups list --zk=h:1"},
		{"zkbridge groups describe --help", "zkbridge groups describe --help"},
		{"zkbridge offsets export g --format csv --zk h", "zkbridge offsets export --format csv --zk h -- g"},
		{"zkbridge nosuch x", "zkbridge -- nosuch x"},
		{"zkbridge groups describe -- -weird-group", "zkbridge groups describe -- -weird-group"},
		{"zkbridge legacy-consumer --auto-commit --group g x", "zkbridge legacy-consumer --auto-commit --group g -- x"},
	} {
		got := strings.Join(interspersed(app, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("interspersed(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestGroupNameMayStartWithDash(t *testing.T) {
	// Kafka allows group names such as "-x"; after "--" they are positionals, not flags.
	var got string
	app := &cli.App{Commands: []*cli.Command{{Name: "d", Action: func(c *cli.Context) error { got = c.Args().First(); return nil }}}}
	if err := app.Run(interspersed(app, []string{"p", "d", "--", "-x"})); err != nil || got != "-x" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestBuildGroupView(t *testing.T) {
	tp := func(t string, p int32) zkstate.TopicPartition { return zkstate.TopicPartition{Topic: t, Partition: p} }
	snap := &zkstate.GroupSnapshot{
		Group: "g",
		Consumers: map[string]zkstate.Consumer{
			"g_a-1-aaaaaaaa": {ID: "g_a-1-aaaaaaaa", Registration: zkstate.ConsumerRegistration{Version: 1, Pattern: "static", Subscription: map[string]int{"t": 2}}},
			"g_w-1-bbbbbbbb": {ID: "g_w-1-bbbbbbbb", EphemeralOwner: 77, Registration: zkstate.ConsumerRegistration{Version: 1, Pattern: "white_list", Subscription: map[string]int{"x.*": 1}}},
		},
		Owners: map[zkstate.TopicPartition]string{
			tp("t", 0): "g_a-1-aaaaaaaa-0",
			tp("t", 2): "g_a-1-aaaaaaaa-1",
			tp("t", 1): "g_gone-1-cccccccc-0", // its consumer is not registered: a stale owner
		},
		Offsets:       map[zkstate.TopicPartition]int64{tp("t", 0): 10, tp("t", 3): 7},
		Partitions:    map[string][]int32{"t": {0, 1, 2, 3}, "x1": {0}},
		MissingTopics: []string{"zz"},
		Problems:      []zkstate.Problem{{Path: "/consumers/g/offsets/t/9", Err: errors.New("bad")}},
	}
	v := buildGroupView(snap, fixedKinds{sessions: map[int64]bool{77: true}}) // session 77 is a running bridge's
	if got := v.Members[0].Owned; !reflect.DeepEqual(got, []string{"t/0", "t/2"}) {
		t.Errorf("owned = %v", got)
	}
	if v.Members[0].Kind != kindZK || v.Members[1].Kind != kindBridge {
		t.Errorf("kinds = %s, %s; want zk, and bridge for the member held by a bridge's session without a hosted znode", v.Members[0].Kind, v.Members[1].Kind)
	}
	if v.Members[0].Threads != 2 || v.Members[1].Pattern != "white_list" {
		t.Errorf("members = %+v", v.Members)
	}
	// t/1's owner is stale, so it counts as owned by nobody live; x1 has no static subscriber.
	if !reflect.DeepEqual(v.Unowned, []string{"t/3"}) {
		t.Errorf("unowned = %v, want [t/3] (t/1 has a stale owner znode)", v.Unowned)
	}
	if len(v.StaleOwners) != 1 || !strings.Contains(v.StaleOwners[0], "t/1 owned by g_gone-1-cccccccc-0") {
		t.Errorf("stale = %v", v.StaleOwners)
	}
	if v.Partitions[0].Offset == nil || *v.Partitions[0].Offset != 10 || v.Partitions[1].Offset != nil {
		t.Errorf("offsets = %+v", v.Partitions[:2])
	}
	if len(v.Problems) != 1 || len(v.MissingTopics) != 1 {
		t.Errorf("problems %v missing %v", v.Problems, v.MissingTopics)
	}
}

// fixedKinds is a memberKinds for tests.
type fixedKinds struct {
	records  map[string]hostedRecord
	problems []zkstate.Problem
	sessions map[int64]bool
}

func (k fixedKinds) hosted(string) (map[string]hostedRecord, []zkstate.Problem) {
	return k.records, k.problems
}
func (k fixedKinds) bridge(session int64) bool { return k.sessions[session] }

// A member's kind comes from its hosted-member znode (zkstate/hosted.go) when one held by the
// registration's own session describes it; a bridge-held registration without one is "bridge",
// any other a zk member.
func TestBuildGroupViewKinds(t *testing.T) {
	reg := func(id string, session int64) zkstate.Consumer {
		return zkstate.Consumer{ID: id, EphemeralOwner: session,
			Registration: zkstate.ConsumerRegistration{Version: 1, Pattern: "static", Subscription: map[string]int{"t": 1}}}
	}
	snap := &zkstate.GroupSnapshot{
		Group: "g",
		Consumers: map[string]zkstate.Consumer{
			"g_kafka":   reg("g_kafka", 77),
			"g_legacy":  reg("g_legacy", 77),
			"g_old":     reg("g_old", 77), // a bridge that writes no hosted znodes
			"g_stale":   reg("g_stale", 55),
			"g_zk":      reg("g_zk", 55),
			"g_fixture": reg("g_fixture", 0), // persistent registration and hosted znode
		},
		Partitions: map[string][]int32{"t": {0}},
	}
	kinds := fixedKinds{
		sessions: map[int64]bool{77: true},
		records: map[string]hostedRecord{
			"g_kafka":   {HostedMember: zkstate.HostedMember{Kind: zkstate.KindKafka, Node: 9000, Member: "kgo-1", Instance: "i-1"}, Session: 77},
			"g_legacy":  {HostedMember: zkstate.HostedMember{Kind: zkstate.KindLegacy, Node: 9001, Member: "g_legacy"}, Session: 77},
			"g_stale":   {HostedMember: zkstate.HostedMember{Kind: zkstate.KindLegacy, Node: 9001}, Session: 77}, // not the registration's session
			"g_fixture": {HostedMember: zkstate.HostedMember{Kind: zkstate.KindLegacy, Node: 1, Member: "g_fixture"}},
			"g_gone":    {HostedMember: zkstate.HostedMember{Kind: zkstate.KindKafka, Node: 9000}, Session: 77}, // no registration
		},
		problems: []zkstate.Problem{{Path: "/zkbridge/groups/g/hosted/g_bad", Err: zkstate.ErrMalformed}},
	}
	v := buildGroupView(snap, kinds)
	got := map[string]memberView{}
	for _, m := range v.Members {
		got[m.ID] = m
	}
	if len(got) != 6 {
		t.Fatalf("members %v, want the 6 registrations (a hosted znode is not a member)", v.Members)
	}
	for id, want := range map[string]string{"g_kafka": kindKafka, "g_legacy": kindLegacy, "g_old": kindBridge,
		"g_stale": kindZK, "g_zk": kindZK, "g_fixture": kindLegacy} {
		if got[id].Kind != want {
			t.Errorf("%s: kind %s, want %s", id, got[id].Kind, want)
		}
	}
	if m := got["g_kafka"]; m.Node == nil || *m.Node != 9000 || m.MemberID != "kgo-1" || m.Instance != "i-1" {
		t.Errorf("kafka member: node %v, member id %q, instance %q", m.Node, m.MemberID, m.Instance)
	}
	if m := got["g_legacy"]; m.Node == nil || *m.Node != 9001 || m.MemberID != "" {
		t.Errorf("legacy member: node %v, member id %q (want none: the consumer id is its name)", m.Node, m.MemberID)
	}
	if m := got["g_zk"]; m.Node != nil || m.MemberID != "" {
		t.Errorf("zk member: node %v, member id %q, want none", m.Node, m.MemberID)
	}
	if len(v.Problems) != 1 || v.Problems[0].Path != "/zkbridge/groups/g/hosted/g_bad" {
		t.Errorf("problems %v, want the malformed hosted znode", v.Problems)
	}
}

func TestCompactRanges(t *testing.T) {
	got := compactRanges([]string{"a/0", "a/1", "a/2", "a/5", "b/1", "b/2"})
	if got != "a/0-2, a/5, b/1-2" {
		t.Errorf("got %q", got)
	}
}
