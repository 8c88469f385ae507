package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Pings' offsets queued one after the other on a group's claimer are written in one Multi, the
// later ping's offset of a partition winning, and each ping gets its own answer, in order. At a
// hundred legacy members pinged every second (BenchmarkLegacyRebalance), one Multi per ping
// kept the claimer busy, and a claim queued behind them waited for every one of them.
func TestIntegration_ClaimerWritesQueuedPingOffsetsInOneMulti(t *testing.T) {
	store := legacyOpenStore(t, legacyConnect(t))
	defer store.Close()
	c, err := NewLegacyCoordinator(LegacyConfig{Store: store, AdvertisedHost: "127.0.0.1", AdvertisedPort: 1, Logger: legacyTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cl := newClaimer(claimerConfig{store: store, group: "commits", log: legacyTestLogger(t)})
	events := make(chan any, 16)
	tp0, tp1 := legacy.TopicPartition{Topic: "t", Partition: 0}, legacy.TopicPartition{Topic: "t", Partition: 1}
	reqs := []any{
		legacyAttachReq{c: c, log: legacyTestLogger(t), events: events},
		legacyCommitReq{member: "a", offsets: map[legacy.TopicPartition]int64{tp0: 5}, exists: map[legacy.TopicPartition]bool{}},
		legacyCommitReq{member: "b", offsets: map[legacy.TopicPartition]int64{tp1: 7}, exists: map[legacy.TopicPartition]bool{}},
		legacyCommitReq{member: "a", offsets: map[legacy.TopicPartition]int64{tp0: 9}, exists: map[legacy.TopicPartition]bool{}},
	}
	multis := c.Stats().ZKMultis
	// Queued at once, under the queue's lock: the claimer takes them together.
	cl.legacyMu.Lock()
	cl.legacyQ = append(cl.legacyQ, reqs...)
	cl.legacyMu.Unlock()
	cl.legacyKick <- struct{}{}
	var got []legacyCommitEv
	for len(got) < 3 {
		select {
		case ev := <-events:
			got = append(got, ev.(legacyCommitEv))
		case <-time.After(10 * time.Second):
			t.Fatalf("answers: %+v, want 3", got)
		}
	}
	cl.leave(true, false)
	(*claimers)(nil).drop(cl) // a claimer of its own: stopped
	for i, want := range []struct {
		member string
		tp     legacy.TopicPartition
		off    int64
	}{{"a", tp0, 5}, {"b", tp1, 7}, {"a", tp0, 9}} {
		if ev := got[i]; ev.err != nil || ev.member != want.member || ev.offsets[want.tp] != want.off {
			t.Errorf("answer %d: %s %v err %v, want %s %v=%d", i, ev.member, ev.offsets, ev.err, want.member, want.tp, want.off)
		}
	}
	if n := c.Stats().ZKMultis - multis; n != 1 {
		t.Errorf("%d Multis for three queued pings, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for tp, want := range map[legacy.TopicPartition]int64{tp0: 9, tp1: 7} {
		data, _, err := store.Get(ctx, zkstate.OffsetPath("commits", tp.Topic, tp.Partition))
		if err != nil {
			t.Fatal(err)
		}
		if off, err := zkstate.ParseOffset(data); err != nil || off != want {
			t.Errorf("offset of %v: %s (%v), want %d", tp, data, err, want)
		}
	}
}

// The final offsets of an attempt whose claim was cancelled after a wait (or failed) are
// committed by the shell (LegacyEffects.Commit), but the claim's Release Multi before the wait
// may have written them already, and let go of the partition's owner znode: its next owner may
// have committed further since. The claimer skips the final offsets its claim's Multis wrote,
// or may have written; others it writes. A Multi that failed with nothing applied wrote none.
func TestIntegration_ClaimerSkipsFinalOffsetsItsClaimWrote(t *testing.T) {
	store := legacyOpenStore(t, legacyConnect(t))
	defer store.Close()
	c, err := NewLegacyCoordinator(LegacyConfig{Store: store, AdvertisedHost: "127.0.0.1", AdvertisedPort: 1, Logger: legacyTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl := newClaimer(claimerConfig{store: store, group: "finals", log: legacyTestLogger(t)})
	events := make(chan any, 16)
	tp0, tp1, tp2 := legacy.TopicPartition{Topic: "t", Partition: 0}, legacy.TopicPartition{Topic: "t", Partition: 1}, legacy.TopicPartition{Topic: "t", Partition: 2}
	// The claim's Release wrote tp0=10 and let go of tp0; its next owner committed 20.
	if err := store.Create(ctx, zkstate.OffsetPath("finals", "t", 0), zkstate.FormatOffset(20), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	var n legacyZKCount
	cl.noteClaimFinals(ctx, legacyPlanInput{Final: map[legacy.TopicPartition]int64{tp0: 10}}, legacyPlan{}, nil, &n)
	// A Multi that failed on its first op applied nothing: tp2's final offset is not written.
	cl.noteClaimFinals(ctx, legacyPlanInput{Final: map[legacy.TopicPartition]int64{tp2: 30}}, legacyPlan{}, &zkstate.MultiError{Index: 0, Err: zkstate.ErrNodeExists}, &n)
	finals := map[legacy.TopicPartition]int64{tp0: 10, tp1: 7, tp2: 30}
	for _, r := range []any{
		legacyAttachReq{c: c, log: legacyTestLogger(t), events: events},
		legacyCommitReq{member: "(final offsets)", offsets: finals, exists: map[legacy.TopicPartition]bool{tp0: true}, finals: true},
	} {
		cl.legacyReq(r)
	}
	select {
	case ev := <-events:
		if e := ev.(legacyCommitEv); e.err != nil || len(e.offsets) != 3 {
			t.Errorf("answer: %v err %v, want the three final offsets", e.offsets, e.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	cl.leave(true, false)
	(*claimers)(nil).drop(cl) // a claimer of its own: stopped
	for tp, want := range map[legacy.TopicPartition]int64{tp0: 20, tp1: 7, tp2: 30} {
		data, _, err := store.Get(ctx, zkstate.OffsetPath("finals", tp.Topic, tp.Partition))
		if err != nil {
			t.Fatal(err)
		}
		if off, err := zkstate.ParseOffset(data); err != nil || off != want {
			t.Errorf("offset of %v: %s (%v), want %d", tp, data, err, want)
		}
	}
}
