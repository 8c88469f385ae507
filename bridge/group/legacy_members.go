package group

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// legacyMember is one registered legacy consumer: its liveness.
type legacyMember struct {
	id         MemberID
	interval   time.Duration
	maxMissed  int
	autoCommit bool

	missed    int               // consecutive requests unanswered in time
	pinging   bool              // a regular PingRequest is in flight, sent at pingSent
	pingSent  time.Time         //
	inAttempt bool              // a Stop, final Ping or Start is in flight: req, sent at reqSent
	req       LegacyRequestKind //
	reqSent   time.Time         //
	nextPing  time.Time         // when the next regular ping is due
	// late are the pings and final pings that timed out after they were sent, oldest first:
	// their answers may still come (LegacyAnswer.Late).
	late []legacyLatePing
}

// legacyLatePing is a ping whose answer is late: when it was sent, and the number of the last
// claim asked for then.
type legacyLatePing struct {
	sent   time.Time
	claims uint64
}

// legacyJoin admits a registered consumer: it is pinged at once, and a new member always
// triggers a rebalance (seed 001 "On Consumer Failover").
func (m *Machine) legacyJoin(ev LegacyJoin) {
	l := &m.legacy
	if old := l.members[ev.Member]; old != nil {
		// The shell let the old member go (its connection had closed): the id is the new one's.
		m.legacyForget(old)
	}
	if l.members == nil {
		l.members = map[MemberID]*legacyMember{}
	}
	l.members[ev.Member] = &legacyMember{
		id:         ev.Member,
		interval:   ev.PingInterval,
		maxMissed:  max(ev.MaxPingRetries, 1),
		autoCommit: ev.AutoCommit,
		nextPing:   m.now,
	}
	i, _ := slices.BinarySearch(l.ids, ev.Member)
	l.ids = slices.Insert(l.ids, i, ev.Member)
	m.legacyTrigger("consumer " + string(ev.Member) + " registered")
}

// legacyForget removes a member from the group and from the answers the phase waits for.
func (m *Machine) legacyForget(mb *legacyMember) {
	l := &m.legacy
	delete(l.members, mb.id)
	if i, ok := slices.BinarySearch(l.ids, mb.id); ok {
		l.ids = slices.Delete(l.ids, i, i+1)
	}
	if l.att != nil {
		delete(l.att.waiting, mb.id)
		delete(l.att.stopped, mb.id)
	}
}

// legacyDrop removes a member the shell lost or the engine found dead or broken: the shell
// closes its connection and deletes its registration, and the group rebalances (seed 001 "On
// Consumer Failover").
func (m *Machine) legacyDrop(d LegacyDrop) {
	mb := m.legacy.members[d.Member]
	m.legacyForget(mb)
	m.fx.Legacy.Drops = append(m.fx.Legacy.Drops, d)
	m.legacyTrigger("consumer " + string(d.Member) + " removed")
}

// legacySend asks the shell to send a request; a rebalance request joins the attempt's
// waiting set and counts as the member's ping.
func (m *Machine) legacySend(mb *legacyMember, kind LegacyRequestKind) {
	if kind == LegacyPing {
		mb.pinging, mb.pingSent = true, m.now
	} else {
		mb.inAttempt, mb.req, mb.reqSent = true, kind, m.now
		m.legacy.att.waiting[mb.id] = true
	}
	m.fx.Legacy.Requests = append(m.fx.Legacy.Requests, LegacyRequest{Member: mb.id, Kind: kind, Retries: mb.missed})
}

// legacyPings pings every member that is due and has no request in flight. A member that has
// answered its part of a slow rebalance phase keeps being pinged, so that neither side takes
// the other for dead while the group waits for its slowest member.
func (m *Machine) legacyPings() {
	l := &m.legacy
	for _, id := range l.ids {
		mb := l.members[id]
		if mb.pinging || mb.inAttempt || m.now.Before(mb.nextPing) {
			continue
		}
		m.legacySend(mb, LegacyPing)
	}
}

