package bridge_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	fsasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// saslForwardEnv is a kfake cluster whose only listener requires SASL (SCRAM-SHA-512 users
// alice and bob, PLAIN user carol, each allowed everything on its own topic alone, ACLs on),
// registered in ZooKeeper as a Kafka broker with a SASL_PLAINTEXT listener, behind a bridge
// with SASLForward and the ZooKeeper authorizer (alice may use groups "alice-*").
type saslForwardEnv struct {
	kf   *kfake.Cluster
	b    *running
	acl  *aclWriter
	addr string
	ca   *tlstest.CA // with TLS: vouches for the brokers and the bridge
}

// startSASLForward starts the env; a positive reauth is the brokers'
// connections.max.reauth.ms, and withTLS makes every hop TLS: the brokers listen on
// SASL_SSL only (the bridge dials them with --upstream-tls) and the bridge's listeners are
// SASL_SSL too.
func startSASLForward(t *testing.T, reauth time.Duration, withTLS ...bool) *saslForwardEnv {
	t.Helper()
	useTLS := len(withTLS) > 0 && withTLS[0]
	var ca *tlstest.CA
	protocol := "SASL_PLAINTEXT"
	own := func(topic string) kfake.ACL {
		return kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral,
			Operation: kmsg.ACLOperationAll, Allow: true}
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(2, "alice-t", "bob-t", "carol-t"),
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.User("SCRAM-SHA-512", "alice", "alice-secret", own("alice-t")),
		kfake.User("SCRAM-SHA-512", "bob", "bob-secret", own("bob-t")),
		kfake.User("PLAIN", "carol", "carol-secret", own("carol-t"))}
	if reauth > 0 {
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": strconv.Itoa(int(reauth.Milliseconds()))}))
	}
	if useTLS {
		ca = tlstest.NewCA(t, "ca")
		broker := ca.Server(t, "broker")
		opts = append(opts, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{broker.TLS}, MinVersion: tls.VersionTLS12}))
		protocol = "SASL_SSL"
	}
	kf, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	host, port, err := net.SplitHostPort(kf.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)

	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A broker with a SASL listener only (Kafka 2.x's registration: host null, port -1).
	reg := zkstate.BrokerRegistration{ID: 0, Version: 4, Port: -1, JMXPort: -1, Timestamp: "1700000000000",
		Endpoints:                   []string{protocol + "://" + net.JoinHostPort(host, strconv.Itoa(p))},
		ListenerSecurityProtocolMap: map[string]string{protocol: protocol}}
	if err := zkstate.LoadLayout(ctx, s, zkstate.Layout{Brokers: []zkstate.BrokerRegistration{reg},
		Topics: map[string]zkstate.TopicAssignment{
			"alice-t": {Version: 1, Partitions: map[int32][]int32{0: {0}, 1: {0}}},
			"bob-t":   {Version: 1, Partitions: map[int32][]int32{0: {0}, 1: {0}}},
		}}); err != nil {
		t.Fatal(err)
	}
	w := &aclWriter{t: t, s: s}
	w.set(authz.Pattern{Type: authz.Group, Name: "alice-", PatternType: authz.Prefixed}, allowACL("User:alice", authz.Read))
	w.set(authz.Pattern{Type: authz.Topic, Name: "alice-t"}, allowACL("User:alice", authz.Read))
	w.set(authz.Pattern{Type: authz.Group, Name: "bob-", PatternType: authz.Prefixed}, allowACL("User:bob", authz.Read))
	w.set(authz.Pattern{Type: authz.Topic, Name: "bob-t"}, allowACL("User:bob", authz.Read))

	b := startBridge(t, connect, 9001, func(c *bridge.Config) {
		c.Logger = c.Logger.Level(zerolog.InfoLevel)
		c.UpstreamFromZK, c.ProxyListen = true, "127.0.0.1:0"
		c.SASLForward = true
		c.Authorizer = bridge.AuthorizerZooKeeper
		if useTLS {
			srv := ca.Server(t, "bridge")
			c.UpstreamTLS = &tlsconfig.Client{CAFile: ca.File}
			c.KafkaTLS = tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
		}
	})
	return &saslForwardEnv{kf: kf, b: b, acl: w, addr: b.Addr().String(), ca: ca}
}

