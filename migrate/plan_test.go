package migrate_test

import (
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// census builds a census in mode with members given as "kind:id".
func census(mode zkstate.Mode, members ...string) migrate.Census {
	c := migrate.Census{Group: "g", Exists: true, Mode: mode, Recorded: true}
	for _, m := range members {
		kind, id, _ := strings.Cut(m, ":")
		c.Members = append(c.Members, migrate.Member{ID: id, Kind: kind, Source: "ids"})
	}
	return c
}

// TestPlan is the table of issue 6 item 1: the steps to each target and the preconditions that
// block them.
func TestPlan(t *testing.T) {
	const (
		L = zkstate.ModeLegacy
		M = zkstate.ModeMixed
		K = zkstate.ModeKafka
		F = zkstate.ModeFinalized
	)
	fwd := func(to zkstate.Mode) migrate.Request { return migrate.Request{Target: to} }
	back := func(to zkstate.Mode) migrate.Request { return migrate.Request{Target: to, Rollback: true} }
	force := func(to zkstate.Mode) migrate.Request { return migrate.Request{Target: to, Rollback: true, Force: true} }

	for _, tc := range []struct {
		name    string
		c       migrate.Census
		req     migrate.Request
		status  migrate.Status
		steps   string // "legacy→mixed,mixed→kafka"; a blocked step ends in "!", a forced one in "+"
		reason  string // substring of GroupPlan.Reason
		members []string
	}{
		// legacy → mixed: always.
		{name: "legacy to mixed with every kind", c: census(L, "zk:z1", "legacy:l1", "kafka:k1"), req: fwd(M),
			status: migrate.StatusReady, steps: "legacy→mixed"},
		{name: "legacy to mixed, no record yet", c: migrate.Census{Group: "g", Mode: L, DefaultWhy: "ids"}, req: fwd(M),
			status: migrate.StatusReady, steps: "legacy→mixed"},

		// mixed → kafka: only without legacy and zk members.
		{name: "mixed to kafka, kafka members only", c: census(M, "kafka:k1", "kafka:k2"), req: fwd(K),
			status: migrate.StatusReady, steps: "mixed→kafka"},
		{name: "mixed to kafka, a zk member remains", c: census(M, "kafka:k1", "zk:z1"), req: fwd(K),
			status: migrate.StatusBlocked, steps: "mixed→kafka!", reason: "mixed → kafka: 1 zk member remains (z1)", members: []string{"z1"}},
		{name: "mixed to kafka, legacy and zk members remain", c: census(M, "legacy:l1", "zk:z1", "zk:z2"), req: fwd(K),
			status: migrate.StatusBlocked, steps: "mixed→kafka!", reason: "1 legacy member and 2 zk members remain (l1, z1, z2)", members: []string{"l1", "z1", "z2"}},
		{name: "mixed to kafka, many members are listed short", c: census(M, "zk:a", "zk:b", "zk:c", "zk:d", "zk:e"), req: fwd(K),
			status: migrate.StatusBlocked, steps: "mixed→kafka!", reason: "(a, b, c and 2 more)"},

		// Multi-step targets go step by step, each step checked.
		{name: "legacy to kafka, empty group", c: census(L), req: fwd(K),
			status: migrate.StatusReady, steps: "legacy→mixed,mixed→kafka"},
		{name: "legacy to kafka blocked at the second step", c: census(L, "zk:z1"), req: fwd(K),
			status: migrate.StatusBlocked, steps: "legacy→mixed,mixed→kafka!", reason: "mixed → kafka"},
		{name: "legacy to finalized", c: census(L, "kafka:k1"), req: fwd(F),
			status: migrate.StatusReady, steps: "legacy→mixed,mixed→kafka,kafka→finalized"},

		// kafka → finalized: no legacy or zk member (the mirror stops).
		{name: "kafka to finalized", c: census(K, "kafka:k1"), req: fwd(F),
			status: migrate.StatusReady, steps: "kafka→finalized"},
		{name: "kafka to finalized with a zk member", c: census(K, "kafka:k1", "zk:z1"), req: fwd(F),
			status: migrate.StatusBlocked, steps: "kafka→finalized!", reason: "finalizing stops the ZooKeeper mirror"},

		// Nothing to do.
		{name: "at target", c: census(K), req: fwd(K), status: migrate.StatusAtTarget},
		{name: "migrate never moves back", c: census(K, "kafka:k1"), req: fwd(M), status: migrate.StatusPast, reason: "use zkbridge rollback"},
		{name: "finalized is past everything", c: census(F), req: fwd(L), status: migrate.StatusPast},

		// Rollbacks.
		{name: "kafka to mixed with kafka members", c: census(K, "kafka:k1"), req: back(M),
			status: migrate.StatusReady, steps: "kafka→mixed"},
		{name: "mixed to legacy without kafka members", c: census(M, "zk:z1", "legacy:l1"), req: back(L),
			status: migrate.StatusReady, steps: "mixed→legacy"},
		{name: "mixed to legacy with kafka members", c: census(M, "kafka:k1", "kafka:k2", "zk:z1"), req: back(L),
			status: migrate.StatusBlocked, steps: "mixed→legacy!", reason: "2 kafka members remain (k1, k2)", members: []string{"k1", "k2"}},
		{name: "mixed to legacy forced", c: census(M, "kafka:k1"), req: force(L),
			status: migrate.StatusReady, steps: "mixed→legacy+"},
		{name: "kafka to legacy: the second step is checked", c: census(K, "kafka:k1"), req: back(L),
			status: migrate.StatusBlocked, steps: "kafka→mixed,mixed→legacy!", reason: "mixed → legacy"},
		{name: "kafka to legacy forced", c: census(K, "kafka:k1"), req: force(L),
			status: migrate.StatusReady, steps: "kafka→mixed,mixed→legacy+"},
		{name: "rollback at target", c: census(L), req: back(L), status: migrate.StatusAtTarget},
		{name: "rollback never moves forward", c: census(L), req: back(M), status: migrate.StatusRefused, reason: "use zkbridge migrate"},

		// Finalized is terminal, and the refusal says why.
		{name: "rollback of a finalized group", c: census(F), req: back(M),
			status: migrate.StatusRefused, reason: "finalized is terminal: the ZooKeeper mirror is no longer written"},
		{name: "forced rollback of a finalized group", c: census(F), req: force(L),
			status: migrate.StatusRefused, reason: "a rollback would lose them"},

		{name: "unknown target", c: census(L), req: fwd("kraft"), status: migrate.StatusRefused, reason: "unknown target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := migrate.Plan(tc.c, tc.req)
			if p.Status != tc.status {
				t.Errorf("status %s, want %s (reason %q)", p.Status, tc.status, p.Reason)
			}
			if got := stepsString(p.Steps); got != tc.steps {
				t.Errorf("steps %q, want %q", got, tc.steps)
			}
			if !strings.Contains(p.Reason, tc.reason) {
				t.Errorf("reason %q lacks %q", p.Reason, tc.reason)
			}
			if tc.members != nil {
				i := p.FirstBlocked()
				if i < 0 {
					t.Fatalf("no blocked step")
				}
				if got := strings.Join(p.Steps[i].Blockers[0].Members, ","); got != strings.Join(tc.members, ",") {
					t.Errorf("blocking members %s, want %v", got, tc.members)
				}
			}
			if p.Status == migrate.StatusBlocked && p.Reason == "" {
				t.Error("a blocked plan must say why")
			}
		})
	}
}

