package group

// Rebalance phases: PreparingRebalance's join phase, CompletingRebalance's sync deadline, the
// new generation and its leader (GroupCoordinator.prepareRebalance, onCompleteJoin).

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Cause classifies why a group prepares a rebalance, for the shell's metrics; the log line's
// Reason says it in words (LogEvent.Cause).
type Cause string

// Rebalance causes: the values of the shell's rebalances_total cause label.
const (
	CauseMemberJoin   Cause = "member_join"   // a new member joins
	CauseMemberRejoin Cause = "member_rejoin" // new metadata, a rejoining leader or static member
	CauseMemberLeave  Cause = "member_leave"  // LeaveGroup, or a session that timed out
	CauseSyncTimeout  Cause = "sync_timeout"  // members that did not sync in time
	CauseRestore      Cause = "restore"       // restored mid-rebalance, or over group.max.size
	// CauseAssignorChanged: the group's assignment is to come from elsewhere (a mixed group's
	// server-side assignment, Rebalance) or changed while a generation waited for it.
	CauseAssignorChanged Cause = "assignor_changed"
	// CauseOtherKinds: a mixed group's zk or legacy members, or its topics, changed (Rebalance).
	CauseOtherKinds Cause = "other_kinds"
	CauseOther      Cause = "other" // anything else: a failed write, a Rebalance without a cause
)

func (m *Machine) maybePrepareRebalance(cause Cause, reason string) {
	switch m.state {
	case Stable, CompletingRebalance, Empty:
		m.prepareRebalance(cause, reason)
	}
}

// prepareRebalance is Kafka's prepareRebalance.
func (m *Machine) prepareRebalance(cause Cause, reason string) {
	m.answerBeats(ErrRebalanceInProgress) // the members rejoin now (heartbeat_hold.go)
	if m.state == CompletingRebalance {
		m.resetAndPropagateAssignmentError(ErrRebalanceInProgress)
	}
	clear(m.pendingSync)
	m.syncDeadline = time.Time{}
	m.genSeq, m.assignSeq, m.proposed = 0, 0, nil
	for _, mb := range m.members {
		mb.joinSeq, mb.joinStatic = 0, false // parked joins now wait for this phase
	}
	rt := m.rebalanceTimeout()
	if m.state == Empty {
		// InitialDelayedJoin: wait InitialRebalanceDelay, more while members keep coming, at most
		// the rebalance timeout.
		m.initialJoin, m.newMemberAdded = true, false
		m.initialDelay = m.cfg.InitialRebalanceDelay
		m.initialRemaining = max(rt-m.cfg.InitialRebalanceDelay, 0)
		m.joinDeadline = m.now.Add(m.initialDelay)
	} else {
		m.initialJoin = false
		m.joinDeadline = m.now.Add(rt)
	}
	m.clearResuming()
	m.prevState, m.state = m.state, PreparingRebalance
	m.fx.Logs = append(m.fx.Logs, LogEvent{Msg: "preparing rebalance", Reason: reason, Cause: cause})
	m.jointKafkaTrigger(reason) // joint.go
	m.tryCompleteJoin()
}

// resetAndPropagateAssignmentError is Kafka's: every parked SyncGroup gets err.
func (m *Machine) resetAndPropagateAssignmentError(err ErrorCode) {
	for _, id := range m.order {
		mb := m.members[id]
		mb.Assignment = nil
		if mb.syncing {
			m.reply(SyncReply{Token: mb.syncToken, Err: err})
			mb.syncing = false
			m.scheduleSession(mb)
		}
	}
}

func (m *Machine) rebalanceTimeout() time.Duration {
	var rt time.Duration
	for _, mb := range m.members {
		rt = max(rt, mb.RebalanceTimeout)
	}
	return rt
}

func (m *Machine) numJoining() int {
	n := 0
	for _, mb := range m.members {
		if mb.joining {
			n++
		}
	}
	return n
}

// tryCompleteJoin is Kafka's tryCompleteJoin: the join phase ends early when every member has
// rejoined and no KIP-394 pending member is outstanding; not during the initial delay.
func (m *Machine) tryCompleteJoin() {
	if m.state != PreparingRebalance || m.initialJoin {
		return
	}
	if m.numJoining() == len(m.members) && len(m.pending) == 0 {
		m.completeJoin()
	}
}

