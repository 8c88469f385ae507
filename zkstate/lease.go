package zkstate

import (
	"context"
	"time"
)

// The session lease: how long this process can vouch that its session is alive, from its own
// clock alone.
//
// Ownership expressed by ephemeral znodes ends when the server expires the session, and the
// server does that only after it has heard nothing from the session for the session timeout.
// A reply to a request sent at t proves the server heard from the session after t, so the
// session lives at least until t plus the timeout. A process that was paused (a stopped
// process, a long GC or VM pause, a network partition) learns of an expiry only once it is
// running and connected again, and acts on stale beliefs meanwhile; the lease tells it,
// before anything else, that it can no longer vouch for them.
//
// The Store keeps the lease by sending a cheap read (an exists of the root) every sixth of the
// timeout and extending the lease to the send time plus leaseShare of the timeout when the
// reply comes in the same session. A healthy connection thus always holds about four fifths
// of a timeout of lease; the lease lapses no later than a fifth of the timeout after
// go-zookeeper itself would give the connection up (two thirds of the timeout without a
// read), and a tenth before the server could expire the session.

// leaseShare is the part of the session timeout a reply vouches for, after the request's send
// time: a margin of a tenth covers clock rates and the time an owner needs to act on a lapse.
const leaseShare = 0.9

// leaseProbes is how many lease probes the Store sends per session timeout.
const leaseProbes = 6

// lease is what a probe reply vouched for.
type lease struct {
	session int64
	// until carries both clocks: the monotonic one goes on while a process is stopped, the
	// wall clock also while a machine is suspended; either lapsing ends the lease.
	until time.Time
}

// Vouched reports whether the Store can vouch at now that the current session is alive: a
// reply to a request sent less than nine tenths of the session timeout before now came in
// this session. It is false before the first probe reply and from an expiry until a probe of
// the new session is answered.
func (s *Store) Vouched(now time.Time) bool {
	_, ok := s.VouchedUntil(now)
	return ok
}

// VouchedUntil is Vouched, and until when the lease it read holds: what the Store vouched for
// at now, it vouches for until then only (a process paused after asking must not act on the
// answer afterwards).
func (s *Store) VouchedUntil(now time.Time) (time.Time, bool) {
	l := s.lease.Load()
	if l == nil || l.session != s.conn.SessionID() {
		return time.Time{}, false
	}
	if now.Before(l.until) && now.Round(0).Before(l.until.Round(0)) {
		return l.until, true
	}
	return time.Time{}, false
}

// LeaseUntil is when the current lease lapses (zero without one); for logs and tests.
func (s *Store) LeaseUntil() time.Time {
	if l := s.lease.Load(); l != nil && l.session == s.conn.SessionID() {
		return l.until
	}
	return time.Time{}
}

// leaseLoop probes until Close: every sixth of the session timeout, and at once when a
// session is established (leaseCh), so that a new session is vouched for without waiting.
func (s *Store) leaseLoop(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.leaseCh:
		case <-time.After(s.SessionTimeout() / leaseProbes):
		}
		s.probeLease()
	}
}

// probeLease sends one probe and extends the lease when its reply comes in the session it was
// sent in. Probes are not counted in Requests: they are the Store's keep-alive, like pings.
//
// A session is vouched for only once the session goroutine has delivered its events, the
// previous session's Expired first: an owner fences what the old session held on that event,
// and must not find the new session vouched for before it has (go-zookeeper has the new
// session a little before the goroutine has handled it, and a periodic probe can fall between).
func (s *Store) probeLease() {
	sid := s.conn.SessionID()
	if sid == 0 || sid != s.told.Load() {
		return
	}
	sent := time.Now()
	if _, _, err := s.conn.Exists("/"); err != nil || s.conn.SessionID() != sid {
		return
	}
	l := &lease{session: sid, until: sent.Add(time.Duration(leaseShare * float64(s.SessionTimeout())))}
	for {
		old := s.lease.Load()
		if old != nil && old.session == sid && !l.until.After(old.until) {
			return
		}
		if s.lease.CompareAndSwap(old, l) {
			return
		}
	}
}
