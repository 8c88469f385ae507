package bridge

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// The hub wakes every claimer of the group but the one that released, never blocks, and
// forgets a claimer that unsubscribed.
func TestOwnerReleases(t *testing.T) {
	var nilHub *ownerReleases
	nilHub.released("g", nil) // a coordinator outside a Bridge
	if nilHub.subscribe("g") != nil {
		t.Fatal("a nil hub gave a channel")
	}
	h := newOwnerReleases()
	a, b, other := h.subscribe("g"), h.subscribe("g"), h.subscribe("h")
	h.released("g", a)
	h.released("g", a) // b's wake is pending already: this one must not block
	select {
	case <-a:
		t.Error("the releaser woke itself")
	default:
	}
	select {
	case <-b:
	default:
		t.Error("the other claimer of g was not woken")
	}
	select {
	case <-other:
		t.Error("a claimer of another group was woken")
	default:
	}
	h.unsubscribe("g", b)
	h.released("g", nil)
	select {
	case <-b:
		t.Error("an unsubscribed claimer was woken")
	default:
	}
	if _, ok := <-a; !ok {
		t.Error("a's channel closed")
	}
}

// A legacy rebalance waiting to claim partitions another member still owns claims them as
// soon as that member lets go (issue 5: a legacy join in a bridge-driven group waited 300 ms
// for a release that came at 200): "watched", another session deletes the owner znode and the
// claim's watch on it sees that; "announced", the bridge's hub says an actor of the same bridge
// released owner znodes (releases.go). The backoff is 30 s, so only the wake-up can finish the
// claim within the test's wait (legacyWait, 15 s).
func TestIntegration_LegacyClaimWaitsForTheRelease(t *testing.T) {
	for _, announce := range []bool{false, true} {
		name := "watched"
		if announce {
			name = "announced"
		}
		t.Run(name, func(t *testing.T) { testLegacyClaimWaitsForTheRelease(t, announce) })
	}
}

func testLegacyClaimWaitsForTheRelease(t *testing.T, announce bool) {
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	legacyMixedLayout(t, store, map[string]int{"t": 4})
	hub := newOwnerReleases()
	env := legacyStartIn(t, store, "", func(c *LegacyConfig) {
		c.RetryBackoff, c.RetryBackoffMax = 30*time.Second, 30*time.Second
	}, hub)
	group := "wake_" + t.Name()[len(t.Name())-3:]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Another member (its own session, as a zk member's or the Kafka claim's owners are not
	// the legacy coordinator's) is registered first in sort order and owns every partition.
	other := legacyOpenStore(t, connect)
	t.Cleanup(func() { other.Close() })
	otherID := group + "_a"
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

	// A legacy member joins: range over [<g>_a, <g>_b] gives it partitions 2 and 3, which the
	// other member holds, so the coordinator stops it... and waits to claim.
	c := legacyRunConsumer(t, env.addr, group, group+"_b", map[string]int{"t": 1}, legacyConsumerOpts{quiet: true})
	legacyEventually(t, "the legacy rebalance waiting to claim", func() (bool, string) {
		st := env.coord.Stats()
		return st.ClaimWaits > 0, fmt.Sprintf("stats %+v", st)
	})

	// The other member lets go of 2 and 3.
	for _, p := range []int32{3, 2} {
		if err := other.Delete(ctx, zkstate.OwnerPath(group, "t", p), -1); err != nil {
			t.Fatal(err)
		}
	}
	if announce {
		hub.released(group, nil)
	}

	legacyEventually(t, "the legacy member started with partitions 2 and 3", func() (bool, string) {
		parts, fetching, _ := c.lastStart()
		var got []int32
		for _, p := range parts {
			got = append(got, p.Partition)
		}
		slices.Sort(got)
		return fetching && slices.Equal(got, []int32{2, 3}), fmt.Sprintf("started %v (fetching %v)", got, fetching)
	})
	for _, p := range []int32{2, 3} {
		data, _, err := store.Get(ctx, zkstate.OwnerPath(group, "t", p))
		if err != nil || string(data) != zkstate.ThreadIDs(group+"_b", 1)[0] {
			t.Errorf("owner of t/%d: %q %v, want %s_b's thread", p, data, err, group)
		}
	}
}
