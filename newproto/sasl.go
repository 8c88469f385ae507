package newproto

// SASL on the Kafka listener (Config.SASL), as a broker's SASL_PLAINTEXT or SASL_SSL listener:
//
//   - SaslHandshake v0-1 (key 17) names the mechanism. After a v0 handshake the client sends
//     the mechanism's tokens as raw frames (a length, the bytes; KIP-43), after v1 inside
//     SaslAuthenticate requests.
//   - SaslAuthenticate v0-2 (key 36, KIP-152): v1 adds the session lifetime (KIP-368), v2 is
//     the flexible version.
//   - Until the client is authenticated only ApiVersions, SaslHandshake and SaslAuthenticate are
//     answered; any other request closes the connection, as a broker does
//     (IllegalSaslStateException). A failed authentication is answered
//     SASL_AUTHENTICATION_FAILED (v1 handshake) and the connection closed; nothing reaches a
//     group.
//   - KIP-368 re-authentication: with a session lifetime, SaslAuthenticate tells the client how
//     long its session lasts; it must authenticate again, on the same connection and as the
//     same principal, before then. A request after the session expired closes the connection,
//     relayed ones included (ClientConn.SessionExpired).
//
// Who checks the client's credentials (saslSide):
//
//   - the bridge itself (SASLConfig.Mechanisms): SCRAM against ZooKeeper, PLAIN against a file;
//   - or, with SASLConfig.Forward, the client's own broker (sasl_forward.go): the exchange goes
//     over the client's upstream connection, which from then on carries the client's relayed
//     requests as that authenticated principal; the bridge only follows the exchange to learn
//     the principal (sasl.Follower) and takes the session lifetime the broker announces.
//
// A connection without SASL answers SaslHandshake and SaslAuthenticate ILLEGAL_SASL_STATE, as a
// broker's PLAINTEXT listener does (KafkaApis); they are never relayed.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/sasl"
)

// SASLMechanism is a mechanism the listener offers; *sasl.Scram and *sasl.Plain are.
type SASLMechanism interface {
	Name() string
	Start() sasl.Exchange
}

// SASLConfig configures SASL on the Kafka listener.
type SASLConfig struct {
	// Mechanisms are offered in this order.
	Mechanisms []SASLMechanism
	// SessionLifetime, when positive, is the session lifetime SaslAuthenticate v1+ announces
	// (Kafka's connections.max.reauth.ms): the connection is closed at its first request after
	// it, unless the client authenticated again (KIP-368).
	SessionLifetime time.Duration
	// Forward, instead of Mechanisms, forwards each client's exchange to its broker through the
	// relay (Config.Relay, whose connections must implement SASLForwarder); the session
	// lifetime is the broker's.
	Forward bool
}

// Validate reports a configuration that cannot work.
func (c *SASLConfig) Validate(proxy bool) error {
	switch {
	case c.Forward && len(c.Mechanisms) > 0:
		return errors.New("newproto: SASL Forward checks nothing itself: no Mechanisms with it")
	case c.Forward && !proxy:
		return errors.New("newproto: SASL Forward needs the relay: the brokers authenticate the clients")
	case c.Forward && c.SessionLifetime != 0:
		return errors.New("newproto: SASL Forward takes the session lifetime from the broker: no SessionLifetime with it")
	case !c.Forward && len(c.Mechanisms) == 0:
		return errors.New("newproto: SASL without mechanisms")
	case c.SessionLifetime < 0:
		return errors.New("newproto: SASL SessionLifetime is negative")
	}
	return nil
}

// saslKeys are the SASL keys ApiVersions advertises on a SASL listener.
var saslKeys = []kmsg.ApiVersionsResponseApiKey{
	{ApiKey: int16(kmsg.SASLHandshake), MinVersion: 0, MaxVersion: 1},
	{ApiKey: int16(kmsg.SASLAuthenticate), MinVersion: 0, MaxVersion: 2},
}

// saslState is a connection's authentication.
type saslState struct {
	mu      sync.Mutex
	side    saslSide
	mech    string    // of the first authentication; re-authentication must use it
	expires time.Time // zero: never
}

