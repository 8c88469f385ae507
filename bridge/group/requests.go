package group

// The member requests besides JoinGroup, each under the name of the GroupCoordinator method it
// follows, and the admin reads and deletes.

import (
	"bytes"
	"slices"
	"strconv"
	"time"
)

// ---------------------------------------------------------------------------------------------
// SyncGroup (GroupCoordinator.handleSyncGroup)

func (m *Machine) sync(ev SyncGroup) {
	if err := m.validateSync(ev); err != ErrNone {
		m.reply(SyncReply{Token: ev.Token, Err: err})
		return
	}
	mb := m.members[ev.MemberID]
	switch m.state {
	case Empty:
		m.reply(SyncReply{Token: ev.Token, Err: ErrUnknownMemberID})
	case PreparingRebalance:
		m.reply(SyncReply{Token: ev.Token, Err: ErrRebalanceInProgress})
	case CompletingRebalance:
		if mb.syncing {
			m.reply(SyncReply{Token: mb.syncToken, Err: ErrRebalanceInProgress})
		}
		mb.syncing, mb.syncToken = true, ev.Token
		m.removePendingSync(mb.ID)
		if mb.ID == m.leader && m.assignSeq == 0 && !m.serverAssign {
			m.propose(ev.Assignments)
			m.log("assignment received from the leader", mb.ID, "generation "+strconv.Itoa(int(m.generation)))
		}
	case Stable:
		mb.resuming = false
		m.removePendingSync(mb.ID)
		m.reply(SyncReply{Token: ev.Token, ProtocolType: m.protocolType, ProtocolName: m.protocolName, Assignment: mb.Assignment})
		m.scheduleSession(mb)
	}
}

// propose makes assignments the generation's; members it leaves out get an empty one. It is
// persisted before any SyncGroup is answered.
func (m *Machine) propose(assignments map[MemberID][]byte) {
	m.proposed = make(map[MemberID][]byte, len(m.members))
	for _, id := range m.order {
		a := assignments[id]
		if a == nil {
			a = []byte{}
		}
		m.proposed[id] = bytes.Clone(a)
	}
	m.assignSeq = m.writeRecord(false)
}

// validateSync is Kafka's validateSyncGroup.
func (m *Machine) validateSync(ev SyncGroup) ErrorCode {
	if err := m.validateCurrentMember(ev.MemberID, ev.InstanceID); err != ErrNone {
		return err
	}
	if ev.Generation != m.generation {
		return ErrIllegalGeneration
	}
	if ev.ProtocolType != nil && (m.protocolType == "" || *ev.ProtocolType != m.protocolType) {
		return ErrInconsistentGroupProtocol
	}
	if ev.ProtocolName != nil && (m.protocolName == "" || *ev.ProtocolName != m.protocolName) {
		return ErrInconsistentGroupProtocol
	}
	return ErrNone
}

func (m *Machine) removePendingSync(id MemberID) {
	delete(m.pendingSync, id)
	if len(m.pendingSync) == 0 {
		m.syncDeadline = time.Time{}
	}
}

// ---------------------------------------------------------------------------------------------
// Heartbeat (GroupCoordinator.handleHeartbeat)

func (m *Machine) heartbeat(ev Heartbeat) {
	err := m.validateCurrentMember(ev.MemberID, ev.InstanceID)
	if err == ErrNone && ev.Generation != m.generation {
		err = ErrIllegalGeneration
	}
	if err == ErrNone {
		switch m.state {
		case Empty:
			err = ErrUnknownMemberID
		case PreparingRebalance:
			m.scheduleSession(m.members[ev.MemberID])
			err = ErrRebalanceInProgress
		case Stable:
			mb := m.members[ev.MemberID]
			mb.resuming = false
			m.scheduleSession(mb)
			if ev.Hold {
				m.parkBeat(mb, ev) // heartbeat_hold.go
				return
			}
		default: // CompletingRebalance
			m.scheduleSession(m.members[ev.MemberID])
		}
	}
	m.reply(HeartbeatReply{Token: ev.Token, Err: err})
}

// scheduleSession is Kafka's completeAndScheduleNextHeartbeatExpiration.
func (m *Machine) scheduleSession(mb *Member) {
	m.setDeadline(mb, m.now.Add(mb.SessionTimeout))
}

// expireMember is Kafka's onExpireHeartbeat with MemberMetadata.hasSatisfiedHeartbeat: a member
// whose JoinGroup or SyncGroup is parked is alive unless it is new.
func (m *Machine) expireMember(mb *Member) {
	if mb.beatParked {
		m.scheduleSession(mb) // alive while its heartbeat waits for an answer (heartbeat_hold.go)
		return
	}
	mb.deadline = time.Time{}
	if !mb.isNew && (mb.joining || mb.syncing) {
		return
	}
	m.log("member removed", mb.ID, "session timeout")
	m.removeMemberAndUpdateGroup(mb.ID)
}

// ---------------------------------------------------------------------------------------------
// LeaveGroup (GroupCoordinator.handleLeaveGroup)

func (m *Machine) leave(ev LeaveGroup) {
	r := LeaveReply{Token: ev.Token, Members: make([]LeaveMemberResult, 0, len(ev.Members))}
	for _, lm := range ev.Members {
		res := LeaveMemberResult{MemberID: lm.MemberID, InstanceID: lm.InstanceID}
		switch {
		case lm.MemberID == "":
			// Administrative removal by group.instance.id (KIP-345).
			if cur, ok := m.static[lm.InstanceID]; ok && lm.InstanceID != "" {
				m.log("member leaves", cur, lm.Reason)
				m.removeMemberAndUpdateGroup(cur)
			} else {
				res.Err = ErrUnknownMemberID
			}
		case m.isPendingMember(lm.MemberID):
			delete(m.pending, lm.MemberID)
			m.log("pending member leaves", lm.MemberID, lm.Reason)
			m.tryCompleteJoin()
		default:
			if err := m.validateCurrentMember(lm.MemberID, lm.InstanceID); err != ErrNone {
				res.Err = err
			} else {
				m.log("member leaves", lm.MemberID, lm.Reason)
				m.removeMemberAndUpdateGroup(lm.MemberID)
			}
		}
		r.Members = append(r.Members, res)
	}
	m.reply(r)
}

