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

	serverAssign bool       // server_assign.go
	jt           jointState // joint.go

	inflightRecord bool // the write in flight carries the record (write_failed.go)

	legacy legacyState // the legacy members and their rebalance (legacy.go)

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
	m.jt.held, m.jt.claim = false, 0 // the generation that waited is gone
}

// ResetKafka forgets the group's Kafka members as a machine made by New would not know them:
// members, generation, protocol, the write in flight and the writes queued, the replies held
// for them, the server-assignment mode, the record's version. The shell calls it when it stops
// serving the group's Kafka members (a fence, an idle unload, a handover, a reload) while the
// group's legacy members carry on: their members, their rebalance and their timers are kept, and
// the time does not run back. Nothing is answered: the shell answers the Kafka requests it still
// holds itself (NOT_COORDINATOR), and a Persisted for the abandoned write is ignored. It returns
// when the machine must be stepped next (the legacy members' timers), like Effects.WakeAt.
func (m *Machine) ResetKafka() time.Time {
	m.reset()
	m.timers = timerQueue{}
	m.idSeq = 0
	m.version = 0
	m.serverAssign = false
	m.jt = jointState{}
	m.inflightRecord = false
	return m.wakeAt()
}

// ResetLegacy forgets the group's legacy members and their rebalance (its claims' numbers go on,
// so that a report on an earlier claim is not taken for a later one's). The shell calls it when
// it stops serving the group's legacy members while its Kafka members carry on; the Kafka part is
// kept. It returns when the machine must be stepped next, like Effects.WakeAt.
func (m *Machine) ResetLegacy() time.Time {
	m.legacy = legacyState{claims: m.legacy.claims}
	return m.wakeAt()
}

// Config returns the machine's configuration.
func (m *Machine) Config() Config { return m.cfg }

// Configure replaces the machine's configuration: the shell of a mixed group sets each kind's
// part when that kind's side starts serving the group (the part of a kind with no member). What
// is armed keeps its time. cfg must pass Validate; Configure panics otherwise, as New does.
func (m *Machine) Configure(cfg Config) {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m.cfg = cfg
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
	if lev, ok := ev.(legacyEvent); ok {
		m.stepLegacy(lev)
	} else {
		switch {
		case m.fenced:
			m.stepFenced(ev)
		case m.state == Dead:
			m.stepDead(ev)
		default:
			m.stepLive(ev)
		}
	}
	m.fireTimers() // timers armed with no delay (e.g. InitialRebalanceDelay 0)
	m.flushWrite()
	m.advanceLegacy()
	m.releaseHeld() // joint.go
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

func (m *Machine) legacyLog(msg string, id MemberID, reason string) {
	m.fx.Logs = append(m.fx.Logs, LogEvent{Msg: msg, Member: id, Reason: reason, Legacy: true})
}

func errString(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
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
	at := m.legacyWakeAt()
	if m.kafkaAwaitsJointClaim() && !m.legacyComing() {
		return m.now // the legacy side ended (ResetLegacy): the held generation asks alone
	}
	if m.fenced {
		return at
	}
	if k, _, _ := m.nextTimer(); !k.IsZero() && (at.IsZero() || k.Before(at)) {
		at = k
	}
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
