package bridge

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/newproto"
)

// A peer looks dead only when its listener refuses a connection after it took one at that
// address; an address never reached is never taken for a dead peer, and a peer registered
// again at another address starts over. A probe's result stands probeFor.
func TestPeerUnreachableNeedsAnEarlierConnection(t *testing.T) {
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	var mu sync.Mutex
	up := map[string]bool{}
	dials := 0
	p.probes.dial = func(_, addr string, _ time.Duration) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		dials++
		if up[addr] {
			c1, c2 := net.Pipe()
			_ = c2.Close()
			return c1, nil
		}
		return nil, errors.New("connection refused")
	}
	set := func(addr string, v bool) {
		mu.Lock()
		defer mu.Unlock()
		up[addr] = v
	}
	peer := newproto.Broker{NodeID: 9002, Host: "bridge-2.test", Port: 29092}
	addr := "bridge-2.test:29092"
	if p.Unreachable(peer) {
		t.Fatal("a peer never reached looks dead")
	}
	time.Sleep(probeFor)
	set(addr, true)
	if p.Unreachable(peer) {
		t.Fatal("a peer taking connections looks dead")
	}
	set(addr, false)
	if p.Unreachable(peer) {
		t.Fatal("the probe's result did not stand")
	}
	time.Sleep(probeFor)
	if !p.Unreachable(peer) {
		t.Fatal("a peer that took a connection and now refuses one does not look dead")
	}
	moved := peer
	moved.Port = 29093
	if p.Unreachable(moved) {
		t.Fatal("a peer at a new address looks dead before it took a connection there")
	}
	mu.Lock()
	defer mu.Unlock()
	if dials != 4 {
		t.Errorf("%d dials, want 4 (one per probe past probeFor)", dials)
	}
}
