package legacy

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// A consumer that shuts down has no leave to send: Reported is how it knows a PingResponse
// carried its last commits before it hangs up. It waits for a ping answered after the call,
// not for one built before it.
func TestClientReportedWaitsForAPingAfterTheCommits(t *testing.T) {
	checkGoroutines(t)
	coord := newFakeCoord()
	addr := startServer(t, coord, nil)
	c := startClient(t, clientConfig(t, "c1", addr))
	s := coord.session(t)
	ctx := context.Background()
	if _, err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(ctx, []PartitionOffset{{Topic: "t", Partition: 0, Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	mustPing(t, s) // a ping before the last commit counts for nothing
	c.Commit(TopicPartition{"t", 0}, 5)

	reported := make(chan error, 1)
	go func() { reported <- c.Reported(ctx) }()
	select {
	case err := <-reported:
		t.Fatalf("Reported returned (%v) before any ping after the commit", err)
	case <-time.After(100 * time.Millisecond):
	}
	if resp := mustPing(t, s); !slices.Equal(resp.Offsets, []PartitionOffset{{Topic: "t", Partition: 0, Offset: 5}}) {
		t.Fatalf("ping after the commit: %s", fmtParts(resp.Offsets))
	}
	select {
	case err := <-reported:
		if err != nil {
			t.Fatalf("Reported: %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Reported still waits after a ping reported the commit")
	}

	// Nobody pings: ctx ends the wait.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := c.Reported(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reported with no ping: %v, want context.DeadlineExceeded", err)
	}

	// Without auto_commit there is nothing to report.
	cfg := clientConfig(t, "c2", addr)
	cfg.AutoCommit = false
	c2, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Reported(short); err != nil {
		t.Errorf("Reported without auto_commit: %v", err)
	}
}
