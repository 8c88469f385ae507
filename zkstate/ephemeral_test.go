package zkstate_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Ephemeral operations on different paths do not wait for each other: only operations on one
// path are serialised (against its reclaim). A bridge handing many groups over deletes their
// 0.8 mirrors' ephemerals together, and while one lock covered the whole set a drain of 30
// groups took seconds on a loaded ZooKeeper (BenchmarkRollingRestart, docs/benchmarks.md).
//
// A CreateEphemeral under hundreds of missing parents takes hundreds of round trips; a
// CreateEphemeral and a DeleteEphemeral of other paths, started while it runs, finish first.
func TestIntegration_EphemeralsOfOtherPathsDoNotWait(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 60*time.Second)

	if err := s.CreateEphemeral(ctx, "/eph/other/old", nil); err != nil {
		t.Fatal(err)
	}
	var deep strings.Builder
	deep.WriteString("/eph/deep")
	for i := range 400 {
		deep.WriteString("/" + strconv.Itoa(i))
	}
	deepDone := make(chan error, 1)
	go func() { deepDone <- s.CreateEphemeral(ctx, deep.String()+"/leaf", nil) }()
	// Its parents' creation has begun: it holds whatever it holds now.
	zktest.Eventually(t, 30*time.Second, "the deep create's first parent", func() bool {
		ok, _, err := s.Exists(ctx, "/eph/deep/0")
		return err == nil && ok
	})
	start := time.Now()
	if err := s.CreateEphemeral(ctx, "/eph/other/new", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteEphemeral(ctx, "/eph/other/old"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	select {
	case err := <-deepDone:
		t.Fatalf("the create and delete of other paths waited for the deep create (%v, err %v): one lock for every ephemeral", took, err)
	default:
	}
	if err := <-deepDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("other paths: %v while the deep create ran", took)
}

// SetEphemeral rewrites a node it created or last wrote in this session with one request: a Set
// at the version it knows, without first reading the node's version (a draining bridge's
// registration rewrite was two round trips on the way of every handover). When the node changed
// meanwhile (another session wrote it; it was deleted and made again), it reads the node as
// before: a foreign node is left alone (ErrNotOwner), ours is written.
func TestIntegration_SetEphemeralWritesAtTheVersionItKnows(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	other := zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)
	const p = "/eph/set/reg"
	if err := s.CreateEphemeral(ctx, p, []byte("v0")); err != nil {
		t.Fatal(err)
	}
	set := func(data string) (map[string]int64, error) {
		before := s.Requests()
		err := s.SetEphemeral(ctx, p, []byte(data))
		after := s.Requests()
		d := map[string]int64{}
		for k, v := range after {
			if n := v - before[k]; n > 0 {
				d[k] = n
			}
		}
		return d, err
	}
	holds := func(want string) {
		t.Helper()
		data, st, err := other.Get(ctx, p)
		if err != nil || string(data) != want || st.EphemeralOwner != s.SessionID() {
			t.Fatalf("%s: %q (owner 0x%x, %v), want %q held by 0x%x", p, data, st.EphemeralOwner, err, want, s.SessionID())
		}
	}
	for _, data := range []string{"v1", "v2"} { // after the create, then after its own write
		reqs, err := set(data)
		if err != nil {
			t.Fatal(err)
		}
		if reqs[zkstate.ReqSet] != 1 || len(reqs) != 1 {
			t.Errorf("SetEphemeral(%s) sent %v, want one set", data, reqs)
		}
		holds(data)
	}
	// Another session wrote the node: the Set at the known version fails, the node is read, ours.
	if _, err := other.Set(ctx, p, []byte("foreign"), -1); err != nil {
		t.Fatal(err)
	}
	if reqs, err := set("v3"); err != nil || reqs[zkstate.ReqExists] != 1 || reqs[zkstate.ReqSet] != 2 {
		t.Errorf("SetEphemeral after another session's write: %v, sent %v; want the set, an exists, the set at the version read", err, reqs)
	}
	holds("v3")
	if reqs, err := set("v4"); err != nil || reqs[zkstate.ReqSet] != 1 || len(reqs) != 1 {
		t.Errorf("SetEphemeral after its fallback: %v, sent %v; want one set", err, reqs)
	}
	holds("v4")
	// The node deleted and made again by another session: not ours, left alone.
	if err := other.Delete(ctx, p, -1); err != nil {
		t.Fatal(err)
	}
	if err := other.CreateEphemeral(ctx, p, []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	if _, err := set("v5"); !errors.Is(err, zkstate.ErrNotOwner) {
		t.Errorf("SetEphemeral of a node another session made again: %v, want ErrNotOwner", err)
	}
	if data, _, err := other.Get(ctx, p); err != nil || string(data) != "theirs" {
		t.Errorf("the other session's node after our SetEphemeral: %q (%v), want it untouched", data, err)
	}
}
