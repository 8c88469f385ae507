package newproto

// Heartbeat, key 12: versions 0-4.
//
// Version notes:
//   - v0: group, generation, member id; out: error. REBALANCE_IN_PROGRESS
//     tells a member to rejoin.
//   - v1: ThrottleMillis (always 0).
//   - v2: no change in the body (throttle after response, KIP-219).
//   - v3: group instance id (KIP-345): a heartbeat whose instance id maps
//     to another member id is FENCED_INSTANCE_ID.
//   - v4: flexible versions.

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.Heartbeat, 0, 4) }

// Heartbeat implements Coordinator.
func (gc *GroupCoordinator) Heartbeat(ctx context.Context, _ *Request, m *kmsg.HeartbeatRequest) (*kmsg.HeartbeatResponse, error) {
	if err := checkGroupID(m.Group); err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	ev := group.Heartbeat{
		MemberID:   group.MemberID(m.MemberID),
		InstanceID: group.InstanceID(optString(m.InstanceID)),
		Generation: group.Generation(m.Generation),
	}
	r, err := do[group.HeartbeatReply](ctx, gc.groups, m.Group, func(t group.Token) group.Event {
		ev.Token = t
		return ev
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat to group %q: %w", m.Group, err)
	}
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.SetVersion(m.Version)
	resp.ErrorCode = wireCode(r.Err)
	return resp, nil
}
