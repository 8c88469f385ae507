package migrate_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// The census tells kinds apart: a registration without a hosted znode is a zk member, the
// hosted znode names the kind of the others, the group record adds Kafka members no
// registration mirrors (counted once), and a group without a mode record gets the default a
// bridge would persist.
func TestIntegration_CensusCountsKinds(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	seed(t, s, "g", zkstate.ModeMixed,
		member{"zk", "z1"}, member{"zk", "z2"}, member{zkstate.KindLegacy, "l1"}, member{zkstate.KindKafka, "k1"},
		member{"record", "member-k1"}, // the record's entry for k1, mirrored in /ids: counted once
		member{"record", "k-only"})
	// A hosted member without a registration (a finalized group's mirror is off).
	h := zkstate.HostedMember{Kind: zkstate.KindKafka, Node: 9001, Member: "m-off"}
	if err := s.Create(ctx, zkstate.HostedMemberPath(root, "g", "k-off"), h.Encode(), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := migrate.ReadCensus(ctx, s, root, "g", migrate.CensusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != zkstate.ModeMixed || !c.Recorded || !c.Exists {
		t.Errorf("mode %s recorded %v exists %v", c.Mode, c.Recorded, c.Exists)
	}
	if got := fmt.Sprint(c.MembersOf(zkstate.KindKafka), c.MembersOf(zkstate.KindLegacy), c.MembersOf(zkstate.KindZK)); got != "[k-off k-only k1] [l1] [z1 z2]" {
		t.Errorf("members by kind %s", got)
	}

	// Record members count while the bridge holding the group runs; once it is gone they are
	// departed: nobody serves them (every bridge stopped before a handoff).
	if err := s.Create(ctx, zkstate.BridgeGroupPath(root, "g")+"/epoch", []byte(`{"version":1,"node_id":7,"acquired":"1"}`), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err = migrate.ReadCensus(ctx, s, root, "g", migrate.CensusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.MembersOf(zkstate.KindKafka), len(c.Departed)); got != "[k-off k1] 1" || c.Departed[0].ID != "k-only" {
		t.Errorf("holder gone: kafka members and departed %s %+v", got, c.Departed)
	}
	if err := s.Create(ctx, root+"/bridges/7", nil, zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	if c, _ = migrate.ReadCensus(ctx, s, root, "g", migrate.CensusOptions{}); c.Count(zkstate.KindKafka) != 3 || len(c.Departed) != 0 {
		t.Errorf("holder alive: %+v", c)
	}

	// Defaults of groups without a mode record.
	seed(t, s, "old", "", member{"zk", "z1"})
	seed(t, s, "served", "", member{"record", "k"})
	if err := s.Create(ctx, zkstate.GroupPath("fresh"), nil, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	for g, want := range map[string]zkstate.Mode{"old": zkstate.ModeLegacy, "served": zkstate.ModeKafka, "fresh": zkstate.ModeKafka} {
		c, err := migrate.ReadCensus(ctx, s, root, g, migrate.CensusOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Mode != want || c.Recorded || c.DefaultWhy == "" || c.ModeVersion != zkstate.NoModeVersion {
			t.Errorf("%s: mode %s recorded %v why %q version %d; want default %s", g, c.Mode, c.Recorded, c.DefaultWhy, c.ModeVersion, want)
		}
	}
	groups, err := migrate.ListGroups(ctx, s, root)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(groups, ","); got != "fresh,g,old,served" {
		t.Errorf("ListGroups = %s", got)
	}
}

// The mirror is current when the 0.8 offsets hold every commit the bridge recorded; a record
// newer than its 0.8 znode is a commit the mirror missed; a finalized group's mirror is off.
func TestIntegration_CensusMirror(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	seed(t, s, "g", zkstate.ModeKafka)
	own := func(off int64) []byte { return zkstate.OwnOffset{Offset: off, LeaderEpoch: -1}.Encode() }
	p := zkstate.CreateOptions{Parents: true}
	// Partition 0: committed by the bridge to both in one multi. Partition 1: a 0.8 consumer
	// only. Partition 2: the bridge's record only (the mirror missed it).
	if err := s.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath("g", "t", 0), zkstate.FormatOffset(5), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(root, "g", "t", 0), own(5), p),
		zkstate.CreateOp(zkstate.OffsetPath("g", "t", 1), zkstate.FormatOffset(7), p)); err != nil {
		t.Fatal(err)
	}
	c, err := migrate.ReadCensus(ctx, s, root, "g", migrate.CensusOptions{Mirror: true})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Mirror.Current() || c.Mirror.Partitions != 2 {
		t.Errorf("mirror %+v, want current over 2 partitions", *c.Mirror)
	}
	if err := s.Create(ctx, zkstate.OwnOffsetPath(root, "g", "t", 2), own(9), p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, zkstate.OwnOffsetPath(root, "g", "t", 0), own(6), -1); err != nil {
		t.Fatal(err)
	}
	c, err = migrate.ReadCensus(ctx, s, root, "g", migrate.CensusOptions{Mirror: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Mirror.Current() || fmt.Sprint(c.Mirror.Stale) != "[{t 0} {t 2}]" {
		t.Errorf("mirror %+v, want stale t/0 and t/2", *c.Mirror)
	}
}

// A multi-step target goes step by step, each step checked on a fresh census: legacy → kafka
// with a zk member stops at mixed, blocked; once the member leaves, a re-run finishes.
func TestIntegration_ApplyStepByStep(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	seed(t, s, "g", zkstate.ModeLegacy, member{"zk", "z1"})

	res, err := migrate.Apply(ctx, s, root, []string{"g"}, applyOpts(zkstate.ModeKafka))
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Status != migrate.StatusBlocked || r.Mode != zkstate.ModeMixed || len(r.Applied) != 1 || !strings.Contains(r.Reason, "1 zk member remains (z1)") {
		t.Fatalf("first run: %+v", r)
	}
	removeMember(t, s, "g", "z1")
	res, err = migrate.Apply(ctx, s, root, []string{"g"}, applyOpts(zkstate.ModeKafka))
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Status != migrate.StatusApplied || r.From != zkstate.ModeMixed || r.Mode != zkstate.ModeKafka {
		t.Fatalf("second run: %+v", r)
	}
	if got := strings.Join(steps(t, s, "g"), " "); got != "→legacy legacy→mixed mixed→kafka" {
		t.Errorf("transitions %s", got)
	}
	trs, _ := zkstate.ReadTransitions(ctx, s, root, "g")
	if last := trs[len(trs)-1]; last.By != "test@host" || last.AtMs == 0 {
		t.Errorf("transition not recorded with who and when: %+v", last)
	}
}

// --wait polls until the blocking members leave.
func TestIntegration_ApplyWaitsForMembersToLeave(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	seed(t, s, "g", zkstate.ModeMixed, member{zkstate.KindLegacy, "l1"}, member{zkstate.KindKafka, "k1"})
	go func() {
		time.Sleep(300 * time.Millisecond)
		removeMember(t, s, "g", "l1")
	}()
	opts := applyOpts(zkstate.ModeKafka)
	opts.Wait = 20 * time.Second
	res, err := migrate.Apply(ctx, s, root, []string{"g"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Status != migrate.StatusApplied || r.Waited < 200*time.Millisecond || r.Waited > 10*time.Second {
		t.Fatalf("%+v", r)
	}

	// And gives up after the wait, saying what blocks.
	seed(t, s, "h", zkstate.ModeMixed, member{"zk", "z9"})
	opts.Wait = 150 * time.Millisecond
	start := time.Now()
	res, _ = migrate.Apply(ctx, s, root, []string{"h"}, opts)
	if r := res[0]; r.Status != migrate.StatusBlocked || !strings.Contains(r.Reason, "z9") || time.Since(start) > 5*time.Second {
		t.Fatalf("%+v after %v", r, time.Since(start))
	}
}

// Rollback to legacy is blocked by Kafka members unless forced; the forced transition says so.
func TestIntegration_RollbackForce(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	seed(t, s, "g", zkstate.ModeKafka, member{zkstate.KindKafka, "k1"}, member{"record", "k2"})
	opts := applyOpts(zkstate.ModeLegacy)
	opts.Rollback = true
	res, _ := migrate.Apply(ctx, s, root, []string{"g"}, opts)
	if r := res[0]; r.Status != migrate.StatusBlocked || r.Mode != zkstate.ModeMixed || !strings.Contains(r.Reason, "2 kafka members remain") {
		t.Fatalf("unforced: %+v", r)
	}
	opts.Force = true
	res, _ = migrate.Apply(ctx, s, root, []string{"g"}, opts)
	if r := res[0]; r.Status != migrate.StatusApplied || r.Mode != zkstate.ModeLegacy || len(r.Blockers) != 1 || !r.Blockers[0].Forced {
		t.Fatalf("forced: %+v", r)
	}
	trs, _ := zkstate.ReadTransitions(ctx, s, root, "g")
	if last := trs[len(trs)-1]; last.To != zkstate.ModeLegacy || !strings.Contains(last.Reason, "2 kafka members (k1, k2): forced: the running bridges will rebalance them out") {
		t.Errorf("forced transition's reason %q", last.Reason)
	}
}

// Rollback after finalize: refused with the reason, nothing changed, forced or not.
func TestIntegration_RollbackAfterFinalizeRefused(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	seed(t, s, "g", zkstate.ModeLegacy)
	res, err := migrate.Apply(ctx, s, root, []string{"g"}, applyOpts(zkstate.ModeFinalized))
	if err != nil || res[0].Status != migrate.StatusApplied || len(res[0].Applied) != 3 {
		t.Fatalf("finalize: %v %+v", err, res)
	}
	_, before := modeOf(t, s, "g")
	trBefore := steps(t, s, "g")
	for _, force := range []bool{false, true} {
		for _, to := range []zkstate.Mode{zkstate.ModeKafka, zkstate.ModeMixed, zkstate.ModeLegacy} {
			opts := applyOpts(to)
			opts.Rollback, opts.Force = true, force
			res, err := migrate.Apply(ctx, s, root, []string{"g"}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if r := res[0]; r.Status != migrate.StatusRefused || !strings.Contains(r.Reason, "finalized is terminal") || len(r.Applied) != 0 {
				t.Errorf("rollback to %s force=%v: %+v", to, force, r)
			}
		}
	}
	mode, after := modeOf(t, s, "g")
	if mode != zkstate.ModeFinalized || after != before || !slices.Equal(steps(t, s, "g"), trBefore) {
		t.Errorf("something changed: mode %s version %d→%d transitions %v→%v", mode, before, after, trBefore, steps(t, s, "g"))
	}
}

// Two appliers with separate ZooKeeper sessions over the same 20 groups: every group ends at the
// target once, every transition is recorded exactly once, and the two together applied each
// step exactly once (the loser of each race saw the winner's step and went on from it, or found
// the target reached).
func TestIntegration_ConcurrentApply(t *testing.T) {
	connect := zktest.Connect(t)
	a, b := zktest.OpenStore(t, connect), zktest.OpenStore(t, connect)
	ctx := testCtx(t)
	var groups []string
	for i := range 20 {
		g := fmt.Sprintf("g%02d", i)
		groups = append(groups, g)
		seed(t, a, g, zkstate.ModeLegacy)
	}
	var results [2][]migrate.Result
	var wg sync.WaitGroup
	for i, s := range []*zkstate.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := applyOpts(zkstate.ModeKafka)
			opts.Who = fmt.Sprintf("applier-%d", i)
			opts.Parallel = 4
			var err error
			results[i], err = migrate.Apply(ctx, s, root, groups, opts) // same order: the most races
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	applied := map[string][]string{}
	for i, rs := range results {
		n, at := 0, 0
		for _, r := range rs {
			n += len(r.Applied)
			if r.Status == migrate.StatusAtTarget {
				at++
			}
		}
		t.Logf("applier %d recorded %d steps; found %d groups already at the target", i, n, at)
		for _, r := range rs {
			switch r.Status {
			case migrate.StatusApplied, migrate.StatusAtTarget:
			default:
				t.Errorf("%s: %s (%s)", r.Group, r.Status, r.Reason)
			}
			for _, st := range r.Applied {
				applied[r.Group] = append(applied[r.Group], st.String())
			}
		}
	}
	for _, g := range groups {
		if mode, _ := modeOf(t, a, g); mode != zkstate.ModeKafka {
			t.Errorf("%s ended %s", g, mode)
		}
		if got := strings.Join(steps(t, a, g), " "); got != "→legacy legacy→mixed mixed→kafka" {
			t.Errorf("%s: transitions %s", g, got)
		}
		got := applied[g]
		slices.Sort(got)
		if strings.Join(got, ",") != "legacy → mixed,mixed → kafka" {
			t.Errorf("%s: the appliers together applied %v", g, got)
		}
	}
}

// apply over 50 groups, cancelled half way, then re-run: all 50 migrated, none twice.
func TestIntegration_ApplyCancelledAndResumed(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	var groups []string
	var ops []zkstate.Op
	for i := range 50 {
		g := fmt.Sprintf("g%02d", i)
		groups = append(groups, g)
		rec := zkstate.ModeRecord{Version: 1, Mode: zkstate.ModeLegacy, UpdatedBy: "seed"}
		ops = append(ops, zkstate.CreateOp(zkstate.ModePath(root, g), rec.Encode(), zkstate.CreateOptions{Parents: true}))
	}
	if err := s.Multi(ctx, ops...); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var done atomic.Int32
	opts := applyOpts(zkstate.ModeMixed)
	opts.Batch, opts.Parallel = 10, 3
	opts.OnResult = func(r migrate.Result) {
		if r.Status == migrate.StatusApplied && done.Add(1) == 25 {
			cancel()
		}
	}
	first, err := migrate.Apply(cctx, s, root, groups, opts)
	if err == nil {
		t.Fatal("cancelled apply returned no error")
	}
	counts := map[migrate.Status]int{}
	for _, r := range first {
		counts[r.Status]++
	}
	if counts[migrate.StatusApplied] < 25 || counts[migrate.StatusApplied] > 30 || counts[migrate.StatusNotStarted] < 15 {
		t.Errorf("first run: %v", counts)
	}
	opts.OnResult = nil
	second, err := migrate.Apply(ctx, s, root, groups, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range second {
		switch {
		case r.Status == migrate.StatusAtTarget && first[i].Status == migrate.StatusApplied:
		case r.Status == migrate.StatusApplied && first[i].Status != migrate.StatusApplied:
		case r.Status == migrate.StatusAtTarget && first[i].Status == migrate.StatusInterrupted:
			// the step in flight at the cancel landed after all
		default:
			t.Errorf("%s: first %s, then %s (%s)", r.Group, first[i].Status, r.Status, r.Reason)
		}
	}
	for _, g := range groups {
		if got := strings.Join(steps(t, s, g), " "); got != "legacy→mixed" {
			t.Errorf("%s: transitions %s", g, got)
		}
	}
}

// Batches: the pause is taken between batches (and reported), and a dry run writes nothing.
func TestIntegration_ApplyBatchesAndDryRun(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	var groups []string
	for i := range 5 {
		g := fmt.Sprintf("g%d", i)
		groups = append(groups, g)
		seed(t, s, g, zkstate.ModeLegacy)
	}
	seed(t, s, "blocked", zkstate.ModeMixed, member{"zk", "z"})
	opts := applyOpts(zkstate.ModeKafka)
	opts.DryRun = true
	res, err := migrate.Apply(ctx, s, root, append(groups, "blocked"), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res[:5] {
		if r.Status != migrate.StatusReady || len(r.Steps) != 2 || len(r.Applied) != 0 {
			t.Errorf("dry run %s: %+v", r.Group, r)
		}
	}
	if r := res[5]; r.Status != migrate.StatusBlocked || len(r.Blockers) != 1 {
		t.Errorf("dry run blocked: %+v", r)
	}
	for _, g := range groups {
		if mode, _ := modeOf(t, s, g); mode != zkstate.ModeLegacy {
			t.Fatalf("dry run wrote %s", g)
		}
	}
	opts = applyOpts(zkstate.ModeMixed)
	opts.Batch, opts.Pause = 2, 50*time.Millisecond
	var pauses []int
	opts.OnPause = func(done int, _ time.Duration) { pauses = append(pauses, done) }
	if _, err := migrate.Apply(ctx, s, root, groups, opts); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pauses) != "[2 4]" {
		t.Errorf("pauses after %v groups, want [2 4]", pauses)
	}
}

// Named groups must exist; --match matches whole names.
func TestIntegration_Select(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := testCtx(t)
	for _, g := range []string{"billing-eu", "billing-us", "xbilling-eu"} {
		seed(t, s, g, zkstate.ModeLegacy)
	}
	got, err := migrate.Select(ctx, s, root, migrate.Selector{Match: mustRE(t, "billing-.*")})
	if err != nil || strings.Join(got, ",") != "billing-eu,billing-us" {
		t.Errorf("match: %v %v", got, err)
	}
	if _, err := migrate.Select(ctx, s, root, migrate.Selector{Groups: []string{"billing-eu", "nope"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown group: %v", err)
	}
	if _, err := migrate.Select(ctx, s, root, migrate.Selector{All: true, Groups: []string{"x"}}); err == nil {
		t.Error("two selectors accepted")
	}
}

func mustRE(t testing.TB, expr string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	return re
}
