package zkstate

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// A write whose caller gave up on its ctx still runs, maybe later than the caller's next write:
// its goroutine may not have sent the request yet. A later write of the same path waits for
// it, so that ZooKeeper applies the two in the order they were issued. Before doWrite, a
// zkconsumer auto-commit cancelled by Close (tb-2 = 854) landed after Close's commit of the
// later offset (856): an offset moved backwards (TestIntegration_MigrateCyclesKeepOffsets,
// "l6 starts tb-2 at 854, before the last commit 856").
func TestDoWriteKeepsTheOrderOfAnAbandonedWrite(t *testing.T) {
	tests := []struct {
		name        string
		second      string
		heldBack    bool
		wantApplied []string
	}{
		{name: "same path", second: "/p", heldBack: true, wantApplied: []string{"older", "newer"}},
		{name: "other path", second: "/q", heldBack: false, wantApplied: []string{"newer", "older"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Store{}
			var mu sync.Mutex
			var applied []string
			apply := func(v string) {
				mu.Lock()
				defer mu.Unlock()
				applied = append(applied, v)
			}
			// The first write's goroutine is late: its request is not sent when its caller
			// gives up.
			ctx, cancel := context.WithCancel(t.Context())
			started, release, gaveUp := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				_, err := doWrite(ctx, s, []string{"/p"}, func() (int, error) {
					close(started)
					<-release
					apply("older")
					return 0, nil
				})
				gaveUp <- err
			}()
			<-started
			cancel()
			if err := <-gaveUp; !errors.Is(err, context.Canceled) {
				t.Fatalf("abandoned write: %v, want context.Canceled", err)
			}
			// The caller writes again.
			second := make(chan error, 1)
			go func() {
				_, err := doWrite(t.Context(), s, []string{tt.second}, func() (int, error) {
					apply("newer")
					return 0, nil
				})
				second <- err
			}()
			select {
			case err := <-second:
				if tt.heldBack {
					t.Errorf("the second write of /p went out (err %v) before the abandoned one was answered", err)
				}
			case <-time.After(100 * time.Millisecond):
				if !tt.heldBack {
					t.Errorf("a write of another path waited for the abandoned write of /p")
				}
			}
			close(release)
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				n := len(applied)
				mu.Unlock()
				s.abandoned.mu.Lock()
				held := len(s.abandoned.m)
				s.abandoned.mu.Unlock()
				if n == 2 && held == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(applied, tt.wantApplied) {
				t.Errorf("applied %v, want %v", applied, tt.wantApplied)
			}
			s.abandoned.mu.Lock()
			defer s.abandoned.mu.Unlock()
			if len(s.abandoned.m) != 0 {
				t.Errorf("abandoned writes still held after their answers: %v", s.abandoned.m)
			}
		})
	}
}
