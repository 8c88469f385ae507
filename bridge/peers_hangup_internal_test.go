package bridge

import (
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
)

// A peer killed looks dead at the first refusal after the connection held open to its listener
// was closed by its end (peers_hangup.go), not after refusedFor of refusals: the clients that
// refresh their metadata at the kill (their fetches through its proxy listeners end then) are
// told the survivors' view without it, instead of keeping its addresses for metadata.min.age.
// Counted in dials, not time: the refused dials up to the decision, at most 3 (the probe sent at
// the hang-up, and a tick's probe and reopening of the held connection racing it). Before, the
// rule needed the refusals to span refusedFor: at least 4 (5 seen).
func TestPeerLooksDeadAtTheFirstRefusalAfterItsHangUp(t *testing.T) {
	p, peer := heldPeer(t)
	atDecision := refusalsAtDecision(p, peer)
	defer watching(t, p)()
	time.Sleep(3 * probeEvery) // the peer took connections, one of them held open
	peer.kill()
	awaitDeadWithin3(t, atDecision)
}

// A peer whose listener refuses while the connection held open to it is still open looks dead at
// the first refusal (peers_down.go: peerDown.held): a killed bridge's listener, opened above its
// other descriptors, is the first socket its kernel closes, and under load the survivor read the
// held connection's end hundreds of milliseconds after the listener's first refusal (the
// survivors then decided under refusedFor, hung_up false, in two of three traced benchmark runs).
// Counted in dials: at most 3 refused to the decision; before, the rule needed the refusals to
// span refusedFor, at least 4.
func TestPeerLooksDeadAtTheFirstRefusalWhileHeld(t *testing.T) {
	p, peer := heldPeer(t)
	atDecision := refusalsAtDecision(p, peer)
	defer watching(t, p)()
	time.Sleep(3 * probeEvery) // a connection held open
	peer.mu.Lock()
	peer.killed = true // its listener refuses from now on; the held connection stays open
	peer.mu.Unlock()
	awaitDeadWithin3(t, atDecision)
	if open := peer.open(); open == 0 {
		t.Error("no connection held open to the peer: the test did not test the rule")
	}
}

// A refusal while a connection held open to the peer's listener is open, in the order probes
// were sent: one sent after the connection was opened is death; one sent before it (answered
// late) only starts the refusals in a row.
func TestPeerHeldOpenInTheRule(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	up := peerDown{}.observe(at(0), probeTook)
	held := func(d peerDown, ms int) peerDown { d.held = at(ms); return d }
	for _, tc := range []struct {
		name string
		d    peerDown
		out  bool
	}{
		{"refused, held open since before the probe", held(up, 10).observe(at(100), probeRefused), true},
		{"refused, held open since after the probe was sent", held(up, 150).observe(at(100), probeRefused), false},
		{"refused, none held open", up.observe(at(100), probeRefused), false},
		{"silent, held open", held(up, 10).observe(at(100), probeSilent), false},
		{"never reached, held open", held(peerDown{}, 10).observe(at(100), probeRefused), false},
	} {
		if tc.d.out != tc.out {
			t.Errorf("%s: out %v, want %v", tc.name, tc.d.out, tc.out)
		}
	}
}

// refusalsAtDecision returns a channel that gets the peer's refused dials when p leaves it out
// (only ourselves named).
func refusalsAtDecision(p *peerSet, peer *fakePeer) <-chan int {
	atDecision := make(chan int, 1)
	p.subscribeNamed(func(_, cur *liveView) {
		if len(cur.named) == 1 {
			select {
			case atDecision <- peer.refusedDials():
			default:
			}
		}
	})
	return atDecision
}

