package newproto_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/sasl"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

type memCreds map[string]sasl.Credential

func (m memCreds) ScramCredential(_ context.Context, mech, user string) (sasl.Credential, error) {
	c, ok := m[mech+"/"+user]
	if !ok {
		return sasl.Credential{}, sasl.ErrUnknownUser
	}
	return c, nil
}

// principals records the principal of every authorization asked (and allows everything).
type principals struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (p *principals) Authorize(principal, _ string, _ authz.Operation, _ authz.Resource) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[principal] = true
	return true
}

func (p *principals) has(principal string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[principal]
}

// saslServer is kgoGroupServer with SASL (SCRAM-SHA-256/512 for alice, PLAIN for bob), over
// TLS when ca is set.
func saslServer(t *testing.T, ca *tlstest.CA, lifetime time.Duration) (*testServer, *fakeGroups, *principals) {
	t.Helper()
	creds := memCreds{}
	for _, mech := range []string{sasl.ScramSHA256, sasl.ScramSHA512} {
		c, err := sasl.NewCredential(mech, "alice-secret", nil, 4096)
		if err != nil {
			t.Fatal(err)
		}
		creds[mech+"/alice"] = c
		if creds[mech+"/carol"], err = sasl.NewCredential(mech, "carol-secret", nil, 4096); err != nil {
			t.Fatal(err)
		}
	}
	s256, _ := sasl.NewScram(sasl.ScramSHA256, creds)
	s512, _ := sasl.NewScram(sasl.ScramSHA512, creds)
	pl, _ := sasl.ParsePlainFile([]byte("bob:bob-secret\n"))
	cfg := group.DefaultConfig()
	cfg.InitialRebalanceDelay = 300 * time.Millisecond
	fg := newFakeGroups(t, withConfig(cfg), withRealTime(20*time.Millisecond))
	var parts []newproto.Partition
	for p := range int32(6) {
		parts = append(parts, newproto.Partition{ID: p, Leader: 7, Replicas: []int32{7}, ISR: []int32{7}})
	}
	pr := &principals{seen: map[string]bool{}}
	ncfg := newproto.Config{NodeID: 7, Cluster: &fakeCluster{topics: map[string][]newproto.Partition{kgoTopic: parts}},
		SASL:       &newproto.SASLConfig{Mechanisms: []newproto.SASLMechanism{s512, s256, pl}, SessionLifetime: lifetime},
		Authorizer: pr}
	if ca != nil {
		srv := ca.Server(t, "server")
		tc, err := tlsconfig.NewServer(tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile}, tlsconfig.ServerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ncfg.TLS = tc
	}
	return groupServer(t, fg, ncfg), fg, pr
}

// kgo with SCRAM over TLS (SASL_SSL) joins a group; wrong password and unknown user fail with
// SASL_AUTHENTICATION_FAILED; PLAIN works; the principal is User:<name>.
func TestSASLKgo(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	ts, fg, pr := saslServer(t, ca, 0)
	tlsOpt := kgo.DialTLSConfig(ca.ClientConfig(nil))

	t.Run("SCRAM-SHA-512 joins a group", func(t *testing.T) {
		cl := newKgoClient(t, ts.addr, tlsOpt, kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()),
			kgo.ConsumerGroup("sasl-group"), kgo.ConsumeTopics(kgoTopic), kgo.HeartbeatInterval(100*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			for ctx.Err() == nil {
				cl.PollFetches(ctx)
			}
		}()
		zktest.Eventually(t, 15*time.Second, "the SCRAM member Stable", func() bool {
			d := fg.describe("sasl-group")
			return d.State == group.Stable && len(d.Members) == 1
		})
		if !pr.has("User:alice") {
			t.Fatal("no request authorized as User:alice")
		}
	})
	for _, tc := range []struct {
		name string
		mech kgo.Opt
		ok   bool
	}{
		{"SCRAM-SHA-256", kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()), true},
		{"PLAIN", kgo.SASL(plain.Auth{User: "bob", Pass: "bob-secret"}.AsMechanism()), true},
		{"wrong password", kgo.SASL(scram.Auth{User: "alice", Pass: "nope"}.AsSha256Mechanism()), false},
		{"unknown user", kgo.SASL(scram.Auth{User: "mallory", Pass: "alice-secret"}.AsSha512Mechanism()), false},
		{"PLAIN wrong password", kgo.SASL(plain.Auth{User: "bob", Pass: "nope"}.AsMechanism()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newKgoClient(t, ts.addr, tlsOpt, tc.mech, kgo.RetryTimeout(time.Second))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := cl.Request(ctx, kmsg.NewPtrListGroupsRequest())
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Fatalf("err = %v, want SASL_AUTHENTICATION_FAILED", err)
			}
		})
	}
}

