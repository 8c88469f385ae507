package newproto

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/authz"
)

type denyAll struct{}

func (denyAll) Authorize(string, string, authz.Operation, authz.Resource) bool { return false }

type allowGroups struct{}

func (allowGroups) Authorize(_, _ string, _ authz.Operation, r authz.Resource) bool {
	return r.Type == authz.Group
}

func guarded(t *testing.T, a Authorizer) *router {
	t.Helper()
	g, err := newGuard(a, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return &router{guard: g, log: zerolog.Nop()}
}

func request(msg kmsg.Request) *Request {
	return &Request{Msg: msg, Conn: ConnInfo{Remote: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}, Principal: "User:alice"}}
}

// OffsetDelete (once routed) needs Group DELETE and Topic READ, as Kafka's
// handleOffsetDeleteRequest; a denied request never reaches the coordinator
// (the router has none here: reaching it would fail).
func TestOffsetDeleteAuthorization(t *testing.T) {
	m := kmsg.NewPtrOffsetDeleteRequest()
	m.Group = "g"
	rt := kmsg.NewOffsetDeleteRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewOffsetDeleteRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	m.Topics = append(m.Topics, rt)

	resp, err := guarded(t, denyAll{}).checkedGroup(context.Background(), request(m))
	if err != nil || resp.(*kmsg.OffsetDeleteResponse).ErrorCode != int16(ErrGroupAuthorizationFailed) {
		t.Fatalf("group denied: %v %+v", err, resp)
	}
	resp, err = guarded(t, allowGroups{}).checkedGroup(context.Background(), request(m))
	if err != nil {
		t.Fatal(err)
	}
	od := resp.(*kmsg.OffsetDeleteResponse)
	if od.ErrorCode != 0 || od.Topics[0].Partitions[0].ErrorCode != int16(ErrTopicAuthorizationFailed) {
		t.Fatalf("topic denied: %+v", od)
	}
}

// A group API without a rule is denied, not let through.
func TestAuthorizationFailsClosed(t *testing.T) {
	m := kmsg.NewPtrTxnOffsetCommitRequest()
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "t"
	rt.Partitions = append(rt.Partitions, kmsg.NewTxnOffsetCommitRequestTopicPartition())
	m.Topics = append(m.Topics, rt)
	// Let through, it would reach the (absent) coordinator: COORDINATOR_NOT_AVAILABLE. Denied,
	// it is answered GROUP_AUTHORIZATION_FAILED, or the connection is closed where the
	// response has no field for it.
	_, err := guarded(t, allowGroups{}).checkedGroup(context.Background(), request(m))
	if err == nil || !strings.Contains(err.Error(), "GROUP_AUTHORIZATION_FAILED") {
		t.Fatalf("an API without a rule: %v, want a GROUP_AUTHORIZATION_FAILED refusal", err)
	}
}