func (e *saslForwardEnv) client(t *testing.T, m fsasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	if e.ca != nil {
		opts = append(opts, kgo.DialTLSConfig(e.ca.ClientConfig(nil)))
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.addr), kgo.SASL(m), kgo.DisableIdempotentWrite(),
		kgo.RetryTimeout(3 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func commitOffset(ctx context.Context, cl *kgo.Client, g, topic string, off int64) error {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Group = g
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, off
	rt.Partitions = append(rt.Partitions, rp)
	r.Topics = append(r.Topics, rt)
	resp, err := r.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// The data path to brokers that require SASL, with each client's own exchange forwarded to
// them (issue 16, build item 3): kgo with SCRAM-SHA-512 produces and consumes through the
// bridge as alice, and its group (answered by the bridge) is authorized as User:alice; alice
// can neither write bob's topic (the broker refuses: the upstream connection is alice's) nor
// commit in bob's groups (the bridge refuses); a wrong password is refused by the broker and
// the client gets SASL_AUTHENTICATION_FAILED; sarama's v0 handshake (raw PLAIN token) works
// through the same path.
func TestIntegration_SASLForward(t *testing.T) {
	t.Parallel()
	e := startSASLForward(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()

	t.Run("produce and consume as alice", func(t *testing.T) {
		cl := e.client(t, alice, kgo.DefaultProduceTopic("alice-t"), kgo.ConsumerGroup("alice-g"),
			kgo.ConsumeTopics("alice-t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		for i := range 20 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
				t.Fatalf("produce through the bridge to a SASL broker: %v", err)
			}
		}
		got := 0
		for got < 20 && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
				t.Fatalf("fetch: %v", errs)
			}
			got += fs.NumRecords()
		}
		if got != 20 {
			t.Fatalf("consumed %d records, want 20", got)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit in alice's group, authorized as User:alice: %v", err)
		}
	})

	t.Run("alice cannot act as bob", func(t *testing.T) {
		cl := e.client(t, alice)
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: "bob-t", Value: []byte("x")}).FirstErr()
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("alice producing to bob's topic: %v, want TOPIC_AUTHORIZATION_FAILED from the broker", err)
		}
		if err := commitOffset(ctx, cl, "bob-g", "bob-t", 1); !errors.Is(err, kerr.GroupAuthorizationFailed) {
			t.Fatalf("alice committing in bob's group: %v, want GROUP_AUTHORIZATION_FAILED", err)
		}
		bob := e.client(t, scram.Auth{User: "bob", Pass: "bob-secret"}.AsSha512Mechanism())
		if err := bob.ProduceSync(ctx, &kgo.Record{Topic: "bob-t", Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatalf("bob producing to his own topic: %v", err)
		}
		if err := commitOffset(ctx, bob, "bob-g", "bob-t", 1); err != nil {
			t.Fatalf("bob committing in his own group: %v", err)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		for _, m := range []fsasl.Mechanism{
			scram.Auth{User: "alice", Pass: "guess"}.AsSha512Mechanism(),
			scram.Auth{User: "mallory", Pass: "alice-secret"}.AsSha512Mechanism(),
		} {
			cl := e.client(t, m)
			if err := commitOffset(ctx, cl, "alice-g", "alice-t", 1); !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED", m.Name(), err)
			}
		}
	})

	t.Run("sarama v0 handshake, raw PLAIN token", func(t *testing.T) {
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V2_8_0_0
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Handshake = true
		cfg.Net.SASL.Version = sarama.SASLHandshakeV0
		cfg.ApiVersionsRequest = false // sarama's rule for v0
		cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "carol", "carol-secret"
		cfg.Producer.Return.Successes = true
		cfg.Metadata.Retry.Max = 2
		p, err := sarama.NewSyncProducer([]string{e.addr}, cfg)
		if err != nil {
			t.Fatalf("sarama producer: %v", err)
		}
		defer p.Close()
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "carol-t", Value: sarama.StringEncoder("v0")}); err != nil {
			t.Fatalf("sarama produce through a forwarded v0 exchange: %v", err)
		}
		cfg.Net.SASL.Password = "guess"
		if _, err := sarama.NewSyncProducer([]string{e.addr}, cfg); err == nil {
			t.Fatal("sarama with a wrong PLAIN password got through")
		}
	})
}

