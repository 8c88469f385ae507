package newproto_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// livePeers is fakePeers with PeerLiveness: the peers in down refuse connections; move changes
// a group's owner and the view.
type livePeers struct {
	mu      sync.Mutex
	owners  map[string]newproto.Broker
	down    map[int32]bool
	changed chan struct{}
}

func newLivePeers(owners map[string]newproto.Broker, down ...int32) *livePeers {
	p := &livePeers{owners: owners, down: map[int32]bool{}, changed: make(chan struct{})}
	for _, id := range down {
		p.down[id] = true
	}
	return p
}

func (p *livePeers) Owner(group string) (newproto.Broker, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.owners[group]
	return b, ok
}

func (p *livePeers) Others() []newproto.Broker { return nil }

func (p *livePeers) Unreachable(b newproto.Broker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.down[b.NodeID]
}

func (p *livePeers) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// move makes group ours (the dead peer's session expired and the view changed).
func (p *livePeers) move(group string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.owners, group)
	close(p.changed)
	p.changed = make(chan struct{})
}

// A FindCoordinator answer that would name a peer whose listener refuses connections is held
// until the view changes, then names the new owner: at every version, a batched v4 held whole.
// A reachable peer is named at once.
func TestFindCoordinatorHeldWhileOwnerUnreachable(t *testing.T) {
	dead := newproto.Broker{NodeID: 9002, Host: "bridge-2.test", Port: 29092}
	live := newproto.Broker{NodeID: 9003, Host: "bridge-3.test", Port: 39092}
	for _, v := range kafkatest.Versions(0, 4) {
		peers := newLivePeers(map[string]newproto.Broker{"billing": dead, "audit": live}, dead.NodeID)
		ts := startServer(t, newproto.Config{NodeID: 9001, AdvertisedHost: "bridge-1.test", AdvertisedPort: 19092, Peers: peers})
		c := kafkatest.Dial(t, ts.addr)
		if got := findCoordinator(t, c, v, 0, "audit"); got[0].node != live.NodeID {
			t.Errorf("v%d: audit on %d, want the reachable peer %d at once", v, got[0].node, live.NodeID)
		}
		keys := []string{"billing"}
		if v >= 4 {
			keys = append(keys, "orders", "audit")
		}
		answered := make(chan []coordView, 1)
		go func() { answered <- findCoordinator(t, c, v, 0, keys...) }()
		select {
		case got := <-answered:
			t.Fatalf("v%d: answered %+v while billing's owner is unreachable, want held", v, got)
		case <-time.After(300 * time.Millisecond):
		}
		peers.move("billing")
		var got []coordView
		select {
		case got = <-answered:
		case <-time.After(3 * time.Second):
			t.Fatalf("v%d: still held after the view changed", v)
		}
		want := []coordView{{"billing", 9001, "bridge-1.test", 19092, 0, false}, {"orders", 9001, "bridge-1.test", 19092, 0, false},
			{"audit", 9003, "bridge-3.test", 39092, 0, false}}
		if !slices.Equal(got, want[:len(keys)]) {
			t.Errorf("v%d: got %+v, want %+v", v, got, want[:len(keys)])
		}
	}
}

// A held answer goes out at Config.CoordinatorHold naming the owner as it stands (the dead
// peer's session has not expired: no other bridge may be named); a negative hold never holds.
func TestFindCoordinatorHoldBounded(t *testing.T) {
	dead := newproto.Broker{NodeID: 9002, Host: "bridge-2.test", Port: 29092}
	for _, tc := range []struct {
		hold     time.Duration
		min, max time.Duration
	}{
		{400 * time.Millisecond, 400 * time.Millisecond, 4 * time.Second},
		{-1, 0, time.Second},
	} {
		peers := newLivePeers(map[string]newproto.Broker{"billing": dead}, dead.NodeID)
		ts := startServer(t, newproto.Config{NodeID: 9001, AdvertisedHost: "bridge-1.test", AdvertisedPort: 19092,
			Peers: peers, CoordinatorHold: tc.hold})
		c := kafkatest.Dial(t, ts.addr)
		start := time.Now()
		got := findCoordinator(t, c, 3, 0, "billing")
		took := time.Since(start)
		if got[0].node != dead.NodeID {
			t.Errorf("hold %v: named %d, want the owner %d", tc.hold, got[0].node, dead.NodeID)
		}
		if took < tc.min || took > tc.max {
			t.Errorf("hold %v: answered after %v, want within [%v, %v]", tc.hold, took, tc.min, tc.max)
		}
	}
}

// succeedingPeers is livePeers with PeerSuccession: next names, by group, the bridge it moves to
// once the peers that look dead are gone.
type succeedingPeers struct {
	*livePeers
	next map[string]newproto.Broker
	self int32
}

func (p *succeedingPeers) Successor(group string) (newproto.Broker, bool, bool) {
	b, ok := p.next[group]
	return b, ok && b.NodeID != p.self, ok
}

// An answer that would name a peer that looks dead names, at once, the bridge the group moves to
// when Peers knows it (PeerSuccession): another bridge, or this one; a group whose successor is
// not known, or is the dead owner still (the view has not left it out yet), is held as before.
func TestFindCoordinatorNamesTheSuccessorOfAnUnreachableOwner(t *testing.T) {
	dead := newproto.Broker{NodeID: 9002, Host: "bridge-2.test", Port: 29092}
	live := newproto.Broker{NodeID: 9003, Host: "bridge-3.test", Port: 39092}
	self := newproto.Broker{NodeID: 9001, Host: "bridge-1.test", Port: 19092}
	for _, v := range kafkatest.Versions(0, 4) {
		peers := &succeedingPeers{
			livePeers: newLivePeers(map[string]newproto.Broker{"billing": dead, "orders": dead, "audit": dead, "ledger": dead}, dead.NodeID),
			next:      map[string]newproto.Broker{"billing": live, "orders": self, "ledger": dead},
			self:      self.NodeID,
		}
		ts := startServer(t, newproto.Config{NodeID: 9001, AdvertisedHost: "bridge-1.test", AdvertisedPort: 19092, Peers: peers})
		c := kafkatest.Dial(t, ts.addr)
		for _, tc := range []struct {
			group string
			want  newproto.Broker
		}{{"billing", live}, {"orders", self}} {
			answered := make(chan []coordView, 1)
			go func() { answered <- findCoordinator(t, c, v, 0, tc.group) }()
			select {
			case got := <-answered:
				if got[0].node != tc.want.NodeID || got[0].host != tc.want.Host || got[0].port != tc.want.Port {
					t.Errorf("v%d: %s on %+v, want its successor %+v", v, tc.group, got[0], tc.want)
				}
			case <-time.After(3 * time.Second):
				t.Fatalf("v%d: %s held while its successor is known", v, tc.group)
			}
		}
		for _, group := range []string{"audit", "ledger"} {
			answered := make(chan []coordView, 1)
			go func() { answered <- findCoordinator(t, c, v, 0, group) }()
			select {
			case got := <-answered:
				t.Fatalf("v%d: %s answered %+v, want held (no successor other than its owner)", v, group, got)
			case <-time.After(300 * time.Millisecond):
			}
			peers.move(group)
			select {
			case <-answered:
			case <-time.After(3 * time.Second):
				t.Fatalf("v%d: %s still held after the view changed", v, group)
			}
		}
	}
}
