package migrate

import (
	"fmt"
	"strings"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Status is where a group stands with respect to a request: what Plan says before anything is
// written, and what Apply reports after.
type Status string

const (
	// StatusAtTarget: the group is in the target mode; nothing to do.
	StatusAtTarget Status = "at-target"
	// StatusPast: a migration's target is behind the group's mode (a group at kafka asked for
	// mixed): nothing to do, migrate never moves a group back (rollback does).
	StatusPast Status = "past-target"
	// StatusReady: every step can be taken now.
	StatusReady Status = "ready"
	// StatusBlocked: a precondition holds a step back (members that must leave first).
	StatusBlocked Status = "blocked"
	// StatusRefused: the request can never be carried out from the group's mode (a rollback
	// of a finalized group, a rollback to a mode ahead of the group's).
	StatusRefused Status = "refused"
	// StatusApplied: Apply took the group to the target.
	StatusApplied Status = "applied"
	// StatusConflict: someone else changed the group's mode while Apply worked on it, and not
	// to the target: the change it made stands, and Apply wrote nothing over it.
	StatusConflict Status = "conflict"
	// StatusFailed: Apply hit an error (ZooKeeper unreachable, a malformed record).
	StatusFailed Status = "failed"
	// StatusNotStarted: Apply never got to the group (cancelled, or an earlier batch failed).
	StatusNotStarted Status = "not-started"
	// StatusInterrupted: the context ended while Apply worked on the group. A step in flight
	// may or may not have been applied; a re-run reads back where the group is.
	StatusInterrupted Status = "interrupted"
)

// Request says where the groups should go.
type Request struct {
	Target zkstate.Mode
	// Rollback moves groups back (kafka → mixed → legacy); otherwise they move forward (legacy
	// → mixed → kafka → finalized) and a group already past the target is left alone.
	Rollback bool
	// Force takes the step to legacy even though Kafka members remain: the running bridges
	// then rebalance them out of the group and refuse their JoinGroups (their last commits are
	// kept: bridge/modes.go).
	Force bool
}

// Blocker codes.
const (
	// BlockOldMembers: legacy or zk members remain, and the step (to kafka, to finalized) does
	// not admit them.
	BlockOldMembers = "legacy-or-zk-members"
	// BlockKafkaMembers: Kafka members remain, and the step (to legacy) does not admit them.
	BlockKafkaMembers = "kafka-members"
)

// Blocker is a precondition that holds a step back.
type Blocker struct {
	Code   string `json:"code"`
	Reason string `json:"reason"`
	// Members are the ids of the members in the way.
	Members []string `json:"members,omitempty"`
	// Waitable: the blocker goes away by itself when members leave (Apply's Wait).
	Waitable bool `json:"waitable"`
	// Forced: Request.Force overrides the blocker; the step is taken anyway.
	Forced bool `json:"forced,omitempty"`
}

// Step is one transition of a plan.
type Step struct {
	From     zkstate.Mode `json:"from"`
	To       zkstate.Mode `json:"to"`
	Blockers []Blocker    `json:"blockers,omitempty"`
}

// Blocked reports whether a blocker that Force did not override holds the step back.
func (s Step) Blocked() bool {
	for _, b := range s.Blockers {
		if !b.Forced {
			return true
		}
	}
	return false
}

// Waitable reports whether every blocker of a blocked step may go away by itself.
func (s Step) Waitable() bool {
	for _, b := range s.Blockers {
		if !b.Forced && !b.Waitable {
			return false
		}
	}
	return true
}

func (s Step) String() string { return string(s.From) + " → " + string(s.To) }

// GroupPlan is Plan's answer for one group.
type GroupPlan struct {
	Group  string
	Mode   zkstate.Mode // the group's mode now
	Target zkstate.Mode
	Status Status // at-target, past-target, ready, blocked or refused
	// Steps from Mode to Target, one transition each, in order. A blocked plan still lists
	// every step: the first blocked one is where Apply stops.
	Steps []Step
	// Reason says in a sentence why the plan has its status (empty when ready).
	Reason string
}

// FirstBlocked returns the index of the first blocked step, or -1.
func (p GroupPlan) FirstBlocked() int {
	for i, s := range p.Steps {
		if s.Blocked() {
			return i
		}
	}
	return -1
}

// Plan computes the steps that take the group of census c to req.Target and the preconditions
// of each. It is pure: the census is its whole input.
//
// Preconditions, per step:
//
//   - legacy → mixed: none (mixed admits every kind).
//   - mixed → kafka: no legacy and no zk member remains. Kafka mode refuses legacy Registers,
//     and nothing can stop a 0.8 consumer, which would go on consuming beside the Kafka
//     members with an assignment of its own.
//   - kafka → finalized: no legacy and no zk member remains either: finalizing stops the 0.8
//     mirror, so a 0.8 consumer left running would read offsets that are no longer written.
//     From then on every rollback is refused (zkstate.ValidTransition says why).
//   - kafka → mixed: none (mixed admits Kafka members too; the bridges then assign with the 0.8
//     algorithm, so zk and legacy members may come back).
//   - mixed → legacy: no Kafka member remains, unless Force: the bridges then rebalance the
//     Kafka members out and refuse them, keeping their last commits.
//
// Every step is checked against the same census: Apply reads a fresh census before each step,
// so a member that leaves (or joins) between two steps is seen.
func Plan(c Census, req Request) GroupPlan {
	p := GroupPlan{Group: c.Group, Mode: c.Mode, Target: req.Target}
	from, to := modeIndex(c.Mode), modeIndex(req.Target)
	switch {
	case from < 0:
		p.Status, p.Reason = StatusRefused, fmt.Sprintf("the group's mode %q is unknown", c.Mode)
		return p
	case to < 0:
		p.Status, p.Reason = StatusRefused, fmt.Sprintf("unknown target mode %q", req.Target)
		return p
	case from == to:
		p.Status, p.Reason = StatusAtTarget, "already "+string(c.Mode)
		return p
	case !req.Rollback && to < from:
		p.Status, p.Reason = StatusPast, fmt.Sprintf("already past %s (the group is %s); migrate never moves a group back: use zkbridge rollback", req.Target, c.Mode)
		return p
	case req.Rollback && to > from:
		p.Status, p.Reason = StatusRefused, fmt.Sprintf("the group is %s, before %s: rollback only moves a group back; use zkbridge migrate", c.Mode, req.Target)
		return p
	case req.Rollback && c.Mode == zkstate.ModeFinalized:
		// zkstate.ValidTransition's message says why finalized is terminal.
		err := zkstate.ValidTransition(c.Mode, zkstate.Modes[from-1])
		p.Status, p.Reason = StatusRefused, "rollback refused: "+strings.TrimPrefix(err.Error(), zkstate.ErrInvalidTransition.Error()+": ")
		return p
	}
	dir := 1
	if to < from {
		dir = -1
	}
	for i := from; i != to; i += dir {
		st := Step{From: zkstate.Modes[i], To: zkstate.Modes[i+dir]}
		if err := zkstate.ValidTransition(st.From, st.To); err != nil {
			// Not reachable with the four modes in order; kept so a new mode cannot slip by.
			p.Status, p.Reason = StatusRefused, err.Error()
			return p
		}
		st.Blockers = blockers(c, st, req.Force)
		p.Steps = append(p.Steps, st)
	}
	p.Status = StatusReady
	if i := p.FirstBlocked(); i >= 0 {
		p.Status = StatusBlocked
		p.Reason = p.Steps[i].String() + ": " + joinReasons(p.Steps[i].Blockers)
	}
	return p
}

// blockers lists the preconditions that hold step st back for the group of census c.
func blockers(c Census, st Step, force bool) []Blocker {
	switch st.To {
	case zkstate.ModeKafka, zkstate.ModeFinalized:
		if st.From == zkstate.ModeFinalized {
			return nil
		}
		legacy, zk := c.MembersOf(zkstate.KindLegacy), c.MembersOf(zkstate.KindZK)
		if len(legacy)+len(zk) == 0 {
			return nil
		}
		why := "kafka mode refuses legacy consumers and cannot stop 0.8 consumers"
		if st.To == zkstate.ModeFinalized {
			why = "finalizing stops the ZooKeeper mirror, and a 0.8 or legacy consumer left running would read offsets that are no longer written"
		}
		old := append(legacy, zk...)
		return []Blocker{{
			Code:     BlockOldMembers,
			Reason:   fmt.Sprintf("%s remain%s (%s): %s; stop them, or wait for them to leave (--wait)", countKinds(len(legacy), len(zk)), verbS(len(old)), shortList(old), why),
			Members:  old,
			Waitable: true,
		}}
	case zkstate.ModeLegacy:
		kafka := c.MembersOf(zkstate.KindKafka)
		if len(kafka) == 0 {
			return nil
		}
		b := Blocker{
			Code:     BlockKafkaMembers,
			Members:  kafka,
			Waitable: true,
			Forced:   force,
		}
		if force {
			b.Reason = fmt.Sprintf("%s (%s): forced: the running bridges will rebalance them out and refuse them; their last commits are kept", plural(len(kafka), "kafka member"), shortList(kafka))
		} else {
			b.Reason = fmt.Sprintf("%s remain%s (%s): legacy mode refuses Kafka members; stop them, wait for them to leave (--wait), or --force to have the bridges rebalance them out (their last commits are kept)", plural(len(kafka), "kafka member"), verbS(len(kafka)), shortList(kafka))
		}
		return []Blocker{b}
	}
	return nil
}

func joinReasons(bs []Blocker) string {
	var rs []string
	for _, b := range bs {
		if !b.Forced {
			rs = append(rs, b.Reason)
		}
	}
	return strings.Join(rs, "; ")
}

func countKinds(legacy, zk int) string {
	switch {
	case legacy > 0 && zk > 0:
		return fmt.Sprintf("%s and %s", plural(legacy, "legacy member"), plural(zk, "zk member"))
	case legacy > 0:
		return plural(legacy, "legacy member")
	}
	return plural(zk, "zk member")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// verbS is the verb ending for a subject of n things: "1 member remains", "2 members remain".
func verbS(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

// shortList names at most three ids.
func shortList(ids []string) string {
	if len(ids) <= 3 {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:3], ", ") + fmt.Sprintf(" and %d more", len(ids)-3)
}

func modeIndex(m zkstate.Mode) int {
	for i, x := range zkstate.Modes {
		if x == m {
			return i
		}
	}
	return -1
}
