package bridge

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// The group's goroutine never waits for ZooKeeper: a member's removal goes to the claimer as a
// request whose answer comes back as an event, like the claim. While ZooKeeper holds its answers
// back (a slow server, a stalled link), the actor goes on taking events in and sending requests
// to the members left; the removals and the rebalance they cause complete once ZooKeeper answers
// again.
func TestIntegration_LegacyActorServesWhileZooKeeperStalls(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	store, proxy, _ := legacyProxiedStore(t, 6*time.Second)
	legacySetTopic(t, store, "t", 2)
	env := legacyStart(t, store, "", nil)

	a := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	b := legacyRunConsumer(t, env.addr, "g", "b", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	c := legacyRunConsumer(t, env.addr, "g", "c", map[string]int{"t": 1}, legacyConsumerOpts{autoCommit: true})
	legacyEventually(t, "a, b and c share t", func() (bool, string) {
		st := env.coord.Stats()
		got := legacyOwnersInZK(t, store, "g")
		return st.LastRebalance.Members == 3 && got[legacy.TopicPartition{Topic: "t", Partition: 0}] == "a-0" &&
			got[legacy.TopicPartition{Topic: "t", Partition: 1}] == "b-0", fmt.Sprintf("owners %v, %+v", got, st.LastRebalance)
	})
	rebalances := env.coord.Stats().Rebalances

	// b leaves, then c: the actor takes both departures in while b's removal still waits for
	// ZooKeeper.
	proxy.Mute()
	b.stop()
	c.stop()
	deadline := time.Now().Add(3 * time.Second)
	for env.coord.Stats().Members != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	members := env.coord.Stats().Members
	proxy.Unmute()
	if members != 1 {
		t.Errorf("while ZooKeeper held its answers back, %d members were left after two of three hung up (want 1): the group's goroutine waited for ZooKeeper", members)
	}
	legacyWaitStable(t, store, "g", []*legacyTestConsumer{a}, map[string][]int32{"t": {0, 1}})
	legacyEventually(t, "a owns t alone", func() (bool, string) {
		st := env.coord.Stats()
		got := legacyOwnersInZK(t, store, "g")
		return st.Rebalances > rebalances && st.LastRebalance.Members == 1 && st.Members == 1 &&
				got[legacy.TopicPartition{Topic: "t", Partition: 0}] == "a-0" && got[legacy.TopicPartition{Topic: "t", Partition: 1}] == "a-0",
			fmt.Sprintf("owners %v, %+v", got, st)
	})
	for _, id := range []string{"b", "c"} {
		if ok, _, err := store.Exists(context.Background(), zkstate.IDPath("g", id)); err != nil || ok {
			t.Errorf("%s's registration exists %v (%v) after its removal", id, ok, err)
		}
	}
}
