package zkstate_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

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
