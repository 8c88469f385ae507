package newproto

// Several bridges as one service (docs/several-bridges.md): every bridge must give a client the same answers,
// or the client swaps its broker set on every Metadata refresh and cannot find its coordinator.
// The bridge tells the router who the others are through Peers; the router then
//   - answers FindCoordinator for a group (every version, each key of a batched v4) with the
//     group's owner, which may be another bridge;
//   - lists every live bridge in Metadata, with the address each advertises in its
//     registration, so that the coordinator's node id resolves on every client.
// Our own node keeps the address computed as before (advertised, or the one the client
// dialed), so a bridge alone answers exactly as it did without Peers.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Peers names the other live bridges of one service. Its methods are called for every
// FindCoordinator and Metadata request: they must be cheap and safe for concurrent use.
type Peers interface {
	// Owner returns the bridge that coordinates group, with remote true when it is another
	// bridge; remote false means this bridge (or none is known: this bridge answers).
	Owner(group string) (b Broker, remote bool)
	// Others returns the other live bridges as Metadata lists them.
	Others() []Broker
}

// groupOwner is the node FindCoordinator names for group: a peer, or self.
func (r *router) groupOwner(group string, self Broker) Broker {
	if r.peers == nil {
		return self
	}
	if b, remote := r.peers.Owner(group); remote && b.NodeID != self.NodeID {
		return b
	}
	return self
}

// otherBridges is the peers Metadata lists beside our node; none without Peers.
func (r *router) otherBridges(self Broker) []Broker {
	if r.peers == nil {
		return nil
	}
	var out []Broker
	for _, b := range r.peers.Others() {
		if b.NodeID != self.NodeID {
			out = append(out, b)
		}
	}
	return out
}

// PeerLiveness, when Peers implements it, lets FindCoordinator hold an answer that would name a
// peer that looks dead. A bridge killed with its listeners stays in every bridge's live view
// until ZooKeeper expires its session, and until then no other bridge may serve its groups (the
// lease). Naming it makes a client fail at once on its dial and back off, and the backoffs
// double (franz-go: 250 ms × 2^n up to 5 s), so that when the group does move the client's next
// try is seconds away. Held, the answer goes out when the view changes: it then names the new
// owner, and the client's retry lands right after the takeover. Holding names nobody wrongly;
// only the answer's time changes.
type PeerLiveness interface {
	// Unreachable reports whether b, a peer Owner named, looks dead: its Kafka listener, reachable
	// before, refuses connections now. Called for every FindCoordinator naming a peer: it must be
	// cheap (a cached probe) and safe for concurrent use.
	Unreachable(b Broker) bool
	// Changed returns a channel closed at the next change of the live view.
	Changed() <-chan struct{}
}

// PeerSuccession, when Peers implements it beside PeerLiveness, names the bridge a group moves to
// once the peers that look dead are gone: FindCoordinator answers with it at once where it held
// the answer until the view changed (holdForLivePeer). That bridge does not serve the group
// before it holds it: it keeps the group's requests waiting until it does (the bridge's
// coordinator parks them, for at most as long as an answer would have been held). A client's
// commit then waits at the bridge that takes the group, and is the group's first request served
// after the takeover: the client's lookup, its dial of the new coordinator and its request are
// made while the dead peer's session runs out, not after it. A successor that does not see the
// owner look dead yet answers NOT_COORDINATOR, which the client retries with a lookup.
type PeerSuccession interface {
	// Successor returns the bridge that coordinates group once every peer that looks dead is
	// gone, with remote true when it is another bridge; ok is false when none is known. It must
	// be cheap and safe for concurrent use.
	Successor(group string) (b Broker, remote, ok bool)
}

// successor is the node group moves to from its owner, a peer that looks dead (PeerSuccession);
// ok is false when Peers does not say or names that owner still (the view has not left it out
// yet): the answer is held then, as before.
func (r *router) successor(group string, owner, self Broker) (Broker, bool) {
	s, ok := r.peers.(PeerSuccession)
	if !ok {
		return Broker{}, false
	}
	b, remote, ok := s.Successor(group)
	switch {
	case !ok:
		return Broker{}, false
	case !remote || b.NodeID == self.NodeID:
		return self, true
	case b.NodeID == owner.NodeID:
		return Broker{}, false
	}
	return b, true
}

// DefaultCoordinatorHold is Config.CoordinatorHold's default: longer than the ZooKeeper session
// timeouts bridges run with in tests and benchmarks (4 s) plus ZooKeeper's tick rounding, so that
// one held answer usually spans a dead bridge's expiry, and half of franz-go's default request
// timeout overhead (10 s), the shortest of the clients' defaults.
const DefaultCoordinatorHold = 5 * time.Second

// coordinatorRecheck is how often a held answer asks again without a view change: the dead peer
// may be back (a restart at the same address) without the view changing.
const coordinatorRecheck = 250 * time.Millisecond

// peerUnreachable asks PeerLiveness about b; false without it.
func (r *router) peerUnreachable(b Broker) bool {
	l, ok := r.peers.(PeerLiveness)
	return ok && r.hold > 0 && l.Unreachable(b)
}

// holdForLivePeer returns answer()'s response once it names no unreachable peer, or when
// r.hold has passed since the call, or ctx ends (the connection closed), or the server closes. A batched v4 request is
// held whole while any key names an unreachable peer: the response is one message, and a key
// answered at once with the dead peer would send its client into the backoff the hold avoids;
// the other keys wait at most r.hold (their clients look groups up one key at a time: a consumer
// has one group). The connection's later responses wait behind a held one (responses go out in
// request order): franz-go sends FindCoordinator on its general connection, with Metadata,
// whose answer names the dead peer's brokers until the same view change anyway.
func (r *router) holdForLivePeer(ctx context.Context, answer func() (kmsg.Response, bool)) kmsg.Response {
	l, ok := r.peers.(PeerLiveness)
	if !ok || r.hold <= 0 {
		resp, _ := answer()
		return resp
	}
	var closing <-chan struct{} // nil in unit tests without a Server
	if r.srv != nil {
		closing = r.srv.done
	}
	deadline := time.Now().Add(r.hold)
	var timer *time.Timer
	for {
		changed := l.Changed() // before answering, so that no change is missed
		resp, unreachable := answer()
		left := time.Until(deadline)
		if !unreachable || left <= 0 {
			if timer != nil {
				timer.Stop()
			}
			return resp
		}
		wait := min(left, coordinatorRecheck)
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-changed:
			timer.Stop()
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return resp
		case <-closing: // a closing server answers what it knows rather than delay its drain
			timer.Stop()
			return resp
		}
	}
}
