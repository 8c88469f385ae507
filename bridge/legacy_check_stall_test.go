package bridge

import (
	"fmt"
	"testing"
	"time"
)

// A check that waits for ZooKeeper longer than the members would wait for a request does not
// make them give up: while it reads the group (seed 001 "rebalance (group)" steps 1-3), the
// running members are pinged every ping interval like in every phase (docs/legacy-protocol.md
// §8 "Coordinator" 1; seed 001 line 149), so none of them hears nothing for
// (max_ping_retries + 1) ping intervals and takes its coordinator for failed (§8 "Consumer"
// 2). Here topic t grows from 2 to 4 partitions: the check that follows needs a read of the
// owners (neither a new member nor a departure makes it certain), and ZooKeeper is muted
// before it begins, for about four of the members' silence windows.
func TestIntegration_LegacyCheckStallKeepsMembers(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	// The delay holds the check back until ZooKeeper is muted, after the topic's watch fired.
	const delay = 800 * time.Millisecond
	env, store, proxy, a, b := legacyStallPair(t, func(c *LegacyConfig) { c.RebalanceDelay = delay })
	rebalances := env.coord.Stats().Rebalances

	silence := time.Duration(legacyTestRetries+1) * legacyTestInterval // legacy.Client.serve
	const stall = 2 * time.Second
	legacySetTopic(t, store, "t", 4)
	time.Sleep(delay / 3) // the watch fires, the check waits for the delay
	proxy.Mute()
	muted := time.Now()
	least := legacyFewestMembers(env, muted, stall)
	proxy.Unmute()
	if least != 2 {
		t.Errorf("while the check waited for ZooKeeper, a member (silence window %v) gave up its coordinator: %d members left, want 2", silence, least)
	}

	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a, b}, map[string][]int32{"t": {0, 1, 2, 3}})
	legacyEventually(t, "one rebalance of a and b over 4 partitions", func() (bool, string) {
		st := env.coord.Stats()
		return st.Rebalances > rebalances && st.Members == 2 && st.LastRebalance.Members == 2 && st.LastRebalance.Partitions == 4,
			fmt.Sprintf("%+v", st)
	})
	if last := env.coord.Stats().LastRebalance; last.Checking < stall/2 {
		t.Errorf("the rebalance's check took %v, want about %v: ZooKeeper's stall did not fall in the check", last.Checking, stall-2*delay/3)
	}
}
