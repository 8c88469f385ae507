package newproto

// LeaveGroup, key 13: versions 0-5.
//
// Version notes:
//   - v0: group and one member id; out: error.
//   - v1: ThrottleMillis (always 0).
//   - v2: no change in the body (throttle after response, KIP-219).
//   - v3: a batch of members, each by member id and/or group instance id
//     (KIP-345), with an error per member in the response; a member given
//     by instance id alone (empty member id) is removed administratively
//     (kafka-consumer-groups --delete-members). The engine rebalances at
//     most once for the whole batch.
//   - v4: flexible versions.
//   - v5: a reason per member (KIP-800), passed to the engine for its logs.
//
// Before v3 the response has only the top-level error: as Kafka's
// LeaveGroupResponse does for those versions, it is the request's error,
// else the member's.

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.LeaveGroup, 0, 5) }

// LeaveGroup implements Coordinator.
func (gc *GroupCoordinator) LeaveGroup(ctx context.Context, _ *Request, m *kmsg.LeaveGroupRequest) (*kmsg.LeaveGroupResponse, error) {
	if err := checkGroupID(m.Group); err != nil {
		return nil, fmt.Errorf("leave group: %w", err)
	}
	ev := leaveEvent(m)
	r, err := do[group.LeaveReply](ctx, gc.groups, m.Group, func(t group.Token) group.Event {
		ev.Token = t
		return ev
	})
	if err != nil {
		return nil, fmt.Errorf("leave group %q: %w", m.Group, err)
	}
	return leaveResponse(m.Version, r), nil
}

// leaveEvent translates the request; Token is the caller's.
func leaveEvent(m *kmsg.LeaveGroupRequest) group.LeaveGroup {
	if m.Version < 3 {
		return group.LeaveGroup{Members: []group.LeaveMember{{MemberID: group.MemberID(m.MemberID)}}}
	}
	ev := group.LeaveGroup{Members: make([]group.LeaveMember, len(m.Members))}
	for i, lm := range m.Members {
		ev.Members[i] = group.LeaveMember{
			MemberID:   group.MemberID(lm.MemberID),
			InstanceID: group.InstanceID(optString(lm.InstanceID)),
			Reason:     optString(lm.Reason),
		}
	}
	return ev
}

func leaveResponse(version int16, r group.LeaveReply) *kmsg.LeaveGroupResponse {
	resp := kmsg.NewPtrLeaveGroupResponse()
	resp.SetVersion(version)
	resp.ErrorCode = wireCode(r.Err)
	if version < 3 {
		// LeaveGroupResponse.getError: the top-level error, else the
		// first member error.
		for _, res := range r.Members {
			if resp.ErrorCode == 0 {
				resp.ErrorCode = wireCode(res.Err)
			}
		}
		return resp
	}
	for _, res := range r.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID = string(res.MemberID)
		rm.InstanceID = nilIfEmpty(string(res.InstanceID))
		rm.ErrorCode = wireCode(res.Err)
		resp.Members = append(resp.Members, rm)
	}
	return resp
}
