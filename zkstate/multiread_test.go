package zkstate_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// The multiRead path and the pipelined path must read the same group the same way, malformed
// and missing znodes included; only the cost differs.
func TestIntegration_MultiReadSnapshotEqualsPipelined(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)
	if err := zkstate.LoadLayout(ctx, s, zkstate.ExampleLayout()); err != nil {
		t.Fatal(err)
	}
	const g = "billing"
	if _, err := s.Set(ctx, zkstate.OffsetPath(g, "orders", 3), []byte("12a"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, zkstate.IDPath(g, zkstate.ExampleConsumer2), []byte(`{"version":1,`), -1); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, zkstate.OffsetPath(g, "ghost", 0), []byte("7"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}

	fast, err := s.Snapshot(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.NoMultiRead = true }).Snapshot(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if fast.Stats.Requests >= fast.Stats.Reads || slow.Stats.Requests != slow.Stats.Reads {
		t.Fatalf("stats: multiRead %+v, pipelined %+v; want multiRead to batch and pipelined not to", fast.Stats, slow.Stats)
	}
	if fast.Stats.Reads != slow.Stats.Reads {
		t.Errorf("reads: multiRead %d, pipelined %d", fast.Stats.Reads, slow.Stats.Reads)
	}
	fast.Stats, slow.Stats = zkstate.Stats{}, zkstate.Stats{}
	if !reflect.DeepEqual(problemStrings(fast.Problems), problemStrings(slow.Problems)) {
		t.Errorf("problems differ:\nmultiRead %v\npipelined %v", fast.Problems, slow.Problems)
	}
	fast.Problems, slow.Problems = nil, nil
	if !reflect.DeepEqual(fast, slow) {
		t.Errorf("snapshots differ:\nmultiRead %+v\npipelined %+v", fast, slow)
	}
}

// A multiRead connection left idle longer than its session timeout is re-dialled, not trusted.
func TestIntegration_MultiReadSurvivesAnIdleSession(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.SessionTimeout = 2 * time.Second })
	ctx := timeout(t, 30*time.Second)
	if err := zkstate.LoadLayout(ctx, s, zkstate.ExampleLayout()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		snap, err := s.Snapshot(ctx, "billing")
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Offsets) != 10 || snap.Stats.Requests >= snap.Stats.Reads {
			t.Fatalf("round %d: %d offsets, stats %+v", i, len(snap.Offsets), snap.Stats)
		}
		time.Sleep(3 * time.Second) // past the session timeout: the server expires the session
	}
}

func problemStrings(ps []zkstate.Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Path+": "+p.Err.Error())
	}
	return out
}
