package bridge

// Whether a peer looks dead, for FindCoordinator's hold (newproto.PeerLiveness): a bridge killed
// with its listeners stays in the live view until ZooKeeper expires its session, and a client
// told to go there fails at once and backs off further each time. A peer looks dead when its
// Kafka listener refuses connections (or does not take one within probeTimeout) after it took
// one since it registered at that address: an address this bridge could never reach (one only
// the clients' network resolves) is never taken for a dead peer, so its answers are never held.
// A paused (SIGSTOP) bridge still takes connections in its kernel's backlog and is not held for:
// its answers are as before.

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/newproto"
)

var _ newproto.PeerLiveness = (*peerSet)(nil)

const (
	// probeTimeout bounds one dial of a peer's listener.
	probeTimeout = 500 * time.Millisecond
	// probeFor is how long a probe's result stands: a peer is dialed at most ten times a second
	// however many FindCoordinator requests name it, and a peer killed is seen dead within
	// 100 ms (a client's first retry after a failed dial comes 250 ms later: franz-go's first
	// backoff), and seen back within a held answer's recheck.
	probeFor = 100 * time.Millisecond
)

// liveness is the peerSet's probes and the channel closed at the next view change.
type liveness struct {
	changed chan struct{} // guarded by peerSet.mu; closed and replaced by viewChanged

	mu sync.Mutex
	by map[int32]*peerProbe // by node id
	// dial is net.DialTimeout; tests replace it.
	dial func(network, addr string, timeout time.Duration) (net.Conn, error)

	// settling is the peers whose end closed the connection held open to their listener
	// (peers_hangup.go), by when, until the result of a probe sent since counts: until then
	// Metadata waits (Settled). settled is closed while settling is empty.
	settleMu sync.Mutex
	settling map[int32]time.Time
	settled  chan struct{}
	// held is the connection held open to each peer's listener, which Settled peeks at, and
	// heldAt when it was opened.
	held   map[int32]net.Conn
	heldAt map[int32]time.Time
}

// peerProbe is the last probe of one peer's Kafka listener.
type peerProbe struct {
	mu     sync.Mutex
	addr   string
	at     time.Time // when the last probe answered; zero: never probed
	sent   time.Time // when the probe whose result is recorded was sent
	down   bool
	everUp bool // a connection was taken at addr
}

func (l *liveness) init() {
	l.changed = make(chan struct{})
	l.by = map[int32]*peerProbe{}
	l.dial = net.DialTimeout
	l.settling = map[int32]time.Time{}
	l.held = map[int32]net.Conn{}
	l.heldAt = map[int32]time.Time{}
	l.settled = make(chan struct{})
	close(l.settled)
}

// Changed implements newproto.PeerLiveness.
func (p *peerSet) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes.changed
}

// viewChanged wakes the held answers; p.mu is held.
func (p *peerSet) viewChanged() {
	close(p.probes.changed)
	p.probes.changed = make(chan struct{})
}

// Unreachable implements newproto.PeerLiveness: a probe at most probeFor old answers (the
// probes of watchPeers keep one fresh); concurrent callers share one dial.
func (p *peerSet) Unreachable(b newproto.Broker) bool {
	pr := p.probes.probeAt(b.NodeID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.at.IsZero() || time.Since(pr.at) >= probeFor {
		p.probes.dialLocked(pr)
	}
	return pr.down && pr.everUp
}

// probeAt is the probe record of node id at addr: a peer re-registered at another address is a
// new peer, which has to take a connection before it can look dead.
func (l *liveness) probeAt(id int32, addr string) *peerProbe {
	l.mu.Lock()
	defer l.mu.Unlock()
	pr := l.by[id]
	if pr == nil || pr.addr != addr {
		pr = &peerProbe{addr: addr}
		l.by[id] = pr
	}
	return pr
}

// dialLocked dials pr's address and records the result; pr.mu is held.
func (l *liveness) dialLocked(pr *peerProbe) probeOutcome {
	sent := time.Now()
	err := l.dialOnce(pr.addr)
	pr.record(sent, err)
	return outcomeOf(err)
}

// dialOnce dials addr and closes the connection it got.
func (l *liveness) dialOnce(addr string) error {
	l.mu.Lock()
	dial := l.dial
	l.mu.Unlock()
	c, err := dial("tcp", addr, probeTimeout)
	if err == nil {
		_ = c.Close()
	}
	return err
}

// record keeps the result of a probe sent at sent, unless a later-sent probe's is recorded;
// pr.mu is held.
func (pr *peerProbe) record(sent time.Time, err error) {
	if err == nil {
		pr.everUp = true
	}
	if sent.Before(pr.sent) {
		return
	}
	pr.down, pr.at, pr.sent = err != nil, time.Now(), sent
}

// probeNow dials node id's listener at addr, sent at sent, and records the result (watchPeers).
// The dial holds no lock: the probes of one peer overlap when one hangs.
func (l *liveness) probeNow(id int32, addr string, sent time.Time) probeOutcome {
	pr := l.probeAt(id, addr)
	err := l.dialOnce(addr)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.record(sent, err)
	return outcomeOf(err)
}

// reached reports whether node id's listener took a connection at addr, from any dial of it
// (the watch's probes, the join's, FindCoordinator's hold).
func (l *liveness) reached(id int32, addr string) bool {
	l.mu.Lock()
	pr := l.by[id]
	l.mu.Unlock()
	if pr == nil {
		return false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.addr == addr && pr.everUp
}

// probeJoined probes the peers that joined the live view, so that a peer killed before any
// FindCoordinator named it is known to have been up.
func (p *peerSet) probeJoined(old, cur *liveView) {
	for id, reg := range cur.others {
		if _, ok := old.others[id]; ok {
			continue
		}
		if b, ok := brokerOf(reg); ok {
			go p.Unreachable(b)
		}
	}
	// Forget the peers that left: a node id registering again starts over.
	p.probes.mu.Lock()
	defer p.probes.mu.Unlock()
	for id := range p.probes.by {
		if _, ok := cur.others[id]; !ok {
			delete(p.probes.by, id)
		}
	}
}
