package bridge

// A killed bridge's kernel closes every connection to its listeners the instant the process
// dies, and refuses new ones from then on. So every bridge holds one idle connection open to
// every other live bridge's Kafka listener (it sends nothing, and a bridge's listener sends
// nothing unasked), and when the other end closes it, probes that listener at once: a refusal
// sent after the hang-up makes the peer look dead then (peers_down.go: peerDown.hangup), not
// refusedFor later. The two together are what a process's death looks like from outside; a
// live bridge closes such a connection only at its idle timeout (its listener then takes the
// probe) or as it drains (out of the live view by then: its connection is let go first). A paused
// (SIGSTOP) process closes nothing and refuses nothing.
//
// Why it matters: the kill makes every client fetching through the dead bridge's proxy
// listeners refresh its metadata within milliseconds, and kgo's next refresh is
// metadata.min.age (5 s) later. Answered before any bridge left the dead one out, the refresh
// kept its addresses for the whole failover, and a member whose retried group lookups met two
// of them in a row ended its session. Every bridge sees the hang-up at the same instant, so
// the survivors also leave the dead bridge out within a dial of each other.

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// hangupReport is the end of one connection held open to peer id's listener.
type hangupReport struct {
	id  int32
	key peerDownKey
	at  time.Time // when its end closed it; zero: it could not be opened, or we closed it
}

// holdOpen opens a connection to peer id's listener and holds it until the other end closes it,
// unless one to that listener is held already; the end is reported on w.hangups.
func (w *probeWatch) holdOpen(id int32, key peerDownKey) {
	if h, ok := w.holding[id]; ok && h.key == key {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	w.holding[id] = heldConn{key, cancel}
	w.wg.Go(func() {
		defer cancel()
		r := hangupReport{id: id, key: key}
		if c, at := w.p.probes.dialHeld(id, key.addr); c != nil {
			stop := context.AfterFunc(ctx, func() { _ = c.Close() })
			w.p.probes.holding(id, c, at)
			_, _ = io.Copy(io.Discard, c) // until the other end closes it (or we do)
			stop()
			w.p.probes.holding(id, nil, time.Time{})
			_ = c.Close()
			if ctx.Err() == nil {
				r.at = time.Now()
				w.p.probes.hungUp(id, r.at)
				w.p.log.Debug().Int32("peer", id).Msg("a peer closed the connection held open to its listener: probing it, Metadata waits for the probe")
			}
		}
		select {
		case w.hangups <- r:
		case <-w.ctx.Done():
		}
	})
}

// letGo closes the connections held open to the peers no longer in the live view. A draining
// bridge leaves it first, and lingers while client connections are open (handover_linger.go):
// this one is no client.
func (w *probeWatch) letGo(others map[int32]zkstate.BridgeRegistration) {
	for id, h := range w.holding {
		if _, ok := others[id]; !ok {
			h.cancel()
			delete(w.holding, id)
		}
	}
}

// heldConn is the connection held open to one peer's listener.
type heldConn struct {
	key    peerDownKey
	cancel context.CancelFunc // closes it
}

// dialHeld dials node id's listener at addr and records the result as a probe's; it returns the
// connection and when it was taken, or nil if the dial failed.
func (l *liveness) dialHeld(id int32, addr string) (net.Conn, time.Time) {
	l.mu.Lock()
	dial := l.dial
	l.mu.Unlock()
	sent := time.Now()
	c, err := dial("tcp", addr, probeTimeout)
	pr := l.probeAt(id, addr)
	pr.mu.Lock()
	pr.record(sent, err)
	pr.mu.Unlock()
	if err != nil {
		return nil, time.Time{}
	}
	return c, time.Now()
}

// Settled implements newproto.PeerSettling: a channel closed once no peer whose end closed the
// connection held open to it awaits the probe that tells whether it died (closed already when
// none does). A client whose fetches went through a killed bridge's proxy listeners asks for
// Metadata as soon as its connection ends, which is when ours ends too: answered before the
// probe, the refresh named the dead bridge's addresses until kgo's next one, metadata.min.age
// (5 s) later, and a member of a group that bridge coordinated could meet two of them in a row
// in its group lookups and end its session. The mark is set the moment our read of the held
// connection ends, one wakeup after the peer's kernel closed it, which comes first by far
// against the client's request (its own wakeup, its metadata loop, its request on the wire and
// our read of it).
//
// It also looks at each held connection itself (peerClosed: whether the peer's end is closed,
// without reading): under load the goroutine reading it may wake milliseconds after the kernel
// has the peer's FIN, and a client's request in those milliseconds would still be answered
// with the dead bridge.
func (p *peerSet) Settled() <-chan struct{} {
	l := &p.probes
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	for id, c := range l.held {
		if _, marked := l.settling[id]; !marked && peerClosed(c) {
			l.hungUpLocked(id, time.Now())
		}
	}
	return l.settled
}

// holding notes c as the connection held open to peer id, opened at at (nil: none now).
func (l *liveness) holding(id int32, c net.Conn, at time.Time) {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if c == nil {
		delete(l.held, id)
		delete(l.heldAt, id)
		return
	}
	l.held[id], l.heldAt[id] = c, at
}

// heldSince is when the connection held open to peer id now was opened; zero if none is.
func (l *liveness) heldSince(id int32) time.Time {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	return l.heldAt[id]
}

// hungUp notes that peer id's end closed the connection held open to its listener at at:
// Settled waits until a probe sent since then counts (counted).
func (l *liveness) hungUp(id int32, at time.Time) {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	l.hungUpLocked(id, at)
}

// hungUpLocked is hungUp with l.settleMu held.
func (l *liveness) hungUpLocked(id int32, at time.Time) {
	if len(l.settling) == 0 {
		l.settled = make(chan struct{})
	}
	l.settling[id] = at
}

// counted notes that the standing of peer id took into account a probe sent at sent, and that
// the view built from it is installed: a hang-up noted before sent is settled. A zero sent
// settles peer id's hang-up whenever it came (the peer left the view, or the watch dropped it).
func (l *liveness) counted(id int32, sent time.Time) {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	at, ok := l.settling[id]
	if !ok || !sent.IsZero() && sent.Before(at) {
		return
	}
	delete(l.settling, id)
	if len(l.settling) == 0 {
		close(l.settled)
	}
}

// afterProbe updates Metadata's wait after a probe of peer id sent at sent met o and the view
// built from the standing d is installed. A peer refused since its listener last took a
// connection, and not out yet, is suspect: a killed process's kernel tears its sockets down one
// at a time, over hundreds of milliseconds under load (its clients' connections ended over 0.5 s
// in a traced run), so the connection held open to it may end after its listener closed, and the
// rule then decides refusedFor after the first refusal; the clients refreshing at the kill ask in
// between. Metadata waits (at most MetadataSettleWait) until that is decided: the peer out, or
// a probe taken or silent. Otherwise a probe sent since a hang-up settles it once d has no
// hang-up left to decide, or was silent.
func (l *liveness) afterProbe(id int32, sent time.Time, o probeOutcome, d peerDown) {
	if d.everUp && !d.out && !d.refusedSince.IsZero() {
		l.hungUp(id, sent)
		return
	}
	if d.settled() || o == probeSilent {
		l.counted(id, sent)
	}
}

// settleAll settles every hang-up: the watch that would probe after them has ended.
func (l *liveness) settleAll() {
	l.settleMu.Lock()
	defer l.settleMu.Unlock()
	if len(l.settling) > 0 {
		clear(l.settling)
		close(l.settled)
	}
}
