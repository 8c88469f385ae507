package newproto

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// router is the built-in Handler: it answers the APIs in the ApiVersions
// table, one file per api key, and everything else as unsupported.go says.
// Central dispatch by key, as kfake's cluster.go does.
type router struct {
	nodeID    int32
	host      string // advertised; "" means the address the client dialed
	port      int32  // advertised; 0 means the port the client dialed
	clusterID string
	cluster   Cluster       // nil: no brokers but ours, no topics
	coord     Coordinator   // nil: group APIs answer COORDINATOR_NOT_AVAILABLE
	peers     Peers         // nil: no other bridge (peers.go)
	hold      time.Duration // longest FindCoordinator hold for a dead peer (peers.go); <= 0: none
	log       zerolog.Logger
	srv       *Server // nil in unit tests; gives the bootstrap port to proxy listeners' clients

	topics topicCache // Metadata's per-topic answers (03_metadata.go)
	guard  *guard     // nil: no authorizer (authorize.go)
}

// Handle implements Handler.
func (r *router) Handle(ctx context.Context, req *Request) (kmsg.Response, error) {
	if m, ok := req.Msg.(*kmsg.ApiVersionsRequest); ok {
		// Answers unsupported versions itself (KIP-511).
		return r.apiVersions(ctx, m), nil
	}
	if !supports(req.Msg.Key(), req.Msg.GetVersion()) {
		return r.unsupported(req)
	}
	switch m := req.Msg.(type) {
	case *kmsg.MetadataRequest:
		return r.metadata(ctx, req, m)
	case *kmsg.FindCoordinatorRequest:
		return r.checkedFindCoordinator(ctx, req, m), nil // authorize.go
	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest, *kmsg.HeartbeatRequest,
		*kmsg.LeaveGroupRequest, *kmsg.OffsetCommitRequest, *kmsg.OffsetFetchRequest,
		*kmsg.DescribeGroupsRequest, *kmsg.ListGroupsRequest, *kmsg.DeleteGroupsRequest,
		*kmsg.OffsetDeleteRequest:
		return r.checkedGroup(ctx, req) // authorize.go
	}
	// A key registered with regKey but not routed above; a test checks
	// that every registered key has a route.
	return nil, fmt.Errorf("%s: %w", kmsg.NameForKey(req.Msg.Key()), errNoRoute)
}

var errNoRoute = errors.New("newproto: api key in the version table has no route")

// self is the bridge's own node as Metadata and FindCoordinator advertise
// it. Without a configured advertised address it is the address the client
// dialed, which is right whenever clients reach the bridge directly;
// except that a client on a proxy listener (ServeBroker) dialed an upstream
// broker's stand-in, so the port is the bootstrap listener's.
func (r *router) self(req *Request) Broker {
	var bootstrapPort func() int32
	if req.Conn.role.proxied && r.srv != nil {
		bootstrapPort = r.srv.bootstrapPort
	}
	return advertisedNode(r.nodeID, r.host, r.port, req.Conn.Local, bootstrapPort)
}

// advertisedNode fills what is not configured of a node's address from the
// address the client dialed (local), taking the port from bootstrapPort
// when it is set and knows one.
func advertisedNode(nodeID int32, host string, port int32, local net.Addr, bootstrapPort func() int32) Broker {
	b := Broker{NodeID: nodeID, Host: host, Port: port}
	if b.Host != "" && b.Port != 0 {
		return b
	}
	dialedHost, dialedPort := splitAddr(local)
	if b.Host == "" {
		b.Host = dialedHost
	}
	if b.Port == 0 {
		b.Port = dialedPort
		if bootstrapPort != nil {
			if p := bootstrapPort(); p != 0 {
				b.Port = p
			}
		}
	}
	return b
}

func splitAddr(a net.Addr) (string, int32) {
	switch a := a.(type) {
	case nil:
		return "", 0
	case *net.TCPAddr:
		return a.IP.String(), int32(a.Port)
	}
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String(), 0
	}
	p, _ := strconv.ParseInt(port, 10, 32)
	return host, int32(p)
}
