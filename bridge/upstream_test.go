package bridge_test

// The upstream wiring of upstream.go: configuration and flag parsing, the start-up checks (an
// upstream older than Kafka 0.10, a broker using the bridge's node id), where the proxy
// listeners listen, and following the cluster in --upstream mode. The data path itself is
// dataflow_test.go's.

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/relay"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

func TestUpstreamParseFlags(t *testing.T) {
	for in, want := range map[string][]string{
		"":                      nil,
		"  ":                    nil,
		"k1:9092":               {"k1:9092"},
		"k1:9092, k2:9093":      {"k1:9092", "k2:9093"},
		"[::1]:9092,10.0.0.1:1": {"[::1]:9092", "10.0.0.1:1"},
	} {
		got, err := bridge.ParseUpstream(in)
		if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("ParseUpstream(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"k1", "k1:9092,", ",k1:9092", "k1:0", ":9092", "k1:65536", "k1:x"} {
		if got, err := bridge.ParseUpstream(bad); err == nil {
			t.Errorf("ParseUpstream(%q) = %q, want an error", bad, got)
		}
	}

	for in, want := range map[string]map[int32]string{
		"":                                  nil,
		"1=h:9093":                          {1: "h:9093"},
		" 1 = h:9093 , 1002=0.0.0.0:19094 ": {1: "h:9093", 1002: "0.0.0.0:19094"},
		"0=:9093":                           {0: ":9093"},
	} {
		got, err := bridge.ParseProxyMap(in)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("ParseProxyMap(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"1", "h:9093", "x=h:9093", "-1=h:9093", "1=h", "1=h:9093,1=h:9094", "1=h:9093,", "99999999999=h:1"} {
		if got, err := bridge.ParseProxyMap(bad); err == nil {
			t.Errorf("ParseProxyMap(%q) = %v, want an error", bad, got)
		}
	}
}

func TestUpstreamConfigValidate(t *testing.T) {
	good := []bridge.Config{
		{ZKConnect: "h:1", Upstream: []string{"k:9092"}},
		{ZKConnect: "h:1", UpstreamFromZK: true, ProxyListen: "0.0.0.0:19092", ProxyMap: map[int32]string{3: "h:1"}},
		{ZKConnect: "h:1", Upstream: []string{"k:9092"}, UpstreamTimeout: time.Minute},
	}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", c, err)
		}
	}
	for want, c := range map[string]bridge.Config{
		"exclusive":              {ZKConnect: "h:1", Upstream: []string{"k:9092"}, UpstreamFromZK: true},
		"Upstream broker":        {ZKConnect: "h:1", Upstream: []string{"k"}},
		"need Upstream":          {ZKConnect: "h:1", ProxyListen: "h:1"},
		"ProxyListen":            {ZKConnect: "h:1", UpstreamFromZK: true, ProxyListen: "h"},
		"BASEPORT":               {ZKConnect: "h:1", UpstreamFromZK: true, ProxyListen: "h:70000"},
		"negative":               {ZKConnect: "h:1", UpstreamFromZK: true, ProxyMap: map[int32]string{-1: "h:1"}},
		"bridge's own NodeID":    {ZKConnect: "h:1", UpstreamFromZK: true, ProxyMap: map[int32]string{bridge.DefaultNodeID: "h:1"}},
		"ProxyMap address":       {ZKConnect: "h:1", UpstreamFromZK: true, ProxyMap: map[int32]string{1: "h"}},
		"UpstreamTimeout -1s is": {ZKConnect: "h:1", Upstream: []string{"k:9092"}, UpstreamTimeout: -time.Second},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want an error saying %q", c, err, want)
		}
	}
}

// upstreamConfig is startBridge's configuration, for tests that call Run themselves.
func upstreamConfig(t *testing.T, connect string) bridge.Config {
	return bridge.Config{
		ZKConnect:        connect,
		ZKSessionTimeout: 4 * time.Second,
		KafkaListen:      "127.0.0.1:0",
		AdminListen:      "127.0.0.1:0",
		ProxyListen:      "127.0.0.1:0",
		Group:            testGroupConfig(),
		DrainTimeout:     time.Second,
		Logger:           newLogger(t).Level(zerolog.InfoLevel),
	}
}

