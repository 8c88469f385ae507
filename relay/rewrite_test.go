package relay

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// produceAcks reads acks where Kafka's schema puts it, at every version
// kmsg knows, with and without a transactional id and client id; the
// frames come from kmsg's own request formatter.
func TestProduceAcks(t *testing.T) {
	for _, clientID := range []*string{nil, kmsg.StringPtr(""), kmsg.StringPtr("a-client")} {
		f := kmsg.NewRequestFormatter()
		if clientID != nil {
			f = kmsg.NewRequestFormatter(kmsg.FormatterClientID(*clientID))
		}
		for v := range (&kmsg.ProduceRequest{}).MaxVersion() + 1 {
			for _, txn := range []*string{nil, kmsg.StringPtr(""), kmsg.StringPtr("txn-7")} {
				for _, acks := range []int16{0, 1, -1} {
					req := kmsg.NewPtrProduceRequest()
					req.SetVersion(v)
					req.Acks, req.TransactionID, req.TimeoutMillis = acks, txn, 1234
					frame := f.AppendRequest(nil, req, 42)[4:]
					got, err := produceAcks(frame, v)
					if err != nil || got != acks {
						t.Errorf("v%d client id %v txn %v: acks %d, %v; want %d", v, clientID, txn, got, err, acks)
					}
				}
			}
		}
	}
	if _, err := produceAcks([]byte{0, 0, 0, 99, 0, 0, 0, 1, 0xff, 0xff}, 99); !isRejected(err, newproto.RejectVersion) {
		t.Errorf("unknown version: %v", err)
	}
}

// produceAcks and peekHeader never panic and never read past the frame.
func FuzzProduceAcks(f *testing.F) {
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("c"))
	for _, v := range []int16{0, 3, 8, 9, 13} {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(v)
		req.TransactionID = kmsg.StringPtr("t")
		f.Add(fm.AppendRequest(nil, req, 1)[4:], v)
	}
	f.Add([]byte{0, 0, 0, 9, 0, 0, 0, 1, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, int16(9))
	f.Fuzz(func(t *testing.T, frame []byte, v int16) {
		_, _ = peekHeader(frame)
		if _, err := produceAcks(frame, v); err != nil {
			if _, ok := newproto.RejectReason(err); !ok {
				t.Fatalf("error %v is not a frame error", err)
			}
		}
	})
}

// A response rewrite never panics on what a broker might send, and what it
// writes decodes again.
func FuzzRewriteMetadata(f *testing.F) {
	book := &addressBook{host: "bridge", ports: map[int32]int32{1: 9101, 2: 9102}, self: newproto.Broker{NodeID: 100, Host: "bridge", Port: 9092}}
	for _, v := range []int16{0, 7, 9, 12} {
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(v)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 1, "real", 9092
		resp.Brokers = append(resp.Brokers, b)
		f.Add(responseFrame(7, resp), v)
	}
	f.Fuzz(func(t *testing.T, body []byte, v int16) {
		if v < 0 || v > (&kmsg.MetadataResponse{}).MaxVersion() {
			return
		}
		raw := binary.BigEndian.AppendUint32(make([]byte, 4), 7)
		raw = append(raw, body...)
		binary.BigEndian.PutUint32(raw, uint32(len(raw)-4))
		out, err := rewriteResponse(raw, int16(kmsg.Metadata), v, func(r kmsg.Response) { book.rewriteMetadata(r) })
		if err != nil {
			return
		}
		if int(binary.BigEndian.Uint32(out)) != len(out)-4 || responseCorrelationID(out) != 7 {
			t.Fatalf("bad frame header % x", out[:8])
		}
		again, err := responseBody(out, int16(kmsg.Metadata), v)
		if err != nil {
			t.Fatal(err)
		}
		m := kmsg.NewPtrMetadataResponse()
		m.SetVersion(v)
		if err := m.ReadFrom(again); err != nil {
			t.Fatalf("rewritten response does not decode: %v", err)
		}
	})
}

// responseFrame encodes resp as a broker sends it: size, correlation id,
// header tags for flexible versions, body.
func responseFrame(corr int32, resp kmsg.Response) []byte {
	dst := []byte{0, 0, 0, 0} // size, patched below
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		dst = append(dst, 0) // no tagged fields
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst, uint32(len(dst)-4))
	return dst
}

// isRejected reports whether err is a frame error with reason.
func isRejected(err error, reason string) bool {
	got, ok := newproto.RejectReason(err)
	return ok && got == reason
}