// saslSide checks a connection's exchanges: the bridge's own mechanisms (localSASL) or the
// client's broker (forwardSASL, sasl_forward.go). One exchange at a time.
type saslSide interface {
	// start begins an exchange with the mechanism m names; a response with an error code
	// refuses it. err: no answer can be given (the connection closes).
	start(ctx context.Context, m *kmsg.SASLHandshakeRequest) (*kmsg.SASLHandshakeResponse, error)
	// step takes the client's next token of the exchange start began. A result with an error
	// code: the authentication failed (answered, then the connection closes). err: no answer
	// can be given.
	step(ctx context.Context, token []byte) (saslStep, error)
}

// saslStep is one step's answer.
type saslStep struct {
	out      []byte
	done     bool          // authenticated as user
	user     string        //
	lifetime time.Duration // of the session, once done; 0: no expiry
	code     ErrorCode     // failed: SASL_AUTHENTICATION_FAILED or ILLEGAL_SASL_STATE
	message  string        // for the client, when failed
	why      error         // for our log, when failed
}

// localSASL checks exchanges against the listener's own mechanisms.
type localSASL struct {
	cfg  *SASLConfig
	ex   sasl.Exchange // the exchange in progress, nil between them
	mech string
}

func (l *localSASL) start(_ context.Context, m *kmsg.SASLHandshakeRequest) (*kmsg.SASLHandshakeResponse, error) {
	resp := m.ResponseKind().(*kmsg.SASLHandshakeResponse)
	var mech SASLMechanism
	for _, sm := range l.cfg.Mechanisms {
		resp.SupportedMechanisms = append(resp.SupportedMechanisms, sm.Name())
		if sm.Name() == m.Mechanism {
			mech = sm
		}
	}
	if mech == nil {
		resp.ErrorCode = int16(ErrUnsupportedSASLMechanism)
		return resp, nil
	}
	l.ex, l.mech = mech.Start(), mech.Name()
	return resp, nil
}

func (l *localSASL) step(ctx context.Context, token []byte) (saslStep, error) {
	if l.ex == nil {
		return saslStep{code: ErrIllegalSASLState, message: "SaslAuthenticate without SaslHandshake",
			why: errors.New("SaslAuthenticate without SaslHandshake")}, nil
	}
	out, user, done, err := l.ex.Step(ctx, token)
	if err != nil {
		l.ex = nil
		// Kafka's wording; the reason (wrong password, unknown user) stays in our log.
		return saslStep{code: ErrSASLAuthenticationFailed, message: failedMessage(l.mech), why: err}, nil
	}
	st := saslStep{out: out, done: done, user: user}
	if done {
		l.ex = nil
		st.lifetime = l.cfg.SessionLifetime
	}
	return st, nil
}

// failedMessage is Kafka's message for an authentication that failed.
func failedMessage(mech string) string {
	return "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mech
}

// newSASLState is the authentication of a new connection.
func (c *conn) newSASLState() *saslState {
	if c.s.cfg.SASL.Forward {
		return &saslState{side: newForwardSASL(c)} // sasl_forward.go
	}
	return &saslState{side: &localSASL{cfg: c.s.cfg.SASL}}
}

// withSASLKeys adds the SASL keys to an ApiVersions answer.
func withSASLKeys(resp kmsg.Response) kmsg.Response {
	av, ok := resp.(*kmsg.ApiVersionsResponse)
	if !ok || len(av.ApiKeys) == 0 {
		return resp
	}
	have := map[int16]bool{}
	for _, k := range av.ApiKeys {
		have[k.ApiKey] = true
	}
	for _, k := range saslKeys {
		if !have[k.ApiKey] {
			av.ApiKeys = append(av.ApiKeys, k)
		}
	}
	return av
}

func (c *conn) saslFailed(reason string, err error) {
	c.s.metrics.framesRejected.WithLabelValues(reason).Inc()
	c.log.Warn().Err(err).Str("reason", reason).Msg("SASL authentication failed; closing connection")
}

