package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// The Kafka side of a mixed group remembers the owner znodes it created for its members and
// counts them as its own without reading them. One deleted behind its back (a 0.8.2 consumer
// deletes every owner it believes its own, ZCC:580-590; an operator; a release race) left the
// partition looking unowned to every 0.8 tool while a Kafka member consumed it, and a zk member
// could take it. A claim round that reads the owners anyway sees it gone and claims it again.
func TestIntegration_MixedClaimRecreatesAHeldOwnerDeletedBehindItsBack(t *testing.T) {
	t.Parallel()
	mc := newMixedCluster(t, "hg", map[string]int{"ta": 4})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	other := zktest.OpenStore(t, mc.connect)
	eph := zkstate.CreateOptions{Ephemeral: true, Parents: true}
	// Another member, first in sort order, registered for ta: range gives it ta-0 and ta-1.
	cid := mc.group + "_0other"
	id := zkstate.IDPath(mc.group, cid)
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"ta": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}.Encode()
	if err := other.Create(ctx, id, reg, eph); err != nil {
		t.Fatal(err)
	}
	mc.kafkaMember("k1")
	ta := func(p int32) mtp { return mtp{Topic: "ta", Partition: p} }
	zktest.Eventually(t, 30*time.Second, "k1 consuming ta-2 and ta-3", mc.views.consumes("k1", ta(2), ta(3)))
	owned := zkstate.OwnerPath(mc.group, "ta", 3)
	thread, _, err := other.Get(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}

	// k1's owner znode of ta-3 is deleted from outside. The other member then leaves, still
	// holding ta-0 (as a 0.8.2 consumer does until its session ends): k1's claim of ta-0 and
	// ta-1 fails, reads the owners and waits for ta-0.
	if err := other.Delete(ctx, owned, -1); err != nil {
		t.Fatal(err)
	}
	foreign := zkstate.OwnerPath(mc.group, "ta", 0)
	if err := other.Create(ctx, foreign, []byte(cid+"-0"), eph); err != nil {
		t.Fatal(err)
	}
	if err := other.Delete(ctx, id, -1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := other.Delete(ctx, foreign, -1); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 30*time.Second, "k1 consuming every partition", mc.views.consumes("k1", ta(0), ta(1), ta(2), ta(3)))
	taOwnedBy(t, ctx, other, mc.group, thread)
	mc.views.check(t)
}

// A generation whose first claim round succeeds reads no owner znode's data (the round is
// optimistic: its Multi's creates fail if someone holds one). It did not notice a held owner
// znode deleted behind its back either: the hole stayed until a claim that needed a second round.
// The first round lists the owner znodes' names (in the waves it reads anyway) and claims again
// a held one that is not listed. Here the generation gives the Kafka member nothing new to claim:
// a registration for tb only takes tb-0 away from it.
func TestIntegration_MixedFirstRoundRecreatesAHeldOwnerDeletedBehindItsBack(t *testing.T) {
	t.Parallel()
	mc := newMixedCluster(t, "hf", map[string]int{"ta": 4, "tb": 1})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	other := zktest.OpenStore(t, mc.connect)
	mc.kafkaMember("k1")
	ta := func(p int32) mtp { return mtp{Topic: "ta", Partition: p} }
	zktest.Eventually(t, 30*time.Second, "k1 consuming every partition",
		mc.views.consumes("k1", ta(0), ta(1), ta(2), ta(3), mtp{Topic: "tb", Partition: 0}))
	owned := zkstate.OwnerPath(mc.group, "ta", 3)
	thread, _, err := other.Get(ctx, owned)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Delete(ctx, owned, -1); err != nil {
		t.Fatal(err)
	}
	// Another consumer, first in sort order, registers for tb only: it is given tb-0, and k1
	// keeps ta. Its owner znode is left alone: nothing for k1 to wait for.
	id := zkstate.IDPath(mc.group, mc.group+"_0other")
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"tb": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}.Encode()
	if err := other.Create(ctx, id, reg, zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 30*time.Second, "k1 consuming ta only", mc.views.consumes("k1", ta(0), ta(1), ta(2), ta(3)))
	taOwnedBy(t, ctx, other, mc.group, thread)
	if _, _, err := other.Get(ctx, zkstate.OwnerPath(mc.group, "tb", 0)); !errors.Is(err, zkstate.ErrNoNode) {
		t.Errorf("owner of tb-0 after k1 gave it up: %v, want it gone", err)
	}
	mc.views.check(t)
}

// taOwnedBy waits for the owner znode of ta-3 (the one the test deleted) to hold thread again,
// then checks that every owner znode of ta (4 partitions) holds it.
func taOwnedBy(t *testing.T, ctx context.Context, other *zkstate.Store, group string, thread []byte) {
	t.Helper()
	owned := zkstate.OwnerPath(group, "ta", 3)
	zktest.Eventually(t, 10*time.Second, "the owner znode of ta-3 back with k1's thread", func() (bool, string) {
		data, _, err := other.Get(ctx, owned)
		return err == nil && string(data) == string(thread), fmt.Sprintf("%s: %q, %v; want %q", owned, data, err, thread)
	})
	for p := range int32(4) {
		if data, _, err := other.Get(ctx, zkstate.OwnerPath(group, "ta", p)); err != nil || string(data) != string(thread) {
			t.Errorf("owner of ta-%d: %q, %v; want %q", p, data, err, thread)
		}
	}
}