// runToError runs a bridge that must fail at start and returns Run's error.
func runToError(t *testing.T, cfg bridge.Config) error {
	t.Helper()
	b, err := bridge.New(cfg)
	if err != nil {
		t.Fatalf("bridge.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = b.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not fail at start (ran until the test's deadline): %v", err)
	}
	return err
}

// startOldBroker is a stand-in for a Kafka 0.9 broker: it answers Metadata v0 (itself, no
// topics) and closes the connection on a request with an api key it does not know, as
// ApiVersions (18) is to it.
func startOldBroker(t *testing.T) string {
	t.Helper()
	return startFakeUpstream(t, func(nc net.Conn) {
		for {
			var hdr [12]byte // size, api key, version, correlation id
			if _, err := io.ReadFull(nc, hdr[:]); err != nil {
				return
			}
			size := binary.BigEndian.Uint32(hdr[:])
			if _, err := io.CopyN(io.Discard, nc, int64(size)-8); err != nil || size < 8 {
				return
			}
			if binary.BigEndian.Uint16(hdr[4:]) != uint16(kmsg.Metadata) || binary.BigEndian.Uint16(hdr[6:]) != 0 {
				return
			}
			resp := kmsg.NewPtrMetadataResponse()
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host, b.Port = 1, "127.0.0.1", 9092
			resp.Brokers = append(resp.Brokers, b)
			out := resp.AppendTo(append(make([]byte, 4, 64), hdr[8:12]...))
			binary.BigEndian.PutUint32(out, uint32(len(out)-4))
			if _, err := nc.Write(out); err != nil {
				return
			}
		}
	})
}

// startFakeUpstream serves each connection to a loopback listener with serve (which need not
// close it) until the test ends, and returns the listener's address.
func startFakeUpstream(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				serve(nc)
			})
		}
	})
	return ln.Addr().String()
}

// An upstream older than Kafka 0.10 is refused at start with a message that says so, whether
// it is given as --upstream or registered in /brokers/ids.
func TestIntegration_UpstreamTooOldRefused(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	old := startOldBroker(t)
	zk := zktest.OpenStore(t, connect)
	host, port, _ := net.SplitHostPort(old)
	p, _ := strconv.Atoi(port)
	if err := zk.Create(t.Context(), zkstate.BrokerPath(1), zkstate.BrokerRegistration{ID: 1, Version: 1, Host: host, Port: int32(p), JMXPort: -1}.Encode(),
		zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*bridge.Config){
		"upstream":         func(c *bridge.Config) { c.Upstream = []string{old} },
		"upstream-from-zk": func(c *bridge.Config) { c.UpstreamFromZK = true },
	} {
		cfg := upstreamConfig(t, connect)
		mod(&cfg)
		err := runToError(t, cfg)
		for _, want := range []string{"too old for the relay", "Kafka 0.10 or newer"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: Run = %v, want an error saying %q", name, err, want)
			}
		}
	}
}

// An upstream that accepts connections and closes them unanswered is not called too old (it
// does not answer Metadata v0 either, as a Kafka 0.9 broker would): Run fails saying what it
// does.
func TestIntegration_UpstreamClosingNotTooOld(t *testing.T) {
	t.Parallel()
	closing := startFakeUpstream(t, func(net.Conn) {})
	cfg := upstreamConfig(t, zktest.Connect(t))
	cfg.Upstream = []string{closing}
	err := runToError(t, cfg)
	if err == nil || strings.Contains(err.Error(), "too old") || errors.Is(err, relay.ErrUpstreamTooOld) {
		t.Fatalf("Run = %v, want an error that does not call the upstream too old", err)
	}
	for _, want := range []string{closing, "closed the connection without answering ApiVersions", "not a Kafka broker's PLAINTEXT listener"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run = %v, want an error saying %q", err, want)
		}
	}
}

