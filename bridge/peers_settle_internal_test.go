package bridge

import (
	"net"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Metadata waits while a peer that closed the connection held open to it is being probed
// (Settled, peers_hangup.go): from the hang-up until a probe sent after it counts, Settled is
// open, and once it closes the view leaves the dead peer out, so that a Metadata answered then is
// the survivors' view. Here the probes after the kill wait for release.
func TestPeerSettledOnceTheProbeAfterTheHangUpCounts(t *testing.T) {
	p, peer := heldPeer(t)
	release := make(chan struct{})
	p.probes.mu.Lock()
	dial := p.probes.dial
	p.probes.dial = func(network, addr string, timeout time.Duration) (net.Conn, error) {
		peer.mu.Lock()
		killed := peer.killed
		peer.mu.Unlock()
		if killed {
			<-release
		}
		return dial(network, addr, timeout)
	}
	p.probes.mu.Unlock()
	defer watching(t, p)()
	time.Sleep(3 * probeEvery) // a connection held open
	if !closed(p.Settled()) {
		t.Fatal("Settled is open with no hang-up")
	}
	peer.kill()
	for deadline := time.Now().Add(5 * time.Second); closed(p.Settled()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("Settled never opened after the peer's hang-up")
		}
	}
	time.Sleep(2 * probeEvery)
	if closed(p.Settled()) {
		close(release)
		t.Fatal("Settled closed while every probe since the hang-up is unanswered")
	}
	close(release)
	select {
	case <-p.Settled():
	case <-time.After(5 * time.Second):
		t.Fatal("Settled still open 5 s after the probes were answered")
	}
	if named := p.view.Load().named; slices.Contains(named, 9002) {
		t.Errorf("settled with the dead peer still named: %v", named)
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Settled looks at the held connection itself: a peer's FIN waiting in the socket opens it
// before the goroutine reading that connection has woken (under load, milliseconds after the
// kernel got it), so that a client's Metadata in those milliseconds waits too. Here nothing
// reads the connection.
func TestPeerSettledSeesAHangUpNotReadYet(t *testing.T) {
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	far, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	p.probes.holding(9002, c, time.Now())
	if !closed(p.Settled()) {
		t.Fatal("Settled is open while the peer holds its end open")
	}
	_ = far.Close()
	for deadline := time.Now().Add(2 * time.Second); closed(p.Settled()); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Settled still closed 2 s after the peer closed its end of the held connection")
		}
	}
	p.probes.holding(9002, nil, time.Time{}) // its reader saw the end, as holdOpen's does before reporting it
	p.probes.counted(9002, time.Now())
	if !closed(p.Settled()) {
		t.Error("Settled still open after a probe sent since counted")
	}
}

// A killed peer whose listener still takes the probe sent at the hang-up (its kernel closed the
// connection held open to it before its listener) looks dead at the next refusal, not after
// refusedFor of refusals: a connection taken within hangupGrace of the hang-up does not clear it.
// Counted in dials: at most 3 refused to the decision (5 or more when the take cleared it).
func TestPeerLooksDeadDespiteATakeAsItDies(t *testing.T) {
	p, peer := heldPeer(t)
	taken := false
	p.probes.mu.Lock()
	dial := p.probes.dial
	p.probes.dial = func(network, addr string, timeout time.Duration) (net.Conn, error) {
		peer.mu.Lock()
		takeOnce := peer.killed && !taken
		taken = taken || takeOnce
		peer.mu.Unlock()
		if takeOnce { // the dying listener takes it, then the connection is reset
			c, far := net.Pipe()
			_ = far.Close()
			return c, nil
		}
		return dial(network, addr, timeout)
	}
	p.probes.mu.Unlock()
	atDecision := refusalsAtDecision(p, peer)
	defer watching(t, p)()
	time.Sleep(3 * probeEvery)
	peer.kill()
	awaitDeadWithin3(t, atDecision)
}

// A peer refused since its listener last took a connection, and not out yet, is suspect
// (liveness.afterProbe): Settled is open until the rule decides (out, or a probe taken), so that a
// client refreshing in between is told the survivors' view. With a connection held open to the
// peer the first refusal decides (TestPeerLooksDeadAtTheFirstRefusalWhileHeld); without one
// (none could be opened), the refusals decide after refusedFor.
func TestPeerSettledWaitsForTheRefusalsRule(t *testing.T) {
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	l := &p.probes
	start := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	d := peerDown{}.observe(at(0), probeTook)
	l.afterProbe(9002, at(0), probeTook, d)
	if !closed(p.Settled()) {
		t.Fatal("Settled open while the peer takes connections")
	}
	for ms := 100; ms <= 300; ms += 100 {
		d = d.observe(at(ms), probeRefused)
		l.afterProbe(9002, at(ms), probeRefused, d)
		if d.out || closed(p.Settled()) {
			t.Fatalf("%d ms: out %v, Settled closed %v; want a suspect peer not out yet, Settled open", ms, d.out, closed(p.Settled()))
		}
	}
	d = d.observe(at(400), probeRefused)
	l.afterProbe(9002, at(400), probeRefused, d)
	if !d.out || !closed(p.Settled()) {
		t.Fatalf("refused for refusedFor: out %v, Settled closed %v; want out and settled", d.out, closed(p.Settled()))
	}
}
