package newproto_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// groupAPI describes one group-coordinator API for table-driven tests:
// a request with some items at a version, and the error codes of a
// response in the places that key carries them.
type groupAPI struct {
	key      kmsg.Key
	min, max int16
	request  func(v int16) kmsg.Request
	codes    func(resp kmsg.Response) []int16
}

var groupAPIs = []groupAPI{
	{kmsg.JoinGroup, 0, 9, func(v int16) kmsg.Request {
		r := kmsg.NewPtrJoinGroupRequest()
		r.Group, r.SessionTimeoutMillis, r.RebalanceTimeoutMillis, r.ProtocolType = "g", 10000, 30000, "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", []byte{0, 1}
		r.Protocols = append(r.Protocols, p)
		return r
	}, func(resp kmsg.Response) []int16 { return []int16{resp.(*kmsg.JoinGroupResponse).ErrorCode} }},

	{kmsg.SyncGroup, 0, 5, func(v int16) kmsg.Request {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.Generation, r.MemberID = "g", 1, "m"
		// Mandatory from v5 (KIP-559): without them the request is
		// INCONSISTENT_GROUP_PROTOCOL before any group is asked.
		r.ProtocolType, r.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		return r
	}, func(resp kmsg.Response) []int16 { return []int16{resp.(*kmsg.SyncGroupResponse).ErrorCode} }},

	{kmsg.Heartbeat, 0, 4, func(v int16) kmsg.Request {
		r := kmsg.NewPtrHeartbeatRequest()
		r.Group, r.Generation, r.MemberID = "g", 1, "m"
		return r
	}, func(resp kmsg.Response) []int16 { return []int16{resp.(*kmsg.HeartbeatResponse).ErrorCode} }},

	{kmsg.LeaveGroup, 0, 5, func(v int16) kmsg.Request {
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Group, r.MemberID = "g", "m"
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = "m"
		r.Members = append(r.Members, m)
		return r
	}, func(resp kmsg.Response) []int16 { return []int16{resp.(*kmsg.LeaveGroupResponse).ErrorCode} }},

	{kmsg.OffsetCommit, 0, 8, func(v int16) kmsg.Request {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Group, r.Generation, r.MemberID = "g", 1, "m"
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = "orders"
		for p := range int32(2) {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, 100+int64(p)
			t.Partitions = append(t.Partitions, rp)
		}
		r.Topics = append(r.Topics, t)
		return r
	}, func(resp kmsg.Response) []int16 {
		var codes []int16
		for _, t := range resp.(*kmsg.OffsetCommitResponse).Topics {
			for i, p := range t.Partitions {
				if t.Topic != "orders" || p.Partition != int32(i) {
					return []int16{-999} // shape lost the request's items
				}
				codes = append(codes, p.ErrorCode)
			}
		}
		return codes
	}},

	{kmsg.OffsetFetch, 0, 8, func(v int16) kmsg.Request {
		r := kmsg.NewPtrOffsetFetchRequest()
		if v >= 8 {
			g := kmsg.NewOffsetFetchRequestGroup()
			g.Group = "g"
			gt := kmsg.NewOffsetFetchRequestGroupTopic()
			gt.Topic, gt.Partitions = "orders", []int32{0, 1}
			g.Topics = append(g.Topics, gt)
			r.Groups = append(r.Groups, g)
			return r
		}
		r.Group = "g"
		t := kmsg.NewOffsetFetchRequestTopic()
		t.Topic, t.Partitions = "orders", []int32{0, 1}
		r.Topics = append(r.Topics, t)
		return r
	}, func(resp kmsg.Response) []int16 {
		r := resp.(*kmsg.OffsetFetchResponse)
		var codes []int16
		if r.Version >= 8 {
			for _, g := range r.Groups {
				codes = append(codes, g.ErrorCode)
			}
			return codes
		}
		if r.Version >= 2 {
			codes = append(codes, r.ErrorCode)
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
		return codes
	}},

	{kmsg.DescribeGroups, 0, 5, func(v int16) kmsg.Request {
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Groups = []string{"a", "b"}
		return r
	}, func(resp kmsg.Response) []int16 {
		var codes []int16
		for i, g := range resp.(*kmsg.DescribeGroupsResponse).Groups {
			if g.Group != []string{"a", "b"}[i] {
				return []int16{-999}
			}
			codes = append(codes, g.ErrorCode)
		}
		return codes
	}},

	{kmsg.ListGroups, 0, 4, func(v int16) kmsg.Request {
		return kmsg.NewPtrListGroupsRequest()
	}, func(resp kmsg.Response) []int16 { return []int16{resp.(*kmsg.ListGroupsResponse).ErrorCode} }},

	{kmsg.DeleteGroups, 0, 2, func(v int16) kmsg.Request {
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Groups = []string{"a", "b"}
		return r
	}, func(resp kmsg.Response) []int16 {
		var codes []int16
		for i, g := range resp.(*kmsg.DeleteGroupsResponse).Groups {
			if g.Group != []string{"a", "b"}[i] {
				return []int16{-999}
			}
			codes = append(codes, g.ErrorCode)
		}
		return codes
	}},
}

func allEqual(codes []int16, want int16) bool {
	for _, c := range codes {
		if c != want {
			return false
		}
	}
	return len(codes) > 0
}

// Without a Coordinator every group API at every version answers
// COORDINATOR_NOT_AVAILABLE wherever its response carries errors, so that
// clients look the coordinator up again and retry.
func TestGroupAPIsWithoutCoordinator(t *testing.T) {
	ts := startServer(t, newproto.Config{NodeID: 1})
	c := kafkatest.Dial(t, ts.addr)
	for _, api := range groupAPIs {
		for _, v := range kafkatest.Versions(api.min, api.max) {
			req := api.request(v)
			req.SetVersion(v)
			resp := c.RoundTrip(req)
			if codes := api.codes(resp); !allEqual(codes, int16(newproto.ErrCoordinatorNotAvailable)) {
				t.Errorf("%s v%d: error codes %v, want all COORDINATOR_NOT_AVAILABLE", kmsg.NameForKey(int16(api.key)), v, codes)
			}
		}
	}
}

// Every group API at every version reaches the Coordinator with its
// decoded request and header, and the Coordinator's response goes out at
// the request's version even when the Coordinator leaves the version unset.
func TestGroupAPIsRouteToCoordinator(t *testing.T) {
	type call struct {
		key, version int16
		clientID     string
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	coord := kafkatest.FuncCoordinator{Fn: func(_ context.Context, req *newproto.Request) (kmsg.Response, error) {
		mu.Lock()
		calls = append(calls, call{req.Msg.Key(), req.Msg.GetVersion(), req.ClientID})
		mu.Unlock()
		return kmsg.ResponseForKey(req.Msg.Key()), nil // version 0: the server fixes it
	}}
	ts := startServer(t, newproto.Config{Coordinator: coord})
	c := kafkatest.Dial(t, ts.addr)
	var want []call
	for _, api := range groupAPIs {
		for _, v := range kafkatest.Versions(api.min, api.max) {
			req := api.request(v)
			req.SetVersion(v)
			c.RoundTrip(req) // decodes at v and checks the bytes re-encode
			want = append(want, call{int16(api.key), v, "newproto-test"})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("coordinator calls\n got %v\nwant %v", calls, want)
	}
}

// A Coordinator error carrying an ErrorCode is answered with that code;
// any other error, or no response at all, is COORDINATOR_NOT_AVAILABLE.
func TestGroupAPIsCoordinatorErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want newproto.ErrorCode
	}{
		{"wrapped code", fmt.Errorf("group g is owned by bridge-2: %w", newproto.ErrNotCoordinator), newproto.ErrNotCoordinator},
		{"plain code", newproto.ErrRebalanceInProgress, newproto.ErrRebalanceInProgress},
		{"other error", errors.New("zookeeper: connection loss"), newproto.ErrCoordinatorNotAvailable},
		{"no response", nil, newproto.ErrCoordinatorNotAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := kafkatest.FuncCoordinator{Fn: func(context.Context, *newproto.Request) (kmsg.Response, error) { return nil, tc.err }}
			ts := startServer(t, newproto.Config{Coordinator: coord})
			c := kafkatest.Dial(t, ts.addr)
			for _, api := range groupAPIs {
				req := api.request(api.max)
				req.SetVersion(api.max)
				if codes := api.codes(c.RoundTrip(req)); !allEqual(codes, int16(tc.want)) {
					t.Errorf("%s: codes %v, want all %s", kmsg.NameForKey(int16(api.key)), codes, tc.want.Name())
				}
			}
		})
	}
}
