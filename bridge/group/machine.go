// Package group is the pure group engine of zkbridge: one Machine per consumer group, events in,
// effects out, no goroutines, no clock, no IO (see DESIGN.md §3). Its semantics are those of
// Apache Kafka's classic group coordinator (kafka.coordinator.group.GroupCoordinator and
// GroupMetadata, Kafka 2.x–3.x), so that a thin shell can serve unmodified Kafka clients; the
// comments name the Kafka method or KIP each rule comes from.
//
// Differences from Kafka, all on purpose:
//   - Persist before reply also covers the JoinGroup replies of a new generation: the generation
//     is written (Record.Rebalancing) before any member learns it, so a restarted bridge never
//     reuses a generation number and a stale member is always caught by the generation check.
//   - Superseded parked requests (a second JoinGroup or SyncGroup of the same member while the
//     first is parked) are answered with REBALANCE_IN_PROGRESS instead of being dropped, and a
//     member removed while its SyncGroup is parked gets UNKNOWN_MEMBER_ID, so that every request
//     is answered exactly once.
//   - A lost write (PersistFailed) fences the machine (NOT_COORDINATOR) instead of resetting the
//     rebalance: with ZooKeeper a failed conditional write means another bridge owns the group.
//   - Ties in protocol selection go to the smallest name (Kafka's are hash-map ordered).
//
// Kafka behaviour worth knowing when reading the tests: a static member that did not rejoin is
// kept through the join phase (KIP-345) but, like every member, is removed if it sends no
// SyncGroup within the rebalance timeout after the phase ends (DelayedSync, KAFKA-12890); and a
// Restore brings dynamic members back too, as Kafka's coordinator failover does, so live ones
// carry on and dead ones expire after their session timeout.
package group

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// State is the phase of a group, as in Kafka's GroupMetadata.
type State int8

// Group states (Kafka's GroupState).
const (
	// Empty: no members (possibly offsets). Next: PreparingRebalance when a member joins, Dead
	// when deleted.
	Empty State = iota
	// PreparingRebalance: JoinGroup requests are parked until every known member has rejoined
	// or the rebalance timeout ends. Heartbeats get REBALANCE_IN_PROGRESS.
	PreparingRebalance
	// CompletingRebalance: the new generation exists; SyncGroup requests are parked until the
	// leader's assignment is persisted.
	CompletingRebalance
	// Stable: every member has its assignment.
	Stable
	// Dead: the group was deleted, or the machine is fenced.
	Dead
)

var stateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

