package bridge

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A refusal on the strength of the cached mode is checked against ZooKeeper first (confirm): a
// member that joins right after `zkbridge migrate` changed the mode, before the watch delivered
// it, is not turned away for good. The newer mode read there is cached and onChange told, as
// the watch would have.
func TestIntegration_ModeConfirmedBeforeRefusing(t *testing.T) {
	t.Parallel()
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	ctx := t.Context()
	const g = "moved"
	_, v, err := zkstate.InitMode(ctx, store, DefaultRoot, g, zkstate.ModeKafka, "test", "confirm")
	if err != nil {
		t.Fatal(err)
	}
	m := newGroupModes(Config{Root: DefaultRoot}, legacyTestLogger(t), nil)
	m.timeout = 5 * time.Second
	m.start(store)
	m.mu.Lock()
	m.entry(g).watching = true // no watch is started: the cache lags as long as the test needs
	m.mu.Unlock()
	var told atomic.Int32
	m.onChange = func(string) { told.Add(1) }
	if mode, err := m.ensure(ctx, g, kindLegacy); err != nil || mode != zkstate.ModeKafka {
		t.Fatalf("ensure = %v, %v; want kafka", mode, err)
	}
	if _, err := zkstate.SetMode(ctx, store, DefaultRoot, g, zkstate.ModeKafka, zkstate.ModeMixed, "test", v); err != nil {
		t.Fatal(err)
	}
	if mode, _ := m.modeOf(g); mode != zkstate.ModeKafka {
		t.Fatalf("cached mode %v: the test needs a cache that lags", mode)
	}
	if err := m.admitLegacy(context.Background(), g); err != nil {
		t.Errorf("admitLegacy after the move to mixed: %v, want admitted", err)
	}
	if mode, _ := m.modeOf(g); mode != zkstate.ModeMixed {
		t.Errorf("cached mode after confirm: %v, want mixed", mode)
	}
	if n := told.Load(); n != 1 {
		t.Errorf("onChange told %d times, want 1", n)
	}
	if m.confirm(ctx, g, zkstate.ModeMixed); told.Load() != 1 {
		t.Errorf("onChange told again for a mode it knew")
	}
}

// The default of a group served for the first time looks at its record and its own offsets in
// one round trip (the group's first request waits for it): both exists are sent before
// ZooKeeper answers either (zktest.Proxy.Mute holds the answers back).
func TestIntegration_ModeDefaultLooksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	store, proxy, _ := legacyProxiedStore(t, 10*time.Second)
	m := newGroupModes(Config{Root: DefaultRoot}, legacyTestLogger(t), nil)
	before := store.Requests()[zkstate.ReqExists]
	proxy.Mute()
	type result struct {
		mode zkstate.Mode
		err  error
	}
	done := make(chan result, 1)
	go func() {
		mode, _, err := m.defaultFor(t.Context(), store, "fresh", kindKafka)
		done <- result{mode, err}
	}()
	zktest.Eventually(t, 2*time.Second, "both exists sent before any answer", func() (bool, string) {
		n := store.Requests()[zkstate.ReqExists] - before
		return n == 2, fmt.Sprintf("%d exists sent", n)
	})
	proxy.Unmute()
	if r := <-done; r.err != nil || r.mode != zkstate.ModeKafka {
		t.Fatalf("defaultFor = %v, %v; want kafka", r.mode, r.err)
	}
}
