package group

// JoinGroup (GroupCoordinator.handleJoinGroup): new, known and static members joining.

import (
	"slices"
	"strconv"
	"time"
)

func (m *Machine) join(ev JoinGroup) {
	if ev.SessionTimeout < m.cfg.MinSessionTimeout || ev.SessionTimeout > m.cfg.MaxSessionTimeout {
		m.reply(joinError(ev.Token, ev.MemberID, ErrInvalidSessionTimeout))
		return
	}
	switch {
	case !m.acceptJoiningMember(ev.MemberID, ev.InstanceID):
		// GroupCoordinator.handleJoinGroup: an over-capacity joiner is shed.
		if _, ok := m.members[ev.MemberID]; ok {
			m.remove(ev.MemberID, ErrGroupMaxSizeReached)
			m.log("member removed", ev.MemberID, "group.max.size reached")
		}
		m.reply(joinError(ev.Token, "", ErrGroupMaxSizeReached))
	case ev.MemberID == "":
		m.joinNewMember(ev)
	default:
		m.joinCurrentMember(ev)
	}
	m.tryCompleteJoin()
}

// acceptJoiningMember is Kafka's GroupCoordinator.acceptJoiningMember (group.max.size). A known
// group.instance.id that rejoins with an empty member id counts as its member: it replaces
// itself and does not grow the group (KAFKA-20601).
func (m *Machine) acceptJoiningMember(id MemberID, inst InstanceID) bool {
	if cur, ok := m.static[inst]; ok && id == "" && inst != "" {
		id = cur
	}
	mb, known := m.members[id]
	switch m.state {
	case PreparingRebalance:
		// An existing member awaiting join is accepted; new ones up to the max counted by
		// awaiting members, so that the last to rejoin are shed when the limit was lowered.
		return (known && mb.joining) || !m.cfg.full(m.numJoining())
	case CompletingRebalance, Stable:
		return known || !m.cfg.full(len(m.members))
	default:
		return true
	}
}

// joinNewMember is Kafka's doNewMemberJoinGroup: a JoinGroup with an empty member id.
func (m *Machine) joinNewMember(ev JoinGroup) {
	if !m.supportsProtocols(ev.ProtocolType, ev.Protocols) {
		m.reply(joinError(ev.Token, "", ErrInconsistentGroupProtocol))
		return
	}
	id := m.newMemberID(ev)
	if ev.InstanceID != "" {
		if old, ok := m.static[ev.InstanceID]; ok {
			m.replaceStaticMember(old, id, ev)
			return
		}
		m.addMemberAndRebalance(id, ev)
		return
	}
	if ev.RequireKnownMemberID {
		// KIP-394: remember the id as pending and ask the member to rejoin with it.
		m.setPending(id, m.now.Add(ev.SessionTimeout))
		m.log("pending member must rejoin with its id", id, "")
		m.reply(joinError(ev.Token, id, ErrMemberIDRequired))
		return
	}
	m.addMemberAndRebalance(id, ev)
}

// newMemberID returns the shell-generated id, or a deterministic one if the shell gave none or a
// taken one (a shell bug, but the group should carry on).
func (m *Machine) newMemberID(ev JoinGroup) MemberID {
	if ev.NewMemberID != "" && !m.idTaken(ev.NewMemberID) {
		return ev.NewMemberID
	}
	base := ev.ClientID
	if ev.InstanceID != "" {
		base = string(ev.InstanceID)
	}
	for {
		m.idSeq++
		id := MemberID(base + "-zkbridge-" + strconv.Itoa(m.idSeq))
		if !m.idTaken(id) {
			m.log("shell gave no usable member id; generated one", id, "")
			return id
		}
	}
}

func (m *Machine) idTaken(id MemberID) bool {
	_, member := m.members[id]
	_, pending := m.pending[id]
	return member || pending
}

