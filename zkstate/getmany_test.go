package zkstate_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// GetMany and ChildrenMany answer like a Get or Children per path (data, missing, invalid
// path), in order, with multiRead batching hundreds of reads into a few requests and the
// pipelined fallback making one request per read. Requests counts what each path sent.
func TestIntegration_GetManyAndChildrenMany(t *testing.T) {
	connect := zktest.Connect(t)
	ctx := timeout(t, 30*time.Second)
	setup := zktest.OpenStore(t, connect)
	const n = 300
	var paths []string
	for i := range n {
		p := fmt.Sprintf("/many/t/%d", i)
		if err := setup.Create(ctx, p, []byte(fmt.Sprint(i*7)), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	// Interleave paths that are missing and one that is not a path at all.
	paths = slices.Insert(paths, 10, "/many/t/missing")
	paths = slices.Insert(paths, 20, "not/absolute")

	for _, tc := range []struct {
		name    string
		noMulti bool
		maxReqs int64
	}{
		{"multiRead", false, 10},
		{"pipelined", true, n + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.NoMultiRead = tc.noMulti })
			before := s.Requests()
			got, err := s.GetMany(ctx, paths)
			if err != nil {
				t.Fatal(err)
			}
			after := s.Requests()
			sent := after[zkstate.ReqMultiRead] - before[zkstate.ReqMultiRead] + after[zkstate.ReqGet] - before[zkstate.ReqGet]
			if sent > tc.maxReqs || sent == 0 {
				t.Errorf("GetMany of %d paths sent %d requests, want 1..%d", len(paths), sent, tc.maxReqs)
			}
			if len(got) != len(paths) {
				t.Fatalf("%d results for %d paths", len(got), len(paths))
			}
			for i, p := range paths {
				want, _, wantErr := s.Get(ctx, p)
				r := got[i]
				if r.Err == nil && r.InSession != tc.noMulti {
					t.Errorf("%s: read in our session %v, want %v (pipelined: in it; multiRead: on its own connection)", p, r.InSession, tc.noMulti)
				}
				switch {
				case wantErr != nil:
					var pe *zkstate.PathError
					if r.Err == nil || !errors.As(r.Err, &pe) || pe.Path != p ||
						errors.Is(wantErr, zkstate.ErrNoNode) != errors.Is(r.Err, zkstate.ErrNoNode) {
						t.Errorf("%s: err %v, want like %v", p, r.Err, wantErr)
					}
				case r.Err != nil || string(r.Data) != string(want) || r.Stat.Version != 0 || r.Stat.Mzxid == 0:
					t.Errorf("%s: %q %+v %v, want %q", p, r.Data, r.Stat, r.Err, want)
				}
			}

			kids, err := s.ChildrenMany(ctx, []string{"/many/t", "/many", "/many/none"})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(kids[0].Children)
			if len(kids[0].Children) != n || kids[0].Err != nil || !slices.Equal(kids[1].Children, []string{"t"}) ||
				!errors.Is(kids[2].Err, zkstate.ErrNoNode) {
				t.Errorf("ChildrenMany: %d children of /many/t (%v), %v %v, missing: %v",
					len(kids[0].Children), kids[0].Err, kids[1].Children, kids[1].Err, kids[2].Err)
			}
		})
	}

	// A handful of reads stays pipelined on the Store's own connection, where concurrent
	// callers' reads run side by side (the multiRead connection takes one request at a time).
	t.Run("small", func(t *testing.T) {
		s := zktest.OpenStore(t, connect)
		before := s.Requests()
		got, err := s.GetMany(ctx, paths[:3])
		if err != nil {
			t.Fatal(err)
		}
		after := s.Requests()
		if gets, mr := after[zkstate.ReqGet]-before[zkstate.ReqGet], after[zkstate.ReqMultiRead]-before[zkstate.ReqMultiRead]; gets != 3 || mr != 0 {
			t.Errorf("GetMany of 3 paths: %d gets and %d multiReads, want 3 and 0", gets, mr)
		}
		if string(got[1].Data) != "7" || got[1].Err != nil || !got[1].InSession {
			t.Errorf("read 1: %q %v (in our session: %v), want \"7\" read in our session", got[1].Data, got[1].Err, got[1].InSession)
		}
	})

	// GetBatch sends a handful as one multiRead anyway, and falls back to pipelined Gets.
	for _, tc := range []struct {
		name            string
		noMulti         bool
		gets, multiRead int64
	}{{"batch", false, 0, 1}, {"batch-pipelined", true, 3, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.NoMultiRead = tc.noMulti })
			before := s.Requests()
			got, err := s.GetBatch(ctx, []string{paths[1], "/many/t/missing", paths[2]})
			if err != nil {
				t.Fatal(err)
			}
			after := s.Requests()
			if gets, mr := after[zkstate.ReqGet]-before[zkstate.ReqGet], after[zkstate.ReqMultiRead]-before[zkstate.ReqMultiRead]; gets != tc.gets || mr != tc.multiRead {
				t.Errorf("GetBatch of 3 paths: %d gets and %d multiReads, want %d and %d", gets, mr, tc.gets, tc.multiRead)
			}
			if string(got[0].Data) != "7" || got[0].Err != nil || !errors.Is(got[1].Err, zkstate.ErrNoNode) ||
				string(got[2].Data) != "14" || got[2].Err != nil {
				t.Errorf("GetBatch: %q %v, %v, %q %v; want \"7\", no node, \"14\"", got[0].Data, got[0].Err, got[1].Err, got[2].Data, got[2].Err)
			}
		})
	}

	t.Run("cancelled", func(t *testing.T) {
		s := zktest.OpenStore(t, connect)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.GetMany(cctx, paths); err == nil {
			t.Fatal("GetMany with a cancelled context succeeded")
		}
	})
}
