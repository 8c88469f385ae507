package newproto

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
)

// releaseRecorder is a Groups that records the ReleaseHeartbeat events it is given.
type releaseRecorder struct {
	mu       sync.Mutex
	releases []group.ReleaseHeartbeat
}

func (r *releaseRecorder) Do(_ context.Context, _ string, build func(group.Token) group.Event) (group.Reply, error) {
	ev := build(99)
	r.mu.Lock()
	defer r.mu.Unlock()
	if rel, ok := ev.(group.ReleaseHeartbeat); ok {
		r.releases = append(r.releases, rel)
	}
	return group.HeartbeatReply{Token: 99}, nil
}

func (r *releaseRecorder) FetchOffsets(context.Context, string, map[string][]int32) ([]CommittedOffset, error) {
	return nil, nil
}

func (r *releaseRecorder) ListGroups(context.Context) ([]GroupListing, error) { return nil, nil }

func (r *releaseRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.releases)
}

// A client that pipelines (franz-go sends its heartbeat and a commit at once on one connection)
// has its next request read before its held heartbeat even reached the group's actor: the
// release that the later request triggers can then overtake the heartbeat and find nothing
// parked, and the heartbeat, parked after it, was answered by nothing but a rebalance — with the
// commit behind it on the connection (answers go in request order): seen under load as
// "k6: commit at revoke: the broker connection has died" after 10 s (MigrateCyclesKeepOffsets).
// The hold's end releases it again, a no-op when it was answered.
func TestHeldHeartbeatReleasedAgainAtTheHoldsEnd(t *testing.T) {
	rec := &releaseRecorder{}
	gc := &GroupCoordinator{groups: rec, log: zerolog.Nop(), hold: 50 * time.Millisecond}
	held, later, done := make(chan group.Token, 1), make(chan struct{}), make(chan struct{})
	held <- 7
	close(later) // the connection read the commit before the heartbeat was parked
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		gc.release(context.Background(), "g", "m", held, later, done)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for rec.count() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := rec.count(); n < 2 {
		t.Fatalf("%d ReleaseHeartbeat sent, want one when the later request came and one at the hold's end", n)
	}
	close(done)
	<-finished
	for _, r := range rec.releases {
		if r.Held != 7 || r.MemberID != "m" {
			t.Errorf("release %+v, want member m's heartbeat 7", r)
		}
	}
}