// String returns Kafka's name of the state, as DescribeGroups reports it.
func (s State) String() string {
	if int(s) >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Machine is the state machine of one group. It is not safe for concurrent use: one actor owns
// it and calls Step for every event.
type Machine struct {
	cfg   Config
	group string
	now   time.Time

	state        State
	prevState    State // the state the current PreparingRebalance started from
	generation   Generation
	protocolType string
	protocolName string // the generation's selected protocol; "" while Empty
	leader       MemberID
	members      map[MemberID]*Member
	order        []MemberID // join order: deterministic iteration, leader fallback
	static       map[InstanceID]MemberID
	pending      map[MemberID]time.Time // KIP-394 pending members → expiry
	idSeq        int                    // fallback member ids when the shell gives none

	// Join phase (Kafka's DelayedJoin / InitialDelayedJoin).
	joinDeadline     time.Time
	initialJoin      bool // the phase started from Empty: wait, do not complete early
	newMemberAdded   bool
	initialDelay     time.Duration // the current InitialDelayedJoin round's delay
	initialRemaining time.Duration

	// Sync phase (Kafka's DelayedSync, KAFKA-12890): members that got their JoinGroup reply and
	// have not sent SyncGroup yet, and when they are removed.
	pendingSync  map[MemberID]bool
	syncDeadline time.Time

	timers timerQueue // member and pending-member deadlines, earliest first (timers.go)

	// Writes: at most one in flight; requests made meanwhile accumulate in next.
	seq       uint64 // seq of the last emitted write
	inflight  bool
	next      *pendingWrite
	held      []heldReply
	genSeq    uint64              // the write carrying a new generation, until persisted
	assignSeq uint64              // the write carrying the leader's assignment
	proposed  map[MemberID][]byte // the leader's assignment, until assignSeq is persisted
	version   int64
	fenced    bool

	parkedBeats int // members with a held heartbeat (heartbeat_hold.go)

	serverAssign bool // server_assign.go

	inflightRecord bool // the write in flight carries the record (write_failed.go)

	fx *Effects // the effects of the Step in progress
}

type pendingWrite struct {
	record  *Record
	offsets []OffsetCommitPartition
}

// heldReply is a reply released when write seq is persisted.
type heldReply struct {
	seq   uint64
	reply Reply
}

// New returns the machine of an Empty group at generation 0. cfg must pass Validate; New panics
// otherwise (a configuration error is the caller's bug).
func New(cfg Config, group string) *Machine {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := &Machine{cfg: cfg, group: group}
	m.reset()
	return m
}

func (m *Machine) reset() {
	m.state, m.prevState = Empty, Empty
	m.generation = 0
	m.protocolType, m.protocolName, m.leader = "", "", ""
	m.members = make(map[MemberID]*Member)
	m.order = nil
	m.static = make(map[InstanceID]MemberID)
	m.pending = make(map[MemberID]time.Time)
	m.joinDeadline, m.initialJoin, m.newMemberAdded = time.Time{}, false, false
	m.initialDelay, m.initialRemaining = 0, 0
	m.pendingSync = make(map[MemberID]bool)
	m.syncDeadline = time.Time{}
	m.inflight, m.next, m.held = false, nil, nil
	m.parkedBeats = 0
	m.genSeq, m.assignSeq, m.proposed = 0, 0, nil
	m.fenced = false
}

// State returns the group's state.
func (m *Machine) State() State { return m.state }

// Generation returns the group's generation.
func (m *Machine) Generation() Generation { return m.generation }

// Fenced reports whether the machine fenced itself after a lost write.
func (m *Machine) Fenced() bool { return m.fenced }

// Step applies one event at time now and returns what the shell must do (see Effects for the
// order). Every Step first fires the timers due at now. Time never runs backwards: a now earlier
// than a previous one counts as the previous one.
func (m *Machine) Step(now time.Time, ev Event) Effects {
	var fx Effects
	m.fx = &fx
	if now.After(m.now) {
		m.now = now
	}
	m.fireTimers()
	switch {
	case m.fenced:
		m.stepFenced(ev)
	case m.state == Dead:
		m.stepDead(ev)
	default:
		m.stepLive(ev)
	}
	m.fireTimers() // timers armed with no delay (e.g. InitialRebalanceDelay 0)
	m.flushWrite()
	fx.WakeAt = m.wakeAt()
	m.fx = nil
	return fx
}

func (m *Machine) stepLive(ev Event) {
	switch ev := ev.(type) {
	case JoinGroup:
		m.join(ev)
	case SyncGroup:
		m.sync(ev)
	case Heartbeat:
		m.heartbeat(ev)
	case ReleaseHeartbeat:
		m.releaseBeat(ev) // heartbeat_hold.go
	case LeaveGroup:
		m.leave(ev)
	case OffsetCommit:
		m.commit(ev)
	case Describe:
		m.reply(DescribeReply{Token: ev.Token, Group: m.Describe()})
	case Delete:
		m.delete(ev)
	case Tick:
	case Persisted:
		m.persisted(ev)
	case PersistFailed:
		m.fence("write failed: " + errString(ev.Err))
	case WriteFailed:
		m.writeFailed(ev) // write_failed.go
	case Restore:
		m.restore(ev)
	case AssignMode:
		m.setAssignMode(ev)
	case ServerAssignment:
		m.serverAssignment(ev)
	case Rebalance:
		m.rebalance(ev)
	}
}

// stepDead answers a deleted group: Kafka's handlers answer a Dead group with
// COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again, and the shell creates a new
// machine for the group) and DeleteGroups with GROUP_ID_NOT_FOUND.
func (m *Machine) stepDead(ev Event) {
	switch ev := ev.(type) {
	case Describe:
		m.reply(DescribeReply{Token: ev.Token, Group: m.Describe()})
	case Delete:
		m.reply(DeleteReply{Token: ev.Token, Err: ErrGroupIDNotFound})
	case Persisted:
		m.persisted(ev)
	case PersistFailed:
		m.fence("write failed: " + errString(ev.Err))
	case WriteFailed:
		// The deletion may or may not have been written: load the group again to know.
		m.fence("write of the deletion failed: " + errString(ev.Err))
	case Restore:
		m.restore(ev)
	default:
		m.replyError(ev, ErrCoordinatorNotAvailable)
	}
}

// stepFenced answers everything with NOT_COORDINATOR until a Restore (Kafka answers requests
// for a group it no longer owns so, and the client finds the new coordinator).
func (m *Machine) stepFenced(ev Event) {
	if r, ok := ev.(Restore); ok {
		m.restore(r)
		return
	}
	m.replyError(ev, ErrNotCoordinator)
}

// replyError answers a request event with err.
func (m *Machine) replyError(ev Event, err ErrorCode) {
	switch ev := ev.(type) {
	case JoinGroup:
		m.reply(joinError(ev.Token, ev.MemberID, err))
	case SyncGroup:
		m.reply(SyncReply{Token: ev.Token, Err: err})
	case Heartbeat:
		m.reply(HeartbeatReply{Token: ev.Token, Err: err})
	case ReleaseHeartbeat:
		m.reply(HeartbeatReply{Token: ev.Token, Err: err})
	case LeaveGroup:
		m.reply(LeaveReply{Token: ev.Token, Err: err})
	case OffsetCommit:
		m.reply(commitError(ev, err))
	case Describe:
		m.reply(DescribeReply{Token: ev.Token, Err: err, Group: Description{Group: m.group, State: Dead, Generation: NoGeneration}})
	case Delete:
		m.reply(DeleteReply{Token: ev.Token, Err: err})
	}
}

func joinError(t Token, id MemberID, err ErrorCode) JoinReply {
	return JoinReply{Token: t, Err: err, MemberID: id, Generation: NoGeneration}
}

func commitError(ev OffsetCommit, err ErrorCode) OffsetCommitReply {
	r := OffsetCommitReply{Token: ev.Token, Partitions: make([]OffsetCommitResult, len(ev.Offsets))}
	for i, o := range ev.Offsets {
		r.Partitions[i] = OffsetCommitResult{Topic: o.Topic, Partition: o.Partition, Err: err}
	}
	return r
}

func (m *Machine) reply(r Reply) { m.fx.Replies = append(m.fx.Replies, r) }

func (m *Machine) log(msg string, id MemberID, reason string) {
	m.fx.Logs = append(m.fx.Logs, LogEvent{Msg: msg, Member: id, Reason: reason})
}

func errString(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}

// ---------------------------------------------------------------------------------------------
// JoinGroup (GroupCoordinator.handleJoinGroup)

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
	m.maybePrepareRebalance("new member " + string(id) + " joins")
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
	m.maybePrepareRebalance(reason + ": " + string(mb.ID))
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
			m.prepareRebalance("static member " + string(newID) + " changes the selected protocol")
		}
	case CompletingRebalance:
		// The leader may already have the old id in its member list: rebalance.
		m.prepareRebalance("static member " + string(newID) + " rejoins while awaiting sync")
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
			r.Members = append(r.Members, JoinMember{MemberID: mid, InstanceID: mb.InstanceID, Metadata: mb.metadata(m.protocolName), SessionTimeout: mb.SessionTimeout})
		}
	}
	return r
}