// A broker in /brokers/ids with the bridge's own node id is refused at start: Metadata would
// list two nodes with one id.
func TestIntegration_UpstreamNodeIDCollision(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	zk := zktest.OpenStore(t, connect)
	host, port, _ := net.SplitHostPort(kf.ListenAddrs()[0])
	p, _ := strconv.Atoi(port)
	if err := zk.Create(t.Context(), zkstate.BrokerPath(bridge.DefaultNodeID), zkstate.BrokerRegistration{ID: bridge.DefaultNodeID, Version: 1, Host: host, Port: int32(p), JMXPort: -1}.Encode(),
		zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	cfg := upstreamConfig(t, connect)
	cfg.UpstreamFromZK = true
	err = runToError(t, cfg)
	if want := "NodeID 9000 is also the id of upstream broker"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Run = %v, want an error saying %q", err, want)
	}
}

// Without an upstream there is no relay: no proxy listener, and Metadata is /brokers' as
// before.
func TestIntegration_UpstreamNone(t *testing.T) {
	t.Parallel()
	b := startBridge(t, zktest.Connect(t), dfNode, nil)
	if addrs := b.ProxyAddrs(); len(addrs) != 0 {
		t.Errorf("ProxyAddrs = %v without an upstream, want none", addrs)
	}
}

// freePorts finds n consecutive free loopback ports (a race with other processes remains;
// callers retry). It looks below Linux's ephemeral range (32768 and up): there, runs next to a
// port the kernel just handed out are often taken by the outgoing connections of the same test
// process (ZooKeeper, kfake).
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 200 {
		base := 20000 + rand.IntN(12000-n)
		ok := true
		for i := 0; ok && i < n; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// Where the proxy listeners listen: by default after the Kafka listener's port, broker k of
// the sorted list on port+1+k; an explicit ProxyMap entry wins over ProxyListen.
func TestIntegration_UpstreamProxyListeners(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)

	base := freePorts(t, 4)
	b := startBridge(t, connect, dfNode, func(c *bridge.Config) {
		c.Logger = c.Logger.Level(zerolog.InfoLevel)
		c.KafkaListen = net.JoinHostPort("127.0.0.1", strconv.Itoa(base))
		c.Upstream = []string{kf.ListenAddrs()[1]}
	})
	de := &dfEnv{env: &env{b: b}}
	addrs := de.waitProxies(t, 3)
	for id := range int32(3) {
		if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+1+int(id))); addrs[id].String() != want {
			t.Errorf("broker %d's proxy listener at %s, want %s (Kafka listener's port + 1 + %d)", id, addrs[id], want, id)
		}
	}

	mapped := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePorts(t, 1)))
	b2 := startBridge(t, connect, dfNode+1, func(c *bridge.Config) {
		c.Logger = c.Logger.Level(zerolog.InfoLevel)
		c.Upstream = []string{kf.ListenAddrs()[0]}
		c.ProxyListen = "127.0.0.1:0"
		c.ProxyMap = map[int32]string{1: mapped}
	})
	addrs = (&dfEnv{env: &env{b: b2}}).waitProxies(t, 3)
	if addrs[1].String() != mapped {
		t.Errorf("broker 1's proxy listener at %s, want the mapped %s", addrs[1], mapped)
	}
}

// With --upstream seeds the bridge asks the cluster for its brokers again every
// MetadataMaxAge: a broker added to the cluster gets a proxy listener, one removed loses it.
func TestIntegration_UpstreamSeedsFollowed(t *testing.T) {
	t.Parallel()
	kf, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	b := startBridge(t, zktest.Connect(t), dfNode, func(c *bridge.Config) {
		c.Logger = c.Logger.Level(zerolog.InfoLevel)
		c.Upstream = []string{kf.ListenAddrs()[0]}
		c.ProxyListen = "127.0.0.1:0"
		c.MetadataMaxAge = 200 * time.Millisecond
	})
	de := &dfEnv{env: &env{b: b}}
	de.waitProxies(t, 3)
	id, _, err := kf.AddNode(-1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if addrs := de.waitProxies(t, 4); addrs[id] == nil {
		t.Errorf("no proxy listener for the added broker %d: %v", id, addrs)
	}
	if err := kf.RemoveNode(2); err != nil {
		t.Fatal(err)
	}
	if addrs := de.waitProxies(t, 3); addrs[2] != nil {
		t.Errorf("broker 2 was removed but keeps its proxy listener %s", addrs[2])
	}
}