func TestRewriteMetadata(t *testing.T) {
	book := &addressBook{host: "bridge.example", ports: map[int32]int32{1: 9101, 2: 9102}, self: newproto.Broker{NodeID: 100, Host: "bridge.example", Port: 9092}}
	for _, v := range []int16{1, 9, 12} {
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(v)
		resp.ControllerID = 3
		resp.ClusterID = kmsg.StringPtr("c")
		for _, id := range []int32{1, 2, 3} {
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host, b.Port, b.Rack = id, "real", 9092, kmsg.StringPtr("r")
			resp.Brokers = append(resp.Brokers, b)
		}
		tp := kmsg.NewMetadataResponseTopic()
		tp.Topic = kmsg.StringPtr("t")
		for p, leader := range []int32{1, 3, -1} {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition, mp.Leader, mp.Replicas, mp.ISR = int32(p), leader, []int32{1, 2, 3}, []int32{1, 2, 3}
			if leader < 0 {
				mp.ErrorCode = int16(newproto.ErrLeaderNotAvailable)
			}
			tp.Partitions = append(tp.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, tp)
		in := responseFrame(7, resp)

		out, err := rewriteResponse(in, int16(kmsg.Metadata), v, func(r kmsg.Response) { book.rewriteMetadata(r) })
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		got := kmsg.NewPtrMetadataResponse()
		got.SetVersion(v)
		body, _ := responseBody(out, int16(kmsg.Metadata), v)
		if err := got.ReadFrom(body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		var brokers []string
		for _, b := range got.Brokers {
			brokers = append(brokers, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
		}
		// Broker 3 has no proxy listener: left out; the bridge's
		// node added.
		if want := []string{"1@bridge.example:9101", "2@bridge.example:9102", "100@bridge.example:9092"}; !slices.Equal(brokers, want) {
			t.Errorf("v%d brokers %v, want %v", v, brokers, want)
		}
		if got.ControllerID != -1 {
			t.Errorf("v%d controller %d, want -1 (broker 3 is not listed)", v, got.ControllerID)
		}
		ps := got.Topics[0].Partitions
		if ps[0].Leader != 1 || ps[0].ErrorCode != 0 {
			t.Errorf("v%d partition 0: leader %d error %d", v, ps[0].Leader, ps[0].ErrorCode)
		}
		if ps[1].Leader != -1 || ps[1].ErrorCode != int16(newproto.ErrLeaderNotAvailable) {
			t.Errorf("v%d partition 1 (leader 3, unlisted): leader %d error %d, want -1 LEADER_NOT_AVAILABLE", v, ps[1].Leader, ps[1].ErrorCode)
		}
		if (v >= 2 && (got.ClusterID == nil || *got.ClusterID != "c")) || responseCorrelationID(out) != 7 {
			t.Errorf("v%d: cluster %v corr %d", v, got.ClusterID, responseCorrelationID(out))
		}
	}
}

// With several bridges (Config.Peers) every bridge names each broker at the
// proxy listener of the bridge that serves it, and lists every bridge: the
// same brokers at the same addresses from each (issue 15).
func TestRewriteMetadataSeveralBridges(t *testing.T) {
	// Broker 1 is served here, broker 2 by bridge 101, broker 3 by 102;
	// broker 101 is shadowed by the bridge with its id.
	others := []newproto.Broker{{NodeID: 101, Host: "b1", Port: 9092}, {NodeID: 102, Host: "b2", Port: 9092}}
	elsewhere := map[int32]newproto.Broker{2: {NodeID: 2, Host: "b1", Port: 9202}, 3: {NodeID: 3, Host: "b2", Port: 9303}}
	books := map[string]*addressBook{
		"bridge 100": {host: "b0", ports: map[int32]int32{1: 9101, 2: 9102, 3: 9103, 101: 9104}, self: newproto.Broker{NodeID: 100, Host: "b0", Port: 9092},
			bridges: others, elsewhere: elsewhere},
		"bridge 101": {host: "b1", ports: map[int32]int32{1: 9201, 2: 9202, 3: 9203}, self: newproto.Broker{NodeID: 101, Host: "b1", Port: 9092},
			bridges:   []newproto.Broker{{NodeID: 100, Host: "b0", Port: 9092}, others[1]},
			elsewhere: map[int32]newproto.Broker{1: {NodeID: 1, Host: "b0", Port: 9101}, 3: elsewhere[3]}},
	}
	want := []string{"1@b0:9101", "2@b1:9202", "3@b2:9303", "100@b0:9092", "101@b1:9092", "102@b2:9092"}
	for name, book := range books {
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(12)
		resp.ControllerID = 3
		for _, id := range []int32{1, 2, 3, 101} {
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host, b.Port = id, "real", 9092
			resp.Brokers = append(resp.Brokers, b)
		}
		tp := kmsg.NewMetadataResponseTopic()
		for p, leader := range []int32{1, 2, 3, 101} {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition, mp.Leader = int32(p), leader
			tp.Partitions = append(tp.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, tp)
		book.rewriteMetadata(resp)
		var got []string
		for _, b := range resp.Brokers {
			got = append(got, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s lists %v, want %v", name, got, want)
		}
		if resp.ControllerID != 3 {
			t.Errorf("%s: controller %d, want 3", name, resp.ControllerID)
		}
		for _, p := range resp.Topics[0].Partitions {
			if bad := p.Leader == -1; bad != (p.Partition == 3) {
				t.Errorf("%s: partition %d leader %d error %d (only the one led by a bridge id loses its leader)", name, p.Partition, p.Leader, p.ErrorCode)
			}
		}
	}

	// A transaction coordinator served by another bridge is named there.
	fc := kmsg.NewPtrFindCoordinatorResponse()
	fc.SetVersion(3)
	fc.NodeID, fc.Host, fc.Port = 3, "real", 9092
	books["bridge 100"].rewriteFindCoordinator(fc)
	if fc.Host != "b2" || fc.Port != 9303 || fc.ErrorCode != 0 {
		t.Errorf("transaction coordinator 3 named at %s:%d (error %d), want b2:9303", fc.Host, fc.Port, fc.ErrorCode)
	}
}

func TestRewriteFindCoordinator(t *testing.T) {
	book := &addressBook{host: "h", ports: map[int32]int32{1: 9101}}
	resp := kmsg.NewPtrFindCoordinatorResponse()
	resp.SetVersion(4)
	for _, node := range []int32{1, 2} {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID, c.Host, c.Port = "k", node, "real", 9092
		resp.Coordinators = append(resp.Coordinators, c)
	}
	book.rewriteFindCoordinator(resp)
	if c := resp.Coordinators[0]; c.Host != "h" || c.Port != 9101 || c.ErrorCode != 0 {
		t.Errorf("listed coordinator: %+v", c)
	}
	if c := resp.Coordinators[1]; c.NodeID != -1 || c.ErrorCode != int16(newproto.ErrCoordinatorNotAvailable) {
		t.Errorf("coordinator without a proxy listener: %+v", c)
	}
}

func TestMergeAPIVersions(t *testing.T) {
	local := []kmsg.ApiVersionsResponseApiKey{
		{ApiKey: int16(kmsg.Metadata), MinVersion: 0, MaxVersion: 12},
		{ApiKey: int16(kmsg.FindCoordinator), MinVersion: 0, MaxVersion: 4},
		{ApiKey: int16(kmsg.JoinGroup), MinVersion: 0, MaxVersion: 9},
		{ApiKey: int16(kmsg.ApiVersions), MinVersion: 0, MaxVersion: 4},
	}
	upstream := map[int16]versionRange{
		int16(kmsg.Produce):         {3, 13},
		int16(kmsg.Fetch):           {4, 17},
		int16(kmsg.Metadata):        {0, 9},
		int16(kmsg.FindCoordinator): {0, 3},
		int16(kmsg.JoinGroup):       {0, 5},
		int16(kmsg.ApiVersions):     {0, 3},
		int16(kmsg.OffsetDelete):    {0, 0},
		int16(kmsg.DescribeCluster): {0, 1},
		999:                         {0, 1}, // unknown to kmsg
	}
	got := map[int16]versionRange{}
	for _, k := range mergeAPIVersions(local, upstream) {
		got[k.ApiKey] = versionRange{k.MinVersion, k.MaxVersion}
	}
	want := map[int16]versionRange{
		int16(kmsg.Produce):         {3, 9},  // KIP-951 cap
		int16(kmsg.Fetch):           {4, 15}, // KIP-951 cap
		int16(kmsg.Metadata):        {0, 9},  // relayed: the upstream's
		int16(kmsg.FindCoordinator): {0, 3},  // both
		int16(kmsg.JoinGroup):       {0, 9},  // ours
		int16(kmsg.ApiVersions):     {0, 4},  // ours
		int16(kmsg.DescribeCluster): {0, 1},
	}
	if !maps.Equal(got, want) {
		t.Errorf("merged %v\nwant %v", got, want)
	}
}

// Every key in our table is answered locally except Metadata; the group
// APIs the bridge does not serve are refused, never relayed.
func TestRouteOf(t *testing.T) {
	for key := range int16(math.MaxInt16) {
		if !newproto.Serves(key) {
			continue
		}
		switch r := routeOf(key); kmsg.Key(key) {
		case kmsg.Metadata:
			if r != routeRewrite {
				t.Errorf("Metadata: route %d", r)
			}
		case kmsg.FindCoordinator:
			if r != routeFindCoordinator {
				t.Errorf("FindCoordinator: route %d", r)
			}
		default:
			if r != routeLocal {
				t.Errorf("%s: route %d, want local", kmsg.NameForKey(key), r)
			}
		}
	}
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.Fetch, kmsg.ListOffsets, kmsg.InitProducerID, kmsg.CreateTopics} {
		if r := routeOf(int16(k)); r != routeRelay {
			t.Errorf("%s: route %d, want relay", kmsg.NameForKey(int16(k)), r)
		}
	}
	for _, k := range []kmsg.Key{kmsg.ConsumerGroupHeartbeat, kmsg.ShareFetch, kmsg.StreamsGroupHeartbeat} {
		if !newproto.Serves(int16(k)) && routeOf(int16(k)) != routeRefuse {
			t.Errorf("%s is a group API and must not be relayed", kmsg.NameForKey(int16(k)))
		}
	}
}

// Ports: the first brokers get their rank; later ones the lowest free
// index; nobody moves when brokers come and go.
func TestPortPlan(t *testing.T) {
	var p portPlan
	p = p.assign([]int32{7, 3, 5})
	if want := (portPlan{3: 0, 5: 1, 7: 2}); !maps.Equal(p, want) {
		t.Fatalf("first plan %v, want %v", p, want)
	}
	p = p.assign([]int32{3, 7}) // 5 left: keeps its index
	p = p.assign([]int32{3, 7, 1, 9})
	if want := (portPlan{3: 0, 5: 1, 7: 2, 1: 3, 9: 4}); !maps.Equal(p, want) {
		t.Fatalf("plan %v, want %v", p, want)
	}
	for id, want := range map[int32]string{3: "h:9100", 1: "h:9103", 5: "h:9101", 8: "x:1"} {
		got, err := p.listenAddr(id, map[int32]string{8: "x:1"}, "h:9100")
		if err != nil || got != want {
			t.Errorf("broker %d: %q %v, want %q", id, got, err, want)
		}
	}
	if got, err := p.listenAddr(3, nil, "h:0"); err != nil || got != "h:0" {
		t.Errorf("base 0: %q %v", got, err)
	}
	if got, err := p.listenAddr(3, nil, ""); err != nil || got != "" {
		t.Errorf("no base: %q %v", got, err)
	}
	if _, err := p.listenAddr(9, nil, "h:65533"); err == nil {
		t.Errorf("port past 65535 accepted")
	}
}

// A draining bridge (Proxy.Drain) leaves itself out of Metadata while another bridge is listed:
// a client that refreshes there must not keep an address that closes in a moment. Alone, it
// stays: a client needs a node to ask.
func TestRewriteMetadataDraining(t *testing.T) {
	others := []newproto.Broker{{NodeID: 101, Host: "b1", Port: 9092}}
	for _, tc := range []struct {
		bridges []newproto.Broker
		want    []string
	}{
		{others, []string{"1@b1:9201", "101@b1:9092"}},
		{nil, []string{"1@b0:9101", "100@b0:9092"}},
	} {
		book := &addressBook{host: "b0", ports: map[int32]int32{1: 9101}, self: newproto.Broker{NodeID: 100, Host: "b0", Port: 9092},
			bridges: tc.bridges, draining: true}
		if tc.bridges != nil {
			book.elsewhere = map[int32]newproto.Broker{1: {NodeID: 1, Host: "b1", Port: 9201}}
		}
		resp := kmsg.NewPtrMetadataResponse()
		resp.SetVersion(12)
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = 1, "real", 9092
		resp.Brokers = append(resp.Brokers, b)
		book.rewriteMetadata(resp)
		var got []string
		for _, b := range resp.Brokers {
			got = append(got, fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("draining with other bridges %v lists %v, want %v", tc.bridges, got, tc.want)
		}
	}
}
