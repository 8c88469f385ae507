package group

// Legacy members: consumers of seed 001's coordinator-driven protocol (/work/shared/seeds/001,
// docs/legacy-protocol.md). Unlike a Kafka member, a legacy member does not ask to join a
// generation: the coordinator drives it. It registers once, is pinged every ping interval, and
// when the group must rebalance the coordinator sends it a StopRequest, a final PingRequest for
// its offsets, and a StartRequest with its part of the new ownership (seed 001 "rebalance
// (group)", steps 1-5).
//
// The engine keeps the protocol side of that: the members and their liveness (ping due, missed
// pings, max_ping_retries), the phases of a rebalance and their order, the rebalance delay and
// the retry backoff, all driven by the now of each Step. What needs ZooKeeper is asked of the
// shell as an effect and comes back as an event: the check of seed step 3 (LegacyEffects.Check
// → LegacyChecked) and the claim of step 4, between the Stops and the Starts (LegacyEffects.Claim
// → LegacyClaimed). What needs a socket is a LegacyRequest, its outcome a LegacyAnswer. The
// ownership itself (the 0.8.2 assignment, owners, offsets) is the planner's (bridge/ownership):
// the engine only knows whether the check found a rebalance necessary and whether the claim was
// written. The claim may take a while (it waits for foreign owner znodes, with its own retries):
// its result is matched to the attempt by the claim's number, and an attempt abandoned while its
// claim runs cancels it.
//
// A rebalance, as the engine runs it:
//
//	idle        a trigger (a member registered or left, a topic's partitions or the other
//	            registrations changed, the session expired) waits LegacyConfig.RebalanceDelay
//	checking    Check: seed steps 1-3; LegacyChecked says necessary or not (3.5: back to idle)
//	stopping    step 4.1: a StopRequest to every member; waits for every answer
//	collecting  docs §8 "Coordinator" 2: a final PingRequest to every auto_commit member
//	claiming    Claim: the ownership and the final offsets written in one Multi; or blocked by
//	            another session's owner znode (claim-wait: the claimer retries on its own)
//	starting    step 4.2: a StartRequest to every member; 4.3: waits for every answer
//	backoff     step 5: an attempt that failed is retried after RetryBackoff, doubling up to
//	            RetryBackoffMax
//
// A membership or partition change while stopping or collecting restarts the attempt at
// checking once the answers are in, so that nothing is claimed for a member that left or
// without one that joined; a change while starting is served by the next rebalance. A change
// while stopping still collects the final offsets of the members stopped before the restart,
// and the shell commits them (LegacyEffects.Commit), as it does for an attempt whose claim was
// cancelled (a change while it waited) or failed: a stopped member that leaves before the next
// attempt's final Ping must not take them with it.
//
// Liveness (docs §8 "Liveness"): every member with no request in flight is pinged every ping
// interval, during a rebalance too (its check and its claim included); a Stop, final Ping or
// Start counts as its ping; a request that times out counts as a missed ping, and
// max_ping_retries of them in a row make the member dead. The answer's timeout itself is the shell's (the session's round trip).
//
// Legacy members are not part of the group's Record: their registrations live in
// /consumers/<g>/ids, as every 0.8 consumer's, and a restarted coordinator learns them again
// from their Register. The events are stepped through Machine.Step like every other event.

import (
	"errors"
	"fmt"
	"time"
)

// LegacyConfig is the legacy coordinator's part of Config. The zero value rebalances at once
// and retries without waiting.
type LegacyConfig struct {
	// RebalanceDelay holds a rebalance back this long after its first trigger, so that a burst
	// of registrations is served by one rebalance.
	RebalanceDelay time.Duration
	// RetryBackoff is the first wait after a failed attempt (seed 001 step 5); it doubles up to
	// RetryBackoffMax.
	RetryBackoff, RetryBackoffMax time.Duration
}

func (c LegacyConfig) validate() error {
	if c.RebalanceDelay < 0 || c.RetryBackoff < 0 || c.RetryBackoffMax < 0 {
		return errors.New("group: LegacyConfig durations must not be negative")
	}
	return nil
}

