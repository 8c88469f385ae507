package newproto

// Authorization of the requests the bridge answers itself (Config.Authorizer), as a Kafka
// broker authorizes them (KafkaApis, the ZooKeeper-era AclAuthorizer):
//
//	FindCoordinator (group key)            Group DESCRIBE   GROUP_AUTHORIZATION_FAILED per key
//	JoinGroup, SyncGroup, Heartbeat,
//	LeaveGroup                             Group READ       GROUP_AUTHORIZATION_FAILED
//	OffsetCommit                           Group READ       GROUP_AUTHORIZATION_FAILED, every partition
//	                                       Topic READ       TOPIC_AUTHORIZATION_FAILED, that topic's
//	                                                        partitions; the others are committed
//	OffsetFetch                            Group DESCRIBE   GROUP_AUTHORIZATION_FAILED (per group, v8+)
//	                                       Topic DESCRIBE   named topics: TOPIC_AUTHORIZATION_FAILED;
//	                                                        all topics: the topic is left out
//	DescribeGroups                         Group DESCRIBE   GROUP_AUTHORIZATION_FAILED per group
//	ListGroups                             Cluster DESCRIBE, or else only the groups with Group DESCRIBE
//	DeleteGroups                           Group DELETE     GROUP_AUTHORIZATION_FAILED per group
//	OffsetDelete                           Group DELETE     GROUP_AUTHORIZATION_FAILED
//	                                       Topic READ       TOPIC_AUTHORIZATION_FAILED, that topic's
//	                                                        partitions; the others are deleted
//	Metadata (answered by the bridge)      Topic DESCRIBE   named topics: TOPIC_AUTHORIZATION_FAILED;
//	                                                        all topics: the topic is left out
//
// A group API routed to the coordinator without a rule here is denied (fail closed).
// OffsetFetch asks DESCRIBE, not READ, as Kafka does (READ implies DESCRIBE, so a consumer
// with READ passes). A denied request touches no group: it is answered before the coordinator
// sees it, or, for the topics of an OffsetCommit, those topics are taken out of the request.
// Every denial is counted by API (zkbridge_kafka_authorization_denied_total) and logged, at
// most one line a second with the number left out.

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/authz"
)

// Authorizer decides whether a principal connected from host may perform op on res;
// *authz.Authorizer implements it. It is called on every group request: it must be fast and
// must not block.
type Authorizer interface {
	Authorize(principal, host string, op authz.Operation, res authz.Resource) bool
}

// guard enforces an Authorizer on the router's requests.
type guard struct {
	authz  Authorizer
	denied *prometheus.CounterVec // api
	log    zerolog.Logger

	lastLog    atomic.Int64 // unix nanoseconds of the last denial logged
	suppressed atomic.Int64 // denials not logged since
}

func newGuard(a Authorizer, reg prometheus.Registerer, log zerolog.Logger) (*guard, error) {
	g := &guard{authz: a, log: log, denied: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "zkbridge", Subsystem: "kafka", Name: "authorization_denied_total",
		Help: "Operations denied by the authorizer, by API.",
	}, []string{"api"})}
	if reg != nil {
		if err := reg.Register(g.denied); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func remoteIP(req *Request) string {
	switch a := req.Conn.Remote.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	default:
		h, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return a.String()
		}
		return h
	}
}

// allowed decides one operation and records a denial.
func (g *guard) allowed(req *Request, op authz.Operation, typ authz.ResourceType, name string) bool {
	if g.authz.Authorize(req.Conn.Principal, remoteIP(req), op, authz.Resource{Type: typ, Name: name}) {
		return true
	}
	api := kmsg.NameForKey(req.Msg.Key())
	g.denied.WithLabelValues(api).Inc()
	now := time.Now().UnixNano()
	last := g.lastLog.Load()
	if now-last < int64(time.Second) || !g.lastLog.CompareAndSwap(last, now) {
		g.suppressed.Add(1)
		return false
	}
	g.log.Warn().Str("principal", req.Conn.Principal).Str("host", remoteIP(req)).Str("api", api).
		Str("operation", op.String()).Str("resource", typ.String()+":"+name).
		Int64("denials_not_logged", g.suppressed.Swap(0)).Msg("authorization denied")
	return false
}