// scramConv authenticates a raw connection with SaslHandshake v1 and SaslAuthenticate,
// driving franz-go's SCRAM client; it returns the last SaslAuthenticate response.
func scramConv(t *testing.T, c *kafkatest.Client, user, pass string) *kmsg.SASLAuthenticateResponse {
	t.Helper()
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = sasl.ScramSHA256
	if r := c.RoundTrip(hs).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		t.Fatalf("SaslHandshake: %d", r.ErrorCode)
	}
	sess, msg, err := scram.Auth{User: user, Pass: pass}.AsSha256Mechanism().Authenticate(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	for {
		a := kmsg.NewPtrSASLAuthenticateRequest()
		a.SetVersion(1)
		a.SASLAuthBytes = msg
		r := c.RoundTrip(a).(*kmsg.SASLAuthenticateResponse)
		if r.ErrorCode != 0 {
			return r
		}
		done, next, err := sess.Challenge(r.SASLAuthBytes)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			return r
		}
		msg = next
	}
}

// Before authentication a SASL listener answers ApiVersions (with the SASL keys) and nothing
// else: a group request closes the connection, as a broker does.
func TestSASLRequestBeforeAuthentication(t *testing.T) {
	ts, fg, _ := saslServer(t, nil, 0)
	c := kafkatest.Dial(t, ts.addr)
	av := c.RoundTrip(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
	keys := map[int16]int16{}
	for _, k := range av.ApiKeys {
		keys[k.ApiKey] = k.MaxVersion
	}
	if keys[int16(kmsg.SASLHandshake)] != 1 || keys[int16(kmsg.SASLAuthenticate)] != 2 {
		t.Fatalf("ApiVersions SASL keys: handshake v%d authenticate v%d", keys[17], keys[36])
	}
	c.Send(joinRequest(5, "before-auth", "", ""))
	c.ExpectClosed()
	if d := fg.describe("before-auth"); d.State != group.Dead {
		t.Fatalf("the group was touched: %s", d.State)
	}

	// A failed authentication is answered, then the connection is closed.
	c = kafkatest.Dial(t, ts.addr)
	if r := scramConv(t, c, "alice", "wrong"); r.ErrorCode != 58 || r.ErrorMessage == nil {
		t.Fatalf("wrong password: code %d", r.ErrorCode)
	}
	c.ExpectClosed()

	// An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the list, then closed.
	c = kafkatest.Dial(t, ts.addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = "GSSAPI"
	r := c.RoundTrip(hs).(*kmsg.SASLHandshakeResponse)
	if r.ErrorCode != 33 || len(r.SupportedMechanisms) != 3 {
		t.Fatalf("GSSAPI: code %d mechanisms %v", r.ErrorCode, r.SupportedMechanisms)
	}
	c.ExpectClosed()
}

// SaslHandshake v0: the tokens follow as raw frames (KIP-43), as old clients send them.
func TestSASLHandshakeV0RawTokens(t *testing.T) {
	ts, _, pr := saslServer(t, nil, 0)
	c := kafkatest.Dial(t, ts.addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(0)
	hs.Mechanism = sasl.ScramSHA256
	if r := c.RoundTrip(hs).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		t.Fatalf("SaslHandshake v0: %d", r.ErrorCode)
	}
	sess, msg, err := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism().Authenticate(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		frame := make([]byte, 4, 4+len(msg))
		frame[0], frame[1], frame[2], frame[3] = byte(len(msg)>>24), byte(len(msg)>>16), byte(len(msg)>>8), byte(len(msg))
		c.Write(append(frame, msg...))
		resp, err := c.ReadFrame()
		if err != nil {
			t.Fatalf("raw token: %v", err)
		}
		if done, msg, err = sess.Challenge(resp); err != nil {
			t.Fatal(err)
		}
	}
	lg := kmsg.NewPtrListGroupsRequest()
	if r := c.RoundTrip(lg).(*kmsg.ListGroupsResponse); r.ErrorCode != 0 {
		t.Fatalf("ListGroups after v0 authentication: %d", r.ErrorCode)
	}
	if !pr.has("User:alice") {
		t.Fatal("not authorized as User:alice")
	}
}

// KIP-368: the session lifetime is announced; a client that re-authenticates keeps its
// connection (kgo does it by itself), one that does not is closed at its next request.
func TestSASLReauthentication(t *testing.T) {
	ts, _, _ := saslServer(t, nil, 1500*time.Millisecond)

	c := kafkatest.Dial(t, ts.addr)
	if r := scramConv(t, c, "alice", "alice-secret"); r.ErrorCode != 0 || r.SessionLifetimeMillis != 1500 {
		t.Fatalf("authenticate: code %d lifetime %d", r.ErrorCode, r.SessionLifetimeMillis)
	}
	c.RoundTrip(kmsg.NewPtrListGroupsRequest())
	c2 := kafkatest.Dial(t, ts.addr)
	scramConv(t, c2, "alice", "alice-secret")

	// Re-authenticating as another principal closes the connection.
	c3 := kafkatest.Dial(t, ts.addr)
	scramConv(t, c3, "alice", "alice-secret")
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = sasl.ScramSHA256
	c3.RoundTrip(hs)
	sess, first, _ := scram.Auth{User: "carol", Pass: "carol-secret"}.AsSha256Mechanism().Authenticate(context.Background(), "x")
	a := kmsg.NewPtrSASLAuthenticateRequest()
	a.SetVersion(1)
	a.SASLAuthBytes = first
	r := c3.RoundTrip(a).(*kmsg.SASLAuthenticateResponse)
	_, final, err := sess.Challenge(r.SASLAuthBytes)
	if err != nil {
		t.Fatal(err)
	}
	a.SASLAuthBytes = final
	c3.Send(a)
	c3.ExpectClosed()

	time.Sleep(1600 * time.Millisecond)
	c.Send(kmsg.NewPtrListGroupsRequest())
	c.ExpectClosed()

	// Re-authenticated in time: still served after the first lifetime.
	scramConv(t, c2, "alice", "alice-secret")
	c2.RoundTrip(kmsg.NewPtrListGroupsRequest())

	// kgo re-authenticates before the lifetime ends on the same connection; its requests keep
	// succeeding and it never dials again.
	var dials atomic.Int32
	cl := newKgoClient(t, ts.addr, kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, host)
		}))
	deadline := time.Now().Add(4 * time.Second)
	var firstDials int32
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cl.Request(ctx, kmsg.NewPtrListGroupsRequest())
		cancel()
		if err != nil {
			t.Fatalf("kgo across re-authentication: %v", err)
		}
		if firstDials == 0 {
			firstDials = dials.Load() // the seed connection and the node's
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := dials.Load(); n != firstDials {
		t.Fatalf("kgo dialed %d times after its first request, %d before: want no new connection (it re-authenticates on its own)", n, firstDials)
	}
}

// A listener without SASL answers SaslHandshake and SaslAuthenticate ILLEGAL_SASL_STATE, as
// Kafka's KafkaApis does on a PLAINTEXT listener, and the connection stays usable: they are
// never handed to the Handler, nor relayed.
func TestSASLWithoutSASLIllegalState(t *testing.T) {
	ts := startServer(t, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.SetVersion(1)
	hs.Mechanism = sasl.ScramSHA512
	if code := c.RoundTrip(hs).(*kmsg.SASLHandshakeResponse).ErrorCode; code != int16(newproto.ErrIllegalSASLState) {
		t.Fatalf("SaslHandshake: %d, want ILLEGAL_SASL_STATE", code)
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.SetVersion(2)
	au.SASLAuthBytes = []byte("n,,n=alice,r=abc")
	if code := c.RoundTrip(au).(*kmsg.SASLAuthenticateResponse).ErrorCode; code != int16(newproto.ErrIllegalSASLState) {
		t.Fatalf("SaslAuthenticate: %d, want ILLEGAL_SASL_STATE", code)
	}
	kafkatest.CheckAlive(t, c)
}
