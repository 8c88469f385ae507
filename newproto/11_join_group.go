package newproto

// JoinGroup, key 11: versions 0-9.
//
// Version notes:
//   - v0: group, session timeout, member id ("" for a new member), protocol
//     type and the member's protocols (name + metadata) in preference
//     order; out: error, generation, selected protocol, leader, the
//     member's id, and for the leader every member with its metadata. v0
//     has no rebalance timeout: the session timeout is used as one, as
//     Kafka's KafkaApis does.
//   - v1: rebalance timeout (KIP-62).
//   - v2: ThrottleMillis (always 0: the bridge does not throttle).
//   - v3: no change in the body (throttle after response, KIP-219).
//   - v4: a new dynamic member first gets MEMBER_ID_REQUIRED (79) with its
//     member id in the response and must join again with it (KIP-394):
//     RequireKnownMemberID is set from v4 on.
//   - v5: group instance id (static membership, KIP-345) in the request
//     and in the leader's member list.
//   - v6: flexible versions.
//   - v7: protocol type in the response (KIP-559); protocol name null
//     when there is none (before v7 it is "").
//   - v8: reason (KIP-800), passed to the engine for its logs.
//   - v9: no change in the request; the client understands SkipAssignment
//     (KIP-814): a static leader that rejoins a Stable group is told it is
//     the leader but must not run the assignor.
//
// New member ids are Kafka's: "<client id>-<uuid>" for a dynamic member,
// "<group.instance.id>-<uuid>" for a static one (GroupMetadata.
// generateMemberId). The client host is what Kafka reports: "/" and the
// client's IP.
//
// Not implemented: an empty (non-null) group.instance.id is treated as
// none (Kafka's clients refuse to send one); KIP-848's consumer protocol
// (ConsumerGroupHeartbeat) is not served.

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.JoinGroup, 0, 9) }

// JoinGroup implements Coordinator.
func (gc *GroupCoordinator) JoinGroup(ctx context.Context, req *Request, m *kmsg.JoinGroupRequest) (*kmsg.JoinGroupResponse, error) {
	if err := checkGroupID(m.Group); err != nil {
		return nil, fmt.Errorf("join group: %w", err)
	}
	ev := joinEvent(req, m)
	if ev.MemberID == "" || ev.InstanceID != "" {
		// A static member rejoining with its id may be given a new one: the engine takes its
		// first JoinGroup after a takeover as a restart of the instance (group/resume.go).
		ev.NewMemberID = gc.newMemberID(ev.ClientID, ev.InstanceID)
	}
	r, err := do[group.JoinReply](ctx, gc.groups, m.Group, func(t group.Token) group.Event {
		ev.Token = t
		return ev
	})
	if err != nil {
		return nil, fmt.Errorf("join group %q: %w", m.Group, err)
	}
	return joinResponse(m.Version, r), nil
}

// joinEvent translates the request; NewMemberID and Token are the
// caller's.
func joinEvent(req *Request, m *kmsg.JoinGroupRequest) group.JoinGroup {
	ev := group.JoinGroup{
		MemberID:              group.MemberID(m.MemberID),
		InstanceID:            group.InstanceID(optString(m.InstanceID)),
		ClientID:              req.ClientID,
		ClientHost:            clientHost(req.Conn.Remote),
		SessionTimeout:        millis(m.SessionTimeoutMillis),
		RebalanceTimeout:      millis(m.RebalanceTimeoutMillis),
		ProtocolType:          m.ProtocolType,
		Protocols:             make([]group.Protocol, len(m.Protocols)),
		RequireKnownMemberID:  m.Version >= 4,
		SupportSkipAssignment: m.Version >= 9,
		Reason:                optString(m.Reason),
	}
	if m.Version == 0 {
		ev.RebalanceTimeout = ev.SessionTimeout
	}
	for i, p := range m.Protocols {
		ev.Protocols[i] = group.Protocol{Name: p.Name, Metadata: p.Metadata}
	}
	return ev
}

func joinResponse(version int16, r group.JoinReply) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	resp.SetVersion(version)
	resp.ErrorCode = wireCode(r.Err)
	resp.Generation = int32(r.Generation)
	resp.ProtocolType = nilIfEmpty(r.ProtocolType) // v7+
	resp.Protocol = nilIfEmpty(r.ProtocolName)     // encoded as "" before v7
	resp.LeaderID = string(r.Leader)
	resp.SkipAssignment = r.SkipAssignment // v9+
	resp.MemberID = string(r.MemberID)
	for _, jm := range r.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID = string(jm.MemberID)
		rm.InstanceID = nilIfEmpty(string(jm.InstanceID)) // v5+
		rm.ProtocolMetadata = jm.Metadata
		resp.Members = append(resp.Members, rm)
	}
	return resp
}

// millis converts a wire timeout; negative values stay negative so that
// the engine rejects them.
func millis(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }
