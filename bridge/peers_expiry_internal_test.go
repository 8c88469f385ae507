package bridge

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// peersExpiryRTT is how late the proxy hands the survivor's Store every ZooKeeper answer and
// event in TestIntegration_PeersSeeAnExpiryWithoutARoundTrip.
const peersExpiryRTT = 300 * time.Millisecond

// When a bridge's session ends, ZooKeeper deletes its registration and tells every survivor:
// the registration's data watch fires (NodeDeleted), then <root>/bridges' children watch. The
// survivor's view drops the bridge as the first tells it, without a read: the time from the
// deletion to the view without it is the one delay of the event itself, not two (the event,
// then the children read again before the children's change was delivered). At that view the
// bridge has no registration either (hasRegistration), so that a rescan takes its groups rather
// than waiting for their release. A registration made again under the id (a new session) is
// read into the view, and a late deletion of the old one does not take it out.
func TestIntegration_PeersSeeAnExpiryWithoutARoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	store := zktest.OpenStore(t, proxy.Addr()+connect[i:])
	const root = "/zkbridge"
	register := func(id int32, kafka string) *zkstate.Store {
		t.Helper()
		s := zktest.OpenStore(t, connect) // the bridge's own session
		reg := zkstate.BridgeRegistration{NodeID: id, Kafka: kafka}
		if err := s.Create(ctx, zkstate.BridgePath(root, id), reg.Encode(), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	dead := register(2, "127.0.0.1:19092")
	register(3, "127.0.0.1:19093")

	p := newPeerSet(1, root, zerolog.Nop())
	type seen struct {
		ids        []int32
		registered bool // hasRegistration(2) at the view
		at         time.Time
	}
	var mu sync.Mutex
	var views []seen
	p.subscribe(func(_, cur *liveView) {
		mu.Lock()
		defer mu.Unlock()
		views = append(views, seen{ids: cur.ids, registered: p.hasRegistration(2), at: time.Now()})
	})
	w, err := p.start(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.follow(ctx, store, w)
	}()
	defer func() { cancel(); <-done }()
	zktest.Eventually(t, 10*time.Second, "the view of 1, 2 and 3", func() bool {
		return slices.Equal(p.current().ids, []int32{1, 2, 3})
	})
	// follow sets the registrations' data watches and reads them once more after the first
	// view (2 gets each, beside start's 2): wait until the survivor sent them all, then until a
	// read sent after them is answered (a session's requests are answered in order), so that
	// follow waits for events when the delay starts.
	zktest.Eventually(t, 10*time.Second, "the registrations watched", func() bool {
		return store.Requests()[zkstate.ReqGet] >= 6
	})
	if _, _, err := store.Exists(ctx, "/"); err != nil {
		t.Fatal(err)
	}

	proxy.SetDelay(peersExpiryRTT)
	mu.Lock()
	views = nil
	mu.Unlock()
	start := time.Now()
	if err := dead.Close(); err != nil { // the session ends: ZooKeeper deletes the registration
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "the view without 2", func() bool {
		return slices.Equal(p.current().ids, []int32{1, 3})
	})
	mu.Lock()
	first := views[0]
	mu.Unlock()
	took := first.at.Sub(start)
	if n := float64(took) / float64(peersExpiryRTT); n > 1.9 {
		t.Errorf("session end → view without 2 took %v, %.1f round trips of %v; want the deletion's event only (at most 1.9)", took, n, peersExpiryRTT)
	}
	if !slices.Equal(first.ids, []int32{1, 3}) || first.registered {
		t.Errorf("first view after the session end: %v, 2 registered %v; want [1 3], not registered", first.ids, first.registered)
	}

	// Registered again (a new session): read into the view, and it stays there.
	proxy.SetDelay(0)
	register(2, "127.0.0.1:29092")
	zktest.Eventually(t, 10*time.Second, "2 back in the view with its new registration", func() (bool, string) {
		r := p.current().others[2]
		return r.Kafka == "127.0.0.1:29092" && p.hasRegistration(2), r.Kafka
	})
	time.Sleep(500 * time.Millisecond)
	if r := p.current().others[2]; r.Kafka != "127.0.0.1:29092" || !p.hasRegistration(2) {
		t.Errorf("2 after its new registration settled: %+v, registered %v; want it at 127.0.0.1:29092", r, p.hasRegistration(2))
	}
}
