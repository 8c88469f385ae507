package group

import (
	"slices"
	"time"
)

// legacyState is a Machine's legacy members and their rebalance (legacy.go).
type legacyState struct {
	members map[MemberID]*legacyMember
	ids     []MemberID // sorted: requests go out in a deterministic order

	phase     LegacyPhase
	att       *legacyAttempt
	want      bool      // a trigger waits to be served
	wantSince time.Time // the first trigger not served yet
	trigger   string    // the latest trigger
	retryAt   time.Time // backoff
	failures  int       // consecutive failed attempts
	blocked   int       // consecutive blocked claim rounds
	claims    uint64    // the number of the last claim asked for
	// The rebalance being served, from its first trigger over every attempt.
	since    time.Time
	attempts int
	// assignedAt is when the last claim was written. A ping sent before it answers for the
	// assignment before: its offsets were collected as final offsets, and checking them
	// against the new owners would only refuse the partitions that moved.
	assignedAt time.Time
}

// legacyAttempt is one attempt of a rebalance.
type legacyAttempt struct {
	// when each phase began: the check, the Stops, the claim, the Starts
	began, stopping, claiming, starting time.Time

	waiting map[MemberID]bool // members whose answer the current phase waits for
	stopped map[MemberID]bool // members that answered the attempt's StopRequest
	failed  error             // the first member that did not answer in time (step 5)
	dirty   bool              // membership or partitions changed since the attempt began
	claim   uint64            // the attempt's claim while it runs, else 0
	// finals: a final ping's offsets were accepted in this attempt. If the attempt ends before
	// its claim is written (restarted, failed; asked for or not), the shell commits them
	// (LegacyEffects.Commit).
	finals  bool
	written bool // the attempt's claim is written: its Multi carried the final offsets
}

// LegacyPhase returns where the legacy members' rebalance stands.
func (m *Machine) LegacyPhase() LegacyPhase { return m.legacy.phase }

// LegacyAttempt reports whether a rebalance attempt is in progress (from its check to its last
// StartResponse, claim waits included; not while idle or backing off).
func (m *Machine) LegacyAttempt() bool { return m.legacy.att != nil }

// LegacyMembers returns the legacy members' ids, sorted.
func (m *Machine) LegacyMembers() []MemberID { return slices.Clone(m.legacy.ids) }

func (m *Machine) stepLegacy(ev legacyEvent) {
	switch ev := ev.(type) {
	case LegacyJoin:
		m.legacyJoin(ev)
	case LegacyLeave:
		if mb := m.legacy.members[ev.Member]; mb != nil {
			m.legacyDrop(LegacyDrop{Member: mb.id, Cause: ev.Cause})
		}
	case LegacyAnswer:
		m.legacyAnswer(ev)
	case LegacyTrigger:
		m.legacyTrigger(ev.Reason)
	case LegacyChecked:
		m.legacyChecked(ev)
	case LegacyClaimed:
		m.legacyClaimed(ev)
	}
}

// legacyTrigger records a reason to check the group (seed 001 "rebalance (group)" is run on
// every membership and partition change). An attempt in progress is marked dirty: it restarts
// at the check if it has not claimed yet, and a new check follows it otherwise.
func (m *Machine) legacyTrigger(why string) {
	l := &m.legacy
	if !l.want {
		l.want, l.wantSince = true, m.now
	}
	l.trigger = why
	if l.att != nil {
		l.att.dirty = true
	}
	m.legacyLog("rebalance triggered", "", why)
	m.jointLegacyTrigger(why) // joint.go
}

