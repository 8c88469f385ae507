package bridge

import (
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A claim that waits for ZooKeeper longer than the members would wait for a request does not
// make them give up: while it waits, the members it stopped are pinged every ping interval
// (seed 001 line 149: a consumer answers a PingRequest, stopped or not, within
// ping_interval_ms; docs/legacy-protocol.md §8 "Coordinator" 1), so none of them hears nothing
// for (max_ping_retries + 1) ping intervals and takes its coordinator for failed (§8
// "Consumer" 2). Here b leaves while ZooKeeper holds its answers back: the rebalance that
// follows stops a, collects its final offsets, and its claim stalls for about four of a's
// silence windows.
func TestIntegration_LegacyClaimStallKeepsMembers(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	env, store, proxy, a, b := legacyStallPair(t, nil)
	rebalances := env.coord.Stats().Rebalances

	silence := time.Duration(legacyTestRetries+1) * legacyTestInterval // a's, legacy.Client.serve
	const stall = 1600 * time.Millisecond
	proxy.Mute()
	muted := time.Now()
	b.stop()
	legacyEventually(t, "b's departure taken in", func() (bool, string) {
		n := env.coord.Stats().Members
		return n <= 1, fmt.Sprintf("%d members", n)
	})
	// a gives up at the latest a silence window after its final Ping: its connection closes and
	// the coordinator counts it out (it cannot register again before ZooKeeper answers).
	least := legacyFewestMembers(env, muted, stall)
	proxy.Unmute()
	if least != 1 {
		t.Errorf("while the claim waited %v for ZooKeeper, a (silence window %v) gave up its coordinator: %d members left, want 1", stall, silence, least)
	}

	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a}, map[string][]int32{"t": {0, 1}})
	legacyEventually(t, "a owns t alone after one rebalance whose claim waited for ZooKeeper", func() (bool, string) {
		st := env.coord.Stats()
		got := legacyOwnersInZK(t, store, "g")
		return st.Rebalances > rebalances && st.Members == 1 && st.LastRebalance.Members == 1 &&
				got[legacy.TopicPartition{Topic: "t", Partition: 0}] == "a-0" && got[legacy.TopicPartition{Topic: "t", Partition: 1}] == "a-0",
			fmt.Sprintf("owners %v, %+v", got, st)
	})
	if last := env.coord.Stats().LastRebalance; last.Claiming < stall/2 {
		t.Errorf("the rebalance's claim took %v, want about %v: ZooKeeper's stall did not fall in the claim", last.Claiming, stall)
	}
}

// legacyStallPair starts a legacy coordinator (mod changes its config) on a store whose link to
// ZooKeeper the returned proxy can mute, and members a and b of group g sharing t's two
// partitions. Six seconds of session: the store keeps a muted connection for four and its lease
// for about four and a half, longer than the tests' stalls.
func legacyStallPair(t *testing.T, mod func(*LegacyConfig)) (env *legacyEnv, store *zkstate.Store, proxy *zktest.Proxy, a, b *legacyTestConsumer) {
	t.Helper()
	store, proxy, _ = legacyProxiedStore(t, 6*time.Second)
	legacySetTopic(t, store, "t", 2)
	env = legacyStart(t, store, "", mod)
	a = legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	b = legacyRunConsumer(t, env.addr, "g", "b", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b}, map[string][]int32{"t": {0, 1}})
	return env, store, proxy, a, b
}

// legacyFewestMembers is the fewest members env's coordinator counted from since until stall
// has passed, sampled every 10 ms.
func legacyFewestMembers(env *legacyEnv, since time.Time, stall time.Duration) int {
	least := env.coord.Stats().Members
	for time.Since(since) < stall {
		least = min(least, env.coord.Stats().Members)
		time.Sleep(10 * time.Millisecond)
	}
	return min(least, env.coord.Stats().Members)
}
