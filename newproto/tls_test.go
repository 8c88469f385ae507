package newproto_test

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// tlsGroupServer is kgoGroupServer on a TLS listener (mutual TLS when clientCA).
func tlsGroupServer(t *testing.T, ca *tlstest.CA, clientCA bool) (*testServer, *fakeGroups) {
	t.Helper()
	cfg := group.DefaultConfig()
	cfg.InitialRebalanceDelay = 300 * time.Millisecond
	fg := newFakeGroups(t, withConfig(cfg), withRealTime(20*time.Millisecond))
	var parts []newproto.Partition
	for p := range int32(6) {
		parts = append(parts, newproto.Partition{ID: p, Leader: 7, Replicas: []int32{7}, ISR: []int32{7}})
	}
	srv := ca.Server(t, "server")
	files := tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
	if clientCA {
		files.ClientCAFile = ca.File
	}
	tc, err := tlsconfig.NewServer(files, tlsconfig.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := groupServer(t, fg, newproto.Config{NodeID: 7, TLS: tc,
		Cluster: &fakeCluster{topics: map[string][]newproto.Partition{kgoTopic: parts}}})
	return ts, fg
}

func dialTLS(t *testing.T, addr string, cfg *tls.Config) *kafkatest.Client {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("dial TLS: %v", err)
	}
	return kafkatest.NewClient(t, nc, testClientID)
}

// A kgo consumer joins a group over mutual TLS; offsets committed over TLS read back; a
// plaintext client and a client without a certificate get no answer.
func TestTLSKgoGroup(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	ts, fg := tlsGroupServer(t, ca, true)
	alice := ca.Client(t, "alice", pkix.Name{CommonName: "alice"})

	cl := newKgoClient(t, ts.addr, kgo.DialTLSConfig(ca.ClientConfig(alice)),
		kgo.ConsumerGroup("tls-group"), kgo.ConsumeTopics(kgoTopic), kgo.HeartbeatInterval(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	zktest.Eventually(t, 15*time.Second, "kgo's member Stable over TLS", func() bool {
		d := fg.describe("tls-group")
		return d.State == group.Stable && len(d.Members) == 1
	})

	c := dialTLS(t, ts.addr, ca.ClientConfig(alice))
	simpleCommit(t, c, "tls-commits", map[string]map[int32]int64{kgoTopic: {0: 42}})
	f := kmsg.NewPtrOffsetFetchRequest()
	f.SetVersion(7)
	f.Group = "tls-commits"
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = kgoTopic, []int32{0}
	f.Topics = append(f.Topics, ft)
	resp := c.RoundTrip(f).(*kmsg.OffsetFetchResponse)
	if got := resp.Topics[0].Partitions[0].Offset; got != 42 {
		t.Fatalf("offset read back over TLS = %d, want 42", got)
	}

	t.Run("plaintext client", func(t *testing.T) {
		p := kafkatest.Dial(t, ts.addr)
		p.Send(kmsg.NewPtrApiVersionsRequest())
		if _, err := p.ReadFrame(); err == nil {
			t.Fatal("a plaintext client got an answer from a TLS listener")
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		nc, err := tls.Dial("tcp", ts.addr, ca.ClientConfig(nil))
		if err == nil {
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = nc.Write(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrApiVersionsRequest(), 1))
			if err == nil {
				_, err = nc.Read(make([]byte, 4))
			}
		}
		if err == nil {
			t.Fatal("a client without a certificate got an answer")
		}
	})
}

// librdkafka (kcat) joins a group with security.protocol=ssl and mutual TLS.
func TestTLSKcatGroup(t *testing.T) {
	kcat := kafkatest.KcatPath(t)
	ca := tlstest.NewCA(t, "ca")
	ts, fg := tlsGroupServer(t, ca, true)
	bob := ca.Client(t, "bob", pkix.Name{CommonName: "bob"})
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, kcat, "-b", ts.addr, "-G", "kcat-tls", "-q", "-o", "end",
		"-X", "security.protocol=ssl", "-X", "ssl.ca.location="+ca.File,
		"-X", "ssl.certificate.location="+bob.CertFile, "-X", "ssl.key.location="+bob.KeyFile,
		"-X", "heartbeat.interval.ms=100", "-X", "session.timeout.ms=10000", kgoTopic)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kcat stderr:\n%s", stderr.String())
		}
	})
	zktest.Eventually(t, 20*time.Second, "kcat's member Stable over TLS", func() bool {
		d := fg.describe("kcat-tls")
		return d.State == group.Stable && len(d.Members) == 1
	})
}
