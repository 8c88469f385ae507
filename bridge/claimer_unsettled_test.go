package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A create whose answer is lost (the request reached ZooKeeper, the reply came after the
// request's deadline) may have been applied. The claimer must not forget such a znode: the next
// release has to delete it, or an owner znode of our session outlives the release and keeps its
// partition from the group's next owner for as long as this bridge lives (seen under load after
// a fourth bridge joined: the new owner got NodeExists until the old bridge stopped).
func TestIntegration_ClaimerReleasesAnUnsettledCreate(t *testing.T) {
	t.Parallel()
	ours, proxy, connect := legacyProxiedStore(t, 6*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	observer := legacyOpenStore(t, connect)
	defer observer.Close()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cl := &claimer{store: ours, group: "g", log: zerolog.Nop(), metrics: m,
		kafka: kafkaPart{unsure: map[string][]byte{}}}
	held := &mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}
	owner := zkstate.OwnerPath("g", "t", 0)
	if err := observer.MultiAtomic(ctx, zkstate.CreateOp(zkstate.OwnersPath("g")+"/t", nil, zkstate.CreateOptions{Parents: true})); err != nil {
		t.Fatal(err)
	}

	proxy.Mute()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	claimed := cl.reconcile(short, held, mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{owner: []byte("k-0")}})
	cancelShort()
	zktest.Eventually(t, 5*time.Second, "the muted create reaching ZooKeeper", func() bool {
		ok, _, err := observer.Exists(ctx, owner)
		return err == nil && ok
	})
	proxy.Unmute()
	if claimed {
		t.Fatal("the claim succeeded although its answer was held back; the test did not lose the answer")
	}

	// The member leaves: the claimer releases everything it holds or may hold.
	if !cl.reconcile(ctx, held, mirrorState{ids: map[string][]byte{}, owners: map[string][]byte{}}) {
		t.Fatal("the release failed")
	}
	if ok, st, err := observer.Exists(ctx, owner); err != nil || ok {
		t.Errorf("the owner znode of the unsettled claim outlived the release (exists %v, session 0x%x, ours 0x%x, %v)", ok, st.EphemeralOwner, ours.SessionID(), err)
	}
}
