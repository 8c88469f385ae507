package newproto

// SyncGroup, key 14: versions 0-5.
//
// Version notes:
//   - v0: group, generation, member id and, from the leader, every
//     member's assignment; out: error and the member's assignment.
//   - v1: ThrottleMillis (always 0).
//   - v2: no change in the body (throttle after response, KIP-219).
//   - v3: group instance id (KIP-345): a request whose instance id maps to
//     another member id is FENCED_INSTANCE_ID.
//   - v4: flexible versions.
//   - v5: protocol type and name in the request, checked against the
//     group's, and echoed in the response (KIP-559). Both are mandatory at
//     v5: a request missing either is INCONSISTENT_GROUP_PROTOCOL, as
//     Kafka's KafkaApis answers it (areMandatoryProtocolTypeAndNamePresent).
//
// The leader's assignments are passed on as they are; an assignment listed
// twice for one member keeps the last, as Kafka's toMap does. The engine
// holds every SyncGroup until the leader's assignment is written to
// ZooKeeper (persist before reply).

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.SyncGroup, 0, 5) }

// SyncGroup implements Coordinator.
func (gc *GroupCoordinator) SyncGroup(ctx context.Context, _ *Request, m *kmsg.SyncGroupRequest) (*kmsg.SyncGroupResponse, error) {
	if err := checkGroupID(m.Group); err != nil {
		return nil, fmt.Errorf("sync group: %w", err)
	}
	if m.Version >= 5 && (m.ProtocolType == nil || m.Protocol == nil) {
		resp := kmsg.NewPtrSyncGroupResponse()
		resp.SetVersion(m.Version)
		resp.ErrorCode = int16(ErrInconsistentGroupProtocol)
		return resp, nil
	}
	ev := syncEvent(m)
	r, err := do[group.SyncReply](ctx, gc.groups, m.Group, func(t group.Token) group.Event {
		ev.Token = t
		return ev
	})
	if err != nil {
		return nil, fmt.Errorf("sync group %q: %w", m.Group, err)
	}
	return syncResponse(m.Version, r), nil
}

// syncEvent translates the request; Token is the caller's.
func syncEvent(m *kmsg.SyncGroupRequest) group.SyncGroup {
	ev := group.SyncGroup{
		MemberID:   group.MemberID(m.MemberID),
		InstanceID: group.InstanceID(optString(m.InstanceID)),
		Generation: group.Generation(m.Generation),
	}
	if m.Version >= 5 {
		ev.ProtocolType, ev.ProtocolName = m.ProtocolType, m.Protocol
	}
	if len(m.GroupAssignment) > 0 {
		ev.Assignments = make(map[group.MemberID][]byte, len(m.GroupAssignment))
		for _, a := range m.GroupAssignment {
			ev.Assignments[group.MemberID(a.MemberID)] = a.MemberAssignment
		}
	}
	return ev
}

func syncResponse(version int16, r group.SyncReply) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	resp.SetVersion(version)
	resp.ErrorCode = wireCode(r.Err)
	resp.ProtocolType = nilIfEmpty(r.ProtocolType) // v5+
	resp.Protocol = nilIfEmpty(r.ProtocolName)     // v5+
	resp.MemberAssignment = r.Assignment
	return resp
}