// checkedGroup is group with the authorizer's checks around it.
func (r *router) checkedGroup(ctx context.Context, req *Request) (kmsg.Response, error) {
	g := r.guard
	if g == nil {
		return r.group(ctx, req)
	}
	switch m := req.Msg.(type) {
	case *kmsg.JoinGroupRequest:
		return r.groupOrDenied(ctx, req, g.allowed(req, authz.Read, authz.Group, m.Group))
	case *kmsg.SyncGroupRequest:
		return r.groupOrDenied(ctx, req, g.allowed(req, authz.Read, authz.Group, m.Group))
	case *kmsg.HeartbeatRequest:
		return r.groupOrDenied(ctx, req, g.allowed(req, authz.Read, authz.Group, m.Group))
	case *kmsg.LeaveGroupRequest:
		return r.groupOrDenied(ctx, req, g.allowed(req, authz.Read, authz.Group, m.Group))
	case *kmsg.OffsetCommitRequest:
		return r.checkedOffsetCommit(ctx, req, m)
	case *kmsg.OffsetFetchRequest:
		return r.checkedOffsetFetch(ctx, req, m)
	case *kmsg.DescribeGroupsRequest:
		return r.checkedDescribeGroups(ctx, req, m)
	case *kmsg.ListGroupsRequest:
		return r.checkedListGroups(ctx, req)
	case *kmsg.DeleteGroupsRequest:
		return r.checkedDeleteGroups(ctx, req, m)
	case *kmsg.OffsetDeleteRequest:
		return r.checkedOffsetDelete(ctx, req, m)
	}
	// A group API routed here without a rule of its own: denied until it has one, so that a
	// new API never slips past the authorizer.
	g.log.Error().Str("api", kmsg.NameForKey(req.Msg.Key())).Msg("no authorization rule for this API; denied")
	return r.errorAnswer(req, ErrGroupAuthorizationFailed, "")
}

// checkedOffsetDelete: Group DELETE, then Topic READ per topic (KafkaApis
// handleOffsetDeleteRequest); a denied topic's partitions are answered
// TOPIC_AUTHORIZATION_FAILED and not deleted.
func (r *router) checkedOffsetDelete(ctx context.Context, req *Request, m *kmsg.OffsetDeleteRequest) (kmsg.Response, error) {
	if !r.guard.allowed(req, authz.Delete, authz.Group, m.Group) {
		return r.errorAnswer(req, ErrGroupAuthorizationFailed, "")
	}
	return byTopicRead(ctx, r, req, m.Topics, func(t kmsg.OffsetDeleteRequestTopic) string { return t.Topic },
		func(ok []kmsg.OffsetDeleteRequestTopic) { m.Topics = ok },
		func(resp *kmsg.OffsetDeleteResponse, t kmsg.OffsetDeleteRequestTopic) {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, int16(ErrTopicAuthorizationFailed)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		})
}

