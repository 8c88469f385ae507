package newproto

// FindCoordinator, key 10: versions 0-4.
//
// Version notes:
//   - v0: one group id in, error + coordinator node id, host, port out.
//   - v1: CoordinatorType (0 group, 1 transaction), ThrottleMillis,
//     ErrorMessage.
//   - v2: no change in the body (throttle after response, KIP-219).
//   - v3: flexible versions.
//   - v4: batched lookups (KIP-699): CoordinatorKeys in, one Coordinators
//     entry per key out, each with its own error.
//   - v5 (TRANSACTION_ABORTABLE, KIP-890) and v6 (share groups, KIP-932):
//     not served.
//
// A group's coordinator is the bridge's own node, or, with several bridges
// as one service (Config.Peers, peers.go), the bridge that owns the group,
// with the address it advertises. Transactions are not coordinated by
// the bridge: a transaction key gets COORDINATOR_NOT_AVAILABLE with an
// error message saying why (v1+). Any other key type is INVALID_REQUEST,
// as Kafka answers it.
//
// While the Coordinator says it cannot serve any group (Availability: the
// bridge without ZooKeeper), a group key gets COORDINATOR_NOT_AVAILABLE
// with the reason, which clients back off on and retry, rather than a node
// whose every group answer would be that.
//
// With several bridges, an answer that would name a peer that looks dead (its listener refuses
// connections: Peers implements PeerLiveness) names the bridge the group moves to once that peer
// is gone, when Peers knows it (PeerSuccession: that bridge keeps the group's requests until it
// holds the group); else it is held until the live view changes or Config.CoordinatorHold
// passes (holdForLivePeer, peers.go).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { regKey(kmsg.FindCoordinator, 0, 4) }

// Coordinator key types (FindCoordinatorRequest.CoordinatorType).
const (
	coordinatorGroup       int8 = 0
	coordinatorTransaction int8 = 1
)

const errNoTxnCoordinator = "zkbridge coordinates consumer groups only; it has no transaction coordinator"

// available asks the Coordinator whether it can serve groups now.
func (r *router) available() error {
	if a, ok := r.coord.(Availability); ok {
		return a.Available()
	}
	return nil
}

func (r *router) findCoordinator(ctx context.Context, req *Request, m *kmsg.FindCoordinatorRequest) kmsg.Response {
	return r.holdForLivePeer(ctx, func() (kmsg.Response, bool) { return r.findCoordinatorNow(req, m) })
}

// findCoordinatorNow answers m from the current view; unreachable reports whether a key names a
// peer that refuses connections (PeerLiveness).
func (r *router) findCoordinatorNow(req *Request, m *kmsg.FindCoordinatorRequest) (_ kmsg.Response, unreachable bool) {
	self := r.self(req)
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.SetVersion(m.Version)

	answer := func(key string) kmsg.FindCoordinatorResponseCoordinator {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key = key
		switch m.CoordinatorType {
		case coordinatorGroup:
			if err := r.available(); err != nil {
				c.NodeID, c.Port = -1, -1
				c.ErrorCode = int16(ErrCoordinatorNotAvailable)
				c.ErrorMessage = kmsg.StringPtr(err.Error())
				break
			}
			owner := r.groupOwner(key, self)
			if owner.NodeID != self.NodeID && r.peerUnreachable(owner) {
				// The bridge the group moves to, which keeps its requests until it holds it;
				// else the answer is held until the view changes.
				next, ok := r.successor(key, owner, self)
				if ok {
					owner = next
				}
				unreachable = unreachable || !ok
			}
			c.NodeID, c.Host, c.Port = owner.NodeID, owner.Host, owner.Port
		case coordinatorTransaction:
			c.NodeID, c.Port = -1, -1
			c.ErrorCode = int16(ErrCoordinatorNotAvailable)
			c.ErrorMessage = kmsg.StringPtr(errNoTxnCoordinator)
		default:
			c.NodeID, c.Port = -1, -1
			c.ErrorCode = int16(ErrInvalidRequest)
			c.ErrorMessage = kmsg.StringPtr("unknown coordinator key type")
		}
		return c
	}

	if m.Version >= 4 {
		for _, key := range m.CoordinatorKeys {
			resp.Coordinators = append(resp.Coordinators, answer(key))
		}
		return resp, unreachable
	}
	c := answer(m.CoordinatorKey)
	resp.ErrorCode, resp.ErrorMessage = c.ErrorCode, c.ErrorMessage
	resp.NodeID, resp.Host, resp.Port = c.NodeID, c.Host, c.Port
	return resp, unreachable
}
