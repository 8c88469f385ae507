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