// removeMemberAndUpdateGroup is Kafka's: remove, then rebalance (or finish the join phase).
func (m *Machine) removeMemberAndUpdateGroup(id MemberID) {
	m.remove(id, ErrUnknownMemberID)
	switch m.state {
	case Stable, CompletingRebalance:
		m.maybePrepareRebalance(CauseMemberLeave, "member "+string(id)+" left")
	case PreparingRebalance:
		m.tryCompleteJoin()
	}
}

// remove takes a member out of the group; its parked requests are answered with err (a JoinGroup
// without member id, as Kafka's removeMemberAndUpdateGroup does).
func (m *Machine) remove(id MemberID, err ErrorCode) {
	mb, ok := m.members[id]
	if !ok {
		return
	}
	if mb.joining {
		m.reply(joinError(mb.joinToken, "", err))
		mb.joining = false
	}
	if mb.syncing {
		m.reply(SyncReply{Token: mb.syncToken, Err: err})
		mb.syncing = false
	}
	m.answerBeat(mb, err)
	delete(m.members, id)
	m.order = slices.DeleteFunc(m.order, func(x MemberID) bool { return x == id })
	if mb.isStatic() && m.static[mb.InstanceID] == id {
		delete(m.static, mb.InstanceID)
	}
	m.removePendingSync(id)
	if m.leader == id {
		m.leader = ""
		if len(m.order) > 0 {
			m.leader = m.order[0]
		}
	}
}

// ---------------------------------------------------------------------------------------------
// OffsetCommit (GroupCoordinator.handleCommitOffsets)

func (m *Machine) commit(ev OffsetCommit) {
	if err := m.validateOffsetCommit(ev); err != ErrNone {
		m.reply(commitError(ev, err))
		return
	}
	switch m.state {
	case CompletingRebalance:
		// The member has the new generation but not its assignment yet.
		m.reply(commitError(ev, ErrRebalanceInProgress))
		return
	case Stable, PreparingRebalance:
		// Commits are allowed while preparing a rebalance (from the current generation); they
		// count as liveness.
		if mb, ok := m.members[ev.MemberID]; ok {
			m.scheduleSession(mb)
		}
	}
	r := OffsetCommitReply{Token: ev.Token, Partitions: make([]OffsetCommitResult, len(ev.Offsets))}
	var accepted []OffsetCommitPartition
	for i, o := range ev.Offsets {
		r.Partitions[i] = OffsetCommitResult{Topic: o.Topic, Partition: o.Partition}
		if len(o.Metadata) > m.cfg.MaxOffsetMetadata {
			r.Partitions[i].Err = ErrOffsetMetadataTooLarge
			continue
		}
		accepted = append(accepted, o)
	}
	if len(accepted) == 0 {
		m.reply(r)
		return
	}
	m.held = append(m.held, heldReply{seq: m.writeOffsets(accepted), reply: r})
}

// validateOffsetCommit is Kafka's validateOffsetCommit.
func (m *Machine) validateOffsetCommit(ev OffsetCommit) ErrorCode {
	switch {
	case ev.Generation < 0 && m.state == Empty:
		// A client without group management (or an admin tool) commits into an Empty group.
		return ErrNone
	case ev.Generation >= 0 || ev.MemberID != "" || ev.InstanceID != "":
		if err := m.validateCurrentMember(ev.MemberID, ev.InstanceID); err != ErrNone {
			return err
		}
		if ev.Generation != m.generation {
			return ErrIllegalGeneration
		}
		return ErrNone
	case m.state != Empty:
		// Only members commit into a non-empty group.
		return ErrUnknownMemberID
	default:
		return ErrNone
	}
}

// ---------------------------------------------------------------------------------------------
// Describe and Delete

// Describe returns the group as DescribeGroups shows it (Kafka's GroupMetadata.summary: member
// metadata and assignments only while Stable).
func (m *Machine) Describe() Description {
	d := Description{
		Group:        m.group,
		State:        m.state,
		ProtocolType: m.protocolType,
		Generation:   m.generation,
		Leader:       m.leader,
		Version:      m.version,
	}
	if m.state == Stable {
		d.ProtocolName = m.protocolName
	}
	for _, id := range m.order {
		mb := m.members[id]
		md := MemberDescription{MemberID: id, InstanceID: mb.InstanceID, Kind: mb.Kind, ClientID: mb.ClientID, ClientHost: mb.ClientHost}
		if m.state == Stable {
			md.Metadata = bytes.Clone(mb.metadata(m.protocolName))
			md.Assignment = bytes.Clone(mb.Assignment)
		}
		d.Members = append(d.Members, md)
	}
	return d
}

// delete is Kafka's handleDeleteGroups for one group: only an Empty group can be deleted.
func (m *Machine) delete(ev Delete) {
	if m.state != Empty {
		m.reply(DeleteReply{Token: ev.Token, Err: ErrNonEmptyGroup})
		return
	}
	m.prevState, m.state = m.state, Dead
	clear(m.pending)
	rec := m.record(false)
	rec.Deleted = true
	m.log("group deleted", "", "")
	m.held = append(m.held, heldReply{seq: m.queueWrite(&rec, nil), reply: DeleteReply{Token: ev.Token}})
}
