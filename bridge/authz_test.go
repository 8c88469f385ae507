package bridge_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/authz"
	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/tlsconfig/tlstest"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// aclWriter writes ACLs as Kafka does in ZooKeeper mode (kafka.zk.ZkAclStore): the resource
// znode, then a change notification.
type aclWriter struct {
	t   *testing.T
	s   *zkstate.Store
	seq atomic.Int64
}

func (w *aclWriter) set(p authz.Pattern, entries ...authz.Entry) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root := "/kafka-acl"
	if p.PatternType == authz.Prefixed {
		root = "/kafka-acl-extended/prefixed"
	}
	znode := path.Join(root, p.Type.String(), p.Name)
	if len(entries) == 0 {
		if err := w.s.Delete(ctx, znode, -1); err != nil {
			w.t.Fatal(err)
		}
	} else {
		data := authz.EncodeEntries(entries)
		if _, err := w.s.Set(ctx, znode, data, -1); err != nil {
			if err := w.s.Create(ctx, znode, data, zkstate.CreateOptions{Parents: true}); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	// Kafka names change nodes with a sequential suffix; the name's form is all a reader sees.
	n := fmt.Sprintf("acl_changes_%010d", w.seq.Add(1))
	changes, note := "/kafka-acl-changes", []byte(p.Type.String()+":"+p.Name)
	if p.PatternType == authz.Prefixed {
		changes = "/kafka-acl-extended-changes"
		note = fmt.Appendf(nil, `{"version":1,"resourceType":"%s","name":"%s","patternType":"PREFIXED"}`, strings.ToUpper(p.Type.String()), p.Name)
	}
	if err := w.s.Create(ctx, path.Join(changes, n), note, zkstate.CreateOptions{Parents: true}); err != nil {
		w.t.Fatal(err)
	}
}

func allowACL(principal string, op authz.Operation) authz.Entry {
	return authz.Entry{Principal: principal, Host: "*", Operation: op, Allow: true}
}

func denyACL(principal string, op authz.Operation) authz.Entry {
	return authz.Entry{Principal: principal, Host: "*", Operation: op}
}

// securedBridge is a bridge with mutual TLS on the Kafka listener, principals from the
// certificates' CN, and the ZooKeeper authorizer (super user User:admin).
type securedBridge struct {
	*running
	ca  *tlstest.CA
	acl *aclWriter
	s   *zkstate.Store
}

func startSecuredBridge(t *testing.T) *securedBridge {
	t.Helper()
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := zkstate.LoadLayout(ctx, s, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}}},
		"secret": {Version: 1, Partitions: map[int32][]int32{0: {1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, "ca")
	srv := ca.Server(t, "bridge")
	w := &aclWriter{t: t, s: s}
	b := startBridge(t, connect, 9001, func(c *bridge.Config) {
		c.KafkaTLS = tlsconfig.Server{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.File}
		c.PrincipalMappingRules = "RULE:^CN=([^,]*).*$/$1/"
		c.Authorizer = bridge.AuthorizerZooKeeper
		c.SuperUsers = "User:admin"
	})
	return &securedBridge{running: b, ca: ca, acl: w, s: s}
}

// as dials the Kafka listener with a certificate for CN=name.
func (b *securedBridge) as(t *testing.T, name string) *wireConn {
	t.Helper()
	pair := b.ca.Client(t, name, pkix.Name{CommonName: name, Organization: []string{"corp"}})
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", b.Addr().String(), b.ca.ClientConfig(pair))
	if err != nil {
		t.Fatalf("dial as %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	return &wireConn{c: c, br: bufio.NewReaderSize(c, 64<<10), f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("authz-test"))}
}

func mustRoundTrip(t *testing.T, w *wireConn, req kmsg.Request) kmsg.Response {
	t.Helper()
	resp, err := w.roundTrip(req)
	if err != nil {
		t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
	}
	return resp
}

// groupCode sends the request of api for group g (and topic events where it names topics) and
// returns the error code that says whether it was authorized.
func groupCode(t *testing.T, w *wireConn, api, g string) int16 {
	t.Helper()
	switch api {
	case "FindCoordinator":
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.SetVersion(3)
		r.CoordinatorKey = g
		return mustRoundTrip(t, w, r).(*kmsg.FindCoordinatorResponse).ErrorCode
	case "JoinGroup":
		r := kmsg.NewPtrJoinGroupRequest()
		r.SetVersion(5)
		r.Group, r.ProtocolType = g, "consumer"
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10000, 10000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name = "range"
		r.Protocols = append(r.Protocols, p)
		return mustRoundTrip(t, w, r).(*kmsg.JoinGroupResponse).ErrorCode
	case "SyncGroup":
		r := kmsg.NewPtrSyncGroupRequest()
		r.SetVersion(3)
		r.Group, r.MemberID, r.Generation = g, "nobody", 1
		return mustRoundTrip(t, w, r).(*kmsg.SyncGroupResponse).ErrorCode
	case "Heartbeat":
		r := kmsg.NewPtrHeartbeatRequest()
		r.SetVersion(3)
		r.Group, r.MemberID, r.Generation = g, "nobody", 1
		return mustRoundTrip(t, w, r).(*kmsg.HeartbeatResponse).ErrorCode
	case "LeaveGroup":
		r := kmsg.NewPtrLeaveGroupRequest()
		r.SetVersion(2)
		r.Group, r.MemberID = g, "nobody"
		return mustRoundTrip(t, w, r).(*kmsg.LeaveGroupResponse).ErrorCode
	case "OffsetCommit":
		return commitCodes(t, w, g, map[string]int64{"events": 5})["events"]
	case "OffsetFetch":
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(7)
		r.Group = g
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic, ft.Partitions = "events", []int32{0}
		r.Topics = append(r.Topics, ft)
		resp := mustRoundTrip(t, w, r).(*kmsg.OffsetFetchResponse)
		if resp.ErrorCode != 0 {
			return resp.ErrorCode
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	case "DescribeGroups":
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.SetVersion(5)
		r.Groups = []string{g}
		return mustRoundTrip(t, w, r).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode
	case "OffsetDelete":
		r := kmsg.NewPtrOffsetDeleteRequest()
		r.Group = g
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = "events"
		rt.Partitions = append(rt.Partitions, kmsg.NewOffsetDeleteRequestTopicPartition())
		r.Topics = append(r.Topics, rt)
		return mustRoundTrip(t, w, r).(*kmsg.OffsetDeleteResponse).ErrorCode
	case "DeleteGroups":
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.SetVersion(2)
		r.Groups = []string{g}
		return mustRoundTrip(t, w, r).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode
	}
	t.Fatalf("no request for %s", api)
	return 0
}

// commitCodes commits offset o to partition 0 of each topic (no member: an Empty group's
// commit) and returns each topic's error code.
func commitCodes(t *testing.T, w *wireConn, g string, offsets map[string]int64) map[string]int16 {
	t.Helper()
	r := kmsg.NewPtrOffsetCommitRequest()
	r.SetVersion(7)
	r.Group, r.Generation = g, -1
	topics := make([]string, 0, len(offsets))
	for tp := range offsets {
		topics = append(topics, tp)
	}
	sort.Strings(topics)
	for _, tp := range topics {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = tp
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offsets[tp]
		rt.Partitions = append(rt.Partitions, rp)
		r.Topics = append(r.Topics, rt)
	}
	out := map[string]int16{}
	for _, rt := range mustRoundTrip(t, w, r).(*kmsg.OffsetCommitResponse).Topics {
		out[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	return out
}

// fetchOffset reads partition 0 of topic as w's principal (-1: none committed).
func fetchOffset(t *testing.T, w *wireConn, g, topic string) int64 {
	t.Helper()
	r := kmsg.NewPtrOffsetFetchRequest()
	r.SetVersion(7)
	r.Group = g
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = topic, []int32{0}
	r.Topics = append(r.Topics, ft)
	resp := mustRoundTrip(t, w, r).(*kmsg.OffsetFetchResponse)
	if resp.ErrorCode != 0 || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("OffsetFetch %s %s: %d/%d", g, topic, resp.ErrorCode, resp.Topics[0].Partitions[0].ErrorCode)
	}
	return resp.Topics[0].Partitions[0].Offset
}

const groupAuthFailed = 30

// The ACL matrix (issue 16): every group API the bridge answers × allowed / denied / no ACL /
// prefixed / wildcard / super user / deny-over-allow, against ACL znodes in Kafka's own format
// in a real ZooKeeper. Each API needs the operation Kafka's KafkaApis asks for it.
func TestIntegration_ACLMatrix(t *testing.T) {
	t.Parallel()
	b := startSecuredBridge(t)
	apis := []struct {
		api string
		op  authz.Operation
	}{
		{"FindCoordinator", authz.Describe}, {"JoinGroup", authz.Read}, {"SyncGroup", authz.Read},
		{"Heartbeat", authz.Read}, {"LeaveGroup", authz.Read}, {"OffsetCommit", authz.Read},
		{"OffsetFetch", authz.Describe}, {"DescribeGroups", authz.Describe}, {"DeleteGroups", authz.Delete},
		{"OffsetDelete", authz.Delete},
	}
	// The topic ACLs OffsetCommit and OffsetFetch need besides the group's.
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "events"}, allowACL("User:alice", authz.Read), allowACL("User:carol", authz.Read))
	type cell struct {
		scenario, principal, group string
		allowed                    bool
	}
	var cells = map[string][]cell{}
	for _, a := range apis {
		g := func(s string) string { return strings.ToLower(a.api) + "-" + s }
		other := authz.Write // an operation that implies nothing the API needs
		if a.op == authz.Describe {
			other = authz.Create
		}
		b.acl.set(authz.Pattern{Type: authz.Group, Name: g("allowed")}, allowACL("User:alice", a.op))
		b.acl.set(authz.Pattern{Type: authz.Group, Name: g("other-op")}, allowACL("User:alice", other))
		b.acl.set(authz.Pattern{Type: authz.Group, Name: g("denied")}, allowACL("User:alice", authz.All), denyACL("User:alice", a.op))
		b.acl.set(authz.Pattern{Type: authz.Group, Name: g("others")}, allowACL("User:bob", a.op))
		b.acl.set(authz.Pattern{Type: authz.Group, Name: g("pre-"), PatternType: authz.Prefixed}, allowACL("User:alice", a.op))
		b.acl.set(authz.Pattern{Type: authz.Group, Name: g("all")}, allowACL("User:*", a.op))
		cells[a.api] = []cell{
			{"allowed", "alice", g("allowed"), true},
			{"no ACL", "alice", g("nothing"), false},
			{"another operation only", "alice", g("other-op"), false},
			{"another principal's ACL", "alice", g("others"), false},
			{"deny over allow", "alice", g("denied"), false},
			{"prefixed", "alice", g("pre-x"), true},
			{"prefixed, not matching", "alice", g("pre"), false},
			{"wildcard principal", "alice", g("all"), true},
			{"super user", "admin", g("nothing"), true},
			{"super user over a deny", "admin", g("denied"), true},
		}
	}
	// A wildcard resource for carol only: every group for her, nothing more for alice.
	b.acl.set(authz.Pattern{Type: authz.Group, Name: "*"}, allowACL("User:carol", authz.All))

	conns := map[string]*wireConn{}
	for _, p := range []string{"alice", "admin", "carol"} {
		conns[p] = b.as(t, p)
	}
	// The last ACL written is in force once carol may describe a group.
	zktest.Eventually(t, 10*time.Second, "the ACLs are loaded", func() (bool, string) {
		c := groupCode(t, conns["carol"], "DescribeGroups", "any")
		return c != groupAuthFailed, fmt.Sprint("carol's DescribeGroups: ", c)
	})
	for _, a := range apis {
		t.Run(a.api, func(t *testing.T) {
			for _, c := range append(cells[a.api], cell{"wildcard resource", "carol", strings.ToLower(a.api) + "-nothing", true}) {
				code := groupCode(t, conns[c.principal], a.api, c.group)
				if got := code != groupAuthFailed; got != c.allowed {
					t.Errorf("%s: %s as %s on %s: code %d, allowed=%v, want %v", a.api, c.scenario, c.principal, c.group, code, got, c.allowed)
				}
			}
		})
	}

	t.Run("OffsetCommit topics", func(t *testing.T) {
		// Group READ but no Topic READ on secret: events is committed, secret answered
		// TOPIC_AUTHORIZATION_FAILED and not committed.
		codes := commitCodes(t, conns["alice"], "offsetcommit-allowed", map[string]int64{"events": 11, "secret": 12})
		if codes["events"] != 0 || codes["secret"] != 29 {
			t.Fatalf("commit codes %v, want events 0, secret 29", codes)
		}
		if o := fetchOffset(t, conns["admin"], "offsetcommit-allowed", "secret"); o != -1 {
			t.Fatalf("a denied topic was committed: offset %d", o)
		}
		if o := fetchOffset(t, conns["admin"], "offsetcommit-allowed", "events"); o != 11 {
			t.Fatalf("the allowed topic's offset is %d, want 11", o)
		}
		// A denied group's commit touches nothing.
		if codes := commitCodes(t, conns["alice"], "offsetcommit-untouched", map[string]int64{"events": 13}); codes["events"] != groupAuthFailed {
			t.Fatalf("commit to a group without ACL: %v", codes)
		}
		if o := fetchOffset(t, conns["admin"], "offsetcommit-untouched", "events"); o != -1 {
			t.Fatalf("a denied commit was stored: offset %d", o)
		}
	})

	t.Run("OffsetFetch topics", func(t *testing.T) {
		// Named and not describable: TOPIC_AUTHORIZATION_FAILED. All topics: left out.
		commitCodes(t, conns["admin"], "offsetfetch-allowed", map[string]int64{"events": 3, "secret": 4})
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(7)
		r.Group = "offsetfetch-allowed"
		ft := kmsg.NewOffsetFetchRequestTopic()
		ft.Topic, ft.Partitions = "secret", []int32{0}
		r.Topics = append(r.Topics, ft)
		resp := mustRoundTrip(t, conns["alice"], r).(*kmsg.OffsetFetchResponse)
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 29 || p.Offset != -1 {
			t.Fatalf("named secret: code %d offset %d, want 29 and -1", p.ErrorCode, p.Offset)
		}
		r.Topics = nil
		resp = mustRoundTrip(t, conns["alice"], r).(*kmsg.OffsetFetchResponse)
		var names []string
		for _, tp := range resp.Topics {
			names = append(names, tp.Topic)
		}
		if len(names) != 1 || names[0] != "events" {
			t.Fatalf("all topics as alice: %v, want [events]", names)
		}
	})

	t.Run("ListGroups", func(t *testing.T) {
		for _, g := range []string{"describegroups-allowed", "describegroups-nothing"} {
			commitCodes(t, conns["admin"], g, map[string]int64{"events": 1})
		}
		list := func(w *wireConn) map[string]bool {
			r := kmsg.NewPtrListGroupsRequest()
			r.SetVersion(3)
			out := map[string]bool{}
			for _, g := range mustRoundTrip(t, w, r).(*kmsg.ListGroupsResponse).Groups {
				out[g.Group] = true
			}
			return out
		}
		alice := list(conns["alice"])
		if !alice["describegroups-allowed"] || alice["describegroups-nothing"] {
			t.Errorf("alice lists %v: want describegroups-allowed and not describegroups-nothing", alice)
		}
		if admin := list(conns["admin"]); !admin["describegroups-nothing"] {
			t.Errorf("the super user lists %v", admin)
		}
		// Cluster DESCRIBE lists every group.
		b.acl.set(authz.Pattern{Type: authz.Cluster, Name: authz.ClusterName}, allowACL("User:alice", authz.Describe))
		zktest.Eventually(t, 10*time.Second, "alice lists every group with Cluster DESCRIBE", func() (bool, string) {
			l := list(conns["alice"])
			return l["describegroups-nothing"], fmt.Sprint(l)
		})
	})

	t.Run("denials counted", func(t *testing.T) {
		mfs, err := b.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() != "zkbridge_kafka_authorization_denied_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "api" && l.GetValue() == "JoinGroup" {
						n = m.GetCounter().GetValue()
					}
				}
			}
		}
		if n < 1 {
			t.Fatalf("JoinGroup denials counted: %v", n)
		}
	})
}

