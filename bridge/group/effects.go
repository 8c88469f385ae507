package group

import "time"

// Effects is everything one Step asks of the shell:
//
//   - If Persist or Offsets is set (NeedsWrite), write them to ZooKeeper in one Multi that first
//     checks the group's epoch, then Step Persisted, or PersistFailed if the write failed. At
//     most one write is outstanding: the engine emits the next one only after the previous one
//     is reported, so the shell never queues writes.
//   - Send Replies, each to the connection its Token came from (per connection in request order).
//     They may go out at once, before or while the write runs: no reply depends on the write of
//     its own Effects. A reply that depends on a write (a new generation, an assignment, a
//     static member's new id, committed offsets, a deletion) is held inside the engine and comes
//     out of the Step that reports that write done: persist before reply, the rule raft's Ready
//     documents, kept by the engine so that the shell cannot break it.
//   - Arm the group's single timer for WakeAt (zero: disarm) and Step Tick when it fires.
type Effects struct {
	// Persist is the group's record to write; nil when it did not change.
	Persist *Record
	// Offsets are accepted offset commits to write in the same Multi as Persist.
	Offsets []OffsetCommitPartition
	// Replies answer requests now.
	Replies []Reply
	// Assign asks the shell for the generation's server-side assignment, to be stepped back as
	// ServerAssignment (server_assign.go); nil when none is needed.
	Assign *AssignRequest
	// WakeAt is the earliest time a timer of the group is due; zero when none is.
	WakeAt time.Time
	// Logs say what happened and why, for the shell's logger.
	Logs []LogEvent
	// Legacy are the legacy members' requests, drops, check and claim (legacy.go).
	Legacy LegacyEffects
}

// NeedsWrite reports whether the effects carry a write the shell must acknowledge.
func (e *Effects) NeedsWrite() bool { return e.Persist != nil || len(e.Offsets) > 0 }

// LogEvent is one line for the shell's structured logger.
type LogEvent struct {
	Msg    string
	Member MemberID // "" when not about one member
	Reason string   // why, when there is a why
	// Cause classifies Reason on the line that starts a rebalance ("preparing rebalance");
	// empty on every other line.
	Cause Cause
	// Legacy marks the lines about the legacy members (legacy.go), which their shell logs.
	Legacy bool
}

// Reply answers the request carrying the same Token.
type Reply interface {
	// RequestToken is the Token of the request this reply answers.
	RequestToken() Token
}

// JoinMember is one member as the leader's JoinGroup reply lists it.
type JoinMember struct {
	MemberID   MemberID
	InstanceID InstanceID
	Metadata   []byte // for the group's selected protocol
	// SessionTimeout is the member's: how long it may go on consuming without its coordinator.
	SessionTimeout time.Duration
}

// JoinReply answers a JoinGroup.
type JoinReply struct {
	Token        Token
	Err          ErrorCode
	MemberID     MemberID   // the member's id; with ErrMemberIDRequired, the id to rejoin with
	Generation   Generation // NoGeneration on error
	ProtocolType string     // "" when none
	ProtocolName string     // "" when none
	Leader       MemberID
	// SkipAssignment: the receiver is the leader of a Stable group and must not run the
	// assignor (JoinGroup v9+, KIP-814).
	SkipAssignment bool
	// Members is set for the leader only: every member with its metadata.
	Members []JoinMember
}

// SyncReply answers a SyncGroup.
type SyncReply struct {
	Token        Token
	Err          ErrorCode
	ProtocolType string
	ProtocolName string
	Assignment   []byte
}

// HeartbeatReply answers a Heartbeat.
type HeartbeatReply struct {
	Token Token
	Err   ErrorCode
}

// LeaveMemberResult is the outcome for one member of a LeaveGroup.
type LeaveMemberResult struct {
	MemberID   MemberID
	InstanceID InstanceID
	Err        ErrorCode
}

// LeaveReply answers a LeaveGroup: Err for the whole request, Members one by one.
type LeaveReply struct {
	Token   Token
	Err     ErrorCode
	Members []LeaveMemberResult
}

// OffsetCommitResult is the outcome for one partition of an OffsetCommit.
type OffsetCommitResult struct {
	Topic     string
	Partition int32
	Err       ErrorCode
}

// OffsetCommitReply answers an OffsetCommit, partition by partition, in request order.
type OffsetCommitReply struct {
	Token      Token
	Partitions []OffsetCommitResult
}

// MemberDescription is one member as Describe shows it.
type MemberDescription struct {
	MemberID   MemberID
	InstanceID InstanceID
	Kind       Kind
	ClientID   string
	ClientHost string
	// Metadata and Assignment are set only while the group is Stable, as Kafka's
	// GroupMetadata.summary does.
	Metadata   []byte
	Assignment []byte
}

// Description is the group as Describe shows it.
type Description struct {
	Group        string
	State        State
	ProtocolType string
	ProtocolName string // set only while Stable, as in Kafka's DescribeGroups
	Generation   Generation
	Leader       MemberID
	Members      []MemberDescription
	Version      int64 // of the record znode, as last persisted or restored
}

// DescribeReply answers a Describe.
type DescribeReply struct {
	Token Token
	Err   ErrorCode
	Group Description
}

// DeleteReply answers a Delete.
type DeleteReply struct {
	Token Token
	Err   ErrorCode
}

// RequestToken implements Reply.
func (r JoinReply) RequestToken() Token { return r.Token }

// RequestToken implements Reply.
func (r SyncReply) RequestToken() Token { return r.Token }

// RequestToken implements Reply.
func (r HeartbeatReply) RequestToken() Token { return r.Token }

// RequestToken implements Reply.
func (r LeaveReply) RequestToken() Token { return r.Token }

// RequestToken implements Reply.
func (r OffsetCommitReply) RequestToken() Token { return r.Token }

// RequestToken implements Reply.
func (r DescribeReply) RequestToken() Token { return r.Token }

// RequestToken implements Reply.
func (r DeleteReply) RequestToken() Token { return r.Token }