// onJoinDeadline is the expiry of DelayedJoin or InitialDelayedJoin.
func (m *Machine) onJoinDeadline() {
	if m.initialJoin && m.newMemberAdded && m.initialRemaining != 0 {
		// InitialDelayedJoin.onComplete: extend by another delay, within the remaining time.
		m.newMemberAdded = false
		delay := min(m.cfg.InitialRebalanceDelay, m.initialRemaining)
		m.initialRemaining = max(m.initialRemaining-m.initialDelay, 0)
		m.initialDelay = delay
		m.joinDeadline = m.joinDeadline.Add(delay)
		return
	}
	m.joinDeadline = time.Time{}
	m.completeJoin()
}

// completeJoin is Kafka's onCompleteJoin.
func (m *Machine) completeJoin() {
	m.joinDeadline = time.Time{}
	m.initialJoin = false
	// Dynamic members that did not rejoin are dropped; static ones stay (KIP-345) until their
	// session times out.
	for _, id := range slices.Clone(m.order) {
		mb := m.members[id]
		if !mb.joining && !mb.isStatic() {
			m.remove(id, ErrUnknownMemberID)
			m.log("member removed", id, "did not rejoin before the rebalance timeout")
		}
	}
	if !m.maybeElectNewJoinedLeader() && len(m.members) > 0 {
		// Only static members that did not rejoin are left: wait another rebalance timeout
		// until their sessions end or they rejoin (KAFKA-8220).
		m.joinDeadline = m.now.Add(m.rebalanceTimeout())
		m.log("no member rejoined; waiting another rebalance timeout", "", "")
		return
	}
	// GroupMetadata.initNextGeneration
	m.generation++
	m.prevState = m.state
	if len(m.members) == 0 {
		m.protocolName, m.leader = "", ""
		m.state = Empty
		m.log("group is empty", "", "generation "+strconv.Itoa(int(m.generation)))
		m.writeRecord(false)
		return
	}
	m.protocolName = m.selectProtocol()
	m.state = CompletingRebalance
	waitFor := "generation complete, awaiting leader's assignment"
	if m.serverAssign {
		waitFor = "generation complete, awaiting the bridge's assignment"
	}
	m.log(waitFor, m.leader, "generation "+strconv.Itoa(int(m.generation))+" protocol "+m.protocolName)
	// The JoinGroup replies carry the new generation: persist it first.
	seq := m.writeRecord(true)
	m.genSeq = seq
	for _, id := range m.order {
		mb := m.members[id]
		if mb.joining {
			mb.joinSeq, mb.joinStatic = seq, false
		}
		m.scheduleSession(mb)
		mb.isNew = false
		m.pendingSync[id] = true
	}
	m.syncDeadline = m.now.Add(m.rebalanceTimeout())
	if m.serverAssign {
		m.askAssignment() // joint.go: held while the legacy members are on their way to a claim
	}
}

// maybeElectNewJoinedLeader is Kafka's: keep the leader if it rejoined, else the first member
// (in join order) that did; false when none did.
func (m *Machine) maybeElectNewJoinedLeader() bool {
	if m.leader == "" {
		return false
	}
	if m.members[m.leader].joining {
		return true
	}
	for _, id := range m.order {
		if m.members[id].joining {
			m.log("new leader: the leader did not rejoin", id, "previous "+string(m.leader))
			m.leader = id
			return true
		}
	}
	return false
}

// onSyncDeadline is Kafka's onExpirePendingSync (KAFKA-12890): members that got the new
// generation but did not SyncGroup within the rebalance timeout are removed, and the group
// rebalances.
func (m *Machine) onSyncDeadline() {
	m.syncDeadline = time.Time{}
	if (m.state != CompletingRebalance && m.state != Stable) || len(m.pendingSync) == 0 {
		clear(m.pendingSync)
		return
	}
	var removed []MemberID
	for _, id := range slices.Clone(m.order) {
		if m.pendingSync[id] {
			m.remove(id, ErrUnknownMemberID)
			m.log("member removed", id, "no SyncGroup before the rebalance timeout")
			removed = append(removed, id)
		}
	}
	clear(m.pendingSync)
	m.prepareRebalance(CauseSyncTimeout, fmt.Sprintf("members %v did not sync", removed))
}