// advanceLegacy moves the rebalance as far as it can go at m.now, then pings the members due.
// It runs at the end of every Step.
func (m *Machine) advanceLegacy() {
	l := &m.legacy
	if len(l.members) == 0 && l.phase == LegacyIdle && !l.want {
		return
	}
	for range 16 { // each pass moves one phase; an attempt has fewer
		before, att := l.phase, l.att
		switch l.phase {
		case LegacyIdle:
			if l.want && !m.now.Before(l.wantSince.Add(m.cfg.Legacy.RebalanceDelay)) {
				m.legacyBegin()
			}
		case LegacyStopping, LegacyCollecting, LegacyStarting:
			if len(l.att.waiting) == 0 {
				m.legacyAdvance()
			}
		case LegacyJoining:
			if l.att.dirty {
				m.legacyLog("group changed while waiting for the Kafka join phase: rebalance from step 1", "", l.trigger)
				m.legacyBegin()
			} else if m.state != PreparingRebalance {
				m.legacyReady() // joint.go
			}
		case LegacyClaimWait:
			if l.att.dirty {
				// The claim waits for others; a changed group restarts from step 1 instead.
				m.legacyBegin()
			}
		case LegacyBackoff:
			if !m.now.Before(l.retryAt) {
				m.legacyBegin()
			}
		}
		if l.phase == before && l.att == att {
			break
		}
	}
	// Members are pinged in every phase, while the shell runs the check or the claim too: either
	// may wait for ZooKeeper far longer than a ping interval (seed 001 line 149: a consumer
	// answers each of Ping, Stop and Start within ping_interval_ms, stopped or not), and a
	// member without a request for (max_ping_retries + 1) ping intervals takes the coordinator
	// for failed (docs §8 "Consumer" 2).
	m.legacyPings()
}

// legacyBegin starts an attempt: the check of seed steps 1-3.
func (m *Machine) legacyBegin() {
	l := &m.legacy
	if l.since.IsZero() {
		l.since = l.wantSince
		if l.since.IsZero() {
			l.since = m.now
		}
	}
	if l.att != nil && l.att.claim != 0 {
		m.fx.Legacy.Cancel = l.att.claim
	}
	m.legacyCommitFinals()
	l.want, l.wantSince = false, time.Time{}
	l.attempts++
	l.att = &legacyAttempt{began: m.now, waiting: map[MemberID]bool{}, stopped: map[MemberID]bool{}}
	l.phase = LegacyChecking
	m.fx.Legacy.Check = &LegacyCheck{Attempt: l.attempts, Trigger: l.trigger, Kafka: m.kafkaJoining()}
}

func (m *Machine) legacyChecked(ev LegacyChecked) {
	l := &m.legacy
	if l.phase != LegacyChecking {
		return // not asked for
	}
	switch {
	case ev.Err != nil:
		m.legacyFail(ev.Err)
	case !ev.Needed:
		m.legacyLog("rebalance not necessary (seed step 3.5)", "", ev.Reason)
		m.legacyFinish(&LegacyRebalance{Unnecessary: true, Attempts: l.attempts, Members: len(l.members)})
	default:
		// Step 4.1: a StopRequest to every member.
		l.phase, l.att.stopping = LegacyStopping, m.now
		for _, id := range l.ids {
			m.legacySend(l.members[id], LegacyStop)
		}
	}
}

// legacyAdvance moves to the next phase once every answer of the current one is in.
func (m *Machine) legacyAdvance() {
	l := &m.legacy
	if l.att.failed != nil {
		m.legacyFail(l.att.failed)
		return
	}
	switch l.phase {
	case LegacyStopping:
		// docs §8 "Coordinator" 2: the offsets reported after a StopResponse are final. They
		// are collected even when the group changed meanwhile: the members are stopped, and a
		// stopped member that leaves before the next attempt's final Ping would take the
		// offsets it consumed since its last ping with it (the restart follows the collection,
		// whose offsets the shell commits: legacyCommitFinals).
		l.phase = LegacyCollecting
		for _, id := range l.ids {
			if mb := l.members[id]; mb.autoCommit && l.att.stopped[id] {
				m.legacySend(mb, LegacyFinalPing)
			}
		}
		if l.att.dirty && len(l.att.waiting) > 0 {
			m.legacyLog("group changed while stopping its members: collecting their final offsets before step 1", "", l.trigger)
		}
	case LegacyCollecting:
		if l.att.dirty {
			msg := "group changed while collecting final offsets: rebalance from step 1"
			if !l.att.finals {
				msg = "group changed while stopping its members: rebalance from step 1" // none to collect
			}
			m.legacyLog(msg, "", l.trigger)
			m.legacyBegin()
			return
		}
		m.legacyReady() // joint.go: with the Kafka members' generation, or alone
	case LegacyStarting:
		m.legacyComplete()
	}
}

