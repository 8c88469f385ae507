package relay

// A client's own SASL exchange, forwarded to its broker (newproto.SASLForwarder, for
// newproto.SASLConfig.Forward): the broker authenticates the client on the client
// connection's upstream connection, which is then pinned: the client's relayed requests go on
// it and on no other, and once it is lost the client connection closes instead of dialing an
// upstream connection nobody authenticated.

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// saslCorrelationID is the correlation id of the bridge's forwarded SASL requests: the
// upstream connection pairs responses by order, the id only checks it.
const saslCorrelationID int32 = 0x5a534c // "ZSL"

// errSessionExpired closes a client connection whose SASL session expired (KIP-368).
var errSessionExpired = errors.New("SASL session expired without re-authentication")

// errUnpinned is a pinned upstream connection that is gone.
var errUnpinned = errors.New("the upstream connection the client authenticated on is gone; the client must connect and authenticate again")

// ForwardSASL sends a SASL request to the connection's broker on its upstream connection,
// after what was relayed before it, and returns the broker's response
// (newproto.SASLForwarder). req's version is lowered to the broker's highest.
func (rc *relayConn) ForwardSASL(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	up, err := rc.upstream(ctx)
	if err != nil {
		return nil, err
	}
	rc.mu.Lock()
	if rc.pinned == nil {
		rc.pinned = up
	}
	pinned := rc.pinned
	rc.mu.Unlock()
	if pinned != up {
		return nil, errUnpinned
	}
	if v, ok := rc.p.up.versionsOf(up.broker)[req.Key()]; ok {
		if req.GetVersion() > v.max {
			req.SetVersion(v.max)
		}
		if req.GetVersion() < v.min {
			return nil, &upstreamError{broker: up.broker, addr: up.addr,
				err: fmt.Errorf("%s v%d-v%d only", kmsg.NameForKey(req.Key()), v.min, v.max)}
		}
	} else if rc.p.up.versionsOf(up.broker) != nil {
		return nil, &upstreamError{broker: up.broker, addr: up.addr,
			err: fmt.Errorf("no %s (Kafka 1.0 or newer is needed to forward SASL)", kmsg.NameForKey(req.Key()))}
	}

	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID(rc.p.up.cfg.ClientID))
	frame := f.AppendRequest(nil, req, saslCorrelationID)[4:] // send writes the size
	type answer struct {
		raw []byte
		err error
	}
	answers := make(chan answer, 1)
	p := &pendingReq{corr: saslCorrelationID, key: req.Key(), version: req.GetVersion(),
		reply: func(raw []byte, err error) { answers <- answer{raw, err} }}
	if queued, err := up.send(p, int32(len(frame)), frame, nil); !queued {
		return nil, &upstreamError{broker: up.broker, addr: up.addr, err: err}
	}
	var a answer
	select {
	case a = <-answers:
	case <-ctx.Done():
		up.fail(ctx.Err())
		return nil, ctx.Err()
	}
	if a.err != nil {
		if closedByPeer(a.err) {
			a.err = fmt.Errorf("%w: %w", newproto.ErrClosedByBroker, a.err)
		}
		return nil, a.err
	}
	// a.raw is not put back in the pool: the decoded response's byte fields point into it.
	body, err := responseBody(a.raw, req.Key(), req.GetVersion())
	if err != nil {
		return nil, &upstreamError{broker: up.broker, addr: up.addr, err: err}
	}
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, &upstreamError{broker: up.broker, addr: up.addr,
			err: fmt.Errorf("decoding %s v%d response: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), err)}
	}
	return resp, nil
}
