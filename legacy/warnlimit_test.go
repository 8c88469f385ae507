package legacy

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// At most warnBurst warnings per warnPeriod; the first of the next period carries the count of
// those suppressed.
func TestWarnLimiter(t *testing.T) {
	var l warnLimiter
	t0 := time.Unix(1000, 0)
	for i := range warnBurst {
		if ok, s := l.allow(t0.Add(time.Duration(i) * time.Millisecond)); !ok || s != 0 {
			t.Fatalf("line %d: allow = %v, %d", i, ok, s)
		}
	}
	for i := range 5 {
		if ok, _ := l.allow(t0.Add(time.Second)); ok {
			t.Fatalf("line %d past the burst allowed", warnBurst+i)
		}
	}
	if ok, s := l.allow(t0.Add(warnPeriod)); !ok || s != 5 {
		t.Errorf("next period: allow = %v, suppressed %d; want true, 5", ok, s)
	}
	if ok, s := l.allow(t0.Add(warnPeriod + time.Millisecond)); !ok || s != 0 {
		t.Errorf("then: allow = %v, suppressed %d; want true, 0", ok, s)
	}
}

// Issue 17 §6: one warn line per bad or idle connection flooded the log (5,000 in a minute).
// 60 connections sending garbage and 5 idle ones give at most warnBurst warn lines, and each
// still closes only its own connection.
func TestServerWarningsRateLimited(t *testing.T) {
	checkGoroutines(t)
	var buf lockedBuffer
	coord := newFakeCoord()
	addr := startServer(t, coord, func(c *Config) {
		c.Logger = zerolog.New(&buf)
		c.IdleTimeout = 200 * time.Millisecond
	})
	var idle []*rawConn
	for range 5 {
		idle = append(idle, dialRaw(t, addr))
	}
	for range 60 {
		r := dialRaw(t, addr)
		r.sendBytes([]byte{0x00, 0x00, 0x00, 0x04, 0x00, 0x03, 0x00, 0x00}) // unknown type
		r.expectClosed()
	}
	for _, r := range idle {
		r.expectClosed() // by the idle timeout
	}
	if n := strings.Count(buf.String(), `"level":"warn"`); n == 0 || n > warnBurst {
		t.Errorf("%d warn lines for 65 bad connections, want 1..%d:\n%s", n, warnBurst, buf.String())
	}
	startClient(t, clientConfig(t, "good", addr))
	mustPing(t, coord.session(t))
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Issue 17 §3: no limit on connections. MaxConnectionsPerIP and MaxConnections close one
// connection too many at once; closing one lets another in.
func TestServerConnectionLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"per ip", func(c *Config) { c.MaxConnectionsPerIP = 2 }},
		{"total", func(c *Config) { c.MaxConnections = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := newFakeCoord()
			addr := startServer(t, coord, tc.mod)
			consult := func(r *rawConn) {
				t.Helper()
				r.send(&ConsultRequest{})
				if _, ok := r.recv().(*ConsultResponse); !ok {
					t.Fatal("no ConsultResponse")
				}
			}
			a, b := dialRaw(t, addr), dialRaw(t, addr)
			consult(a)
			consult(b)
			third := dialRaw(t, addr)
			third.expectClosed()
			a.nc.Close()
			deadline := time.Now().Add(5 * time.Second)
			for {
				r := dialRaw(t, addr)
				_, _ = r.nc.Write(AppendFrame(nil, &ConsultRequest{})) // may be refused still
				if _, err := r.tryRecv(); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no connection admitted after one closed")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
