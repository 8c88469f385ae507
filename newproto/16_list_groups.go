package newproto

// ListGroups, key 16: versions 0-4.
//
// Version notes:
//   - v0: no input; out: error and every group with its protocol type.
//   - v1: ThrottleMillis (always 0).
//   - v2: no change in the body (throttle after response, KIP-219).
//   - v3: flexible versions.
//   - v4: a states filter in the request and each group's state in the
//     response (KIP-518). The filter matches case-insensitively, as
//     Kafka's newer coordinator does; an empty filter lists every group.
//   - v5 (types filter, KIP-848): not served.
//
// The groups are those Groups.ListGroups knows, sorted by name so that the
// answer is deterministic. A failure of Groups fails the whole request
// (top-level error).
//
// Answered per node, as brokers do: a broker lists the groups it
// coordinates, and admin clients (kafkajs admin.listGroups, kadm, kcat -L
// through kafka-consumer-groups --list) ask every broker of the metadata
// and concatenate the answers. Every group's coordinator is the bridge's
// own node (10_find_coordinator.go), so its listeners list the groups and
// a proxy listener, which stands for an upstream broker, lists none:
// otherwise each group came back once per node (kafkajs listed every group
// four times through a bridge in front of three brokers).

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { regKey(kmsg.ListGroups, 0, 4) }

// ListGroups implements Coordinator.
func (gc *GroupCoordinator) ListGroups(ctx context.Context, req *Request, m *kmsg.ListGroupsRequest) (*kmsg.ListGroupsResponse, error) {
	if notCoordinatorNode(req) {
		resp := kmsg.NewPtrListGroupsResponse()
		resp.SetVersion(m.Version)
		return resp, nil
	}
	listed, err := gc.groups.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	states := make(map[string]bool, len(m.StatesFilter))
	if m.Version >= 4 {
		for _, s := range m.StatesFilter {
			states[strings.ToLower(s)] = true
		}
	}
	resp := kmsg.NewPtrListGroupsResponse()
	resp.SetVersion(m.Version)
	for _, l := range listed {
		if len(states) > 0 && !states[strings.ToLower(l.State)] {
			continue
		}
		g := kmsg.NewListGroupsResponseGroup()
		g.Group, g.ProtocolType, g.GroupState = l.Group, l.ProtocolType, l.State
		resp.Groups = append(resp.Groups, g)
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].Group < resp.Groups[j].Group })
	return resp, nil
}

// notCoordinatorNode reports a request on a proxy listener: that node stands
// for an upstream broker, which coordinates no group the bridge serves.
func notCoordinatorNode(req *Request) bool {
	if req == nil {
		return false
	}
	_, proxied := req.Conn.UpstreamBroker()
	return proxied
}
