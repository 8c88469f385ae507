package bridge

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// A legacy rebalance waiting to claim partitions another member of the same bridge still owns
// (in a mixed group: the Kafka members, until their join barrier lets them go) claims them as
// soon as that member's release is announced on the bridge's hub, not at the end of its backoff
// (issue 5: a legacy join in a bridge-driven group waited 300 ms for a release that came at
// 200). The backoff here is 30 s, so only the wake can finish the claim within the test.
func TestIntegration_LegacyClaimWokenByReleaseOfTheBridge(t *testing.T) {
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	legacyMixedLayout(t, store, map[string]int{"t": 4})
	hub := newOwnerReleases()
	env := legacyStartIn(t, store, "", func(c *LegacyConfig) {
		c.RetryBackoff, c.RetryBackoffMax = 30*time.Second, 30*time.Second
	}, hub)
	const group = "wake"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Another member (its own session, as the Kafka claim's owners are not the legacy
	// coordinator's) is registered first in sort order and owns every partition.
	other := legacyOpenStore(t, connect)
	t.Cleanup(func() { other.Close() })
	const otherID = "wake_a"
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic, TimestampMs: time.Now().UnixMilli()}
	if err := other.Create(ctx, zkstate.IDPath(group, otherID), reg.Encode(), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	thread := zkstate.ThreadIDs(otherID, 1)[0]
	for p := range int32(4) {
		if err := other.Create(ctx, zkstate.OwnerPath(group, "t", p), []byte(thread), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
			t.Fatal(err)
		}
	}

	// A legacy member joins: range over [wake_a, wake_b] gives it partitions 2 and 3, which
	// wake_a holds, so the coordinator stops it... and waits to claim.
	c := legacyRunConsumer(t, env.addr, group, "wake_b", map[string]int{"t": 1}, legacyConsumerOpts{quiet: true})
	legacyEventually(t, "the legacy rebalance waiting to claim", func() (bool, string) {
		st := env.coord.Stats()
		return st.ClaimWaits > 0, fmt.Sprintf("stats %+v", st)
	})

	// wake_a lets go of 2 and 3 and the bridge announces it.
	for _, p := range []int32{2, 3} {
		if err := other.Delete(ctx, zkstate.OwnerPath(group, "t", p), -1); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	hub.released(group, nil)

	legacyEventually(t, "the legacy member started with partitions 2 and 3", func() (bool, string) {
		parts, fetching, _ := c.lastStart()
		var got []int32
		for _, p := range parts {
			got = append(got, p.Partition)
		}
		slices.Sort(got)
		return fetching && slices.Equal(got, []int32{2, 3}), fmt.Sprintf("started %v (fetching %v)", got, fetching)
	})
	if took := time.Since(released); took > 10*time.Second {
		t.Errorf("the claim took %v after the release: it waited for its backoff, not for the wake", took)
	}
	for _, p := range []int32{2, 3} {
		data, _, err := store.Get(ctx, zkstate.OwnerPath(group, "t", p))
		if err != nil || string(data) != zkstate.ThreadIDs("wake_b", 1)[0] {
			t.Errorf("owner of t/%d: %q %v, want wake_b's thread", p, data, err)
		}
	}
}
