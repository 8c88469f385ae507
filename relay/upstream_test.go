package relay_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/relay"
)

// The start-up check of the upstream brokers (Upstream.Probe, and
// Discover for --upstream seeds) against small fake servers on loopback:
// each way of not answering ApiVersions gets its own message, and only a
// real pre-0.10 broker (it closes the connection on ApiVersions, an api
// key it does not know, yet answers a Metadata v0 request) is called too
// old.
func TestUpstreamHandshakeFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serve   func(net.Conn)
		tooOld  bool
		timeout bool
		want    []string
	}{{
		name:  "accepts and closes",
		serve: func(nc net.Conn) { nc.Close() },
		want:  []string{"closed the connection without answering ApiVersions", "Metadata v0", "not a Kafka broker's PLAINTEXT listener"},
	}, {
		name: "reads and resets",
		serve: func(nc net.Conn) {
			readRequest(nc)
			_ = nc.(*net.TCPConn).SetLinger(0) // close sends RST
			nc.Close()
		},
		want: []string{"closed the connection without answering ApiVersions", "connection reset", "not a Kafka broker's PLAINTEXT listener"},
	}, {
		name: "says nothing",
		serve: func(nc net.Conn) {
			readRequest(nc)
			_, _ = io.Copy(io.Discard, nc) // until the bridge gives up
			nc.Close()
		},
		timeout: true,
		want:    []string{"no answer to ApiVersions within", "accepts connections but does not answer"},
	}, {
		name:   "Kafka 0.9",
		serve:  kafka09,
		tooOld: true,
		want:   []string{"closed the connection on ApiVersions", "answers Metadata v0", "older than 0.10", "Kafka 0.10 or newer is required"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeUpstream(t, tc.serve)
			host, port, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(port)
			up, err := relay.NewUpstream(relay.UpstreamConfig{
				Brokers:     []newproto.Broker{{NodeID: 1, Host: host, Port: int32(p)}},
				DialTimeout: 300 * time.Millisecond, RequestTimeout: 300 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for name, check := range map[string]func() error{
				"Probe":    func() error { return up.Probe(ctx) },
				"Discover": func() error { return up.Discover(ctx, []string{addr}) },
			} {
				err := check()
				if err == nil {
					t.Fatalf("%s succeeded", name)
				}
				if errors.Is(err, relay.ErrUpstreamTooOld) != tc.tooOld {
					t.Errorf("%s: %v; wraps ErrUpstreamTooOld: %v, want %v", name, err, !tc.tooOld, tc.tooOld)
				}
				if errors.Is(err, os.ErrDeadlineExceeded) != tc.timeout {
					t.Errorf("%s: %v; a timeout: %v, want %v", name, err, !tc.timeout, tc.timeout)
				}
				for _, want := range append([]string{addr}, tc.want...) {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: %q does not say %q", name, err, want)
					}
				}
			}
		})
	}
}

// fakeUpstream serves every connection to a loopback listener with serve,
// until the test ends.
func fakeUpstream(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() { serve(nc) })
		}
	})
	return ln.Addr().String()
}

// readRequest reads one request frame and returns its api key, version
// and correlation id and the frame (after the size); key -1 when the
// connection ended first.
func readRequest(nc net.Conn) (key, version int16, corr int32) {
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		return -1, 0, 0
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, frame); err != nil || len(frame) < 8 {
		return -1, 0, 0
	}
	return int16(binary.BigEndian.Uint16(frame)), int16(binary.BigEndian.Uint16(frame[2:])), int32(binary.BigEndian.Uint32(frame[4:]))
}

// kafka09 answers as a Kafka 0.9 broker does: Metadata v0 with itself as
// the only broker and no topics, and any api key it does not know
// (ApiVersions, 18) by closing the connection.
func kafka09(nc net.Conn) {
	defer nc.Close()
	for {
		key, version, corr := readRequest(nc)
		if key != int16(kmsg.Metadata) || version != 0 {
			return
		}
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(0)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 1, "127.0.0.1", 9092
		resp.Brokers = append(resp.Brokers, b)
		out := binary.BigEndian.AppendUint32(make([]byte, 4, 64), uint32(corr))
		out = resp.AppendTo(out)
		binary.BigEndian.PutUint32(out, uint32(len(out)-4))
		if _, err := nc.Write(out); err != nil {
			return
		}
	}
}