// joinCurrentMember is Kafka's doCurrentMemberJoinGroup: a JoinGroup with a member id.
func (m *Machine) joinCurrentMember(ev JoinGroup) {
	if !m.supportsProtocols(ev.ProtocolType, ev.Protocols) {
		m.reply(joinError(ev.Token, ev.MemberID, ErrInconsistentGroupProtocol))
		return
	}
	if m.isPendingMember(ev.MemberID) {
		if ev.InstanceID != "" {
			// Kafka treats this as an illegal state: pending members are always dynamic.
			m.reply(joinError(ev.Token, ev.MemberID, ErrUnknownMemberID))
			return
		}
		m.addMemberAndRebalance(ev.MemberID, ev)
		return
	}
	if err := m.validateCurrentMember(ev.MemberID, ev.InstanceID); err != ErrNone {
		m.reply(joinError(ev.Token, ev.MemberID, err))
		return
	}
	mb := m.members[ev.MemberID]
	switch m.state {
	case PreparingRebalance:
		m.updateMemberAndRebalance(mb, ev, "member rejoins")
	case CompletingRebalance:
		switch {
		case mb.matches(ev.Protocols) && m.genSeq != 0:
			// The generation is still being persisted: the JoinGroup waits for it like the
			// others (a retry replaces the member's parked one).
			m.supersedeJoin(mb)
			mb.joining, mb.joinToken = true, ev.Token
			mb.joinSeq, mb.joinStatic = m.genSeq, false
		case mb.matches(ev.Protocols):
			// The member lost its JoinGroup reply: send the current generation again.
			m.reply(m.joinResult(ev.Token, mb.ID, m.leader, mb.ID == m.leader, false))
		default:
			m.updateMemberAndRebalance(mb, ev, "member rejoins with new metadata")
		}
	case Stable:
		switch {
		case m.resume(mb, ev):
		case mb.ID == m.leader:
			// The leader may rejoin to rebalance for changes the metadata does not show
			// (e.g. new partitions).
			m.updateMemberAndRebalance(mb, ev, "leader rejoins")
		case !mb.matches(ev.Protocols):
			m.updateMemberAndRebalance(mb, ev, "member rejoins with new metadata")
		default:
			m.reply(m.joinResult(ev.Token, mb.ID, m.leader, false, false))
		}
	default:
		m.reply(joinError(ev.Token, ev.MemberID, ErrUnknownMemberID))
	}
}

// validateCurrentMember is Kafka's validateCurrentMember: the instance id, when given, must map
// to this member id (else FENCED_INSTANCE_ID, KIP-345), and the member must exist.
func (m *Machine) validateCurrentMember(id MemberID, inst InstanceID) ErrorCode {
	if inst != "" {
		cur, ok := m.static[inst]
		if !ok {
			return ErrUnknownMemberID
		}
		if cur != id {
			return ErrFencedInstanceID
		}
	}
	if _, ok := m.members[id]; !ok {
		return ErrUnknownMemberID
	}
	return ErrNone
}

func (m *Machine) isPendingMember(id MemberID) bool {
	_, pending := m.pending[id]
	_, member := m.members[id]
	return pending && !member
}

// supportsProtocols is Kafka's GroupMetadata.supportsProtocols.
func (m *Machine) supportsProtocols(ptype string, protocols []Protocol) bool {
	if m.state == Empty {
		return ptype != "" && len(protocols) > 0
	}
	if ptype != m.protocolType {
		return false
	}
	for _, p := range protocols {
		if m.supportCount(p.Name) == len(m.members) {
			return true
		}
	}
	return false
}

func (m *Machine) supportCount(name string) int {
	n := 0
	for _, mb := range m.members {
		if mb.supports(name) {
			n++
		}
	}
	return n
}

// selectProtocol is Kafka's GroupMetadata.selectProtocol: among the protocols every member
// supports, each member votes for its most preferred; most votes wins (ties: smallest name).
func (m *Machine) selectProtocol() string {
	candidates := make(map[string]bool)
	for _, id := range m.order {
		for _, p := range m.members[id].Protocols {
			if m.supportCount(p.Name) == len(m.members) {
				candidates[p.Name] = true
			}
		}
	}
	votes := make(map[string]int)
	for _, id := range m.order {
		if v := m.members[id].vote(candidates); v != "" {
			votes[v]++
		}
	}
	best, bestVotes := "", 0
	for name, n := range votes {
		if n > bestVotes || (n == bestVotes && name < best) {
			best, bestVotes = name, n
		}
	}
	return best
}

// addMemberAndRebalance is Kafka's addMemberAndRebalance.
func (m *Machine) addMemberAndRebalance(id MemberID, ev JoinGroup) {
	mb := &Member{
		ID:               id,
		InstanceID:       ev.InstanceID,
		Kind:             KindKafka,
		ClientID:         ev.ClientID,
		ClientHost:       ev.ClientHost,
		SessionTimeout:   ev.SessionTimeout,
		RebalanceTimeout: rebalanceTimeoutOf(ev),
		ProtocolType:     ev.ProtocolType,
		Protocols:        cloneProtocols(ev.Protocols),
		joining:          true,
		joinToken:        ev.Token,
		isNew:            true,
	}
	// InitialDelayedJoin: a new member extends the initial delay of a group that was Empty.
	if m.state == PreparingRebalance && m.prevState == Empty {
		m.newMemberAdded = true
	}
	if len(m.members) == 0 {
		m.protocolType = mb.ProtocolType
	}
	if m.leader == "" {
		m.leader = id
	}
	m.members[id] = mb
	m.order = append(m.order, id)
	if mb.isStatic() {
		m.static[mb.InstanceID] = id
	} else {
		delete(m.pending, id)
	}
	// A new member cannot heartbeat while its JoinGroup is parked; it is dropped after
	// NewMemberJoinTimeout if the join phase outlasts that (Kafka's NewMemberJoinTimeoutMs).
	m.setDeadline(mb, m.now.Add(m.cfg.NewMemberJoinTimeout))
	m.log("member joins", id, ev.Reason)
	m.maybePrepareRebalance(CauseMemberJoin, "new member "+string(id)+" joins")
}

