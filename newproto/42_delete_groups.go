package newproto

// DeleteGroups, key 42: versions 0-2.
//
// Version notes:
//   - v0: group ids in, an error per group out (KIP-229).
//   - v1: no change in the body (throttle after response, KIP-219).
//   - v2: flexible versions.
//   - v3+ (error message): not served.
//
// Each group is one Delete through Groups.Do, asked concurrently and
// answered in request order with its own error: only an Empty group can be
// deleted (NON_EMPTY_GROUP otherwise), a group the bridge does not know is
// GROUP_ID_NOT_FOUND, and a group owned by another bridge is
// NOT_COORDINATOR. Deleting a group deletes its offsets too; that is the
// Groups owner's write (the engine's Record.Deleted).

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.DeleteGroups, 0, 2) }

// DeleteGroups implements Coordinator.
func (gc *GroupCoordinator) DeleteGroups(ctx context.Context, _ *Request, m *kmsg.DeleteGroupsRequest) (*kmsg.DeleteGroupsResponse, error) {
	resp := kmsg.NewPtrDeleteGroupsResponse()
	resp.SetVersion(m.Version)
	resp.Groups = make([]kmsg.DeleteGroupsResponseGroup, len(m.Groups))
	gc.eachGroup(len(m.Groups), func(i int) {
		name := m.Groups[i]
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = name
		rg.ErrorCode = gc.deleteGroup(ctx, name)
		resp.Groups[i] = rg
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("delete groups: %w", err)
	}
	return resp, nil
}

func (gc *GroupCoordinator) deleteGroup(ctx context.Context, name string) int16 {
	if err := checkGroupID(name); err != nil {
		return int16(ErrInvalidGroupID)
	}
	r, err := do[group.DeleteReply](ctx, gc.groups, name, func(t group.Token) group.Event {
		return group.Delete{Token: t}
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0 // not written: the caller returns ctx's error
		}
		return gc.errorCode(fmt.Errorf("deleting group %q: %w", name, err), kmsg.DeleteGroups, name)
	}
	return wireCode(r.Err)
}
