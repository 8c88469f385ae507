package relay_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// scramAuth runs a SCRAM-SHA-512 exchange as user on c (SaslHandshake v1 unless reauth
// already sent it) and returns the last SaslAuthenticate response; a failure answered on the
// first step is returned as is.
func scramAuth(t *testing.T, c *kafkatest.Client, user, pass string) *kmsg.SASLAuthenticateResponse {
	t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = "SCRAM-SHA-512"
	if r := c.RoundTrip(hs).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		t.Fatalf("SaslHandshake: %s", newproto.ErrorCode(r.ErrorCode).Name())
	}
	sess, first, err := scram.Auth{User: user, Pass: pass}.AsSha512Mechanism().Authenticate(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	a := kmsg.NewPtrSASLAuthenticateRequest()
	a.SetVersion(2)
	a.SASLAuthBytes = first
	r := c.RoundTrip(a).(*kmsg.SASLAuthenticateResponse)
	if r.ErrorCode != 0 {
		return r
	}
	_, final, err := sess.Challenge(r.SASLAuthBytes)
	if err != nil {
		t.Fatal(err)
	}
	a.SASLAuthBytes = final
	return c.RoundTrip(a).(*kmsg.SASLAuthenticateResponse)
}

// The exchange a client runs through the relay is its broker's (newproto.SASLConfig.Forward):
// the broker's session lifetime reaches the client, its relayed requests go on the upstream
// connection it authenticated, re-authentication as the same user is forwarded and keeps the
// connection, as another user is refused before it reaches the broker and closes the
// connection, and a wrong password is the broker's refusal, answered SASL_AUTHENTICATION_FAILED.
func TestSASLForwardedExchange(t *testing.T) {
	e := startRelay(t, relayOpts{sasl: true, kfakeOpts: []kfake.Opt{
		kfake.User("SCRAM-SHA-512", "mallory", "mallory-secret"),
		kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": "60000"}),
	}})
	metadata := func(c *kafkatest.Client) *kmsg.MetadataResponse {
		m := kmsg.NewPtrMetadataRequest()
		m.SetVersion(9)
		return c.RoundTrip(m).(*kmsg.MetadataResponse)
	}

	c := kafkatest.Dial(t, e.addr)
	if r := scramAuth(t, c, saslUser, saslPass); r.ErrorCode != 0 || r.SessionLifetimeMillis != 60000 {
		t.Fatalf("authenticate through the relay: code %d, lifetime %d (want the broker's 60000)", r.ErrorCode, r.SessionLifetimeMillis)
	}
	if m := metadata(c); len(m.Topics) == 0 {
		t.Fatalf("relayed Metadata after authenticating: %+v", m)
	}
	if r := scramAuth(t, c, saslUser, saslPass); r.ErrorCode != 0 || r.SessionLifetimeMillis != 60000 {
		t.Fatalf("re-authenticate as the same user: code %d, lifetime %d", r.ErrorCode, r.SessionLifetimeMillis)
	}
	if m := metadata(c); len(m.Topics) == 0 {
		t.Fatalf("relayed Metadata after re-authenticating: %+v", m)
	}

	// Re-authenticating as another user: not forwarded, the connection closed.
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = "SCRAM-SHA-512"
	c.RoundTrip(hs)
	_, first, err := scram.Auth{User: "mallory", Pass: "mallory-secret"}.AsSha512Mechanism().Authenticate(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	a := kmsg.NewPtrSASLAuthenticateRequest()
	a.SetVersion(2)
	a.SASLAuthBytes = first
	c.Send(a)
	c.ExpectClosed()

	bad := kafkatest.Dial(t, e.addr)
	if r := scramAuth(t, bad, saslUser, "guess"); r.ErrorCode != int16(newproto.ErrSASLAuthenticationFailed) {
		t.Fatalf("wrong password: code %d, want SASL_AUTHENTICATION_FAILED", r.ErrorCode)
	}
	bad.ExpectClosed()

	// Before authenticating, a relayed request closes the connection: nothing reaches a broker.
	anon := kafkatest.Dial(t, e.addr)
	anon.Send(kmsg.NewPtrMetadataRequest())
	anon.ExpectClosed()
}
