package group

// Held heartbeats: how a rebalance reaches a member at once instead of at its next heartbeat.
//
// A Kafka member of the classic protocol learns that its group rebalances only from the answer
// to a heartbeat (REBALANCE_IN_PROGRESS), and the join phase waits for every member, so a
// rebalance takes about one heartbeat interval before any work starts. When the shell allows it
// (Heartbeat.Hold), a Stable member's heartbeat is not answered at once: it is parked, as Kafka
// parks a JoinGroup, and answered
//   - REBALANCE_IN_PROGRESS as soon as the group prepares a rebalance (the member rejoins now),
//   - with the error of the member's removal when it leaves or is removed,
//   - with the machine's error when it is fenced or restored (abandon),
//   - with what a heartbeat would get now when the shell releases it (ReleaseHeartbeat): its
//     connection has a later request to answer (the Kafka protocol answers in request order),
//     the connection is closing, or the hold the shell allows is over.
//
// The wire allows a broker to take its time over any answer; the client only waits. The hold
// has no clock in the machine: the shell bounds it, because the bound is set by the clients'
// request timeouts, which only the operator knows. A member whose heartbeat is parked is alive
// (its session deadline is pushed on, as Kafka counts a member with a parked JoinGroup alive);
// its session restarts when the heartbeat is answered.
//
// A member has at most one parked heartbeat: a second one (from a client that sends without
// waiting for the answer) answers the first with no error.

// ReleaseHeartbeat answers the parked Heartbeat Held of member MemberID now, with what a
// heartbeat would get now; it is itself answered by a HeartbeatReply with no error. Nothing
// happens if that heartbeat was answered already.
type ReleaseHeartbeat struct {
	Token    Token
	MemberID MemberID
	Held     Token
}

func (ReleaseHeartbeat) isEvent() {}

// parkBeat parks the heartbeat ev of mb, answering the one it supersedes.
func (m *Machine) parkBeat(mb *Member, ev Heartbeat) {
	if mb.beatParked {
		m.reply(HeartbeatReply{Token: mb.beatToken})
	} else {
		m.parkedBeats++
	}
	mb.beatParked, mb.beatToken = true, ev.Token
}

// answerBeat answers mb's parked heartbeat, if any, with err.
func (m *Machine) answerBeat(mb *Member, err ErrorCode) {
	if !mb.beatParked {
		return
	}
	mb.beatParked = false
	m.parkedBeats--
	m.reply(HeartbeatReply{Token: mb.beatToken, Err: err})
}

// releaseBeat is ReleaseHeartbeat.
func (m *Machine) releaseBeat(ev ReleaseHeartbeat) {
	if mb, ok := m.members[ev.MemberID]; ok && mb.beatParked && mb.beatToken == ev.Held {
		// Parked only while Stable, and answered when the group leaves it (answerBeats): the
		// answer now is a Stable member's, and its session restarts from now.
		m.answerBeat(mb, ErrNone)
		m.scheduleSession(mb)
	}
	m.reply(HeartbeatReply{Token: ev.Token})
}

// answerBeats answers every parked heartbeat with err.
func (m *Machine) answerBeats(err ErrorCode) {
	if m.parkedBeats == 0 {
		return
	}
	for _, id := range m.order {
		mb := m.members[id]
		if mb.beatParked {
			m.answerBeat(mb, err)
			if err == ErrRebalanceInProgress {
				m.scheduleSession(mb)
			}
		}
	}
}
