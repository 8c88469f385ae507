package bridge_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 17 §2: OffsetCommit for a topic or partition /brokers/topics does not list was stored
// (300 groups × 10 partitions of made-up topics: +9,000 znodes in the ZooKeeper the brokers
// depend on). Kafka answers UNKNOWN_TOPIC_OR_PARTITION and writes nothing; so does the bridge,
// and an offset of -7 (which reads back as "invalid" and makes a consumer reset, skipping
// records with "largest") is OFFSET_OUT_OF_RANGE. A real client's commit (kgo, on a real
// socket) of a known partition in the same request is stored.
func TestIntegration_CommitUnknownTopic(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	loadTopicsLayout(t, zk, map[string]int32{"orders": 3}, false)
	b := startBridge(t, connect, clientsNode, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	const g = "limits"
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = g, -1
	for _, x := range []struct {
		topic string
		parts []int32
		off   int64
	}{{"orders", []int32{0, 1, 3}, 41}, {"made-up", []int32{0}, 5}, {"orders", []int32{2}, -7}} {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = x.topic
		for _, p := range x.parts {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, x.off
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	type tp struct {
		topic string
		p     int32
	}
	var got []int16
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			got = append(got, rp.ErrorCode)
		}
	}
	// orders/0, orders/1 stored; orders/3 does not exist; made-up/0 neither; orders/2 at -7.
	want := []int16{0, 0, 3, 3, 1}
	if len(got) != len(want) {
		t.Fatalf("codes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("codes %v, want %v", got, want)
			break
		}
	}
	for _, x := range []struct {
		tp   tp
		want string
	}{{tp{"orders", 0}, "41"}, {tp{"orders", 1}, "41"}, {tp{"orders", 2}, ""}, {tp{"orders", 3}, ""}, {tp{"made-up", 0}, ""}} {
		d, _, err := zk.Get(ctx, zkstate.OffsetPath(g, x.tp.topic, x.tp.p))
		switch {
		case x.want == "" && !errors.Is(err, zkstate.ErrNoNode):
			t.Errorf("%v: znode %q %v, want none", x.tp, d, err)
		case x.want != "" && string(d) != x.want:
			t.Errorf("%v: znode %q %v, want %s", x.tp, d, err, x.want)
		}
	}
	for _, p := range []string{"/consumers/" + g + "/offsets/made-up", bridge.DefaultRoot + "/groups/" + g + "/offsets/made-up"} {
		if ok, _, err := zk.Exists(ctx, p); err != nil || ok {
			t.Errorf("%s exists=%v err=%v: a refused commit wrote it", p, ok, err)
		}
	}
	// A ZooKeeper-era commit (v0: stored without a member check, as 0.8.2 brokers did) is
	// checked alike.
	if c := kafkaRoundTrip(t, b.Addr().String(), wireCommit("v0", "", -1, "made-up", 0, 5)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; c != 3 {
		t.Errorf("v0 commit of an unknown topic: %s, want UNKNOWN_TOPIC_OR_PARTITION", codeName(c))
	}
	if c := kafkaRoundTrip(t, b.Addr().String(), wireCommit("v0", "", -1, "orders", 0, -7)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; c != 1 {
		t.Errorf("v0 commit of -7: %s, want OFFSET_OUT_OF_RANGE", codeName(c))
	}
	if ok, _, err := zk.Exists(ctx, "/consumers/v0"); err != nil || ok {
		t.Errorf("/consumers/v0 exists=%v err=%v: a refused v0 commit wrote it", ok, err)
	}
	if _, body := httpGet(t, "http://"+b.AdminAddr().String()+"/metrics"); !containsLine(body, `zkbridge_limits_refusals_total{limit="unknown_topic_or_partition"} 3`) ||
		!containsLine(body, `zkbridge_limits_refusals_total{limit="negative_offset"} 2`) {
		t.Errorf("refusals not counted:\n%s", grepLines(body, "zkbridge_limits"))
	}
}

// A bridge holding MaxGroups groups refuses a new one (GROUP_MAX_SIZE_REACHED), to JoinGroup and
// OffsetCommit alike, and keeps serving the groups it has.
func TestIntegration_MaxGroups(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	loadTopicsLayout(t, zk, map[string]int32{"orders": 1}, false)
	b := startBridge(t, connect, clientsNode, func(c *bridge.Config) { c.MaxGroups = 2 })
	addr := b.Addr().String()
	for _, g := range []string{"g1", "g2"} {
		resp := kafkaRoundTrip(t, addr, groupCommit(g, "", -1, "orders", 0, 1)).(*kmsg.OffsetCommitResponse)
		if c := resp.Topics[0].Partitions[0].ErrorCode; c != 0 {
			t.Fatalf("commit to %s: code %d", g, c)
		}
	}
	zktest.Eventually(t, 10*time.Second, "groups listed", func() (bool, string) {
		kids, _, err := zk.Children(ctx, bridge.DefaultRoot+"/groups")
		return err == nil && len(kids) == 2, "waiting for the listing"
	})
	// The watch of <root>/groups delivers the listing asynchronously: g3 is refused once it has.
	zktest.Eventually(t, 10*time.Second, "g3 refused", func() (bool, string) {
		resp := kafkaRoundTrip(t, addr, groupCommit("g3", "", -1, "orders", 0, 1)).(*kmsg.OffsetCommitResponse)
		c := resp.Topics[0].Partitions[0].ErrorCode
		return c == 81, "code " + codeName(c)
	})
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.SessionTimeoutMillis, join.ProtocolType = "g4", 10000, "consumer"
	jp := kmsg.NewJoinGroupRequestProtocol()
	jp.Name, jp.Metadata = "range", subscription(0, "orders")
	join.Protocols = append(join.Protocols, jp)
	if c := kafkaRoundTrip(t, addr, join).(*kmsg.JoinGroupResponse).ErrorCode; c != 81 {
		t.Errorf("JoinGroup of a new group past the cap: %s, want GROUP_MAX_SIZE_REACHED", codeName(c))
	}
	if c := kafkaRoundTrip(t, addr, groupCommit("g1", "", -1, "orders", 0, 2)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; c != 0 {
		t.Errorf("commit to a known group: %s", codeName(c))
	}
	if ok, _, _ := zk.Exists(ctx, bridge.DefaultRoot+"/groups/g3"); ok {
		t.Errorf("a refused group was written")
	}
}

// groupCommit is wireCommit at version 2: a simple commit (generation -1) that goes through
// the group (v0 and v1 without a member are stored as 0.8.2 brokers did, unchecked_commit.go).
func groupCommit(g, member string, gen int32, topic string, p int32, off int64) *kmsg.OffsetCommitRequest {
	req := wireCommit(g, member, gen, topic, p, off)
	req.SetVersion(2)
	return req
}

// codeName is Kafka's name of an error code, for messages.
func codeName(c int16) string {
	if err := kerr.ErrorForCode(c); err != nil {
		return err.Error()
	}
	return "NONE"
}

// containsLine reports whether text has line as one of its lines.
func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// grepLines returns the lines of text that contain sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Issue 17 §4: an offset of -7 in a 0.8 znode was served as is (a consumer then resets, and
// with "largest" skips records), and a corrupt own offset record fell back without a log line.
// Each malformed znode is now reported as no commit (or its part ignored), logged once per
// znode however often it is read.
func TestIntegration_MalformedOffsetsLoggedOnce(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	loadTopicsLayout(t, zk, map[string]int32{"orders": 3}, false)
	logs := &lineLog{}
	b := startBridge(t, connect, clientsNode, func(c *bridge.Config) {
		c.Logger = zerolog.New(io.MultiWriter(logs, zerolog.ConsoleWriter{Out: testLogOut(t), NoColor: true}))
	})
	addr := b.Addr().String()
	const g = "malformed"
	for p := range int32(3) {
		if c := kafkaRoundTrip(t, addr, groupCommit(g, "", -1, "orders", p, 10)).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; c != 0 {
			t.Fatalf("commit orders/%d: %s", p, codeName(c))
		}
	}
	// Hand edits behind the bridge's back: -7 and garbage in the 0.8 znodes, a corrupt own
	// record for partition 2.
	for path, data := range map[string]string{
		zkstate.OffsetPath(g, "orders", 0):                        "-7",
		zkstate.OffsetPath(g, "orders", 1):                        "ten",
		bridge.DefaultRoot + "/groups/" + g + "/offsets/orders/2": "{not json",
	} {
		if _, err := zk.Set(ctx, path, []byte(data), -1); err != nil {
			t.Fatal(err)
		}
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.SetVersion(1)
	fetch.Group = g
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "orders", []int32{0, 1, 2}
	fetch.Topics = append(fetch.Topics, ft)
	for range 3 {
		got := map[int32]int64{}
		for _, rp := range kafkaRoundTrip(t, addr, fetch).(*kmsg.OffsetFetchResponse).Topics[0].Partitions {
			got[rp.Partition] = rp.Offset
		}
		if want := map[int32]int64{0: -1, 1: -1, 2: 10}; !maps.Equal(got, want) {
			t.Fatalf("OffsetFetch = %v, want %v", got, want)
		}
	}
	for _, path := range []string{"/consumers/" + g + "/offsets/orders/0", "/consumers/" + g + "/offsets/orders/1", bridge.DefaultRoot + "/groups/" + g + "/offsets/orders/2"} {
		if n := logs.count(`"message":"malformed offset"`, `"path":"`+path+`"`); n != 1 {
			t.Errorf("%s logged %d times, want once", path, n)
		}
	}
}

// lineLog keeps JSON log lines for a test to count.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

// count returns the lines that contain every one of subs.
func (l *lineLog) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// testLogOut is a writer into t.Log that goes quiet once the test is over (newLogger's).
func testLogOut(t *testing.T) io.Writer {
	l := &testLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}
