package newproto_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// fetched is one partition of an OffsetFetch response, flattened.
type fetched struct {
	topic    string
	part     int32
	offset   int64
	epoch    int32
	metadata string
	code     int16
}

func (f fetched) String() string {
	return fmt.Sprintf("%s/%d=%d(e%d,%q,%s)", f.topic, f.part, f.offset, f.epoch, f.metadata, codeName(f.code))
}

func flattenFetch(r *kmsg.OffsetFetchResponse) []fetched {
	var out []fetched
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			out = append(out, fetched{t.Topic, p.Partition, p.Offset, p.LeaderEpoch, optStr(p.Metadata), p.ErrorCode})
		}
	}
	return out
}

func flattenFetchGroup(g kmsg.OffsetFetchResponseGroup) []fetched {
	var out []fetched
	for _, t := range g.Topics {
		for _, p := range t.Partitions {
			out = append(out, fetched{t.Topic, p.Partition, p.Offset, p.LeaderEpoch, optStr(p.Metadata), p.ErrorCode})
		}
	}
	return out
}

func optStr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// OffsetFetch at every version: committed partitions with their offset,
// metadata and (v5+) leader epoch; uncommitted ones -1 and "" with no
// error; null topics (v2+) for every committed offset; the group errors
// per partition (v0-v1) or top-level (v2-v7); v8 several groups, each with
// its own topics and error (KIP-709).
func TestOffsetFetchVersions(t *testing.T) {
	fenced := fmt.Errorf("owned by bridge-2: %w", newproto.ErrNotCoordinator)
	fg := newFakeGroups(t, withFailure(func(g string, _ group.Event) error {
		if g == "fenced" {
			return fenced
		}
		return nil
	}))
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	simpleCommit(t, c, "fetch", map[string]map[int32]int64{"orders": {0: 100, 1: 101}, "payments": {3: 7}})

	request := func(v int16, g string, topics map[string][]int32, order ...string) *kmsg.OffsetFetchRequest {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(v)
		r.Group = g
		if topics != nil {
			r.Topics = []kmsg.OffsetFetchRequestTopic{}
		}
		for _, topic := range order {
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic, rt.Partitions = topic, topics[topic]
			r.Topics = append(r.Topics, rt)
		}
		return r
	}
	asked := map[string][]int32{"orders": {0, 1, 2}, "absent": {0}}

	for _, v := range kafkatest.Versions(0, 7) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			e := int32(-1)
			if v >= 5 {
				e = 3 // simpleCommit's leader epoch
			}
			resp := c.RoundTrip(request(v, "fetch", asked, "orders", "absent")).(*kmsg.OffsetFetchResponse)
			want := []fetched{
				{"orders", 0, 100, e, "md-100", 0},
				{"orders", 1, 101, e, "md-101", 0},
				{"orders", 2, -1, -1, "", 0},
				{"absent", 0, -1, -1, "", 0},
			}
			if got := flattenFetch(resp); resp.ErrorCode != 0 || !reflect.DeepEqual(got, want) {
				t.Errorf("named topics: %s %v\nwant %v", codeName(resp.ErrorCode), got, want)
			}

			if v >= 2 {
				resp = c.RoundTrip(request(v, "fetch", nil)).(*kmsg.OffsetFetchResponse)
				want = []fetched{{"orders", 0, 100, e, "md-100", 0}, {"orders", 1, 101, e, "md-101", 0}, {"payments", 3, 7, e, "md-7", 0}}
				if got := flattenFetch(resp); !reflect.DeepEqual(got, want) {
					t.Errorf("all topics: %v\nwant %v", got, want)
				}
			}

			for g, code := range map[string]int16{"": int16(newproto.ErrInvalidGroupID), "fenced": int16(newproto.ErrNotCoordinator)} {
				resp = c.RoundTrip(request(v, g, asked, "orders")).(*kmsg.OffsetFetchResponse)
				if v >= 2 {
					if resp.ErrorCode != code || len(resp.Topics) != 0 {
						t.Errorf("group %q: %s with %d topics, want %s and none", g, codeName(resp.ErrorCode), len(resp.Topics), codeName(code))
					}
					continue
				}
				want = []fetched{{"orders", 0, -1, -1, "", code}, {"orders", 1, -1, -1, "", code}, {"orders", 2, -1, -1, "", code}}
				if got := flattenFetch(resp); !reflect.DeepEqual(got, want) {
					t.Errorf("group %q: %v\nwant %v", g, got, want)
				}
			}
		})
	}

	t.Run("v8", func(t *testing.T) {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(8)
		for _, g := range []struct {
			name   string
			topics map[string][]int32
		}{{"fetch", map[string][]int32{"orders": {1, 2}}}, {"fetch", nil}, {"unknown", map[string][]int32{"orders": {0}}}, {"", nil}, {"fenced", nil}} {
			rg := kmsg.NewOffsetFetchRequestGroup()
			rg.Group = g.name
			for topic, parts := range g.topics {
				rt := kmsg.NewOffsetFetchRequestGroupTopic()
				rt.Topic, rt.Partitions = topic, parts
				rg.Topics = append(rg.Topics, rt)
			}
			r.Groups = append(r.Groups, rg)
		}
		resp := c.RoundTrip(r).(*kmsg.OffsetFetchResponse)
		want := []struct {
			group string
			code  int16
			parts []fetched
		}{
			{"fetch", 0, []fetched{{"orders", 1, 101, 3, "md-101", 0}, {"orders", 2, -1, -1, "", 0}}},
			{"fetch", 0, []fetched{{"orders", 0, 100, 3, "md-100", 0}, {"orders", 1, 101, 3, "md-101", 0}, {"payments", 3, 7, 3, "md-7", 0}}},
			{"unknown", 0, []fetched{{"orders", 0, -1, -1, "", 0}}},
			{"", int16(newproto.ErrInvalidGroupID), nil},
			{"fenced", int16(newproto.ErrNotCoordinator), nil},
		}
		if len(resp.Groups) != len(want) {
			t.Fatalf("%d groups, want %d", len(resp.Groups), len(want))
		}
		for i, g := range resp.Groups {
			if got := flattenFetchGroup(g); g.Group != want[i].group || g.ErrorCode != want[i].code || !reflect.DeepEqual(got, want[i].parts) {
				t.Errorf("group %d: %q %s %v\nwant %q %s %v", i, g.Group, codeName(g.ErrorCode), got, want[i].group, codeName(want[i].code), want[i].parts)
			}
		}
	})
}

