// Package kafkatest is what tests of the Kafka side share: a client that
// speaks the Kafka framing over a raw TCP connection, so that a test sees
// exactly the bytes a server writes, and reading the servers' metrics.
package kafkatest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client speaks the Kafka framing over a raw TCP connection.
type Client struct {
	t  testing.TB
	NC net.Conn
	// Corr is the correlation id of the last request sent.
	Corr int32
	fmtr *kmsg.RequestFormatter
}

// Dial connects to addr; t.Cleanup closes the connection.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return &Client{t: t, NC: nc, fmtr: kmsg.NewRequestFormatter(kmsg.FormatterClientID("newproto-test"))}
}

// Send writes req with the next correlation id and returns that id.
func (c *Client) Send(req kmsg.Request) int32 {
	c.t.Helper()
	c.Corr++
	c.Write(c.fmtr.AppendRequest(nil, req, c.Corr))
	return c.Corr
}

// Write writes b as it is.
func (c *Client) Write(b []byte) {
	c.t.Helper()
	_ = c.NC.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.NC.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// SendStraddling writes req in two parts that straddle the idle deadline
// a connection begins with: its size and the start of its header half an
// idle period after the call, the rest three quarters of one later. It
// returns the correlation id.
func (c *Client) SendStraddling(req kmsg.Request, idle time.Duration) int32 {
	c.t.Helper()
	c.Corr++
	b := c.fmtr.AppendRequest(nil, req, c.Corr)
	time.Sleep(idle / 2)
	c.Write(b[:6])
	time.Sleep(idle * 3 / 4)
	c.Write(b[6:])
	return c.Corr
}

// Recv reads one response and decodes it as key at version. It checks the
// response header version and that the body re-encodes to the same bytes,
// which catches a wrong version or a missing tagged-field section.
func (c *Client) Recv(key, version int16) (int32, kmsg.Response) {
	c.t.Helper()
	frame, err := c.ReadFrame()
	if err != nil {
		c.t.Fatalf("reading response to %s v%d: %v", kmsg.NameForKey(key), version, err)
	}
	resp := kmsg.ResponseForKey(key)
	resp.SetVersion(version)
	if len(frame) < 4 {
		c.t.Fatalf("response frame of %d bytes", len(frame))
	}
	corr := int32(binary.BigEndian.Uint32(frame))
	body := frame[4:]
	if resp.IsFlexible() && key != int16(kmsg.ApiVersions) {
		if len(body) == 0 || body[0] != 0 {
			c.t.Fatalf("%s v%d: response header v1 must end with an empty tag section, got % x", kmsg.NameForKey(key), version, body[:min(len(body), 4)])
		}
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decoding %s v%d response: %v", kmsg.NameForKey(key), version, err)
	}
	if again := resp.AppendTo(nil); !bytes.Equal(again, body) {
		c.t.Fatalf("%s v%d response does not re-encode to its bytes:\n got % x\nwant % x", kmsg.NameForKey(key), version, body, again)
	}
	return corr, resp
}

// ReadFrame reads one response frame, without its size.
func (c *Client) ReadFrame() ([]byte, error) {
	_ = c.NC.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.NC, size[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.NC, frame)
	return frame, err
}

// RoundTrip sends req and decodes its response at req's version.
func (c *Client) RoundTrip(req kmsg.Request) kmsg.Response {
	c.t.Helper()
	corr := c.Send(req)
	got, resp := c.Recv(req.Key(), req.GetVersion())
	if got != corr {
		c.t.Fatalf("correlation id %d, want %d", got, corr)
	}
	return resp
}

// ExpectClosed checks that the server closes the connection without
// writing anything.
func (c *Client) ExpectClosed() {
	c.t.Helper()
	frame, err := c.ReadFrame()
	if err == nil {
		c.t.Fatalf("connection still open: got a %d-byte response", len(frame))
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !IsReset(err) {
		c.t.Fatalf("want the connection closed, got %v", err)
	}
}

// IsReset reports a connection the peer reset.
func IsReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe"))
}

// CheckAlive proves a connection still works with an ApiVersions round
// trip.
func CheckAlive(t testing.TB, c *Client) {
	t.Helper()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(2)
	resp := c.RoundTrip(req).(*kmsg.ApiVersionsResponse)
	if resp.ErrorCode != 0 {
		t.Fatalf("ApiVersions error %d", resp.ErrorCode)
	}
}

// Versions lists min..max.
func Versions(minV, maxV int16) []int16 {
	var vs []int16
	for v := minV; v <= maxV; v++ {
		vs = append(vs, v)
	}
	return vs
}

// CounterValue is the value of the counter or gauge name whose labels
// include labels, 0 if there is none.
func CounterValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// NewClient speaks the Kafka framing over nc, which t.Cleanup closes.
func NewClient(t testing.TB, nc net.Conn, clientID string) *Client {
	t.Cleanup(func() { nc.Close() })
	return &Client{t: t, NC: nc, fmtr: kmsg.NewRequestFormatter(kmsg.FormatterClientID(clientID))}
}

// Frame encodes req with correlation id corr as Send would, without
// sending it (tests that write several requests at once).
func (c *Client) Frame(req kmsg.Request, corr int32) []byte {
	return c.fmtr.AppendRequest(nil, req, corr)
}

// SetClientID makes the requests sent from now on carry id.
func (c *Client) SetClientID(id string) {
	c.fmtr = kmsg.NewRequestFormatter(kmsg.FormatterClientID(id))
}
