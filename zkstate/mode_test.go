package zkstate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

const modeRoot = "/zkbridge"

// ValidTransition follows issue 6 item 1: "legacy → mixed (always); mixed → kafka ...;
// kafka → finalized (stops the ZooKeeper mirror; from then on rollback is refused with a message
// that says why); rollback kafka → mixed and mixed → legacy". Member preconditions are the
// migrate command's; here only the steps themselves.
func TestValidTransition(t *testing.T) {
	L, M, K, F := zkstate.ModeLegacy, zkstate.ModeMixed, zkstate.ModeKafka, zkstate.ModeFinalized
	tests := []struct {
		from, to zkstate.Mode
		ok       bool
		why      string // part of the refusal's message
	}{
		// "move groups one at a time from legacy to mixed to kafka to finalized"
		{L, M, true, ""},
		{M, K, true, ""},
		{K, F, true, ""},
		// "rollback kafka → mixed and mixed → legacy"
		{K, M, true, ""},
		{M, L, true, ""},
		// one step at a time
		{L, K, false, "skips a step: migrate"},
		{L, F, false, "skips a step: migrate"},
		{M, F, false, "skips a step: migrate"},
		{K, L, false, "skips a step: roll back"},
		// "kafka → finalized ...: from then on rollback is refused with a message that says why"
		{F, K, false, "finalized is terminal"},
		{F, M, false, "finalized is terminal"},
		{F, L, false, "finalized is terminal"},
		// no-ops and nonsense
		{L, L, false, "already in mode legacy"},
		{F, F, false, "already in mode finalized"},
		{"", M, false, "unknown mode"},
		{L, "kafak", false, "unknown mode"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s→%s", tc.from, tc.to), func(t *testing.T) {
			err := zkstate.ValidTransition(tc.from, tc.to)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidTransition = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, zkstate.ErrInvalidTransition) {
				t.Fatalf("ValidTransition = %v, want ErrInvalidTransition", err)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Errorf("ValidTransition = %q, want it to say %q", err, tc.why)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"legacy", "Mixed", " kafka ", "FINALIZED"} {
		if m, err := zkstate.ParseMode(s); err != nil || !m.Valid() {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := zkstate.ParseMode("zk"); err == nil {
		t.Error("ParseMode(zk) succeeded")
	}
}

// The record's JSON is the documented one: timestamps as strings of milliseconds, like Kafka's.
func TestModeRecordFormat(t *testing.T) {
	rec := zkstate.ModeRecord{Mode: zkstate.ModeKafka, UpdatedBy: "ops@box", UpdatedAtMs: 1700000000123, From: zkstate.ModeMixed, Seq: 3}
	want := `{"version":1,"mode":"kafka","updated_by":"ops@box","updated_at_ms":"1700000000123","from":"mixed","seq":3}`
	if got := string(rec.Encode()); got != want {
		t.Fatalf("Encode = %s\nwant     %s", got, want)
	}
	back, err := zkstate.ParseModeRecord([]byte(want))
	if err != nil {
		t.Fatal(err)
	}
	rec.Version = 1
	if back != rec {
		t.Fatalf("ParseModeRecord = %+v, want %+v", back, rec)
	}
	tr := zkstate.Transition{Seq: 1, To: zkstate.ModeLegacy, By: "zkbridge-9000@h", AtMs: 5, Reason: "why"}
	if got := string(tr.Encode()); got != `{"version":1,"seq":1,"from":"","to":"legacy","by":"zkbridge-9000@h","at_ms":"5","reason":"why"}` {
		t.Fatalf("Transition.Encode = %s", got)
	}
	for _, bad := range []string{``, `[]`, `{"version":1,"mode":"zk"}`, `{"version":0,"mode":"kafka"}`,
		`{"version":1,"mode":"kafka","updated_at_ms":"soon"}`, `{"version":1,"mode":"kafka","from":"x"}`} {
		if _, err := zkstate.ParseModeRecord([]byte(bad)); !errors.Is(err, zkstate.ErrMalformed) {
			t.Errorf("ParseModeRecord(%s) = %v, want ErrMalformed", bad, err)
		}
	}
}

// Issue 5 item 1: "A group with no mode yet is legacy when /consumers/<g> already holds ids,
// owners or offsets, else kafka."
func TestIntegration_DefaultMode(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	mk := func(p string, data string) {
		t.Helper()
		if err := s.Create(ctx, p, []byte(data), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	mk("/consumers/empty-dirs/ids", "")
	mk("/consumers/empty-dirs/owners/t", "") // left behind by released owners
	mk("/consumers/empty-dirs/offsets/t", "")
	mk(zkstate.OffsetPath("with-offsets", "t", 0), "42")
	mk(zkstate.OwnerPath("with-owners", "t", 3), "c-0")
	mk(zkstate.IDPath("with-ids", "c"), string(zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: "static"}.Encode()))

	for _, tc := range []struct {
		group string
		want  zkstate.Mode
		why   string
	}{
		{"nothing", zkstate.ModeKafka, "holds no ids, owners or offsets"},
		{"empty-dirs", zkstate.ModeKafka, "holds no ids, owners or offsets"},
		{"with-offsets", zkstate.ModeLegacy, "/consumers/with-offsets/offsets holds partitions"},
		{"with-owners", zkstate.ModeLegacy, "/consumers/with-owners/owners holds partitions"},
		{"with-ids", zkstate.ModeLegacy, "/consumers/with-ids/ids holds 1 consumer registration"},
	} {
		got, why, err := zkstate.DefaultMode(ctx, s, tc.group)
		if err != nil || got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("DefaultMode(%s) = %q (%q), %v; want %q (%q)", tc.group, got, why, err, tc.want, tc.why)
		}
	}
	if _, _, err := zkstate.DefaultMode(ctx, s, "a/b"); err == nil {
		t.Error("DefaultMode(a/b) succeeded")
	}
}

// A group goes round the whole cycle; every transition is one record change plus one
// transition znode, recorded with who, when, from and to; finalized is terminal.
func TestIntegration_SetModeRecordsEveryTransition(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	const g = "billing"

	if _, v, ok, err := zkstate.ReadMode(ctx, s, modeRoot, g); err != nil || ok || v != zkstate.NoModeVersion {
		t.Fatalf("ReadMode of a new group = %d, %v, %v; want no record", v, ok, err)
	}
	before := time.Now().UnixMilli()
	rec, v, err := zkstate.InitMode(ctx, s, modeRoot, g, zkstate.ModeLegacy, "zkbridge-1@h", "default: 0.8 offsets")
	if err != nil || rec.Mode != zkstate.ModeLegacy || v != 0 || rec.Seq != 1 || rec.From != "" {
		t.Fatalf("InitMode = %+v v%d, %v; want legacy at version 0, seq 1", rec, v, err)
	}
	// InitMode of a group that has a record keeps it.
	if rec2, v2, err := zkstate.InitMode(ctx, s, modeRoot, g, zkstate.ModeKafka, "other", ""); err != nil || rec2.Mode != zkstate.ModeLegacy || v2 != 0 {
		t.Fatalf("second InitMode = %+v v%d, %v; want the first record", rec2, v2, err)
	}

	steps := []zkstate.Mode{zkstate.ModeMixed, zkstate.ModeKafka, zkstate.ModeMixed, zkstate.ModeLegacy,
		zkstate.ModeMixed, zkstate.ModeKafka, zkstate.ModeFinalized}
	from := zkstate.ModeLegacy
	for i, to := range steps {
		who := fmt.Sprintf("ops-%d", i)
		nv, err := zkstate.SetMode(ctx, s, modeRoot, g, from, to, who, v)
		if err != nil {
			t.Fatalf("SetMode %s → %s at v%d: %v", from, to, v, err)
		}
		rec, rv, ok, err := zkstate.ReadMode(ctx, s, modeRoot, g)
		if err != nil || !ok || rv != nv || rec.Mode != to || rec.From != from || rec.UpdatedBy != who || rec.Seq != int32(i+2) {
			t.Fatalf("after %s → %s: ReadMode = %+v v%d (SetMode said v%d), %v", from, to, rec, rv, nv, err)
		}
		from, v = to, nv
	}

	// Finalized is terminal, and a refused transition writes nothing.
	if _, err := zkstate.SetMode(ctx, s, modeRoot, g, zkstate.ModeFinalized, zkstate.ModeKafka, "ops", v); !errors.Is(err, zkstate.ErrInvalidTransition) {
		t.Fatalf("rollback after finalize = %v, want ErrInvalidTransition", err)
	}
	// So is a step from a mode the group is not in.
	if _, err := zkstate.SetMode(ctx, s, modeRoot, g, zkstate.ModeKafka, zkstate.ModeMixed, "ops", v); !errors.Is(err, zkstate.ErrModeMismatch) {
		t.Fatalf("SetMode from kafka of a finalized group = %v, want ErrModeMismatch", err)
	}
	if _, rv, _, _ := zkstate.ReadMode(ctx, s, modeRoot, g); rv != v {
		t.Fatalf("record version %d after refused transitions, want %d", rv, v)
	}

	trs, err := zkstate.ReadTransitions(ctx, s, modeRoot, g)
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != len(steps)+1 {
		t.Fatalf("%d transitions recorded, want %d: %+v", len(trs), len(steps)+1, trs)
	}
	if first := trs[0]; first.From != "" || first.To != zkstate.ModeLegacy || first.By != "zkbridge-1@h" || first.Reason != "default: 0.8 offsets" {
		t.Errorf("first transition = %+v, want the default, legacy, with its reason", first)
	}
	prev := zkstate.ModeLegacy
	for i, tr := range trs[1:] {
		if tr.Seq != int32(i+2) || tr.From != prev || tr.To != steps[i] || tr.By != fmt.Sprintf("ops-%d", i) || tr.AtMs < before || tr.AtMs > time.Now().UnixMilli() {
			t.Errorf("transition %d = %+v, want seq %d %s → %s by ops-%d now", i+2, tr, i+2, prev, steps[i], i)
		}
		prev = steps[i]
	}
}

// Two concurrent SetModes from the same version: exactly one wins, the other gets
// ErrBadVersion, and the loser's transition is not recorded. The same for two creations
// (ErrNodeExists). Many rounds, so that the losers fail at every point: on the early read, or
// on the multi itself.
func TestIntegration_SetModeConcurrentExactlyOneWins(t *testing.T) {
	connect := zktest.Connect(t)
	a, b := zktest.OpenStore(t, connect), zktest.OpenStore(t, connect)
	ctx := timeout(t, 60*time.Second)

	race := func(f func(s *zkstate.Store, who string) error) (wins int, errs []error) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		res := make([]error, 2)
		for i, s := range []*zkstate.Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res[i] = f(s, fmt.Sprintf("racer-%d", i))
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range res {
			if err == nil {
				wins++
			} else {
				errs = append(errs, err)
			}
		}
		return wins, errs
	}

	for round := range 10 {
		g := fmt.Sprintf("g%d", round)
		wins, errs := race(func(s *zkstate.Store, who string) error {
			_, err := zkstate.SetMode(ctx, s, modeRoot, g, zkstate.ModeLegacy, zkstate.ModeMixed, who, zkstate.NoModeVersion)
			return err
		})
		if wins != 1 || len(errs) != 1 || !errors.Is(errs[0], zkstate.ErrNodeExists) || !zkstate.IsModeConflict(errs[0]) {
			t.Fatalf("round %d, creating: %d winners, errors %v; want 1 winner and ErrNodeExists", round, wins, errs)
		}
		// Both read the same version, then race from it.
		_, v, _, err := zkstate.ReadMode(ctx, a, modeRoot, g)
		if err != nil {
			t.Fatal(err)
		}
		wins, errs = race(func(s *zkstate.Store, who string) error {
			_, err := zkstate.SetMode(ctx, s, modeRoot, g, zkstate.ModeMixed, zkstate.ModeKafka, who, v)
			return err
		})
		if wins != 1 || len(errs) != 1 || !errors.Is(errs[0], zkstate.ErrBadVersion) || !zkstate.IsModeConflict(errs[0]) {
			t.Fatalf("round %d, from version %d: %d winners, errors %v; want 1 winner and ErrBadVersion", round, v, wins, errs)
		}
		trs, err := zkstate.ReadTransitions(ctx, a, modeRoot, g)
		if err != nil {
			t.Fatal(err)
		}
		if len(trs) != 2 || trs[0].To != zkstate.ModeMixed || trs[1].To != zkstate.ModeKafka {
			t.Fatalf("round %d: transitions %+v, want exactly legacy → mixed and mixed → kafka", round, trs)
		}
		rec, _, _, _ := zkstate.ReadMode(ctx, a, modeRoot, g)
		if rec.UpdatedBy != trs[1].By {
			t.Fatalf("round %d: record by %q, recorded transition by %q: the loser's write leaked", round, rec.UpdatedBy, trs[1].By)
		}
	}
}

// A record deleted by hand: a SetMode expecting it reports the conflict (ErrNoNode), and the
// group's next first mode continues the transition history instead of colliding with it.
func TestIntegration_SetModeAfterRecordDeleted(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	const g = "g"
	if _, _, err := zkstate.InitMode(ctx, s, modeRoot, g, zkstate.ModeKafka, "a", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := zkstate.SetMode(ctx, s, modeRoot, g, zkstate.ModeKafka, zkstate.ModeMixed, "a", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, zkstate.ModePath(modeRoot, g), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := zkstate.SetMode(ctx, s, modeRoot, g, zkstate.ModeMixed, zkstate.ModeLegacy, "a", 1); !errors.Is(err, zkstate.ErrNoNode) || !zkstate.IsModeConflict(err) {
		t.Fatalf("SetMode of a deleted record = %v, want ErrNoNode (a conflict)", err)
	}
	rec, _, err := zkstate.InitMode(ctx, s, modeRoot, g, zkstate.ModeLegacy, "b", "re-created")
	if err != nil || rec.Seq != 3 {
		t.Fatalf("InitMode after deletion = %+v, %v; want seq 3", rec, err)
	}
	if trs, err := zkstate.ReadTransitions(ctx, s, modeRoot, g); err != nil || len(trs) != 3 {
		t.Fatalf("ReadTransitions = %+v, %v; want 3", trs, err)
	}
}

func TestIntegration_SetModeValidatesArguments(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name     string
		group    string
		from, to zkstate.Mode
		who      string
		version  int32
	}{
		{"no author", "g", zkstate.ModeLegacy, zkstate.ModeMixed, "", zkstate.NoModeVersion},
		{"bad group", "a/b", zkstate.ModeLegacy, zkstate.ModeMixed, "x", zkstate.NoModeVersion},
		{"no from once a record exists", "g", "", zkstate.ModeMixed, "x", 0},
		{"skip", "g", zkstate.ModeLegacy, zkstate.ModeKafka, "x", zkstate.NoModeVersion},
	} {
		if _, err := zkstate.SetMode(ctx, s, modeRoot, tc.group, tc.from, tc.to, tc.who, tc.version); err == nil {
			t.Errorf("%s: SetMode succeeded", tc.name)
		}
	}
	if ok, _, _ := s.Exists(ctx, zkstate.BridgeGroupsPath(modeRoot)); ok {
		t.Error("refused SetModes wrote something")
	}
}

// firstRoundTrip runs call on a Store whose ZooKeeper answers nothing (zktest.Proxy.Mute) and
// waits until the requests it sent are want, by kind: what call sends before its first answer,
// so reads that go out together cost one round trip. Then it lets the answers through and waits
// for call to end.
func firstRoundTrip(t *testing.T, want map[string]int64, call func(ctx context.Context, s *zkstate.Store)) {
	t.Helper()
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	s := zktest.OpenStore(t, proxy.Addr()+connect[i:])
	ctx := timeout(t, 20*time.Second)
	before := s.Requests()
	sent := func() map[string]int64 {
		got := map[string]int64{}
		for k, n := range s.Requests() {
			if d := n - before[k]; d > 0 {
				got[k] = d
			}
		}
		return got
	}
	proxy.Mute()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call(ctx, s)
	}()
	zktest.Eventually(t, 2*time.Second, "the first round trip's requests", func() (bool, string) {
		got := sent()
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("sent %v before any answer, want %v", got, want)
	})
	proxy.Unmute()
	<-done
}

// A group's first service waits for DefaultMode (through InitMode's caller), so its three
// listings go out together: one round trip, not three.
func TestIntegration_DefaultModeListsInOneRoundTrip(t *testing.T) {
	var mode zkstate.Mode
	var err error
	firstRoundTrip(t, map[string]int64{zkstate.ReqChildren: 3}, func(ctx context.Context, s *zkstate.Store) {
		mode, _, err = zkstate.DefaultMode(ctx, s, "fresh")
	})
	if err != nil || mode != zkstate.ModeKafka {
		t.Fatalf("DefaultMode = %v, %v; want kafka", mode, err)
	}
}

// InitMode reads the mode record and lists the transitions a previous record left in one round
// trip (the listing numbers a first record), and returns the record it created without reading
// it back: one get in all.
func TestIntegration_InitModeReadsInOneRoundTrip(t *testing.T) {
	var rec, read zkstate.ModeRecord
	var v, readV int32
	var err, readErr error
	var gets int64
	firstRoundTrip(t, map[string]int64{zkstate.ReqGet: 1, zkstate.ReqChildren: 1}, func(ctx context.Context, s *zkstate.Store) {
		before := s.Requests()[zkstate.ReqGet]
		rec, v, err = zkstate.InitMode(ctx, s, modeRoot, "fresh", zkstate.ModeKafka, "test", "first service")
		gets = s.Requests()[zkstate.ReqGet] - before
		read, readV, _, readErr = zkstate.ReadMode(ctx, s, modeRoot, "fresh")
	})
	if err != nil || rec.Mode != zkstate.ModeKafka || rec.Seq != 1 || v != 0 {
		t.Fatalf("InitMode = %+v, %d, %v; want kafka at seq 1, version 0", rec, v, err)
	}
	if readErr != nil || read != rec || readV != v {
		t.Errorf("InitMode returned %+v (version %d); the record reads %+v (version %d, %v)", rec, v, read, readV, readErr)
	}
	if gets != 1 {
		t.Errorf("InitMode sent %d gets, want 1 (no read back of the record it created)", gets)
	}
}
