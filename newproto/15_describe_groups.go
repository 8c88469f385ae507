package newproto

// DescribeGroups, key 15: versions 0-5.
//
// Version notes:
//   - v0: group ids in; per group: error, state, protocol type, protocol,
//     and members (member id, client id, client host, metadata,
//     assignment).
//   - v1: ThrottleMillis (always 0).
//   - v2: no change in the body (throttle after response, KIP-219).
//   - v3: IncludeAuthorizedOperations in the request, authorized operations
//     per group in the response (KIP-430). The bridge has no ACLs: always
//     INT32_MIN, Kafka's "not provided", even when asked for.
//   - v4: group instance id per member (KIP-345).
//   - v5: flexible versions.
//   - v6 (error message, KIP-1043): not served.
//
// Each group is one Describe through Groups.Do; the groups of a request
// are asked concurrently and answered in request order, each with its own
// error, so a group owned by another bridge (NOT_COORDINATOR) does not
// fail the others. A group the bridge does not know (GROUP_ID_NOT_FOUND,
// as a reply or as an error) is state "Dead" with no error, as Kafka
// describes a group it has no metadata for (GroupCoordinator.DeadGroup). A
// group that fails gets Kafka's empty summary: state "", no members.
//
// Answered per node, as brokers do: on a proxy listener (a node that stands
// for an upstream broker, not the groups' coordinator) every group is
// NOT_COORDINATOR, which sends an admin client to FindCoordinator's answer.
//
// The protocol, the members' metadata and their assignments are set only
// while the group is Stable (the engine's Describe, Kafka's
// GroupMetadata.summary).

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.DescribeGroups, 0, 5) }

// authorizedOperationsNotProvided is Kafka's Integer.MIN_VALUE for
// "authorized operations were not computed".
const authorizedOperationsNotProvided = math.MinInt32

// DescribeGroups implements Coordinator.
func (gc *GroupCoordinator) DescribeGroups(ctx context.Context, req *Request, m *kmsg.DescribeGroupsRequest) (*kmsg.DescribeGroupsResponse, error) {
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.SetVersion(m.Version)
	resp.Groups = make([]kmsg.DescribeGroupsResponseGroup, len(m.Groups))
	if notCoordinatorNode(req) {
		for i, name := range m.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode, rg.AuthorizedOperations = name, int16(ErrNotCoordinator), authorizedOperationsNotProvided
			resp.Groups[i] = rg
		}
		return resp, nil
	}
	gc.eachGroup(len(m.Groups), func(i int) {
		resp.Groups[i] = gc.describe(ctx, m.Groups[i])
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("describe groups: %w", err)
	}
	return resp, nil
}

func (gc *GroupCoordinator) describe(ctx context.Context, name string) kmsg.DescribeGroupsResponseGroup {
	rg := kmsg.NewDescribeGroupsResponseGroup()
	rg.Group = name
	rg.AuthorizedOperations = authorizedOperationsNotProvided
	if err := checkGroupID(name); err != nil {
		rg.ErrorCode = int16(ErrInvalidGroupID)
		return rg
	}
	r, err := do[group.DescribeReply](ctx, gc.groups, name, func(t group.Token) group.Event {
		return group.Describe{Token: t}
	})
	switch {
	case err != nil && errors.Is(err, ErrGroupIDNotFound), err == nil && r.Err == group.ErrGroupIDNotFound:
		rg.State = group.Dead.String()
		return rg
	case err != nil:
		if ctx.Err() == nil {
			rg.ErrorCode = gc.errorCode(fmt.Errorf("describing group %q: %w", name, err), kmsg.DescribeGroups, name)
		}
		return rg
	case r.Err != group.ErrNone:
		rg.ErrorCode = wireCode(r.Err)
		return rg
	}
	d := r.Group
	rg.State = d.State.String()
	rg.ProtocolType = d.ProtocolType
	rg.Protocol = d.ProtocolName
	for _, md := range d.Members {
		rm := kmsg.NewDescribeGroupsResponseGroupMember()
		rm.MemberID = string(md.MemberID)
		rm.InstanceID = nilIfEmpty(string(md.InstanceID)) // v4+
		rm.ClientID = md.ClientID
		rm.ClientHost = md.ClientHost
		rm.ProtocolMetadata = md.Metadata
		rm.MemberAssignment = md.Assignment
		rg.Members = append(rg.Members, rm)
	}
	return rg
}
