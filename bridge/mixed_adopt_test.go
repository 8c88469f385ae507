package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// A mixed group's Kafka member's ephemerals, handed over by one bridge's session: the next
// owner's session adopts them in one Multi, and the old owner's wait ends at once without
// deleting anything ("adopted"); or the adoption refuses a znode that does not hold what the
// new owner would write, changes nothing, and the old owner deletes its znodes once adoptWait
// is over ("refused").
func TestIntegration_AdoptionReplacesOrReleases(t *testing.T) {
	t.Parallel()
	for _, adopted := range []bool{true, false} {
		name := "refused"
		if adopted {
			name = "adopted"
		}
		t.Run(name, func(t *testing.T) { testAdoption(t, adopted) })
	}
}

func testAdoption(t *testing.T, adopted bool) {
	connect := legacyConnect(t)
	old, nu := legacyOpenStore(t, connect), legacyOpenStore(t, connect)
	t.Cleanup(func() { old.Close(); nu.Close() })
	legacyMixedLayout(t, old, map[string]int{"t": 2})
	const g, root, cid = "adopt", "/zkbridge", "adopt_host-1700000000000-0000abcd"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	held := func(node int32, topics ...string) mirrorState {
		sub := map[string]int{}
		for _, tp := range topics {
			sub[tp] = 1
		}
		reg := zkstate.ConsumerRegistration{Version: 1, Subscription: sub, Pattern: zkstate.PatternStatic, TimestampMs: 1700000000000}
		h := zkstate.HostedMember{Kind: zkstate.KindKafka, Node: node, Member: "m"}
		th := []byte(zkstate.ThreadIDs(cid, 1)[0])
		return mirrorState{
			ids:    map[string][]byte{zkstate.IDPath(g, cid): reg.Encode(), zkstate.HostedMemberPath(root, g, cid): h.Encode()},
			owners: map[string][]byte{zkstate.OwnerPath(g, "t", 0): th, zkstate.OwnerPath(g, "t", 1): th},
		}
	}
	sessionOf := func(p string) int64 {
		_, st, err := nu.Get(ctx, p)
		if err != nil {
			return 0
		}
		return st.EphemeralOwner
	}
	paths := func(ms mirrorState) []string {
		return append(sortedPaths(ms.ids), sortedPaths(ms.owners)...)
	}

	// The old owner's claimer holds them, then hands them over.
	cs := newClaimers()
	cl := cs.join(claimerConfig{store: old, group: g, retry: 100 * time.Millisecond, log: legacyTestLogger(t)})
	cl.update(held(1, "t"))
	for _, p := range paths(held(1, "t")) {
		for sessionOf(p) != old.SessionID() {
			if ctx.Err() != nil {
				t.Fatalf("%s never held by the old owner", p)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	handed := cl.handOver()
	cs.drop(cl)
	c := &coordinator{log: legacyTestLogger(t)}
	c.adopting.Add(1)
	waited := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		c.awaitAdoption(ctx, old, g, handed)
		waited <- time.Since(start)
	}()

	// The next owner, holding the group's epoch.
	epoch := zkstate.EpochPath(root, g)
	if err := nu.Create(ctx, epoch, []byte("{}"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	ncs := newClaimers()
	ncl := ncs.join(claimerConfig{store: nu, group: g, retry: 100 * time.Millisecond, log: legacyTestLogger(t)})
	t.Cleanup(func() { ncl.leave(false, false); ncs.drop(ncl) })
	want := held(2, "t") // the hosted-member znode names its new host
	if !adopted {
		want = held(2, "t", "u") // a registration that says something else
	}
	in := mixedInput{Group: g, Strategy: legacy.StrategyRange, Members: []mixedMember{{ID: "m", CID: cid, Topics: []string{"t"}}}}
	res := ncl.adoptNow(ctx, adoptRequest{want: want, epoch: epoch, version: 0, in: in, result: make(chan adoptResult, 1)})
	if res.adopted != adopted {
		t.Fatalf("adopted = %v (%s), want %v", res.adopted, res.why, adopted)
	}
	d := <-waited
	for _, p := range paths(want) {
		switch s := sessionOf(p); {
		case adopted && s != nu.SessionID():
			t.Errorf("%s is session %#x's after the adoption, want the new owner's %#x", p, s, nu.SessionID())
		case !adopted && s != 0:
			t.Errorf("%s is session %#x's after the old owner gave up, want deleted", p, s)
		}
	}
	switch {
	case adopted && res.fingerprint == "":
		t.Errorf("adopted, but the restored assignment is not taken as current: %s", res.why)
	case adopted && d > adoptWait/2:
		t.Errorf("the old owner waited %v after the adoption", d)
	case !adopted && d < adoptWait:
		t.Errorf("the old owner released after %v, before adoptWait (%v)", d, adoptWait)
	}
}