// legacyCommitFinals asks the shell to commit the final offsets the attempt collected, when it
// ends (restarted, failed) before its claim is written: no claim writes them, and the next
// attempt's Check starts over (LegacyCheck). The members are stopped, so these offsets are
// their last; committed through the claimer ahead of any later claim, whose final offsets are
// collected later and never older, they do not regress. A claim asked for and then cancelled
// (a change while it waited) or failed may have written them already, in the Release Multi
// before a wait, which also lets go of owner znodes: the shell skips what the claim wrote, so
// that a partition's new owner is not set back (claim_cancel.txt). A written claim carried
// them in its Multi.
func (m *Machine) legacyCommitFinals() {
	if a := m.legacy.att; a != nil && a.finals && !a.written {
		m.fx.Legacy.Commit = true
	}
}

// legacyClaim asks for step 4's claim: every member stopped, every final offset in.
func (m *Machine) legacyClaim() {
	l := &m.legacy
	l.claims++
	l.phase, l.att.claiming, l.att.claim = LegacyClaiming, m.now, l.claims
	m.fx.Legacy.Claim = &LegacyClaim{Claim: l.claims, Attempt: l.attempts}
}

func (m *Machine) legacyClaimed(ev LegacyClaimed) {
	l := &m.legacy
	if l.att == nil || l.att.claim == 0 || ev.Claim != l.att.claim {
		return // another attempt's claim, or none asked for
	}
	switch ev.Outcome {
	case LegacyClaimWritten:
		// Step 4.2: a StartRequest to every member, now that the ownership is written.
		l.assignedAt, l.blocked = m.now, 0
		l.phase, l.att.starting, l.att.claim, l.att.written = LegacyStarting, m.now, 0, true
		for _, id := range l.ids {
			m.legacySend(l.members[id], LegacyStart)
		}
	case LegacyClaimBlocked:
		// Another member still owns partitions to claim (0.8 consumers retry a taken owner
		// znode the same way, ZCC:769-797); ours stay stopped, and keep being pinged.
		l.blocked++
		l.phase = LegacyClaimWait
		m.fx.Legacy.Blocked = &LegacyBlocked{Tries: l.blocked}
	default:
		l.att.claim = 0
		m.legacyFail(ev.Err)
		m.jointClaimFailed(ev.Claim) // joint.go
	}
}

// legacyComplete ends a rebalance whose every StartResponse came in (seed step 4.3).
func (m *Machine) legacyComplete() {
	l := &m.legacy
	a := l.att
	m.legacyFinish(&LegacyRebalance{
		Duration: m.now.Sub(l.since),
		Attempts: l.attempts,
		Members:  len(l.members),
		Checking: a.stopping.Sub(a.began),
		Stopping: a.claiming.Sub(a.stopping),
		Claiming: a.starting.Sub(a.claiming),
		Starting: m.now.Sub(a.starting),
	})
	l.failures = 0
}

// legacyFinish returns to idle and ends the rebalance being served.
func (m *Machine) legacyFinish(done *LegacyRebalance) {
	l := &m.legacy
	m.fx.Legacy.Done = done
	l.phase, l.att = LegacyIdle, nil
	l.since, l.attempts = time.Time{}, 0
}

// legacyFail is seed step 5: the attempt failed; retry after a backoff.
func (m *Machine) legacyFail(err error) {
	l := &m.legacy
	l.failures++
	m.legacyCommitFinals()
	wait := m.cfg.Legacy.backoff(l.failures)
	m.fx.Legacy.Failed = &LegacyFailure{Err: err, Attempt: l.attempts, RetryIn: wait}
	l.phase, l.att, l.retryAt = LegacyBackoff, nil, m.now.Add(wait)
	if l.trigger == "" {
		l.trigger = "retry"
	}
}

// legacyWakeAt is when the legacy members need a Step without an event: a delayed rebalance, a
// retry, a ping due.
func (m *Machine) legacyWakeAt() time.Time {
	l := &m.legacy
	var wake time.Time
	earlier := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	switch l.phase {
	case LegacyIdle:
		if l.want {
			earlier(l.wantSince.Add(m.cfg.Legacy.RebalanceDelay))
		}
	case LegacyBackoff:
		earlier(l.retryAt)
	}
	for _, mb := range l.members {
		if !mb.pinging && !mb.inAttempt {
			earlier(mb.nextPing)
		}
	}
	return wake
}
