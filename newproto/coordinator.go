package newproto

// The group-coordinator APIs, routed to a Coordinator.
//
// Served ranges (each API's own NN_snake_name.go file registers its range
// with regKey and opens with its version notes; GroupCoordinator in
// groups.go implements Coordinator on the group engine):
//
//	key  api             versions  flexible from
//	  8  OffsetCommit    0-8       8
//	  9  OffsetFetch     0-10      6   (v8 batches groups, KIP-709; v10 topic ids)
//	 11  JoinGroup       0-9       6   (v4 MEMBER_ID_REQUIRED KIP-394, v5 static members KIP-345)
//	 12  Heartbeat       0-4       4
//	 13  LeaveGroup      0-5       4   (v3 batch leave of static members, KIP-345)
//	 14  SyncGroup       0-5       4
//	 15  DescribeGroups  0-5       5
//	 16  ListGroups      0-4       3   (v4 states filter, KIP-518)
//	 42  DeleteGroups    0-2       2
//	 47  OffsetDelete    0         -   (KIP-496)
//
// Not served: OffsetCommit v9+ (KIP-848 member epochs, topic ids),
// DescribeGroups v6 (error message), ListGroups v5 (type
// filter), DeleteGroups v3: they belong to the KIP-848 consumer protocol,
// which the bridge does not speak. A client sending them gets
// UNSUPPORTED_VERSION (unsupported.go).
//
// While Config.Coordinator is nil every group request is answered with
// COORDINATOR_NOT_AVAILABLE in the shape of its own response (top-level,
// per group or per partition, whichever the key has), which every client
// treats as retriable: it looks the coordinator up again and retries.

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Coordinator answers the group-coordinator APIs; the bridge's group-engine
// adapter implements it. newproto has already checked that the version is
// one we serve; the adapter reads the request at msg.Version and returns a
// response whose fields are valid at that version (newproto sets the
// response's version).
//
// Each method may block, for seconds if the protocol says so (JoinGroup
// and SyncGroup wait for the rebalance): it runs on its own goroutine, other
// requests on the same and other connections proceed, and responses still
// leave each connection in request order. ctx is cancelled when the
// client's connection closes or the server's drain deadline passes; the
// method must then return promptly.
//
// Errors: an error wrapping an ErrorCode (fmt.Errorf("...: %w",
// ErrNotCoordinator)) is answered as that code in the request's response
// shape; any other error is logged and answered COORDINATOR_NOT_AVAILABLE
// (retriable: the client looks the coordinator up again). After ctx is
// done the connection is gone and nothing is answered.
type Coordinator interface {
	JoinGroup(ctx context.Context, req *Request, msg *kmsg.JoinGroupRequest) (*kmsg.JoinGroupResponse, error)
	SyncGroup(ctx context.Context, req *Request, msg *kmsg.SyncGroupRequest) (*kmsg.SyncGroupResponse, error)
	Heartbeat(ctx context.Context, req *Request, msg *kmsg.HeartbeatRequest) (*kmsg.HeartbeatResponse, error)
	LeaveGroup(ctx context.Context, req *Request, msg *kmsg.LeaveGroupRequest) (*kmsg.LeaveGroupResponse, error)
	OffsetCommit(ctx context.Context, req *Request, msg *kmsg.OffsetCommitRequest) (*kmsg.OffsetCommitResponse, error)
	OffsetFetch(ctx context.Context, req *Request, msg *kmsg.OffsetFetchRequest) (*kmsg.OffsetFetchResponse, error)
	DescribeGroups(ctx context.Context, req *Request, msg *kmsg.DescribeGroupsRequest) (*kmsg.DescribeGroupsResponse, error)
	ListGroups(ctx context.Context, req *Request, msg *kmsg.ListGroupsRequest) (*kmsg.ListGroupsResponse, error)
	DeleteGroups(ctx context.Context, req *Request, msg *kmsg.DeleteGroupsRequest) (*kmsg.DeleteGroupsResponse, error)
	OffsetDelete(ctx context.Context, req *Request, msg *kmsg.OffsetDeleteRequest) (*kmsg.OffsetDeleteResponse, error)
}

// Availability is implemented by a Coordinator (or by the Groups under a
// GroupCoordinator) that knows when it can serve no group at all, such as
// the bridge while ZooKeeper is unreachable. FindCoordinator then answers
// COORDINATOR_NOT_AVAILABLE with Available's error as the message. It is
// called for every FindCoordinator and must be cheap.
type Availability interface {
	Available() error
}

// errNoResponse is a Coordinator that returned neither a response nor an
// error.
var errNoResponse = errors.New("coordinator returned no response and no error")

// group routes a group request to the Coordinator and translates its
// errors to the wire.
func (r *router) group(ctx context.Context, req *Request) (kmsg.Response, error) {
	if r.coord == nil {
		return r.errorAnswer(req, ErrCoordinatorNotAvailable, "")
	}
	var (
		resp kmsg.Response
		err  error
	)
	switch m := req.Msg.(type) {
	case *kmsg.JoinGroupRequest:
		resp, err = response(r.coord.JoinGroup(ctx, req, m))
	case *kmsg.SyncGroupRequest:
		resp, err = response(r.coord.SyncGroup(ctx, req, m))
	case *kmsg.HeartbeatRequest:
		resp, err = response(r.coord.Heartbeat(ctx, req, m))
	case *kmsg.LeaveGroupRequest:
		resp, err = response(r.coord.LeaveGroup(ctx, req, m))
	case *kmsg.OffsetCommitRequest:
		resp, err = response(r.coord.OffsetCommit(ctx, req, m))
	case *kmsg.OffsetFetchRequest:
		resp, err = response(r.coord.OffsetFetch(ctx, req, m))
	case *kmsg.DescribeGroupsRequest:
		resp, err = response(r.coord.DescribeGroups(ctx, req, m))
	case *kmsg.ListGroupsRequest:
		resp, err = response(r.coord.ListGroups(ctx, req, m))
	case *kmsg.DeleteGroupsRequest:
		resp, err = response(r.coord.DeleteGroups(ctx, req, m))
	case *kmsg.OffsetDeleteRequest:
		resp, err = response(r.coord.OffsetDelete(ctx, req, m))
	default:
		return nil, errors.New("newproto: " + kmsg.NameForKey(req.Msg.Key()) + " routed to the coordinator by mistake")
	}
	if err == nil && resp == nil {
		err = errNoResponse
	}
	if err == nil {
		return resp, nil
	}
	if ctx.Err() != nil {
		// The connection or the server is closing: there is no one
		// to answer.
		return nil, err
	}
	code, ok := codeOf(err)
	if !ok {
		r.log.Warn().Err(err).Str("api", kmsg.NameForKey(req.Msg.Key())).Uint64("conn", req.Conn.ID).
			Msg("coordinator failed; answering COORDINATOR_NOT_AVAILABLE")
		code = ErrCoordinatorNotAvailable
	}
	return r.errorAnswer(req, code, "")
}

// response turns a typed response into a kmsg.Response, keeping a nil
// pointer nil (a typed nil in an interface is not nil).
func response[T any, PT interface {
	*T
	kmsg.Response
}](p PT, err error) (kmsg.Response, error) {
	if p == nil {
		return nil, err
	}
	return p, err
}
