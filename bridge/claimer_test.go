package bridge

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// A legacy rebalance waiting to claim partitions another member still owns claims them as soon
// as that member lets go (a legacy join in a bridge-driven group once waited 300 ms for a
// release that came at 200): "watched", another session deletes the owner znode and the
// claimer's watch on it sees that; "kafka members", the owner znodes are the bridge's own Kafka
// members' and the group's one claimer releases them, which retries the legacy claim on the
// same goroutine. The claimer's backoff is 30 s, so only the wake-up can finish the claim within
// the test's wait (legacyWait, 15 s).
func TestIntegration_LegacyClaimWaitsForTheRelease(t *testing.T) {
	t.Parallel()
	for _, kafka := range []bool{false, true} {
		name := "watched"
		if kafka {
			name = "kafka members"
		}
		t.Run(name, func(t *testing.T) { testLegacyClaimWaitsForTheRelease(t, kafka) })
	}
}

func testLegacyClaimWaitsForTheRelease(t *testing.T, kafka bool) {
	legacyCheckLeaks(t)
	connect := legacyConnect(t)
	store := legacyOpenStore(t, connect)
	t.Cleanup(func() { store.Close() })
	legacyMixedLayout(t, store, map[string]int{"t": 4})
	group := "wake_" + t.Name()[len(t.Name())-3:]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The group's claimer, as the bridge's Kafka actor would have started it, with a backoff
	// no wait of the test reaches.
	cs := newClaimers()
	cl := cs.join(claimerConfig{store: store, group: group, retry: time.Second, log: legacyTestLogger(t),
		backoff: 30 * time.Second, backoffMax: 30 * time.Second})
	env := legacyStartIn(t, store, "", nil, cs)
	t.Cleanup(func() {
		env.stop()
		cl.leave(false, true)
		cs.drop(cl)
	})

	// Another member, registered first in sort order, owns every partition: a Kafka member of
	// the bridge (its znodes are the claimer's, in the bridge's session), or a member with a
	// session of its own (as a zk member's owners are not the legacy coordinator's).
	otherID := group + "_a"
	thread := zkstate.ThreadIDs(otherID, 1)[0]
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic, TimestampMs: time.Now().UnixMilli()}
	owned := func(parts ...int32) mirrorState {
		ms := mirrorState{ids: map[string][]byte{zkstate.IDPath(group, otherID): reg.Encode()}, owners: map[string][]byte{}}
		for _, p := range parts {
			ms.owners[zkstate.OwnerPath(group, "t", p)] = []byte(thread)
		}
		return ms
	}
	var other *zkstate.Store
	if kafka {
		cl.update(owned(0, 1, 2, 3))
		legacyEventually(t, "the Kafka member's owner znodes", func() (bool, string) {
			ok, _, err := store.Exists(ctx, zkstate.OwnerPath(group, "t", 3))
			return ok, fmt.Sprint(err)
		})
	} else {
		other = legacyOpenStore(t, connect)
		t.Cleanup(func() { other.Close() })
		if err := other.Create(ctx, zkstate.IDPath(group, otherID), reg.Encode(), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
			t.Fatal(err)
		}
		for p := range int32(4) {
			if err := other.Create(ctx, zkstate.OwnerPath(group, "t", p), []byte(thread), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A legacy member joins: range over [<g>_a, <g>_b] gives it partitions 2 and 3, which the
	// other member holds, so the coordinator stops it... and its claim waits.
	c := legacyRunConsumer(t, env.addr, group, group+"_b", map[string]int{"t": 1}, legacyConsumerOpts{quiet: true})
	legacyEventually(t, "the legacy rebalance waiting to claim", func() (bool, string) {
		st := env.coord.Stats()
		return st.ClaimWaits > 0, fmt.Sprintf("stats %+v", st)
	})

	// The other member lets go of 2 and 3.
	if kafka {
		cl.update(owned(0, 1))
	} else {
		for _, p := range []int32{3, 2} {
			if err := other.Delete(ctx, zkstate.OwnerPath(group, "t", p), -1); err != nil {
				t.Fatal(err)
			}
		}
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