// backoff is RetryBackoff doubled n-1 times, capped at RetryBackoffMax (which counts as
// RetryBackoff when below it).
func (c LegacyConfig) backoff(n int) time.Duration {
	ceiling := max(c.RetryBackoffMax, c.RetryBackoff)
	d := c.RetryBackoff
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// LegacyRequestKind is a request the coordinator sends a legacy member.
type LegacyRequestKind int8

// The requests of seed 001.
const (
	LegacyPing      LegacyRequestKind = iota // a regular ping (liveness, offsets)
	LegacyStop                               // rebalance step 4.1
	LegacyFinalPing                          // the ping after a StopResponse: final offsets
	LegacyStart                              // rebalance step 4.2
)

func (k LegacyRequestKind) String() string {
	switch k {
	case LegacyPing:
		return "PingRequest"
	case LegacyStop:
		return "StopRequest"
	case LegacyFinalPing:
		return "PingRequest (final offsets)"
	case LegacyStart:
		return "StartRequest"
	}
	return fmt.Sprintf("LegacyRequestKind(%d)", int(k))
}

// LegacyPhase is where a group's legacy rebalance stands.
type LegacyPhase int8

// The phases (see the package's legacy.go).
const (
	LegacyIdle LegacyPhase = iota
	LegacyChecking
	LegacyStopping
	LegacyCollecting
	LegacyClaiming
	LegacyClaimWait
	LegacyStarting
	LegacyBackoff
	// LegacyJoining: every final offset is in, and the claim waits for the Kafka members' join
	// phase, to claim both kinds at once (joint.go).
	LegacyJoining
)

var legacyPhaseNames = [...]string{"idle", "checking", "stopping", "collecting", "claiming", "claim-wait", "starting", "backoff", "joining"}

func (p LegacyPhase) String() string {
	if int(p) >= 0 && int(p) < len(legacyPhaseNames) {
		return legacyPhaseNames[p]
	}
	return fmt.Sprintf("LegacyPhase(%d)", int(p))
}

// Events of legacy members.
type (
	// LegacyJoin: a legacy consumer registered (seed 001 "On Consumer Startup"); the shell has
	// written its /consumers/<g>/ids znode. Replaced says the consumer id was a member whose
	// connection had closed and whose znodes the shell has already let go: it is replaced
	// without a LegacyDrop.
	LegacyJoin struct {
		Member       MemberID
		PingInterval time.Duration
		// MaxPingRetries is the RegisterRequest's max_ping_retries: that many requests in a
		// row without an answer make the member dead. Below 1 counts as 1.
		MaxPingRetries int
		AutoCommit     bool
		Replaced       bool
	}
	// LegacyLeave: the shell lost a member (its connection closed, its id is another session's
	// now). The engine answers with a LegacyDrop, like for a member it declares dead.
	LegacyLeave struct {
		Member MemberID
		Cause  error
	}
	// LegacyAnswer is the outcome of a LegacyRequest.
	LegacyAnswer struct {
		Member  MemberID
		Kind    LegacyRequestKind
		Outcome LegacyOutcome
		// Err says what went wrong: the timeout, the broken connection, or (LegacyRefused) the
		// error code of the StopResponse or StartResponse.
		Err error
		// Late, on a ping or final ping that timed out, says that it was sent: its answer may
		// still come, and the shell waits for it. On any other outcome it marks that answer
		// (LegacyAnswered) or its loss (the connection closed first): the engine matches it to
		// the oldest such ping of the member (answers come in the order the requests went out).
		// A late answer counts for nothing but its offsets.
		Late bool
	}
	// LegacyTrigger is a reason to check the group other than a member joining or leaving: a
	// subscribed topic's partitions changed, the group's other registrations changed, the
	// ZooKeeper session expired.
	LegacyTrigger struct{ Reason string }
	// LegacyChecked answers LegacyEffects.Check: seed step 3's verdict, or the error that kept
	// the shell from reaching one.
	LegacyChecked struct {
		Needed bool
		Reason string
		Err    error
	}
	// LegacyClaimed reports on the claim numbered Claim (LegacyClaim.Claim): blocked (possibly
	// several times: the claimer retries), then written or failed. A report on another claim
	// than the attempt's is ignored.
	LegacyClaimed struct {
		Claim   uint64
		Outcome LegacyClaimOutcome
		Err     error // LegacyClaimFailed
	}
)

// LegacyOutcome is how a request to a legacy member ended.
type LegacyOutcome int8

// Outcomes of a LegacyRequest.
const (
	LegacyAnswered LegacyOutcome = iota // answered in time with no error code
	LegacyTimedOut                      // no answer within its timeout: a missed ping
	LegacyFailed                        // the connection broke or the member broke the protocol
	LegacyRefused                       // a StopResponse or StartResponse with an error code
)

// LegacyClaimOutcome is how a claim ended.
type LegacyClaimOutcome int8

// Outcomes of a claim.
const (
	LegacyClaimWritten LegacyClaimOutcome = iota // the Multi is in: start the members
	LegacyClaimBlocked                           // another session holds an owner znode to claim; retrying
	LegacyClaimFailed
)

func (LegacyJoin) isEvent()    {}
func (LegacyLeave) isEvent()   {}
func (LegacyAnswer) isEvent()  {}
func (LegacyTrigger) isEvent() {}
func (LegacyChecked) isEvent() {}
func (LegacyClaimed) isEvent() {}

func (LegacyJoin) legacy()    {}
func (LegacyLeave) legacy()   {}
func (LegacyAnswer) legacy()  {}
func (LegacyTrigger) legacy() {}
func (LegacyChecked) legacy() {}
func (LegacyClaimed) legacy() {}

// legacyEvent is an event of legacy members: it bypasses the Kafka members' states (a group's
// legacy members are not fenced by its record, nor deleted with it).
type legacyEvent interface {
	Event
	legacy()
}

// LegacyEffects are the legacy members' part of Effects, to carry out in this order:
//
//  1. Accepted: apply the content of the answer just stepped (a ping's offsets, a final
//     ping's offsets, a Start's part as the member's running part). Then Commit: the attempt
//     ended (restarted or failed) before its claim was written; commit the final offsets
//     accepted since its Check as a ping's are, through the claimer (ahead of any later claim),
//     but for those its claim, if one was asked for, may have written already.
//  2. Drops: close each member's connection and delete its registration.
//  3. Requests: send each, in order; a Stop means the member no longer runs its part.
//  4. Blocked, Failed, Done: what happened, for logs and metrics.
//  5. Cancel: the claim of that number is over (its attempt starts again at the check).
//  6. Check: run it (the shell's claimer reads the group) and step LegacyChecked when it is
//     done; other events may be stepped meanwhile: a change of the group marks the attempt
//     dirty, and the result counts for it all the same (a dirty attempt restarts after its
//     Stops, or checks again after an unnecessary one). Claim: hand it to the claimer, with the
//     final offsets accepted since the attempt's Check; its reports come back as LegacyClaimed.
//     While the check or the claim runs (its first round too), the members are pinged every
//     ping interval, as either may wait for ZooKeeper longer than they would wait for a
//     request.
type LegacyEffects struct {
	Accepted bool
	Commit   bool
	Drops    []LegacyDrop
	Requests []LegacyRequest
	Blocked  *LegacyBlocked
	Failed   *LegacyFailure
	Done     *LegacyRebalance
	Cancel   uint64
	Check    *LegacyCheck
	Claim    *LegacyClaim
}

// LegacyRequest asks the shell to send one request to a member.
type LegacyRequest struct {
	Member MemberID
	Kind   LegacyRequestKind
	// Retries is the request's num_retries: the member's consecutive missed requests so far
	// (docs §8 "Liveness").
	Retries int
}

// LegacyDrop asks the shell to close a member's connection with its cause and delete its
// registration; the group rebalances.
type LegacyDrop struct {
	Member MemberID
	// Dead: the member missed Missed requests in a row, its max_ping_retries, at ping interval
	// Interval; Cause is nil then.
	Dead     bool
	Missed   int
	Interval time.Duration
	Cause    error
}

// LegacyCheck asks the shell for seed step 3: is a rebalance necessary? It starts an attempt:
// the final offsets of an earlier attempt no longer count.
type LegacyCheck struct {
	Attempt int
	Trigger string
	// Kafka: the group's Kafka members rebalance with this attempt (joint.go), so the group's
	// registrations change with its claim, where the shell writes theirs: a read of the group
	// now cannot tell whether the legacy members' part changes.
	Kafka bool
}

// LegacyClaim asks the shell for the claim of seed step 4: every member is stopped, every
// final offset is in.
type LegacyClaim struct {
	Claim   uint64 // numbers the claims of the machine, from 1
	Attempt int
	// Joint: the same Effects ask for the Kafka generation's assignment (Effects.Assign), to be
	// claimed with this one, as one claim (joint.go); its reports are this claim's LegacyClaimed
	// and the generation's ServerAssignment.
	Joint bool
}

// LegacyBlocked says a claim waits for another session's owner znodes (the claimer retries).
type LegacyBlocked struct {
	Tries int // consecutive blocked rounds, over claims until one is written
}

// LegacyFailure is seed step 5: an attempt failed and is retried after RetryIn.
type LegacyFailure struct {
	Err     error
	Attempt int
	RetryIn time.Duration
}

// LegacyRebalance describes a rebalance that ended: completed (every StartResponse in), or
// Unnecessary (seed step 3.5).
type LegacyRebalance struct {
	Unnecessary bool
	// Duration runs from the first trigger served to the last StartResponse.
	Duration time.Duration
	Attempts int
	Members  int
	// Where the last attempt's time went: steps 1-3, the Stops and final Pings, the claim,
	// the Starts.
	Checking, Stopping, Claiming, Starting time.Duration
}
