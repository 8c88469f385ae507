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
//   - KIP-368 re-authentication: with SessionLifetime, SaslAuthenticate tells the client how long
//     its session lasts; it must authenticate again, on the same connection and as the same
//     principal, before then. A request after the session expired closes the connection. Not
//     offered with the relay (Config.Relay), whose reader forwards the keys it does not answer.

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
}

// Validate reports a configuration that cannot work.
func (c *SASLConfig) Validate(proxy bool) error {
	if len(c.Mechanisms) == 0 {
		return errors.New("newproto: SASL without mechanisms")
	}
	if c.SessionLifetime < 0 {
		return errors.New("newproto: SASL SessionLifetime is negative")
	}
	if proxy && c.SessionLifetime > 0 {
		return errors.New("newproto: SASL re-authentication (SessionLifetime) is not offered with the relay")
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
	ex      sasl.Exchange // the exchange in progress, nil between them
	mech    string
	expires time.Time // zero: never
}

func (c *conn) saslMechanism(name string) SASLMechanism {
	for _, m := range c.s.cfg.SASL.Mechanisms {
		if m.Name() == name {
			return m
		}
	}
	return nil
}

func (c *conn) mechanismNames() []string {
	var names []string
	for _, m := range c.s.cfg.SASL.Mechanisms {
		names = append(names, m.Name())
	}
	return names
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
		return c.writeFrame(buf) == nil
	}
	for {
		frame, err := c.readFrame() // limits.go
		if err != nil {
			c.readFailed(ctx, err)
			return false
		}
		if raw {
			resp, user, done, err := st.ex.Step(ctx, frame)
			if err != nil {
				c.saslFailed("sasl_authentication_failed", err)
				return false
			}
			buf = binary.BigEndian.AppendUint32(buf[:0], uint32(len(resp)))
			if c.writeFrame(append(buf, resp...)) != nil {
				return false
			}
			if done {
				return c.authenticated(user)
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
			resp := m.ResponseKind().(*kmsg.SASLHandshakeResponse)
			resp.SetVersion(m.Version)
			resp.SupportedMechanisms = c.mechanismNames()
			mech := c.saslMechanism(m.Mechanism)
			if mech == nil {
				resp.ErrorCode = int16(ErrUnsupportedSASLMechanism)
				write(req.CorrelationID, resp)
				c.saslFailed("sasl_unsupported_mechanism", fmt.Errorf("mechanism %q not offered", m.Mechanism))
				return false
			}
			if !write(req.CorrelationID, resp) {
				return false
			}
			st.ex, st.mech = mech.Start(), mech.Name()
			raw = m.Version == 0
		case *kmsg.SASLAuthenticateRequest:
			resp, user, done, ok := c.saslStep(ctx, m)
			if !write(req.CorrelationID, resp) || !ok {
				return false
			}
			if done {
				return c.authenticated(user)
			}
		default:
			c.saslFailed("sasl_illegal_state", fmt.Errorf("%s before authentication", kmsg.NameForKey(m.Key())))
			return false
		}
	}
}

// saslStep runs one SaslAuthenticate step of the exchange in progress. ok false: the client
// failed, resp says so, the connection is to be closed.
func (c *conn) saslStep(ctx context.Context, m *kmsg.SASLAuthenticateRequest) (resp *kmsg.SASLAuthenticateResponse, user string, done, ok bool) {
	st := c.sasl
	resp = m.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	resp.SetVersion(m.Version)
	if st.ex == nil {
		resp.ErrorCode = int16(ErrIllegalSASLState)
		resp.ErrorMessage = kmsg.StringPtr("SaslAuthenticate without SaslHandshake")
		c.saslFailed("sasl_illegal_state", errors.New("SaslAuthenticate without SaslHandshake"))
		return resp, "", false, false
	}
	out, user, done, err := st.ex.Step(ctx, m.SASLAuthBytes)
	if err != nil {
		st.ex = nil
		resp.ErrorCode = int16(ErrSASLAuthenticationFailed)
		// Kafka's wording; the reason (wrong password, unknown user) stays in our log.
		resp.ErrorMessage = kmsg.StringPtr("Authentication failed during authentication due to invalid credentials with SASL mechanism " + st.mech)
		c.saslFailed("sasl_authentication_failed", err)
		return resp, "", false, false
	}
	resp.SASLAuthBytes = out
	if done {
		st.ex = nil
		if lt := c.s.cfg.SASL.SessionLifetime; lt > 0 {
			resp.SessionLifetimeMillis = lt.Milliseconds()
		}
	}
	return resp, user, done, true
}

// authenticated records the connection's principal and session expiry.
func (c *conn) authenticated(user string) bool {
	c.info.Principal = "User:" + user
	if lt := c.s.cfg.SASL.SessionLifetime; lt > 0 {
		c.sasl.expires = time.Now().Add(lt)
	}
	c.log.Debug().Str("principal", c.info.Principal).Str("mechanism", c.sasl.mech).Msg("SASL authenticated")
	return true
}

// reauthenticate answers a SaslHandshake or SaslAuthenticate of an authenticated connection
// (KIP-368): the same principal authenticates again and its session is extended. A failure
// closes the connection.
func (c *conn) reauthenticate(ctx context.Context, req *Request) (kmsg.Response, error) {
	st := c.sasl
	st.mu.Lock()
	defer st.mu.Unlock()
	switch m := req.Msg.(type) {
	case *kmsg.SASLHandshakeRequest:
		resp := m.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = c.mechanismNames()
		mech := c.saslMechanism(m.Mechanism)
		if m.Version == 0 || mech == nil || mech.Name() != st.mech {
			// Kafka re-authenticates with v1 only, and with the same mechanism.
			return nil, fmt.Errorf("re-authentication with SaslHandshake v%d mechanism %q (connection authenticated with %s)", m.Version, m.Mechanism, st.mech)
		}
		st.ex = mech.Start()
		return resp, nil
	case *kmsg.SASLAuthenticateRequest:
		resp, user, done, ok := c.saslStep(ctx, m)
		if !ok {
			return nil, errors.New("re-authentication failed")
		}
		if done {
			if "User:"+user != c.info.Principal {
				return nil, fmt.Errorf("re-authenticated as User:%s, not %s", user, c.info.Principal)
			}
			if lt := c.s.cfg.SASL.SessionLifetime; lt > 0 {
				st.expires = time.Now().Add(lt)
			}
			c.log.Debug().Str("principal", c.info.Principal).Msg("SASL re-authenticated")
		}
		return resp, nil
	}
	return nil, errors.New("not a SASL request")
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