func stepsString(steps []migrate.Step) string {
	var parts []string
	for _, s := range steps {
		x := string(s.From) + "→" + string(s.To)
		switch {
		case s.Blocked():
			x += "!"
		case len(s.Blockers) > 0:
			x += "+"
		}
		parts = append(parts, x)
	}
	return strings.Join(parts, ",")
}

// Every pair of modes gives a plan whose steps are each a valid transition and chain from the
// group's mode to the target (a property over the whole table of modes, both directions).
func TestPlanStepsChain(t *testing.T) {
	for _, from := range zkstate.Modes {
		for _, to := range zkstate.Modes {
			for _, rollback := range []bool{false, true} {
				p := migrate.Plan(census(from), migrate.Request{Target: to, Rollback: rollback, Force: true})
				cur := from
				for _, s := range p.Steps {
					if s.From != cur {
						t.Fatalf("%s→%s rollback=%v: step %s does not start at %s", from, to, rollback, s, cur)
					}
					if err := zkstate.ValidTransition(s.From, s.To); err != nil {
						t.Fatalf("%s→%s: step %s: %v", from, to, s, err)
					}
					cur = s.To
				}
				if p.Status == migrate.StatusReady && cur != to {
					t.Errorf("%s→%s rollback=%v: ready plan ends at %s", from, to, rollback, cur)
				}
				if p.Status != migrate.StatusReady && len(p.Steps) > 0 {
					t.Errorf("%s→%s rollback=%v: %s plan with steps", from, to, rollback, p.Status)
				}
			}
		}
	}
}

