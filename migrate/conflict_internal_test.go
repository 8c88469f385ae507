package migrate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// An applier that loses its compare-and-set to a change that goes the other way (an operator's
// rollback while it migrates) reports a conflict that names the change, and writes nothing over
// it; one that loses to a change along its own way plans again and finishes.
func TestIntegration_ApplyConflict(t *testing.T) {
	connect := zktest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *zkstate.Store { return zktest.OpenStore(t, connect) }
	s, other := open(), open()
	const root = "/zkbridge"
	for _, g := range []string{"back", "along"} {
		if _, _, err := zkstate.InitMode(ctx, s, root, g, zkstate.ModeMixed, "seed", ""); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { testHookBeforeStep = func(string, Step) {} })
	raced := map[string]bool{}
	testHookBeforeStep = func(group string, step Step) {
		if raced[group] {
			return
		}
		raced[group] = true
		_, v, _, err := zkstate.ReadMode(ctx, other, root, group)
		if err != nil {
			t.Error(err)
			return
		}
		to := zkstate.ModeLegacy // "back": an operator rolls the group back meanwhile
		if group == "along" {
			to = zkstate.ModeKafka // "along": another applier takes our step first
		}
		if _, err := zkstate.SetMode(ctx, other, root, group, zkstate.ModeMixed, to, "operator@elsewhere", v); err != nil {
			t.Error(err)
		}
	}
	opts := ApplyOptions{Request: Request{Target: zkstate.ModeFinalized}, Who: "me", Parallel: 1}
	res, err := Apply(ctx, s, root, []string{"along", "back"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	along, back := res[0], res[1]
	if along.Status != StatusApplied || along.Mode != zkstate.ModeFinalized || len(along.Applied) != 1 || along.Applied[0].From != zkstate.ModeKafka {
		t.Errorf("along: %+v", along)
	}
	if back.Status != StatusConflict || back.Mode != zkstate.ModeLegacy || len(back.Applied) != 0 ||
		!strings.Contains(back.Reason, "it was mixed, it is now legacy (set by operator@elsewhere)") {
		t.Errorf("back: %+v", back)
	}
	trs, err := zkstate.ReadTransitions(ctx, s, root, "back")
	if err != nil {
		t.Fatal(err)
	}
	if last := trs[len(trs)-1]; len(trs) != 2 || last.To != zkstate.ModeLegacy || last.By != "operator@elsewhere" {
		t.Errorf("back's transitions: %+v", trs)
	}
}

func TestOnTheWay(t *testing.T) {
	const L, M, K, F = zkstate.ModeLegacy, zkstate.ModeMixed, zkstate.ModeKafka, zkstate.ModeFinalized
	for _, tc := range []struct {
		from, now, target zkstate.Mode
		want              bool
	}{
		{L, L, K, true}, {L, M, K, true}, {L, K, K, false}, {M, L, K, false},
		{K, M, L, true}, {K, K, L, true}, {M, K, L, false}, {K, F, M, false},
	} {
		if got := onTheWay(tc.from, tc.now, tc.target); got != tc.want {
			t.Errorf("onTheWay(%s, %s, %s) = %v", tc.from, tc.now, tc.target, got)
		}
	}
}
