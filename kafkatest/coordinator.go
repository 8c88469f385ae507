package kafkatest

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// FuncCoordinator is a newproto.Coordinator that routes every method to
// Fn.
type FuncCoordinator struct {
	Fn func(ctx context.Context, req *newproto.Request) (kmsg.Response, error)
}

// as is r as a T, nil as the zero T.
func as[T kmsg.Response](r kmsg.Response) T {
	if r == nil {
		var zero T
		return zero
	}
	return r.(T)
}

func (f FuncCoordinator) JoinGroup(ctx context.Context, req *newproto.Request, _ *kmsg.JoinGroupRequest) (*kmsg.JoinGroupResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.JoinGroupResponse](r), err
}

func (f FuncCoordinator) SyncGroup(ctx context.Context, req *newproto.Request, _ *kmsg.SyncGroupRequest) (*kmsg.SyncGroupResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.SyncGroupResponse](r), err
}

func (f FuncCoordinator) Heartbeat(ctx context.Context, req *newproto.Request, _ *kmsg.HeartbeatRequest) (*kmsg.HeartbeatResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.HeartbeatResponse](r), err
}

func (f FuncCoordinator) LeaveGroup(ctx context.Context, req *newproto.Request, _ *kmsg.LeaveGroupRequest) (*kmsg.LeaveGroupResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.LeaveGroupResponse](r), err
}

func (f FuncCoordinator) OffsetCommit(ctx context.Context, req *newproto.Request, _ *kmsg.OffsetCommitRequest) (*kmsg.OffsetCommitResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.OffsetCommitResponse](r), err
}

func (f FuncCoordinator) OffsetFetch(ctx context.Context, req *newproto.Request, _ *kmsg.OffsetFetchRequest) (*kmsg.OffsetFetchResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.OffsetFetchResponse](r), err
}

func (f FuncCoordinator) DescribeGroups(ctx context.Context, req *newproto.Request, _ *kmsg.DescribeGroupsRequest) (*kmsg.DescribeGroupsResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.DescribeGroupsResponse](r), err
}

func (f FuncCoordinator) ListGroups(ctx context.Context, req *newproto.Request, _ *kmsg.ListGroupsRequest) (*kmsg.ListGroupsResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.ListGroupsResponse](r), err
}

func (f FuncCoordinator) DeleteGroups(ctx context.Context, req *newproto.Request, _ *kmsg.DeleteGroupsRequest) (*kmsg.DeleteGroupsResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.DeleteGroupsResponse](r), err
}

func (f FuncCoordinator) OffsetDelete(ctx context.Context, req *newproto.Request, _ *kmsg.OffsetDeleteRequest) (*kmsg.OffsetDeleteResponse, error) {
	r, err := f.Fn(ctx, req)
	return as[*kmsg.OffsetDeleteResponse](r), err
}
