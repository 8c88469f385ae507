package group

import (
	"bytes"
	"time"
)

// MemberID names a member within its group (Kafka's member.id). The shell generates it and hands
// it in (JoinGroup.NewMemberID) so that the engine stays deterministic.
type MemberID string

// InstanceID is a static member's group.instance.id (KIP-345). The empty InstanceID means a
// dynamic member: Kafka rejects an empty group.instance.id (JoinGroupRequest.validateGroupInstanceId),
// so the shell maps a null one to "".
type InstanceID string

// Generation is the group's generation id. It starts at 0 for a new group and increases by one
// every time a join phase completes.
type Generation int32

// NoGeneration is the generation error replies carry and the one simple (non-member) offset
// commits send (Kafka's GroupCoordinator.NoGeneration, OffsetCommitRequest.DEFAULT_GENERATION_ID).
const NoGeneration Generation = -1

// Token identifies one request; the shell chooses it and the engine returns it, unchanged, in
// the reply that answers the request.
type Token uint64

// Kind says how a member talks to the bridge. The engine holds Kafka members (JoinGroup,
// SyncGroup, persisted in the group's Record) and legacy members (seed 001's coordinator-driven
// protocol, legacy.go: not persisted, they register again); zk members (0.8 consumers)
// rebalance themselves through ZooKeeper. In a mixed group all three follow one 0.8.2
// assignment (server_assign.go, bridge/ownership).
type Kind string

// Member kinds.
const (
	KindKafka  Kind = "kafka"
	KindLegacy Kind = "legacy"
)

// Protocol is one (name, metadata) pair of a JoinGroup, in the member's order of preference.
// For consumers the name is the assignor ("range") and the metadata the encoded subscription.
type Protocol struct {
	Name     string
	Metadata []byte
}

// Member is one member of a group as the engine keeps it. The exported fields are its data (what
// a Record stores); the unexported ones are its place in the current rebalance.
type Member struct {
	ID               MemberID
	InstanceID       InstanceID // "" for a dynamic member
	Kind             Kind
	ClientID         string
	ClientHost       string
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	ProtocolType     string
	Protocols        []Protocol // in preference order
	Assignment       []byte     // this generation's assignment (empty until the leader's SyncGroup is persisted)

	// joining: the member's parked JoinGroup (Kafka's awaitingJoinCallback).
	joining   bool
	joinToken Token
	// joinSeq != 0: the parked JoinGroup is answered once write joinSeq is persisted: either the
	// new generation's reply (persist before reply), or, with joinStatic, the reply to a static
	// member that replaced its old member id in a Stable group (Kafka's storeGroup callback in
	// updateStaticMemberAndRebalance), which names joinLeader as leader unless joinSkip (KIP-814).
	joinSeq    uint64
	joinStatic bool
	joinLeader MemberID
	joinSkip   bool
	// syncing: the member's parked SyncGroup (Kafka's awaitingSyncCallback).
	syncing   bool
	syncToken Token
	// beatParked: the member's held Heartbeat (heartbeat_hold.go).
	beatParked bool
	beatToken  Token
	// isNew: added in the current join phase and not yet through it; such a member expires
	// after Config.NewMemberJoinTimeout even while it waits (Kafka's MemberMetadata.isNew).
	isNew bool
	// resuming: restored with the group and not heard from since (resume.go).
	resuming bool
	// deadline: when the member's session (or new-member join timeout) ends; zero when no
	// expiration is scheduled (Kafka's DelayedHeartbeat).
	deadline time.Time
}

// isStatic reports whether the member has a group.instance.id.
func (mb *Member) isStatic() bool { return mb.InstanceID != "" }

// matches reports whether protocols equal the member's, names and metadata, in order
// (Kafka's MemberMetadata.matches).
func (mb *Member) matches(protocols []Protocol) bool {
	if len(protocols) != len(mb.Protocols) {
		return false
	}
	for i, p := range protocols {
		if p.Name != mb.Protocols[i].Name || !bytes.Equal(p.Metadata, mb.Protocols[i].Metadata) {
			return false
		}
	}
	return true
}

// metadata returns the member's metadata for protocol name.
func (mb *Member) metadata(name string) []byte {
	for _, p := range mb.Protocols {
		if p.Name == name {
			return p.Metadata
		}
	}
	return nil
}

// supports reports whether the member lists protocol name.
func (mb *Member) supports(name string) bool {
	for _, p := range mb.Protocols {
		if p.Name == name {
			return true
		}
	}
	return false
}

// vote returns the member's most preferred protocol among candidates (Kafka's MemberMetadata.vote).
func (mb *Member) vote(candidates map[string]bool) string {
	for _, p := range mb.Protocols {
		if candidates[p.Name] {
			return p.Name
		}
	}
	return ""
}

func cloneProtocols(ps []Protocol) []Protocol {
	if ps == nil {
		return nil
	}
	out := make([]Protocol, len(ps))
	for i, p := range ps {
		out[i] = Protocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)}
	}
	return out
}

// Members returns the number of members of the group.
func (m *Machine) Members() int { return len(m.members) }