// authenticate runs the SASL exchange that opens a connection, answering synchronously (the
// client sends nothing else meanwhile); false: the connection is to be closed.
func (c *conn) authenticate(ctx context.Context) bool {
	_ = c.nc.SetDeadline(time.Now().Add(DefaultHandshakeTimeout))
	defer func() { _ = c.nc.SetDeadline(time.Time{}) }()
	st := c.sasl
	raw := false // after a v0 handshake: raw token frames
	var buf []byte
	write := func(corr int32, resp kmsg.Response) bool {
		buf = appendResponse(buf[:0], corr, resp)
		return c.writeFrame(buf, time.Time{}) == nil
	}
	for {
		frame, err := c.readFrame() // limits.go
		if err != nil {
			c.readFailed(ctx, err)
			return false
		}
		if raw {
			// No error response in this form: a failure closes the connection.
			r, err := st.side.step(ctx, frame)
			if err != nil || r.code != 0 {
				c.saslFailed("sasl_authentication_failed", stepError(r, err))
				return false
			}
			buf = binary.BigEndian.AppendUint32(buf[:0], uint32(len(r.out)))
			if c.writeFrame(append(buf, r.out...), time.Time{}) != nil {
				return false
			}
			if r.done {
				return c.authenticated(r)
			}
			continue
		}
		req, err := parseRequest(frame)
		if err != nil {
			c.readFailed(ctx, err)
			return false
		}
		req.Conn = c.info
		c.s.metrics.request(req.Msg.Key(), req.Msg.GetVersion())
		switch m := req.Msg.(type) {
		case *kmsg.ApiVersionsRequest:
			resp, err := c.callHandler(ctx, req)
			if err == nil && c.relay != nil {
				resp, err = c.relay.APIVersions(ctx, resp)
			}
			if err != nil || !write(req.CorrelationID, withSASLKeys(resp)) {
				return false
			}
		case *kmsg.SASLHandshakeRequest:
			resp, err := st.side.start(ctx, m)
			if err != nil {
				c.saslFailed("sasl_handshake_failed", err)
				return false
			}
			resp.SetVersion(m.Version)
			if !write(req.CorrelationID, resp) {
				return false
			}
			if resp.ErrorCode != 0 {
				c.saslFailed("sasl_unsupported_mechanism", fmt.Errorf("mechanism %q: %s", m.Mechanism, ErrorCode(resp.ErrorCode).Name()))
				return false
			}
			st.mech = m.Mechanism
			raw = m.Version == 0
		case *kmsg.SASLAuthenticateRequest:
			resp, r, ok := c.saslStep(ctx, m)
			if !write(req.CorrelationID, resp) || !ok {
				return false
			}
			if r.done {
				return c.authenticated(r)
			}
		default:
			c.saslFailed("sasl_illegal_state", fmt.Errorf("%s before authentication", kmsg.NameForKey(m.Key())))
			return false
		}
	}
}

// stepError describes a failed step for the log.
func stepError(r saslStep, err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%s: %s: %w", r.code.Name(), r.message, r.why)
}

// saslStep runs one SaslAuthenticate step of the exchange in progress. ok false: the client
// failed, resp says so, the connection is to be closed.
func (c *conn) saslStep(ctx context.Context, m *kmsg.SASLAuthenticateRequest) (resp *kmsg.SASLAuthenticateResponse, r saslStep, ok bool) {
	resp = m.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	resp.SetVersion(m.Version)
	r, err := c.sasl.side.step(ctx, m.SASLAuthBytes)
	if err != nil {
		// No answer from the side that checks (the broker is gone): the client sees a
		// broken connection and may retry, unlike after SASL_AUTHENTICATION_FAILED.
		c.saslFailed("sasl_unanswered", err)
		return nil, r, false
	}
	if r.code != 0 {
		resp.ErrorCode = int16(r.code)
		resp.ErrorMessage = kmsg.StringPtr(r.message)
		c.saslFailed(saslReason(r.code), stepError(r, nil))
		return resp, r, false
	}
	resp.SASLAuthBytes = r.out
	if r.done && r.lifetime > 0 {
		resp.SessionLifetimeMillis = r.lifetime.Milliseconds()
	}
	return resp, r, true
}