// legacyAnswer takes the outcome of one request: liveness first (docs §8 "Liveness"), then
// what the answer means for the ping or the rebalance it belongs to.
func (m *Machine) legacyAnswer(ev LegacyAnswer) {
	l := &m.legacy
	mb := l.members[ev.Member]
	switch {
	case mb == nil:
		return // removed meanwhile
	case ev.Late && ev.Outcome != LegacyTimedOut:
		m.legacyLateAnswer(mb, ev)
		return
	case ev.Kind == LegacyPing && !mb.pinging, ev.Kind != LegacyPing && (!mb.inAttempt || mb.req != ev.Kind):
		return // not in flight: the shell answers each request once
	}
	sent, current := mb.pingSent, false
	if ev.Kind == LegacyPing {
		mb.pinging = false
	} else {
		mb.inAttempt, sent = false, mb.reqSent
		if l.att != nil && l.att.waiting[mb.id] {
			delete(l.att.waiting, mb.id)
			current = true
		}
	}
	switch ev.Outcome {
	case LegacyAnswered, LegacyRefused:
		mb.missed = 0
		mb.nextPing = sent.Add(mb.interval)
	case LegacyTimedOut:
		if ev.Late && (ev.Kind == LegacyPing || ev.Kind == LegacyFinalPing) {
			mb.late = append(mb.late, legacyLatePing{sent: sent, claims: l.claims})
		}
		mb.missed++
		if mb.missed >= mb.maxMissed {
			m.legacyDrop(LegacyDrop{Member: mb.id, Dead: true, Missed: mb.missed, Interval: mb.interval})
			return
		}
		mb.nextPing = m.now // the next ping goes out at once, with num_retries = missed
		if current && l.att.failed == nil {
			l.att.failed = fmt.Errorf("consumer %q did not answer its %v: %w", mb.id, ev.Kind, ev.Err)
		}
		return
	default:
		m.legacyDrop(LegacyDrop{Member: mb.id, Cause: orUnknown(ev.Err)})
		return
	}
	switch ev.Kind {
	case LegacyPing:
		// A ping sent before the last claim answers for the assignment before it. One answered
		// while a claim's round runs reports the final offsets the claim writes: handed to the
		// claimer behind that round, its commit would come after the partitions changed owner.
		// One answered while the check runs is taken: the member still runs the current
		// assignment, and its commit reaches the claimer ahead of the attempt's claim.
		m.fx.Legacy.Accepted = !sent.Before(l.assignedAt) && l.phase != LegacyClaiming
	case LegacyStop, LegacyStart:
		if ev.Outcome == LegacyRefused {
			// docs §8 "Coordinator" 5: an error code counts as a failed member.
			m.legacyDrop(LegacyDrop{Member: mb.id, Cause: fmt.Errorf("consumer %q answered its %v with %w", mb.id, ev.Kind, orUnknown(ev.Err))})
			return
		}
		m.fx.Legacy.Accepted = ev.Kind == LegacyStart && current
		if ev.Kind == LegacyStop && current {
			l.att.stopped[mb.id] = true
		}
	case LegacyFinalPing:
		m.fx.Legacy.Accepted = current
		if current {
			l.att.finals = true
		}
	}
}

// legacyLateAnswer takes the answer of the member's oldest ping that timed out, or its loss.
// Its offsets are the member's last word when it hangs up right after it (a consumer that
// leaves reports its offsets in a ping and closes the connection): dropping them would start
// the next owner behind them. They count when the ping was sent after the last claim was written
// (as for a ping answered in time) and no claim was asked for since: a claim asked for later
// carries the member's final offsets, answered after this one and never older, and this commit,
// handed to the claimer after that claim, would be written after it.
func (m *Machine) legacyLateAnswer(mb *legacyMember, ev LegacyAnswer) {
	if len(mb.late) == 0 {
		return
	}
	p := mb.late[0]
	mb.late = mb.late[1:]
	l := &m.legacy
	m.fx.Legacy.Accepted = ev.Outcome == LegacyAnswered && !p.sent.Before(l.assignedAt) && p.claims == l.claims &&
		l.phase != LegacyClaiming
}

func orUnknown(err error) error {
	if err == nil {
		return errors.New("unknown error")
	}
	return err
}