// An ACL added or removed while a client runs takes effect at once (Kafka's change
// notifications): well within a second here.
func TestIntegration_ACLChangeTakesEffect(t *testing.T) {
	b := startSecuredBridge(t)
	alice := b.as(t, "alice")
	p := authz.Pattern{Type: authz.Group, Name: "late"}
	for i, step := range []struct {
		entries []authz.Entry
		allowed bool
	}{
		{[]authz.Entry{allowACL("User:alice", authz.Read)}, true},
		{[]authz.Entry{allowACL("User:alice", authz.Read), denyACL("User:*", authz.Read)}, false},
		{[]authz.Entry{allowACL("User:alice", authz.Read)}, true},
		{nil, false}, // the resource znode deleted
	} {
		start := time.Now()
		b.acl.set(p, step.entries...)
		for {
			code := groupCode(t, alice, "Heartbeat", "late")
			if (code != groupAuthFailed) == step.allowed {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("step %d: not in effect after %v (code %d)", i, time.Since(start), code)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took := time.Since(start)
		t.Logf("step %d (allowed=%v) in effect after %v", i, step.allowed, took)
		if took > time.Second {
			t.Errorf("step %d took %v, want under a second", i, took)
		}
	}
}

// Metadata answered by the bridge itself (no data path) shows a principal only the topics it
// may DESCRIBE, as KafkaApis does (issue 16): named, a topic it may not describe is
// TOPIC_AUTHORIZATION_FAILED whether it exists or not; asked for all topics, it is left out.
// ACL znodes in Kafka's format: literal, prefixed, wildcard principal, wildcard resource,
// deny over allow, READ implying DESCRIBE, super user.
func TestIntegration_MetadataTopicDescribe(t *testing.T) {
	t.Parallel()
	b := startSecuredBridge(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	extra := map[string]zkstate.TopicAssignment{}
	for _, name := range []string{"pre-x", "prefix", "public", "bobs", "readable"} {
		extra[name] = zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{0: {1}}}
	}
	if err := zkstate.LoadLayout(ctx, b.s, zkstate.Layout{Topics: extra}); err != nil {
		t.Fatal(err)
	}
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "events"}, allowACL("User:alice", authz.Describe))
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "readable"}, allowACL("User:alice", authz.Read))
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "secret"}, allowACL("User:alice", authz.All), denyACL("User:alice", authz.Describe))
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "pre-", PatternType: authz.Prefixed}, allowACL("User:alice", authz.Describe))
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "public"}, allowACL("User:*", authz.Describe))
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "bobs"}, allowACL("User:bob", authz.Describe))
	b.acl.set(authz.Pattern{Type: authz.Topic, Name: "*"}, allowACL("User:carol", authz.Describe))
	conns := map[string]*wireConn{}
	for _, p := range []string{"alice", "carol", "admin"} {
		conns[p] = b.as(t, p)
	}
	metadata := func(who string, topics ...string) map[string]int16 {
		r := kmsg.NewPtrMetadataRequest()
		r.SetVersion(9)
		if topics != nil {
			r.Topics = []kmsg.MetadataRequestTopic{}
			for _, name := range topics {
				rt := kmsg.NewMetadataRequestTopic()
				rt.Topic = kmsg.StringPtr(name)
				r.Topics = append(r.Topics, rt)
			}
		}
		out := map[string]int16{}
		for _, rt := range mustRoundTrip(t, conns[who], r).(*kmsg.MetadataResponse).Topics {
			out[*rt.Topic] = rt.ErrorCode
			if rt.ErrorCode == int16(newproto.ErrTopicAuthorizationFailed) && len(rt.Partitions) > 0 {
				t.Errorf("%s: %s denied with its partitions", who, *rt.Topic)
			}
		}
		return out
	}
	zktest.Eventually(t, 10*time.Second, "the ACLs and topics are loaded", func() (bool, string) {
		got := metadata("carol", "bobs", "prefix")
		return got["bobs"] == 0 && got["prefix"] == 0, fmt.Sprint("carol: ", got)
	})
	const denied, unknown = int16(newproto.ErrTopicAuthorizationFailed), int16(newproto.ErrUnknownTopicOrPartition)
	for _, c := range []struct {
		scenario, who, topic string
		want                 int16
	}{
		{"literal DESCRIBE", "alice", "events", 0},
		{"READ implies DESCRIBE", "alice", "readable", 0},
		{"deny over allow", "alice", "secret", denied},
		{"prefixed", "alice", "pre-x", 0},
		{"prefixed, not matching", "alice", "prefix", denied},
		{"wildcard principal", "alice", "public", 0},
		{"another principal's ACL", "alice", "bobs", denied},
		{"unknown topic, no DESCRIBE: existence not told", "alice", "nope", denied},
		{"wildcard resource", "carol", "secret", 0},
		{"wildcard resource, unknown topic", "carol", "nope", unknown},
		{"super user", "admin", "secret", 0},
		{"super user, unknown topic", "admin", "nope", unknown},
	} {
		if got := metadata(c.who, c.topic)[c.topic]; got != c.want {
			t.Errorf("%s: %s's Metadata for %s: code %d, want %d", c.scenario, c.who, c.topic, got, c.want)
		}
	}
	all := func(who string) []string {
		return slices.Sorted(maps.Keys(metadata(who)))
	}
	if got, want := all("alice"), []string{"events", "pre-x", "public", "readable"}; !slices.Equal(got, want) {
		t.Errorf("alice's all-topics Metadata: %v, want %v", got, want)
	}
	everything := []string{"bobs", "events", "pre-x", "prefix", "public", "readable", "secret"}
	for _, who := range []string{"carol", "admin"} {
		if got := all(who); !slices.Equal(got, everything) {
			t.Errorf("%s's all-topics Metadata: %v, want %v", who, got, everything)
		}
	}
}
