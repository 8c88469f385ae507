package legacy

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Warnings about single connections (an undecodable frame, an idle or refused connection) are
// rate limited: a scanner or a broken client fleet opening thousands of connections must not
// flood the log (issue 17: 5,000 warn lines in a minute). At most warnBurst such lines are
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