// librdkafka (kcat) with SASL_PLAINTEXT, and with SASL_SSL on both hops, through the relay: it
// produces and consumes as carol (PLAIN) and as alice (SCRAM-SHA-512); a wrong password fails.
func TestIntegration_SASLForwardKcat(t *testing.T) {
	t.Parallel()
	t.Run("SASL_PLAINTEXT", func(t *testing.T) { kcatThroughSASLForward(t, false) })
	t.Run("SASL_SSL", func(t *testing.T) { kcatThroughSASLForward(t, true) })
}

// kcatThroughSASLForward: kcat as carol and alice through the relay, every hop over TLS with
// withTLS (kcat speaks SASL_SSL to the bridge, the bridge SASL_SSL to the brokers).
func kcatThroughSASLForward(t *testing.T, withTLS bool) {
	kcat := kafkatest.KcatPath(t)
	e := startSASLForward(t, 0, withTLS)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	security := []string{"-X", "security.protocol=SASL_PLAINTEXT"}
	if withTLS {
		security = []string{"-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + e.ca.File}
	}
	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, kcat, append(append([]string{"-b", e.addr}, security...), args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct{ mech, user, pass, topic string }{
		{"PLAIN", "carol", "carol-secret", "carol-t"},
		{"SCRAM-SHA-512", "alice", "alice-secret", "alice-t"},
	} {
		t.Run(c.mech, func(t *testing.T) {
			auth := []string{"-X", "sasl.mechanisms=" + c.mech, "-X", "sasl.username=" + c.user, "-X", "sasl.password=" + c.pass}
			if out, err := run("k1\nk2\nk3\n", append(auth, "-P", "-t", c.topic, "-p", "0")...); err != nil {
				t.Fatalf("kcat -P as %s: %v\n%s", c.user, err, out)
			}
			out, err := run("", append(auth, "-C", "-t", c.topic, "-p", "0", "-o", "beginning", "-e", "-q")...)
			if err != nil || !strings.Contains(out, "k1\nk2\nk3") {
				t.Fatalf("kcat -C as %s: %v\n%s", c.user, err, out)
			}
			bad := []string{"-X", "sasl.mechanisms=" + c.mech, "-X", "sasl.username=" + c.user, "-X", "sasl.password=guess"}
			if out, err := run("", append(bad, "-L", "-m", "2")...); err == nil {
				t.Fatalf("kcat with a wrong password listed metadata:\n%s", out)
			}
		})
	}
}

// KIP-368 through the relay: the broker announces a session lifetime, the bridge passes it
// on, and kgo re-authenticates on its connections (forwarded to the broker in their place
// among the relayed requests) instead of being disconnected; its group commits keep working.
func TestIntegration_SASLForwardReauthentication(t *testing.T) {
	e := startSASLForward(t, time.Second)
	var connects, authenticates atomic.Int64
	cl := e.client(t, scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(),
		kgo.DefaultProduceTopic("alice-t"), kgo.WithHooks(saslHooks{&connects, &authenticates}))
	produceAndCommitAcrossSessions(t, cl, "alice-t", &connects, &authenticates)
}

// produceAndCommitAcrossSessions produces and commits for 3.5 s, several one-second SASL
// sessions: kgo must re-authenticate each connection instead of being disconnected.
func produceAndCommitAcrossSessions(t *testing.T, cl *kgo.Client, topic string, connects, authenticates *atomic.Int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var warm, authenticated int64
	deadline := time.Now().Add(3500 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		if err := commitOffset(ctx, cl, "alice-reauth", topic, int64(i)); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if i == 0 {
			// Every connection kgo uses here is open and authenticated. The 3.5 s start now: a
			// first round that took seconds under load (and re-authenticated within it) left
			// no session to expire after it ("18 SaslAuthenticate requests (18 after it)").
			warm, authenticated = connects.Load(), authenticates.Load()
			deadline = time.Now().Add(3500 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// No connection was opened again (a session that expired would have closed one), and the
	// connections in use re-authenticated (SCRAM: two SaslAuthenticate requests each time).
	if c, a := connects.Load(), authenticates.Load(); c != warm || a < authenticated+2 {
		t.Fatalf("%d connections (%d after the first request), %d SaslAuthenticate requests (%d after it): want no reconnect and re-authentications",
			c, warm, a, authenticated)
	}
}

type saslHooks struct{ connects, authenticates *atomic.Int64 }

func (h saslHooks) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h.connects.Add(1)
	}
}

func (h saslHooks) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key == int16(kmsg.SASLAuthenticate) {
		h.authenticates.Add(1)
	}
}

// KIP-368 with the bridge's own SASL and the data path: re-authentication is answered by the
// bridge (SaslHandshake and SaslAuthenticate are never relayed), so kgo re-authenticates on
// every connection, proxy listeners included, without a reconnect while it produces to a
// plaintext kfake cluster and commits.
func TestIntegration_SASLLocalReauthenticationWithRelay(t *testing.T) {
	t.Parallel()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	connect := zktest.Connect(t)
	writeScramUser(t, zktest.OpenStore(t, connect), "alice", "alice-secret")
	b := startBridge(t, connect, 9001, func(c *bridge.Config) {
		c.Logger = c.Logger.Level(zerolog.InfoLevel)
		c.Upstream, c.ProxyListen = kf.ListenAddrs(), "127.0.0.1:0"
		c.SASLMechanisms = []string{"SCRAM-SHA-512"}
		c.SASLSessionLifetime = time.Second
	})
	e := &saslForwardEnv{addr: b.Addr().String()}
	var connects, authenticates atomic.Int64
	cl := e.client(t, scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(),
		kgo.DefaultProduceTopic("events"), kgo.WithHooks(saslHooks{&connects, &authenticates}))
	produceAndCommitAcrossSessions(t, cl, "events", &connects, &authenticates)
}

func TestSASLForwardConfigValidate(t *testing.T) {
	base := func(mod func(*bridge.Config)) bridge.Config {
		c := bridge.Config{ZKConnect: "h:1", UpstreamFromZK: true, SASLForward: true}
		mod(&c)
		return c
	}
	for name, c := range map[string]bridge.Config{
		"with SASLMechanisms":      base(func(c *bridge.Config) { c.SASLMechanisms = []string{"SCRAM-SHA-512"} }),
		"with SASLSessionLifetime": base(func(c *bridge.Config) { c.SASLSessionLifetime = time.Minute }),
		"with seeds":               base(func(c *bridge.Config) { c.UpstreamFromZK, c.Upstream = false, []string{"k:9092"} }),
		"without a data path":      base(func(c *bridge.Config) { c.UpstreamFromZK = false }),
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "SASLForward") {
			t.Errorf("%s: Validate = %v, want a SASLForward error", name, err)
		}
	}
	if err := base(func(*bridge.Config) {}).Validate(); err != nil {
		t.Errorf("SASLForward from /brokers/ids: %v", err)
	}
}