// idGroups is Groups that knows topic ids (the bridge's come from the
// topic znodes Kafka 2.8+ writes).
type idGroups struct {
	*fakeGroups
	ids map[string][16]byte
}

func (g idGroups) TopicIDs(context.Context) (map[string][16]byte, error) { return g.ids, nil }

// v9 is v8 (the member id and epoch are for KIP-848 groups); v10 names
// topics by id: known ids are answered as their topic, unknown ones (and
// the zero id) UNKNOWN_TOPIC_ID per partition; all topics leaves out the
// committed topics that have no id.
func TestOffsetFetchTopicIDs(t *testing.T) {
	ordersID := [16]byte{1}
	fg := newFakeGroups(t)
	ts := startServer(t, newproto.Config{Coordinator: newproto.NewGroupCoordinator(
		idGroups{fg, map[string][16]byte{"orders": ordersID}}, newproto.WithUUIDs(seqUUIDs()))})
	c := kafkatest.Dial(t, ts.addr)
	simpleCommit(t, c, "fetch", map[string]map[int32]int64{"orders": {0: 100, 1: 101}, "payments": {3: 7}})

	type part struct {
		id     [16]byte
		topic  string
		part   int32
		offset int64
		code   int16
	}
	flatten := func(g kmsg.OffsetFetchResponseGroup) []part {
		var out []part
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				out = append(out, part{t.TopicID, t.Topic, p.Partition, p.Offset, p.ErrorCode})
			}
		}
		return out
	}
	fetch := func(v int16, topics []kmsg.OffsetFetchRequestGroupTopic) []part {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.SetVersion(v)
		rg := kmsg.NewOffsetFetchRequestGroup()
		rg.Group, rg.MemberID, rg.MemberEpoch = "fetch", kmsg.StringPtr("some-member"), 7
		rg.Topics = topics
		r.Groups = append(r.Groups, rg)
		resp := c.RoundTrip(r).(*kmsg.OffsetFetchResponse)
		if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
			t.Fatalf("v%d: groups %+v, want one without error", v, resp.Groups)
		}
		return flatten(resp.Groups[0])
	}
	topic := func(name string, id [16]byte, parts ...int32) kmsg.OffsetFetchRequestGroupTopic {
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.TopicID, rt.Partitions = name, id, parts
		return rt
	}

	got := fetch(9, []kmsg.OffsetFetchRequestGroupTopic{topic("orders", [16]byte{}, 0, 2)})
	if want := []part{{[16]byte{}, "orders", 0, 100, 0}, {[16]byte{}, "orders", 2, -1, 0}}; !reflect.DeepEqual(got, want) {
		t.Errorf("v9: %v\nwant %v", got, want)
	}

	got = fetch(10, []kmsg.OffsetFetchRequestGroupTopic{
		topic("", ordersID, 1, 0), topic("", [16]byte{9}, 0, 0, 1), topic("", [16]byte{}, 3)})
	want := []part{
		{ordersID, "", 1, 101, 0}, {ordersID, "", 0, 100, 0},
		{[16]byte{9}, "", 0, -1, int16(newproto.ErrUnknownTopicID)}, {[16]byte{9}, "", 1, -1, int16(newproto.ErrUnknownTopicID)},
		{[16]byte{}, "", 3, -1, int16(newproto.ErrUnknownTopicID)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v10 by id: %v\nwant %v", got, want)
	}

	got = fetch(10, nil)
	if want := []part{{ordersID, "", 0, 100, 0}, {ordersID, "", 1, 101, 0}}; !reflect.DeepEqual(got, want) {
		t.Errorf("v10 all topics: %v\nwant %v", got, want)
	}
}
