package group

import "time"

// Event is an input to Machine.Step: a request (it carries a Token and is answered by exactly one
// Reply, now or later), a timer (Tick), the outcome of a write (Persisted, PersistFailed), or a
// load (Restore).
type Event interface{ isEvent() }

// JoinGroup asks to join the group or to rejoin it (Kafka's JoinGroup, API key 11).
type JoinGroup struct {
	Token      Token
	MemberID   MemberID   // "" for a new member
	InstanceID InstanceID // "" for a dynamic member (KIP-345)
	ClientID   string
	ClientHost string
	// SessionTimeout must lie in [Config.MinSessionTimeout, Config.MaxSessionTimeout].
	SessionTimeout time.Duration
	// RebalanceTimeout bounds the join phase. JoinGroup v0 has none: zero means the session
	// timeout, as in Kafka.
	RebalanceTimeout time.Duration
	ProtocolType     string     // "consumer" for consumers
	Protocols        []Protocol // in preference order
	// RequireKnownMemberID: JoinGroup v4+ (KIP-394); a new dynamic member first gets
	// MEMBER_ID_REQUIRED with its member id and must rejoin with it.
	RequireKnownMemberID bool
	// SupportSkipAssignment: JoinGroup v9+ (KIP-814); a static leader that rejoins a Stable group
	// is told it is the leader but must not run the assignor.
	SupportSkipAssignment bool
	// NewMemberID is the id the engine gives the member if it needs one; the shell generates it
	// (Kafka uses clientId or group.instance.id, "-", a random UUID). Randomness is an input.
	NewMemberID MemberID
	Reason      string // KIP-800, for logs only
}

// SyncGroup fetches the member's assignment; the leader's carries everyone's (API key 14).
type SyncGroup struct {
	Token      Token
	MemberID   MemberID
	InstanceID InstanceID
	Generation Generation
	// ProtocolType and ProtocolName (SyncGroup v5+) must match the group's when set.
	ProtocolType *string
	ProtocolName *string
	// Assignments is the leader's assignment; followers send none.
	Assignments map[MemberID][]byte
}

// Heartbeat keeps the member's session alive (API key 12).
type Heartbeat struct {
	Token      Token
	MemberID   MemberID
	InstanceID InstanceID
	Generation Generation
	// Hold lets the machine hold the answer to a Stable member's heartbeat until the group
	// rebalances, the member goes or the shell releases it (heartbeat_hold.go). The shell sets
	// it only when it will send the ReleaseHeartbeat.
	Hold bool
}

// LeaveMember is one member of a LeaveGroup: by member id, or by instance id alone with an empty
// member id (administrative removal, KIP-345).
type LeaveMember struct {
	MemberID   MemberID
	InstanceID InstanceID
	Reason     string // KIP-800, for logs only
}

// LeaveGroup removes members (API key 13; v3+ carries a batch, KIP-345). Versions 0-2 are a
// batch of one.
type LeaveGroup struct {
	Token   Token
	Members []LeaveMember
}

// OffsetCommitPartition is one committed offset: the request's entry and the write effect.
type OffsetCommitPartition struct {
	Topic       string
	Partition   int32
	Offset      int64 // the next offset to consume
	LeaderEpoch int32 // -1 when unknown
	Metadata    string
}

// OffsetCommit commits offsets (API key 8). A member commits with its member id and generation;
// a client that does not use group management sends MemberID "" and Generation NoGeneration,
// which Kafka accepts only while the group is Empty.
//
// OffsetFetch has no event: Kafka answers it regardless of the group's state, so the shell reads
// the offsets from ZooKeeper directly. Offsets become visible when their write is done, which is
// also when their OffsetCommit is answered.
type OffsetCommit struct {
	Token      Token
	MemberID   MemberID
	InstanceID InstanceID
	Generation Generation
	Offsets    []OffsetCommitPartition
}

// Describe asks for the group's state and members (DescribeGroups, API key 15).
type Describe struct{ Token Token }

// Delete deletes the group; allowed only while it is Empty (DeleteGroups, API key 42).
type Delete struct{ Token Token }

// Tick tells the machine that time has passed; the shell steps it at or after Effects.WakeAt.
// Every Step first fires the timers due at its now, so Tick is only needed when nothing else
// happens.
type Tick struct{}

// Persisted reports that the write of the last Effects carrying Persist or Offsets is durable.
// Version is what the shell reports as the version of the group's record after the write; the
// engine only shows it in Describe.
type Persisted struct{ Version int64 }

// PersistFailed reports that the write failed. The engine treats it as a lost CAS (another bridge
// took the group over): it fences itself, answers every parked request with NOT_COORDINATOR and
// every later one too. The shell retries transient errors itself before reporting them.
type PersistFailed struct{ Err error }

// WriteFailed reports that the write failed without any sign that another bridge took the group
// over: ZooKeeper was slow or away past the shell's write timeout, or the connection dropped.
// Unlike PersistFailed the group stays: the requests that waited for the write are answered
// COORDINATOR_NOT_AVAILABLE (clients retry them), a new generation or assignment that was being
// written is abandoned with a rebalance (Kafka's doSyncGroup does the same when storing the group
// fails), and the next write goes out. The write may still have been applied; every later write
// of the session is applied after it, so nothing moves backwards.
type WriteFailed struct{ Err error }

// Restore loads the group from its Record after a bridge restart or a takeover, the way Kafka's
// coordinator loads a group from __consumer_offsets: every member comes back with its generation
// and assignment and its session restarts at the load time; the group is Stable (Empty without
// members). Members that are still alive carry on without a rebalance (they heartbeat and commit
// with the same member id and generation); the others expire after their session timeout, which
// starts a rebalance. Version is the record's znode version. Anything parked in the machine is
// answered NOT_COORDINATOR first.
type Restore struct {
	Record  Record
	Version int64
}

func (JoinGroup) isEvent()     {}
func (SyncGroup) isEvent()     {}
func (Heartbeat) isEvent()     {}
func (LeaveGroup) isEvent()    {}
func (OffsetCommit) isEvent()  {}
func (Describe) isEvent()      {}
func (Delete) isEvent()        {}
func (Tick) isEvent()          {}
func (Persisted) isEvent()     {}
func (PersistFailed) isEvent() {}
func (WriteFailed) isEvent()   {}
func (Restore) isEvent()       {}