// byTopicRead answers a request whose topics each need Topic READ (OffsetCommit, OffsetDelete,
// as KafkaApis checks them), in one response: the readable topics go to the group coordinator
// (narrow restricts the request to them), and deny appends each other topic to the response,
// every partition TOPIC_AUTHORIZATION_FAILED. With no topic readable the coordinator is not
// asked. R is the request's response type.
func byTopicRead[T any, R kmsg.Response](ctx context.Context, r *router, req *Request, topics []T, name func(T) string,
	narrow func(ok []T), deny func(R, T)) (kmsg.Response, error) {
	ok, denied := readableTopics(r, req, topics, name)
	if len(denied) == 0 {
		return r.group(ctx, req)
	}
	resp := req.Msg.ResponseKind().(R)
	resp.SetVersion(req.Msg.GetVersion())
	if len(ok) > 0 {
		narrow(ok)
		got, err := r.group(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = got.(R)
	}
	for _, t := range denied {
		deny(resp, t)
	}
	return resp, nil
}

// readableTopics splits a request's topics into those the principal may READ and those it may
// not (Topic READ, as KafkaApis checks each topic of an OffsetCommit or OffsetDelete).
func readableTopics[T any](r *router, req *Request, topics []T, name func(T) string) (ok, denied []T) {
	for _, t := range topics {
		if r.guard.allowed(req, authz.Read, authz.Topic, name(t)) {
			ok = append(ok, t)
		} else {
			denied = append(denied, t)
		}
	}
	return ok, denied
}

func (r *router) groupOrDenied(ctx context.Context, req *Request, ok bool) (kmsg.Response, error) {
	if !ok {
		return r.errorAnswer(req, ErrGroupAuthorizationFailed, "")
	}
	return r.group(ctx, req)
}

func (r *router) checkedOffsetCommit(ctx context.Context, req *Request, m *kmsg.OffsetCommitRequest) (kmsg.Response, error) {
	if !r.guard.allowed(req, authz.Read, authz.Group, m.Group) {
		return r.errorAnswer(req, ErrGroupAuthorizationFailed, "")
	}
	return byTopicRead(ctx, r, req, m.Topics, func(t kmsg.OffsetCommitRequestTopic) string { return t.Topic },
		func(ok []kmsg.OffsetCommitRequestTopic) { m.Topics = ok },
		func(resp *kmsg.OffsetCommitResponse, t kmsg.OffsetCommitRequestTopic) {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, int16(ErrTopicAuthorizationFailed)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		})
}

func (r *router) checkedOffsetFetch(ctx context.Context, req *Request, m *kmsg.OffsetFetchRequest) (kmsg.Response, error) {
	names := r.topicNames(ctx, m)
	if m.Version < 8 {
		if !r.guard.allowed(req, authz.Describe, authz.Group, m.Group) {
			return r.errorAnswer(req, ErrGroupAuthorizationFailed, "")
		}
		got, err := r.group(ctx, req)
		if err != nil {
			return nil, err
		}
		resp := got.(*kmsg.OffsetFetchResponse)
		resp.Topics = filterFetched(resp.Topics, m.Topics == nil, func(t kmsg.OffsetFetchResponseTopic) (string, [16]byte) { return t.Topic, [16]byte{} },
			func(t *kmsg.OffsetFetchResponseTopic) {
				for i := range t.Partitions {
					t.Partitions[i].Offset, t.Partitions[i].LeaderEpoch, t.Partitions[i].Metadata = -1, -1, nil
					t.Partitions[i].ErrorCode = int16(ErrTopicAuthorizationFailed)
				}
			}, r.guard, req, names)
		return resp, nil
	}
	var ok []kmsg.OffsetFetchRequestGroup
	var denied []string
	all := map[string]bool{} // group → asked for all topics
	for _, gr := range m.Groups {
		if r.guard.allowed(req, authz.Describe, authz.Group, gr.Group) {
			ok = append(ok, gr)
			all[gr.Group] = gr.Topics == nil
		} else {
			denied = append(denied, gr.Group)
		}
	}
	resp := kmsg.NewPtrOffsetFetchResponse()
	resp.SetVersion(m.Version)
	if len(ok) > 0 {
		m.Groups = ok
		got, err := r.group(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = got.(*kmsg.OffsetFetchResponse)
	}
	for i := range resp.Groups {
		rg := &resp.Groups[i]
		rg.Topics = filterFetched(rg.Topics, all[rg.Group], func(t kmsg.OffsetFetchResponseGroupTopic) (string, [16]byte) { return t.Topic, t.TopicID },
			func(t *kmsg.OffsetFetchResponseGroupTopic) {
				for i := range t.Partitions {
					t.Partitions[i].Offset, t.Partitions[i].LeaderEpoch, t.Partitions[i].Metadata = -1, -1, nil
					t.Partitions[i].ErrorCode = int16(ErrTopicAuthorizationFailed)
				}
			}, r.guard, req, names)
	}
	for _, g := range denied {
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode = g, int16(ErrGroupAuthorizationFailed)
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// topicNames maps topic ids to names for OffsetFetch v10, whose answers name topics by id.
func (r *router) topicNames(ctx context.Context, m *kmsg.OffsetFetchRequest) map[[16]byte]string {
	if m.Version < 10 {
		return nil
	}
	gc, ok := r.coord.(*GroupCoordinator)
	if !ok {
		return nil
	}
	ids, err := gc.topicIDs(ctx)
	if err != nil || ids == nil {
		return nil
	}
	return ids.byID
}

// filterFetched applies Topic DESCRIBE to an OffsetFetch answer: asked for all topics, a denied
// topic is left out; named, it is answered TOPIC_AUTHORIZATION_FAILED (deny). A topic named by
// an id nobody knows was answered UNKNOWN_TOPIC_ID and stays so.
func filterFetched[T any](topics []T, all bool, name func(T) (string, [16]byte), deny func(*T), g *guard, req *Request, byID map[[16]byte]string) []T {
	out := topics[:0]
	for _, t := range topics {
		n, id := name(t)
		if n == "" && id != ([16]byte{}) {
			n = byID[id]
			if n == "" {
				out = append(out, t)
				continue
			}
		}
		if g.allowed(req, authz.Describe, authz.Topic, n) {
			out = append(out, t)
			continue
		}
		if !all {
			deny(&t)
			out = append(out, t)
		}
	}
	return out
}

func (r *router) checkedDescribeGroups(ctx context.Context, req *Request, m *kmsg.DescribeGroupsRequest) (kmsg.Response, error) {
	var ok, denied []string
	for _, gr := range m.Groups {
		if r.guard.allowed(req, authz.Describe, authz.Group, gr) {
			ok = append(ok, gr)
		} else {
			denied = append(denied, gr)
		}
	}
	resp := kmsg.NewPtrDescribeGroupsResponse()
	resp.SetVersion(m.Version)
	if len(ok) > 0 {
		m.Groups = ok
		got, err := r.group(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = got.(*kmsg.DescribeGroupsResponse)
	}
	for _, g := range denied {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, int16(ErrGroupAuthorizationFailed)
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

func (r *router) checkedListGroups(ctx context.Context, req *Request) (kmsg.Response, error) {
	// Cluster DESCRIBE lists every group; without it, only the ones the principal may
	// describe. Not counted as a denial: filtering is the normal answer.
	if r.guard.authz.Authorize(req.Conn.Principal, remoteIP(req), authz.Describe, authz.Resource{Type: authz.Cluster, Name: authz.ClusterName}) {
		return r.group(ctx, req)
	}
	got, err := r.group(ctx, req)
	if err != nil {
		return nil, err
	}
	resp := got.(*kmsg.ListGroupsResponse)
	kept := resp.Groups[:0]
	for _, gr := range resp.Groups {
		if r.guard.authz.Authorize(req.Conn.Principal, remoteIP(req), authz.Describe, authz.Resource{Type: authz.Group, Name: gr.Group}) {
			kept = append(kept, gr)
		}
	}
	resp.Groups = kept
	return resp, nil
}

func (r *router) checkedDeleteGroups(ctx context.Context, req *Request, m *kmsg.DeleteGroupsRequest) (kmsg.Response, error) {
	var ok, denied []string
	for _, gr := range m.Groups {
		if r.guard.allowed(req, authz.Delete, authz.Group, gr) {
			ok = append(ok, gr)
		} else {
			denied = append(denied, gr)
		}
	}
	resp := kmsg.NewPtrDeleteGroupsResponse()
	resp.SetVersion(m.Version)
	if len(ok) > 0 {
		m.Groups = ok
		got, err := r.group(ctx, req)
		if err != nil {
			return nil, err
		}
		resp = got.(*kmsg.DeleteGroupsResponse)
	}
	for _, g := range denied {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, int16(ErrGroupAuthorizationFailed)
		resp.Groups = append(resp.Groups, rg)
	}
	return resp, nil
}

// checkedFindCoordinator answers a group key the principal may not describe
// GROUP_AUTHORIZATION_FAILED, as Kafka does.
func (r *router) checkedFindCoordinator(ctx context.Context, req *Request, m *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := r.findCoordinator(ctx, req, m)
	if r.guard == nil || m.CoordinatorType != coordinatorGroup {
		return resp
	}
	fc := resp.(*kmsg.FindCoordinatorResponse)
	if m.Version < 4 {
		if !r.guard.allowed(req, authz.Describe, authz.Group, m.CoordinatorKey) {
			fc.ErrorCode, fc.NodeID, fc.Host, fc.Port = int16(ErrGroupAuthorizationFailed), -1, "", -1
		}
		return fc
	}
	for i := range fc.Coordinators {
		c := &fc.Coordinators[i]
		if !r.guard.allowed(req, authz.Describe, authz.Group, c.Key) {
			c.ErrorCode, c.NodeID, c.Host, c.Port = int16(ErrGroupAuthorizationFailed), -1, "", -1
		}
	}
	return fc
}

// describableTopics applies Topic DESCRIBE to a Metadata answer the bridge gives itself, as
// KafkaApis handleTopicMetadataRequest does: asked for all topics, a topic the principal may
// not describe is left out (not counted as a denial: filtering is the normal answer); named,
// it is answered TOPIC_AUTHORIZATION_FAILED without partitions whether it exists or not (its
// existence is not told), by its name, or by its id alone when it was asked for by id. A topic
// asked for by an id nobody knows stays UNKNOWN_TOPIC_ID.
func (r *router) describableTopics(req *Request, m *kmsg.MetadataRequest, resp *kmsg.MetadataResponse, all bool) *kmsg.MetadataResponse {
	g := r.guard
	if g == nil {
		return resp
	}
	byName := make(map[string]bool, len(m.Topics))
	for _, t := range m.Topics {
		if t.Topic != nil {
			byName[*t.Topic] = true
		}
	}
	kept := resp.Topics[:0]
	for _, t := range resp.Topics {
		switch {
		case t.Topic == nil:
			kept = append(kept, t)
		case all:
			if g.authz.Authorize(req.Conn.Principal, remoteIP(req), authz.Describe, authz.Resource{Type: authz.Topic, Name: *t.Topic}) {
				kept = append(kept, t)
			}
		case g.allowed(req, authz.Describe, authz.Topic, *t.Topic):
			kept = append(kept, t)
		default:
			d := kmsg.NewMetadataResponseTopic()
			d.ErrorCode = int16(ErrTopicAuthorizationFailed)
			if byName[*t.Topic] {
				d.Topic = kmsg.StringPtr(*t.Topic)
			} else {
				d.TopicID = t.TopicID
			}
			kept = append(kept, d)
		}
	}
	resp.Topics = kept
	return resp
}
