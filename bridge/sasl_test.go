package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	fsasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/sasl"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// writeScramUser writes a user's SCRAM credentials as `kafka-configs --alter --add-config
// 'SCRAM-SHA-256=[iterations=4096,password=...],SCRAM-SHA-512=[...]' --entity-type users`
// does in ZooKeeper mode.
func writeScramUser(t *testing.T, s *zkstate.Store, user, password string) {
	t.Helper()
	cfg := map[string]string{}
	for _, mech := range []string{sasl.ScramSHA256, sasl.ScramSHA512} {
		c, err := sasl.NewCredential(mech, password, nil, 4096)
		if err != nil {
			t.Fatal(err)
		}
		cfg[mech] = c.String()
	}
	data, err := json.Marshal(map[string]any{"version": 1, "config": cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Create(ctx, "/config/users/"+user, data, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
}

// saramaSCRAM adapts franz-go's SCRAM client to sarama's SCRAMClient.
type saramaSCRAM struct {
	sha512     bool
	user, pass string
	sess       fsasl.Session
	done       bool
}

func (s *saramaSCRAM) Begin(user, pass, _ string) error {
	s.user, s.pass = user, pass
	return nil
}

func (s *saramaSCRAM) Step(challenge string) (string, error) {
	if s.sess == nil {
		m := scram.Auth{User: s.user, Pass: s.pass}.AsSha256Mechanism()
		if s.sha512 {
			m = scram.Auth{User: s.user, Pass: s.pass}.AsSha512Mechanism()
		}
		sess, first, err := m.Authenticate(context.Background(), "")
		s.sess = sess
		return string(first), err
	}
	done, next, err := s.sess.Challenge([]byte(challenge))
	s.done = done
	return string(next), err
}

func (s *saramaSCRAM) Done() bool { return s.done }

// SCRAM against the credentials Kafka keeps in ZooKeeper, over TLS (SASL_SSL), with the
// authorizer on: kgo, sarama and librdkafka (kcat) each authenticate as User:alice, which the
// ACLs let use groups "sasl-*"; a wrong password and an unknown user are refused with
// SASL_AUTHENTICATION_FAILED and touch no group.
func TestIntegration_SASLClients(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, s, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	writeScramUser(t, s, "alice", "alice-secret")
	w := &aclWriter{t: t, s: s}
	w.set(authz.Pattern{Type: authz.Group, Name: "sasl-", PatternType: authz.Prefixed}, allowACL("User:alice", authz.Read))
	w.set(authz.Pattern{Type: authz.Topic, Name: "events"}, allowACL("User:alice", authz.Read))

	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t, "bridge")
	b := startBridge(t, connect, 9001, func(c *bridge.Config) {
		c.KafkaTLS = tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
		c.SASLMechanisms = []string{sasl.ScramSHA512, sasl.ScramSHA256}
		c.Authorizer = bridge.AuthorizerZooKeeper
	})
	addr := b.Addr().String()
	kgoAs := func(m fsasl.Mechanism) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(ca.ClientConfig(nil)), kgo.SASL(m), kgo.RetryTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	commit := func(cl *kgo.Client, g string, off int64) error {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Group = g
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "events"
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
	fetch := func(cl *kgo.Client, g string) int64 {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.Group = g
		rt := kmsg.NewOffsetFetchRequestTopic()
		rt.Topic, rt.Partitions = "events", []int32{0}
		r.Topics = append(r.Topics, rt)
		resp, err := r.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0].Offset
	}

	t.Run("kgo", func(t *testing.T) {
		cl := kgoAs(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())
		if err := commit(cl, "sasl-kgo", 42); err != nil {
			t.Fatal(err)
		}
		if o := fetch(cl, "sasl-kgo"); o != 42 {
			t.Fatalf("read back %d, want 42", o)
		}
		// Authenticated, but not authorized for this group: the principal is User:alice.
		if err := commit(cl, "other-group", 1); !errors.Is(err, kerr.GroupAuthorizationFailed) {
			t.Fatalf("commit outside the ACL: %v", err)
		}
	})

	t.Run("wrong password and unknown user", func(t *testing.T) {
		for _, m := range []fsasl.Mechanism{
			scram.Auth{User: "alice", Pass: "guess"}.AsSha512Mechanism(),
			scram.Auth{User: "mallory", Pass: "alice-secret"}.AsSha256Mechanism(),
		} {
			cl := kgoAs(m)
			if err := commit(cl, "sasl-kgo", 1); !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED", m.Name(), err)
			}
		}
		admin := kgoAs(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())
		if o := fetch(admin, "sasl-kgo"); o != 42 {
			t.Fatalf("a refused client moved the offset to %d", o)
		}
	})

	t.Run("sarama", func(t *testing.T) {
		cfg := sarama.NewConfig()
		cfg.Version = sarama.V2_8_0_0
		cfg.ClientID = "sasl-sarama"
		cfg.Net.TLS.Enable = true
		cfg.Net.TLS.Config = ca.ClientConfig(nil)
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Handshake = true
		cfg.Net.SASL.Version = sarama.SASLHandshakeV1
		cfg.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "alice", "alice-secret"
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{} }
		cfg.Metadata.Retry.Max = 1
		client, err := sarama.NewClient([]string{addr}, cfg)
		if err != nil {
			t.Fatalf("sarama client: %v", err)
		}
		defer client.Close()
		broker, err := client.Coordinator("sasl-sarama")
		if err != nil {
			t.Fatalf("sarama coordinator: %v", err)
		}
		req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: "sasl-sarama", ConsumerGroupGeneration: -1, RetentionTime: -1}
		req.AddBlock("events", 1, 77, 0, "")
		resp, err := broker.CommitOffset(req)
		if err != nil || resp.Errors["events"][1] != sarama.ErrNoError {
			t.Fatalf("sarama commit: %v %v", err, resp)
		}
		freq := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: "sasl-sarama"}
		freq.AddPartition("events", 1)
		fresp, err := broker.FetchOffset(freq)
		if err != nil || fresp.GetBlock("events", 1).Offset != 77 {
			t.Fatalf("sarama fetch: %v %+v", err, fresp.GetBlock("events", 1))
		}
	})

	t.Run("kcat", func(t *testing.T) {
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Skip("kcat not installed")
		}
		args := func(pass, group string) []string {
			return []string{"-b", addr, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + ca.File,
				"-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", "sasl.password=" + pass,
				"-G", group, "-q", "-o", "end", "-X", "heartbeat.interval.ms=100", "-X", "session.timeout.ms=10000", "events"}
		}
		kctx, stop := context.WithCancel(context.Background())
		defer stop()
		cmd := exec.CommandContext(kctx, kcat, args("alice-secret", "sasl-kcat")...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stop()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("kcat stderr:\n%s", stderr.String())
			}
		}()
		cl := kgoAs(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism())
		zktest.Eventually(t, 20*time.Second, "kcat's member in group sasl-kcat", func() (bool, string) {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.Groups = []string{"sasl-kcat"}
			resp, err := r.RequestWith(ctx, cl)
			if err != nil {
				return false, err.Error()
			}
			g := resp.Groups[0]
			return g.State == "Stable" && len(g.Members) == 1, g.State
		})

		// A wrong password: librdkafka reports the authentication failure and gets no metadata.
		bad := exec.CommandContext(ctx, kcat, "-b", addr, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location="+ca.File,
			"-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", "sasl.password=nope", "-L", "-m", "5")
		out, err := bad.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "SASL") {
			t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
		}
	})
}
