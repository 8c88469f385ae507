package bridge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Every listener serves TLS when configured (issue 16, item 1): a kgo client commits and reads
// back offsets over TLS, the admin listener answers HTTPS only, and the legacy listener
// requires mutual TLS; the seed-001 protocol inside it is unchanged.
func TestIntegration_BridgeTLSListeners(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, s, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t, "bridge")
	plain := tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile}
	mutual := plain
	mutual.ClientCAFile = ca.File
	b := startBridge(t, connect, 9001, func(c *bridge.Config) {
		c.LegacyListen = "127.0.0.1:0"
		c.KafkaTLS, c.AdminTLS, c.LegacyTLS = plain, plain, mutual
	})

	t.Run("kafka", func(t *testing.T) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()), kgo.DialTLSConfig(ca.ClientConfig(nil)), kgo.RetryTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		commit := kmsg.NewPtrOffsetCommitRequest()
		commit.Group = "tls-app"
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = "events"
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset = 1, 77
		ct.Partitions = append(ct.Partitions, cp)
		commit.Topics = append(commit.Topics, ct)
		resp, err := commit.RequestWith(ctx, cl)
		if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("OffsetCommit over TLS: %v %+v", err, resp)
		}
		fetch := kmsg.NewPtrOffsetFetchRequest()
		fetch.Group = "tls-app"
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic, ft.Partitions = "events", []int32{1}
		fetch.Topics = append(fetch.Topics, ft)
		fr, err := fetch.RequestWith(ctx, cl)
		if err != nil || fr.Topics[0].Partitions[0].Offset != 77 {
			t.Fatalf("OffsetFetch over TLS: %v %+v", err, fr)
		}
		// Metadata over TLS names the bridge, which the client reached again over TLS above.
		nc, err := net.DialTimeout("tcp", b.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = nc.Write(kmsg.NewRequestFormatter().AppendRequest(nil, kmsg.NewPtrApiVersionsRequest(), 1))
		if _, err := io.ReadFull(nc, make([]byte, 4)); err == nil {
			t.Fatal("a plaintext client got an answer from the TLS Kafka listener")
		}
	})

	t.Run("admin", func(t *testing.T) {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientConfig(nil)}}
		resp, err := hc.Get("https://" + b.AdminAddr().String() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz over HTTPS: %s", resp.Status)
		}
		if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + b.AdminAddr().String() + "/healthz"); err == nil && resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP /healthz answered 200 on a TLS admin listener")
		}
	})

	t.Run("legacy", func(t *testing.T) {
		alice := ca.Client(t, "legacy-app", pkix.Name{CommonName: "legacy-app"})
		dialer := &tls.Dialer{Config: ca.ClientConfig(alice)}
		rec := &startRecorder{}
		cl, err := legacy.NewClient(legacy.ClientConfig{
			Brokers:         []string{b.LegacyAddr().String()},
			GroupID:         "old-app",
			ConsumerID:      "old-app_host-1-0000abcd",
			Subscription:    map[string]int{"events": 1},
			AutoOffsetReset: legacy.ResetSmallest,
			PingInterval:    200 * time.Millisecond,
			MaxPingRetries:  3,
			Handler:         rec,
			Logger:          newLogger(t),
			Dial: func(ctx context.Context, addr string) (net.Conn, error) {
				return dialer.DialContext(ctx, "tcp", addr)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cl.Run(runCtx) }()
		defer func() {
			stop()
			<-done
		}()
		zktest.Eventually(t, 15*time.Second, "the legacy consumer over mutual TLS is started on events/0-1", func() (bool, string) {
			parts := rec.last()
			return len(parts) == 2, "started on " + fmtParts(parts)
		})

		// Without a client certificate the handshake (or the first read, in TLS 1.3) fails.
		nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", b.LegacyAddr().String(), ca.ClientConfig(nil))
		if err == nil {
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = nc.Read(make([]byte, 1))
		}
		if err == nil {
			t.Fatal("a legacy client without a certificate was served")
		}
	})
}

// The admin listener's bearer token guards everything but /healthz (issue 16, item 7).
func TestIntegration_AdminToken(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	b := startBridge(t, connect, 9001, func(c *bridge.Config) { c.AdminToken = "s3cr3t-token" })
	get := func(path, token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+b.AdminAddr().String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Ready once the bridge's registration exists (a round trip after start).
	zktest.Eventually(t, 10*time.Second, "/readyz with the token", func() (bool, string) {
		code := get("/readyz", "s3cr3t-token")
		return code == http.StatusOK, fmt.Sprint(code)
	})
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/readyz", "", http.StatusUnauthorized},
		{"/metrics", "wrong", http.StatusUnauthorized},
		{"/metrics", "s3cr3t-token", http.StatusOK},
		{"/readyz", "s3cr3t-token", http.StatusOK},
	} {
		if got := get(tc.path, tc.token); got != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
}

// The relay reaches brokers on their TLS listener (issue 16, item 3): a kfake cluster that
// speaks only TLS, a plaintext client of the bridge produces and consumes through it; with a
// CA that does not vouch for the brokers the bridge does not start.
func TestIntegration_UpstreamTLS(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ca := tlstest.NewCA(t, "ca")
	brokerCert := ca.Server(t, "broker")
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "tls-events"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{brokerCert.TLS}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)

	other := tlstest.NewCA(t, "other")
	cfg := testBridgeConfig(connect, 9001, newLogger(t))
	cfg.Upstream, cfg.ProxyListen = kf.ListenAddrs(), "127.0.0.1:0"
	cfg.UpstreamTLS = &tlsconfig.Client{CAFile: other.File}
	wrong, err := bridge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := wrong.Run(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("a bridge with a CA that does not vouch for the broker: Run = %v", err)
	}

	b := startBridge(t, connect, 9002, func(c *bridge.Config) {
		c.Upstream, c.ProxyListen = kf.ListenAddrs(), "127.0.0.1:0"
		c.UpstreamTLS = &tlsconfig.Client{CAFile: ca.File}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()), kgo.DefaultProduceTopic("tls-events"),
		kgo.ConsumeTopics("tls-events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 20 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("produce through the bridge to a TLS broker: %v", err)
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
}

// The bridge reaches ZooKeeper on its secure client port (issue 16, item 6): Debian's
// ZooKeeper with the Netty connection factory and a PEM key store serves TLS on a second port;
// the bridge connects there with the CA only, serves a commit, and the offset is in ZooKeeper
// as read over the plaintext port. A client without TLS gets no session on the secure port.
func TestIntegration_ZooKeeperTLS(t *testing.T) {
	zk := zktest.StartTLS(t)
	ca, secure := zk.CA, zk.Secure

	// Plaintext against the secure port: no session.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := zkstate.Open(ctx, zkstate.Config{Connect: secure, Logger: newLogger(t)})
	cancel()
	if err == nil {
		t.Fatal("a plaintext session on the secure client port")
	}

	b := startBridge(t, secure+"/zktls", 9001, func(c *bridge.Config) {
		c.ZKTLS = &tlsconfig.Client{CAFile: ca.File}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Group = "zk-tls"
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "events"
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 31
	rt.Partitions = append(rt.Partitions, rp)
	r.Topics = append(r.Topics, rt)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := r.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit through a bridge on ZooKeeper over TLS: %v %+v", err, resp)
	}
	plain := zktest.OpenStore(t, zk.Addr+"/zktls")
	data, _, err := plain.Get(ctx, "/consumers/zk-tls/offsets/events/0")
	if err != nil || string(data) != "31" {
		t.Fatalf("offset in ZooKeeper: %q, %v", data, err)
	}
}

// With brokers from /brokers/ids, --upstream-tls dials each broker's SSL endpoint, not its
// PLAINTEXT one: the registration names both (PLAINTEXT at a port where nothing listens), and
// a plaintext client of the bridge produces and consumes through it.
func TestIntegration_UpstreamTLSFromRegistry(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ca := tlstest.NewCA(t, "ca")
	brokerCert := ca.Server(t, "broker")
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "tls-zk"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{brokerCert.TLS}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	reg := zkstate.BrokerRegistration{ID: 0, Version: 4, Port: -1, JMXPort: -1, Timestamp: "1700000000000",
		Endpoints:                   []string{"PLAINTEXT://" + deadAddr, "SSL://" + kf.ListenAddrs()[0]},
		ListenerSecurityProtocolMap: map[string]string{"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, zktest.OpenStore(t, connect), zkstate.Layout{Brokers: []zkstate.BrokerRegistration{reg}}); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, 9001, func(c *bridge.Config) {
		c.UpstreamFromZK, c.ProxyListen = true, "127.0.0.1:0"
		c.UpstreamTLS = &tlsconfig.Client{CAFile: ca.File}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()), kgo.DefaultProduceTopic("tls-zk"),
		kgo.ConsumeTopics("tls-zk"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RetryTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 5 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatalf("produce through the bridge to the broker's SSL endpoint: %v", err)
		}
	}
	got := 0
	for got < 5 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
			t.Fatalf("fetch: %v", errs)
		}
		got += fs.NumRecords()
	}
	if got != 5 {
		t.Fatalf("consumed %d records, want 5", got)
	}
}