// rebalanceTimeoutOf returns the JoinGroup's rebalance timeout; none (JoinGroup v0, or a
// nonsensical zero) means the session timeout, as Kafka's KafkaApis does for v0.
func rebalanceTimeoutOf(ev JoinGroup) time.Duration {
	if ev.RebalanceTimeout <= 0 {
		return ev.SessionTimeout
	}
	return ev.RebalanceTimeout
}

// updateMemberAndRebalance is Kafka's updateMemberAndRebalance (GroupMetadata.updateMember).
func (m *Machine) updateMemberAndRebalance(mb *Member, ev JoinGroup, reason string) {
	m.supersedeJoin(mb)
	mb.Protocols = cloneProtocols(ev.Protocols)
	mb.RebalanceTimeout = rebalanceTimeoutOf(ev)
	mb.SessionTimeout = ev.SessionTimeout
	mb.joining, mb.joinToken = true, ev.Token
	m.maybePrepareRebalance(CauseMemberRejoin, reason+": "+string(mb.ID))
}

// supersedeJoin answers a member's parked JoinGroup that a newer one replaces (Kafka drops it).
func (m *Machine) supersedeJoin(mb *Member) {
	if mb.joining {
		m.reply(joinError(mb.joinToken, mb.ID, ErrRebalanceInProgress))
		mb.joining, mb.joinSeq = false, 0
	}
}

// replaceStaticMember is Kafka's updateStaticMemberAndRebalance (KIP-345): a known
// group.instance.id joins with an empty member id. The member keeps its place and assignment
// under a new member id; the old id is fenced.
func (m *Machine) replaceStaticMember(oldID, newID MemberID, ev JoinGroup) {
	currentLeader := m.leader
	mb := m.members[oldID]
	// GroupMetadata.replaceStaticMember: fence the old id's parked requests at once.
	if mb.joining {
		m.reply(joinError(mb.joinToken, oldID, ErrFencedInstanceID))
		mb.joining, mb.joinSeq = false, 0
	}
	if mb.syncing {
		m.reply(SyncReply{Token: mb.syncToken, Err: ErrFencedInstanceID})
		mb.syncing = false
	}
	delete(m.members, oldID)
	mb.ID = newID
	m.members[newID] = mb
	m.order[slices.Index(m.order, oldID)] = newID
	if m.leader == oldID {
		m.leader = newID
	}
	m.static[mb.InstanceID] = newID
	if m.pendingSync[oldID] {
		delete(m.pendingSync, oldID)
		m.pendingSync[newID] = true
	}
	mb.Protocols = cloneProtocols(ev.Protocols)
	mb.RebalanceTimeout = rebalanceTimeoutOf(ev)
	mb.SessionTimeout = ev.SessionTimeout
	mb.joining, mb.joinToken = true, ev.Token
	m.scheduleSession(mb)
	m.log("static member rejoins with a new member id; old id fenced", newID, "replaces "+string(oldID))

	switch m.state {
	case Stable:
		if m.selectProtocol() == m.protocolName {
			// Same selected protocol: no rebalance. Persist the new member id, then answer.
			mb.joinSeq = m.writeRecord(false)
			mb.joinStatic = true
			mb.joinLeader = currentLeader
			mb.joinSkip = ev.SupportSkipAssignment
		} else {
			m.prepareRebalance(CauseMemberRejoin, "static member "+string(newID)+" changes the selected protocol")
		}
	case CompletingRebalance:
		// The leader may already have the old id in its member list: rebalance.
		m.prepareRebalance(CauseMemberRejoin, "static member "+string(newID)+" rejoins while awaiting sync")
	}
}

// joinResult is the JoinGroup reply of a member of the current generation.
func (m *Machine) joinResult(t Token, id, leader MemberID, withMembers, skip bool) JoinReply {
	r := JoinReply{
		Token:          t,
		MemberID:       id,
		Generation:     m.generation,
		ProtocolType:   m.protocolType,
		ProtocolName:   m.protocolName,
		Leader:         leader,
		SkipAssignment: skip,
	}
	if withMembers {
		r.Members = make([]JoinMember, 0, len(m.order))
		for _, mid := range m.order {
			mb := m.members[mid]
			meta := mb.metadata(m.protocolName)
			if skip && m.protocolType == "consumer" {
				meta = ownedAsAssigned(meta, mb.Assignment, m.generation) // resume.go
			}
			r.Members = append(r.Members, JoinMember{MemberID: mid, InstanceID: mb.InstanceID, Metadata: meta, SessionTimeout: mb.SessionTimeout})
		}
	}
	return r
}