func saslReason(code ErrorCode) string {
	if code == ErrIllegalSASLState {
		return "sasl_illegal_state"
	}
	return "sasl_authentication_failed"
}

// authenticated records the connection's principal and session expiry.
func (c *conn) authenticated(r saslStep) bool {
	c.info.Principal = "User:" + r.user
	if r.lifetime > 0 {
		c.sasl.expires = time.Now().Add(r.lifetime)
	}
	if f, ok := c.sasl.side.(*forwardSASL); ok {
		f.principal = c.info.Principal
	}
	c.log.Debug().Str("principal", c.info.Principal).Str("mechanism", c.sasl.mech).Msg("SASL authenticated")
	return true
}

// reauthenticate answers a SaslHandshake or SaslAuthenticate of an authenticated connection
// (KIP-368): the same principal authenticates again and its session is extended. A failure
// closes the connection. Without SASL both are answered ILLEGAL_SASL_STATE, as by a broker's
// PLAINTEXT listener.
func (c *conn) reauthenticate(ctx context.Context, req *Request) (kmsg.Response, error) {
	if c.sasl == nil {
		return illegalSASLState(req.Msg), nil
	}
	st := c.sasl
	st.mu.Lock()
	defer st.mu.Unlock()
	switch m := req.Msg.(type) {
	case *kmsg.SASLHandshakeRequest:
		if m.Version == 0 || m.Mechanism != st.mech {
			// Kafka re-authenticates with v1 only, and with the same mechanism.
			return nil, fmt.Errorf("re-authentication with SaslHandshake v%d mechanism %q (connection authenticated with %s)", m.Version, m.Mechanism, st.mech)
		}
		resp, err := st.side.start(ctx, m)
		if err == nil && resp.ErrorCode != 0 {
			err = fmt.Errorf("re-authentication refused: %s", ErrorCode(resp.ErrorCode).Name())
		}
		return resp, err
	case *kmsg.SASLAuthenticateRequest:
		resp, r, ok := c.saslStep(ctx, m)
		if !ok {
			return nil, errors.New("re-authentication failed")
		}
		if r.done {
			if "User:"+r.user != c.info.Principal {
				return nil, fmt.Errorf("re-authenticated as User:%s, not %s", r.user, c.info.Principal)
			}
			st.expires = time.Time{}
			if r.lifetime > 0 {
				st.expires = time.Now().Add(r.lifetime)
			}
			c.log.Debug().Str("principal", c.info.Principal).Msg("SASL re-authenticated")
		}
		return resp, nil
	}
	return nil, errors.New("not a SASL request")
}

// illegalSASLState is KafkaApis' answer to a SASL request outside an authentication.
func illegalSASLState(req kmsg.Request) kmsg.Response {
	resp := req.ResponseKind()
	switch r := resp.(type) {
	case *kmsg.SASLHandshakeResponse:
		r.ErrorCode = int16(ErrIllegalSASLState)
	case *kmsg.SASLAuthenticateResponse:
		r.ErrorCode = int16(ErrIllegalSASLState)
		r.ErrorMessage = kmsg.StringPtr("SaslAuthenticate request received after successful authentication")
	}
	return resp
}

// isSASL reports whether key is one of the SASL keys.
func isSASL(key int16) bool {
	return key == int16(kmsg.SASLHandshake) || key == int16(kmsg.SASLAuthenticate)
}

// sessionExpired reports whether a SASL session has expired (KIP-368): the connection's next
// request other than a re-authentication closes it.
func (c *conn) sessionExpired() bool {
	if c.sasl == nil {
		return false
	}
	c.sasl.mu.Lock()
	defer c.sasl.mu.Unlock()
	return !c.sasl.expires.IsZero() && time.Now().After(c.sasl.expires)
}