func TestCommittedOffsets(t *testing.T) {
	tp := func(p int32) zkstate.TopicPartition { return zkstate.TopicPartition{Topic: "t", Partition: p} }
	own := func(off int64) zkstate.OwnOffset {
		return zkstate.OwnOffset{Offset: off, LeaderEpoch: 3, Metadata: "m"}
	}
	states := []migrate.OffsetState{
		// 0 only in ZooKeeper (a zk member's commit).
		{TopicPartition: tp(0), ZKExists: true, HasZK: true, ZK: 10, ZKZxid: 5},
		// 1 committed by the bridge in one multi (same zxid).
		{TopicPartition: tp(1), ZKExists: true, HasZK: true, ZK: 20, ZKZxid: 6, OwnExists: true, HasOwn: true, Own: own(20), OwnZxid: 6},
		// 2: the bridge committed after finalization (own newer, 0.8 not written).
		{TopicPartition: tp(2), ZKExists: true, HasZK: true, ZK: 30, ZKZxid: 6, OwnExists: true, HasOwn: true, Own: own(35), OwnZxid: 12},
		// 3: a 0.8 consumer committed after finalization (ignored once finalized).
		{TopicPartition: tp(3), ZKExists: true, HasZK: true, ZK: 99, ZKZxid: 15, OwnExists: true, HasOwn: true, Own: own(40), OwnZxid: 6},
		// 4: a zk member committed after the bridge, before finalization (it wins).
		{TopicPartition: tp(4), ZKExists: true, HasZK: true, ZK: 50, ZKZxid: 8, OwnExists: true, HasOwn: true, Own: own(45), OwnZxid: 6},
		// 5: only the bridge's record.
		{TopicPartition: tp(5), OwnExists: true, HasOwn: true, Own: own(60), OwnZxid: 13},
	}
	const finalZxid = 10
	got := map[int32]int64{}
	for _, o := range migrate.Committed(states, true, finalZxid) {
		got[o.Partition] = o.Offset
	}
	want := map[int32]int64{0: 10, 1: 20, 2: 35, 3: 40, 4: 50, 5: 60}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("finalized: partition %d = %d, want %d", p, got[p], w)
		}
	}
	got = map[int32]int64{}
	for _, o := range migrate.Committed(states, false, 0) {
		got[o.Partition] = o.Offset
		if o.Partition == 1 && (o.LeaderEpoch != 3 || o.Metadata != "m") {
			t.Errorf("not finalized: partition 1 lost the record's epoch and metadata: %+v", o)
		}
	}
	want = map[int32]int64{0: 10, 1: 20, 2: 30, 3: 99, 4: 50}
	if len(got) != len(want) {
		t.Errorf("not finalized: %v, want %v", got, want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("not finalized: partition %d = %d, want %d", p, got[p], w)
		}
	}
}

func TestDiff(t *testing.T) {
	committed := []migrate.Offset{{Topic: "t", Partition: 0, Offset: 10}, {Topic: "t", Partition: 1, Offset: 20}, {Topic: "t", Partition: 2, Offset: 30}}
	incoming := []migrate.Offset{{Topic: "t", Partition: 2, Offset: 25}, {Topic: "t", Partition: 0, Offset: 15}, {Topic: "t", Partition: 1, Offset: 20}, {Topic: "u", Partition: 0, Offset: 1}}
	var got []string
	for _, c := range migrate.Diff(committed, incoming) {
		got = append(got, c.Topic+"/"+string(rune('0'+c.Partition))+":"+c.Change)
	}
	want := "t/0:forward t/1:unchanged t/2:backward u/0:new"
	if strings.Join(got, " ") != want {
		t.Errorf("diff %v, want %s", got, want)
	}
}
