package legacy

import (
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/connlimit"
)

// Warnings about single connections (an undecodable frame, an idle or refused connection) are
// rate limited: a scanner or a broken client fleet opening thousands of connections must not
// flood the log (one such fleet wrote 5,000 warn lines in a minute). At most warnBurst such lines are
// written per warnPeriod; the first line of the next period says how many were suppressed.
const (
	warnBurst  = 10
	warnPeriod = 10 * time.Second
)

// warnLimiter is a fixed-window rate limiter for per-connection warnings. The zero value is
// ready; it is safe for concurrent use.
type warnLimiter struct {
	mu         sync.Mutex
	start      time.Time
	n          int // lines written in the window
	suppressed int // lines dropped since the last one written
}

// allow reports whether a line may be written now, and how many were suppressed before it.
func (l *warnLimiter) allow(now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= warnPeriod {
		l.start, l.n = now, 0
	}
	if l.n >= warnBurst {
		l.suppressed++
		return false, 0
	}
	l.n++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// warn starts a warning about one connection, or returns nil (on which zerolog's methods do
// nothing) when the limit drops it.
func (c *serverConn) warn() *zerolog.Event {
	ok, suppressed := c.srv.warns.allow(time.Now())
	if !ok {
		return nil
	}
	e := c.log.Warn()
	if suppressed > 0 {
		e = e.Int("suppressed_warnings", suppressed)
	}
	return e
}

// admit counts a new connection from remote against Config.MaxConnections and
// MaxConnectionsPerIP, or refuses it (with a rate-limited warning); s.mu must be held.
func (s *Server) admit(remote net.Addr) bool {
	ip, refused := s.limits.Admit(remote)
	if refused == "" {
		return true
	}
	if ok, suppressed := s.warns.allow(time.Now()); ok {
		s.log.Warn().Str("remote", ip).Int("suppressed_warnings", suppressed).
			Msg("connection refused: --max-connections or --max-connections-per-ip reached")
	}
	return false
}

// release forgets a connection admit counted; s.mu must be held.
func (s *Server) release(remote net.Addr) { s.limits.Done(connlimit.Host(remote)) }