// ---------------------------------------------------------------------------------------------
// Rebalance phases

func (m *Machine) maybePrepareRebalance(reason string) {
	switch m.state {
	case Stable, CompletingRebalance, Empty:
		m.prepareRebalance(reason)
	}
}

// prepareRebalance is Kafka's prepareRebalance.
func (m *Machine) prepareRebalance(reason string) {
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
	m.prevState, m.state = m.state, PreparingRebalance
	m.log("preparing rebalance", "", reason)
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
		m.requestAssignment()
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
	m.prepareRebalance(fmt.Sprintf("members %v did not sync", removed))
}

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
		m.maybePrepareRebalance("member " + string(id) + " left")
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

// ---------------------------------------------------------------------------------------------
// Writes: persist before reply

// writeRecord queues the group's record and returns the seq of the write that will carry it.
func (m *Machine) writeRecord(rebalancing bool) uint64 {
	rec := m.record(rebalancing)
	return m.queueWrite(&rec, nil)
}

func (m *Machine) writeOffsets(offs []OffsetCommitPartition) uint64 {
	return m.queueWrite(nil, offs)
}

// queueWrite adds to the next write; it is emitted at the end of the Step if none is in flight,
// else when the one in flight is acknowledged. A later record replaces an earlier one; a later
// offset for a partition replaces an earlier one.
func (m *Machine) queueWrite(rec *Record, offs []OffsetCommitPartition) uint64 {
	if m.next == nil {
		m.next = &pendingWrite{}
	}
	if rec != nil {
		m.next.record = rec
	}
	for _, o := range offs {
		i := slices.IndexFunc(m.next.offsets, func(x OffsetCommitPartition) bool {
			return x.Topic == o.Topic && x.Partition == o.Partition
		})
		if i >= 0 {
			m.next.offsets[i] = o
		} else {
			m.next.offsets = append(m.next.offsets, o)
		}
	}
	return m.seq + 1
}

