package newproto

// SASL forwarded to the brokers (SASLConfig.Forward): the bridge holds no credentials of its
// own for the brokers, and checks none itself. A client's SaslHandshake and SaslAuthenticate
// go to its broker over the client connection's own upstream connection (the relay's
// SASLForwarder); the broker authenticates the client, and that upstream connection then
// carries the client's relayed requests as the principal the broker authenticated: a client
// reaches a broker only as itself. The bridge follows the exchange (sasl.Follower) to learn
// that principal, which its authorizer checks on the group APIs it answers itself, and takes
// the session lifetime the broker announces (KIP-368): it closes the connection at a locally
// answered request after expiry as the broker does at a relayed one, and re-authentication
// goes to the broker on the same upstream connection, in its place among the relayed requests.
//
// Towards the broker the exchange is always SaslHandshake v1 and SaslAuthenticate (the highest
// version both know); a client that sent a v0 handshake has its raw tokens carried in
// SaslAuthenticate requests and the broker's answers returned raw. Only the mechanisms whose
// principal can be read from the client's messages are forwarded: PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 (not GSSAPI, OAUTHBEARER, nor SCRAM with a delegation token).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/sasl"
)

// SASLForwarder is what SASLConfig.Forward needs of the relay's side of a connection
// (RelayConn): req is sent to the client's broker on the connection's upstream connection
// (dialed if there is none yet), in its place after the requests relayed before it, and the
// broker's response decoded. The relay may lower req's version to what the broker supports.
// From the first call on, that upstream connection is the only one the client connection
// uses: once it is lost, the client connection closes (a new one would not be authenticated).
// An error wrapping ErrClosedByBroker: the broker closed the connection instead of answering.
type SASLForwarder interface {
	ForwardSASL(ctx context.Context, req kmsg.Request) (kmsg.Response, error)
}

// ErrClosedByBroker is a broker that closed the upstream connection instead of answering a
// forwarded SASL request: how a broker refuses raw tokens, and how some refuse a
// SaslAuthenticate. The client is answered SASL_AUTHENTICATION_FAILED.
var ErrClosedByBroker = errors.New("the broker closed the connection")

// forwardSASL is the saslSide of SASLConfig.Forward.
type forwardSASL struct {
	fw        SASLForwarder // nil: the relay cannot forward; every exchange fails
	f         *sasl.Follower
	principal string // once authenticated: re-authentication must keep it
}

func newForwardSASL(c *conn) *forwardSASL {
	fw, _ := c.relay.(SASLForwarder)
	return &forwardSASL{fw: fw}
}

func (s *forwardSASL) start(ctx context.Context, m *kmsg.SASLHandshakeRequest) (*kmsg.SASLHandshakeResponse, error) {
	if s.fw == nil {
		return nil, errors.New("newproto: SASL Forward without a relay that forwards SASL")
	}
	resp := m.ResponseKind().(*kmsg.SASLHandshakeResponse)
	s.f = nil
	f, err := sasl.Follow(m.Mechanism)
	if err != nil {
		resp.ErrorCode = int16(ErrUnsupportedSASLMechanism)
		resp.SupportedMechanisms = sasl.Forwardable
		return resp, nil
	}
	up := kmsg.NewPtrSASLHandshakeRequest()
	up.SetVersion(1) // never raw tokens upstream: every answer is a framed response
	up.Mechanism = m.Mechanism
	r, err := s.fw.ForwardSASL(ctx, up)
	if err != nil {
		return nil, fmt.Errorf("forwarding SaslHandshake: %w", err)
	}
	br, ok := r.(*kmsg.SASLHandshakeResponse)
	if !ok {
		return nil, fmt.Errorf("forwarding SaslHandshake: answered with %s", kmsg.NameForKey(r.Key()))
	}
	resp.ErrorCode = br.ErrorCode
	for _, name := range br.SupportedMechanisms {
		if slices.Contains(sasl.Forwardable, name) {
			resp.SupportedMechanisms = append(resp.SupportedMechanisms, name)
		}
	}
	if resp.ErrorCode == 0 {
		s.f = f
	}
	return resp, nil
}

func (s *forwardSASL) step(ctx context.Context, token []byte) (saslStep, error) {
	f := s.f
	if f == nil {
		return saslStep{code: ErrIllegalSASLState, message: "SaslAuthenticate without SaslHandshake",
			why: errors.New("SaslAuthenticate without SaslHandshake")}, nil
	}
	fail := func(message string, why error) (saslStep, error) {
		s.f = nil
		return saslStep{code: ErrSASLAuthenticationFailed, message: message, why: why}, nil
	}
	first := f.User() == ""
	if err := f.Client(token); err != nil {
		return fail(failedMessage(f.Mechanism()), err)
	}
	if first && s.principal != "" && "User:"+f.User() != s.principal {
		// Not even forwarded: the broker would refuse it too (KIP-368), but the bridge's
		// own principal must not change either.
		return fail(fmt.Sprintf("Cannot change principals during re-authentication from %s: User:%s", s.principal, f.User()),
			fmt.Errorf("re-authentication as User:%s on a connection of %s", f.User(), s.principal))
	}
	up := kmsg.NewPtrSASLAuthenticateRequest()
	up.SetVersion(2) // the relay lowers it to the broker's; v1+ tells the session lifetime
	up.SASLAuthBytes = token
	r, err := s.fw.ForwardSASL(ctx, up)
	if errors.Is(err, ErrClosedByBroker) {
		return fail(failedMessage(f.Mechanism()), fmt.Errorf("forwarding SaslAuthenticate: %w", err))
	}
	if err != nil {
		return saslStep{}, fmt.Errorf("forwarding SaslAuthenticate: %w", err)
	}
	br, ok := r.(*kmsg.SASLAuthenticateResponse)
	if !ok {
		return saslStep{}, fmt.Errorf("forwarding SaslAuthenticate: answered with %s", kmsg.NameForKey(r.Key()))
	}
	if br.ErrorCode != 0 {
		s.f = nil
		msg := ""
		if br.ErrorMessage != nil {
			msg = *br.ErrorMessage
		}
		return saslStep{code: ErrorCode(br.ErrorCode), message: msg,
			why: fmt.Errorf("the broker refused User:%s: %s", f.User(), ErrorCode(br.ErrorCode).Name())}, nil
	}
	done, err := f.Server(br.SASLAuthBytes)
	if err != nil {
		return fail(failedMessage(f.Mechanism()), err)
	}
	st := saslStep{out: br.SASLAuthBytes, done: done}
	if done {
		s.f = nil
		st.user = f.User()
		st.lifetime = time.Duration(br.SessionLifetimeMillis) * time.Millisecond
	}
	return st, nil
}