// awaitDeadWithin3 waits for the peer to look dead (the refused dials counted at the decision)
// and checks that it took 1 to 3 of them.
func awaitDeadWithin3(t *testing.T, atDecision <-chan int) {
	t.Helper()
	select {
	case n := <-atDecision:
		if n < 1 || n > 3 {
			t.Errorf("the peer looked dead after %d refused dials, want 1 to 3", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the peer never looked dead")
	}
}

// The connection held open to a peer is closed once the peer leaves the live view: a draining
// bridge leaves it first, and lingers while client connections to it are open
// (handover_linger.go), which this one is not. Before, the drain of
// TestIntegration_SeveralBridgesDrainReleasesTheMirrorWhenTheBatchFails waited its 3 s linger
// for it, and its group was taken over meanwhile as one of a bridge that is gone.
func TestPeerHeldConnectionLetGoWhenThePeerLeaves(t *testing.T) {
	p, peer := heldPeer(t)
	defer watching(t, p)()
	time.Sleep(3 * probeEvery) // a connection held open
	p.publish(nil)             // 9002 drains: out of the live view
	deadline := time.Now().Add(5 * time.Second)
	for peer.open() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to a peer that left the live view still open", peer.open())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakePeer is a peer's listener for p.probes.dial: each connection taken is a net.Pipe whose far
// end the peer keeps until it is killed; killed, it refuses every dial.
type fakePeer struct {
	mu      sync.Mutex
	ends    []net.Conn
	closed  map[net.Conn]bool // ends whose connection our side closed
	killed  bool
	refused int
}

// heldPeer is a peerSet of 9001 with one live peer, 9002, dialed through a fakePeer.
func heldPeer(t *testing.T) (*peerSet, *fakePeer) {
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	f := &fakePeer{closed: map[net.Conn]bool{}}
	p.probes.dial = func(_, _ string, _ time.Duration) (net.Conn, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.killed {
			f.refused++
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		c1, c2 := net.Pipe()
		f.ends = append(f.ends, c2)
		go func() { // the far end sees our close as a read error
			_, _ = c2.Read(make([]byte, 1))
			f.mu.Lock()
			f.closed[c2] = true
			f.mu.Unlock()
		}()
		return c1, nil
	}
	p.publish(map[int32]zkstate.BridgeRegistration{9002: {NodeID: 9002, Kafka: "bridge-2.test:29092", StartedMs: 1}})
	return p, f
}

// kill closes the peer's ends of its connections (its kernel does, for a dead process) and
// refuses every dial from now on.
func (f *fakePeer) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = true
	for _, c := range f.ends {
		_ = c.Close()
	}
}

func (f *fakePeer) refusedDials() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused
}

// open is the connections taken and not closed by either side.
func (f *fakePeer) open() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.ends {
		if !f.closed[c] {
			n++
		}
	}
	return n
}

// The hang-up in the rule, in the order probes were sent: a refusal sent after the hang-up is
// death; one sent before it is not (it only starts the refusals in a row); a connection taken by
// a probe sent more than hangupGrace after the hang-up clears it, one sent before it or within
// the grace does not (a killed process's kernel may close the held connection before its
// listener: in a traced run at 300 groups both survivors decided by the 300 ms rule, 0.6 s after
// the kill); a hang-up learnt after a later-sent refusal has counted makes the peer look dead at
// once.
func TestPeerHangUpInTheRule(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	up := peerDown{}.observe(at(0), probeTook)
	for _, tc := range []struct {
		name string
		d    peerDown
		out  bool
	}{
		{"refused after the hang-up", up.hangup(at(50)).observe(at(60), probeRefused), true},
		{"refused before the hang-up", up.observe(at(40), probeRefused).hangup(at(50)), false},
		{"taken past the hang-up's grace, then refused", up.hangup(at(50)).observe(at(110), probeTook).observe(at(120), probeRefused), false},
		{"taken within the hang-up's grace (a dying kernel's listener not closed yet), then refused", up.hangup(at(50)).observe(at(60), probeTook).observe(at(70), probeRefused), true},
		{"the hang-up learnt after a connection within its grace, then refused", up.observe(at(60), probeTook).hangup(at(50)).observe(at(70), probeRefused), true},
		{"the hang-up learnt after a connection past its grace, then refused", up.observe(at(110), probeTook).hangup(at(50)).observe(at(120), probeRefused), false},
		{"taken before the hang-up (answered late), then refused", up.hangup(at(50)).observe(at(45), probeTook).observe(at(70), probeRefused), true},
		{"the hang-up learnt after a later refusal", up.observe(at(60), probeRefused).hangup(at(50)), true},
		{"the hang-up learnt after a later connection", up.observe(at(60), probeTook).hangup(at(50)), false},
		{"silent after the hang-up", up.hangup(at(50)).observe(at(60), probeSilent), false},
		{"never reached", peerDown{}.hangup(at(50)).observe(at(60), probeRefused), false},
	} {
		if tc.d.out != tc.out {
			t.Errorf("%s: out %v, want %v", tc.name, tc.d.out, tc.out)
		}
	}
}