func (m *Machine) flushWrite() {
	if m.inflight || m.next == nil || m.fenced {
		return
	}
	m.seq++
	m.inflight = true
	m.inflightRecord = m.next.record != nil
	m.fx.Persist = m.next.record
	m.fx.Offsets = m.next.offsets
	m.next = nil
}

// record is the group's Record now (with the leader's assignment while it is being persisted).
func (m *Machine) record(rebalancing bool) Record {
	r := Record{
		Version:      RecordVersion,
		Group:        m.group,
		Generation:   m.generation,
		ProtocolType: m.protocolType,
		ProtocolName: m.protocolName,
		Leader:       m.leader,
		Members:      make([]RecordMember, 0, len(m.order)),
		Rebalancing:  rebalancing,
	}
	for _, id := range m.order {
		mb := m.members[id]
		a := mb.Assignment
		if m.proposed != nil {
			a = m.proposed[id]
		}
		rm := RecordMember{
			ID:                 id,
			InstanceID:         mb.InstanceID,
			Kind:               mb.Kind,
			ClientID:           mb.ClientID,
			ClientHost:         mb.ClientHost,
			SessionTimeoutMs:   mb.SessionTimeout.Milliseconds(),
			RebalanceTimeoutMs: mb.RebalanceTimeout.Milliseconds(),
			ProtocolType:       mb.ProtocolType,
			Assignment:         bytes.Clone(a),
		}
		for _, p := range mb.Protocols {
			rm.Protocols = append(rm.Protocols, RecordProtocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
		}
		r.Members = append(r.Members, rm)
	}
	return r
}

// persisted releases what waited for the write in flight.
func (m *Machine) persisted(ev Persisted) {
	if !m.inflight {
		m.log("ignoring Persisted: no write in flight", "", "")
		return
	}
	seq := m.seq
	m.inflight = false
	m.version = ev.Version
	kept := m.held[:0]
	for _, h := range m.held {
		if h.seq == seq {
			m.reply(h.reply)
		} else {
			kept = append(kept, h)
		}
	}
	m.held = kept
	if m.genSeq == seq {
		m.genSeq = 0
	}
	for _, id := range slices.Clone(m.order) {
		mb := m.members[id]
		if !mb.joining || mb.joinSeq != seq {
			continue
		}
		mb.joinSeq = 0
		switch {
		case mb.joinStatic && m.state == Stable:
			// updateStaticMemberAndRebalance's storeGroup callback. Before KIP-814 (v9) the reply
			// names the previous leader, so that a replaced leader does not run the assignor.
			mb.joinStatic = false
			if mb.joinSkip {
				lead := id == m.leader
				m.reply(m.joinResult(mb.joinToken, id, m.leader, lead, lead))
			} else {
				m.reply(m.joinResult(mb.joinToken, id, mb.joinLeader, false, false))
			}
			mb.joining = false
			m.scheduleSession(mb)
		case !mb.joinStatic && m.state == CompletingRebalance:
			m.reply(m.joinResult(mb.joinToken, id, m.leader, id == m.leader, false))
			mb.joining = false
			m.scheduleSession(mb)
		}
	}
	if m.assignSeq == seq && m.state == CompletingRebalance {
		// setAndPropagateAssignment, then Stable.
		m.assignSeq = 0
		for _, id := range m.order {
			m.members[id].Assignment = m.proposed[id]
		}
		m.proposed = nil
		m.prevState, m.state = m.state, Stable
		m.log("group is stable", m.leader, "generation "+strconv.Itoa(int(m.generation)))
		for _, id := range m.order {
			mb := m.members[id]
			if mb.syncing {
				m.reply(SyncReply{Token: mb.syncToken, ProtocolType: m.protocolType, ProtocolName: m.protocolName, Assignment: mb.Assignment})
				mb.syncing = false
				m.scheduleSession(mb)
			}
		}
	}
}

// fence stops the machine: another bridge owns the group (Kafka's onGroupUnloaded answers
// parked requests with NOT_COORDINATOR).
func (m *Machine) fence(reason string) {
	m.abandon(ErrNotCoordinator)
	m.reset()
	m.state, m.fenced = Dead, true
	m.log("fenced", "", reason)
}

// abandon answers every parked request with err.
func (m *Machine) abandon(err ErrorCode) {
	for _, id := range m.order {
		mb := m.members[id]
		if mb.joining {
			m.reply(joinError(mb.joinToken, id, err))
			mb.joining = false
		}
		if mb.syncing {
			m.reply(SyncReply{Token: mb.syncToken, Err: err})
			mb.syncing = false
		}
		m.answerBeat(mb, err)
	}
	for _, h := range m.held {
		switch r := h.reply.(type) {
		case OffsetCommitReply:
			for i := range r.Partitions {
				r.Partitions[i].Err = err
			}
			m.reply(r)
		case DeleteReply:
			r.Err = err
			m.reply(r)
		}
	}
	m.held = nil
}

// restore loads the group from its record (Kafka's GroupMetadata.loadGroup and onGroupLoaded).
func (m *Machine) restore(ev Restore) {
	rec := ev.Record
	if err := rec.Validate(); err != nil {
		m.fence("cannot restore: " + err.Error())
		return
	}
	m.abandon(ErrNotCoordinator)
	m.reset()
	m.version = ev.Version
	if rec.Deleted {
		m.state = Dead
		m.log("restored a deleted group", "", "")
		return
	}
	m.generation = rec.Generation
	m.protocolType = rec.ProtocolType
	m.protocolName = rec.ProtocolName
	m.leader = rec.Leader
	for _, rm := range rec.Members {
		mb := &Member{
			ID:               rm.ID,
			InstanceID:       rm.InstanceID,
			Kind:             rm.Kind,
			ClientID:         rm.ClientID,
			ClientHost:       rm.ClientHost,
			SessionTimeout:   time.Duration(rm.SessionTimeoutMs) * time.Millisecond,
			RebalanceTimeout: time.Duration(rm.RebalanceTimeoutMs) * time.Millisecond,
			ProtocolType:     rm.ProtocolType,
			Assignment:       bytes.Clone(rm.Assignment),
		}
		for _, p := range rm.Protocols {
			mb.Protocols = append(mb.Protocols, Protocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
		}
		m.members[mb.ID] = mb
		m.order = append(m.order, mb.ID)
		if mb.isStatic() {
			m.static[mb.InstanceID] = mb.ID
		}
		m.scheduleSession(mb) // sessions restart at load time
	}
	if len(m.members) == 0 {
		m.state, m.leader, m.protocolName = Empty, "", ""
		m.log("restored an empty group", "", "generation "+strconv.Itoa(int(m.generation)))
		return
	}
	m.state = Stable
	m.log("restored", m.leader, "generation "+strconv.Itoa(int(m.generation)))
	switch {
	case rec.Rebalancing:
		m.prepareRebalance("restored in the middle of a rebalance")
	case m.cfg.MaxSize > 0 && len(m.members) > m.cfg.MaxSize:
		m.prepareRebalance("restored group is over group.max.size")
	}
}

// ---------------------------------------------------------------------------------------------
// Timers

type timerKind int8

const (
	timerMember timerKind = iota
	timerPending
	timerJoin
	timerSync
)

// nextTimer (timers.go) returns the earliest armed timer.

func (m *Machine) wakeAt() time.Time {
	if m.fenced {
		return time.Time{}
	}
	at, _, _ := m.nextTimer()
	return at
}

func (m *Machine) fireTimers() {
	if m.fenced {
		return
	}
	// Every firing disarms or moves its timer, so the loop ends; the bound is a safety net.
	for range 100000 {
		at, kind, id := m.nextTimer()
		if at.IsZero() || at.After(m.now) {
			return
		}
		switch kind {
		case timerMember:
			m.expireMember(m.members[id])
		case timerPending:
			delete(m.pending, id)
			m.log("pending member removed", id, "did not rejoin within its session timeout")
			m.tryCompleteJoin()
		case timerJoin:
			m.onJoinDeadline()
		case timerSync:
			m.onSyncDeadline()
		}
	}
}
