package newproto_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

func commitRequest(v int16, g, member string, gen int32, parts ...kmsg.OffsetCommitRequestTopicPartition) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.SetVersion(v)
	r.Group, r.MemberID, r.Generation = g, member, gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "orders"
	t.Partitions = parts
	r.Topics = append(r.Topics, t)
	return r
}

func commitPartition(p int32, offset int64, epoch int32, metadata *string) kmsg.OffsetCommitRequestTopicPartition {
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, offset, epoch, metadata
	return rp
}

func commitCodes(r *kmsg.OffsetCommitResponse) []int16 {
	var codes []int16
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			codes = append(codes, p.ErrorCode)
		}
	}
	return codes
}

// OffsetCommit at every version. v0 is a simple commit (no member): taken
// into an Empty group, refused while the group has members. From v1 a
// member commits with its generation; a stale one is ILLEGAL_GENERATION.
// Leader epochs are kept from v6; a null metadata is ""; oversized
// metadata fails its partition alone.
func TestOffsetCommitVersions(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)

	for _, v := range kafkatest.Versions(0, 8) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			simple := fmt.Sprintf("commit-simple-v%d", v)
			r := c.RoundTrip(commitRequest(v, simple, "", -1,
				commitPartition(0, 10, 5, kmsg.StringPtr("m0")),
				commitPartition(1, 11, 5, nil))).(*kmsg.OffsetCommitResponse)
			if codes := commitCodes(r); !reflect.DeepEqual(codes, []int16{0, 0}) {
				t.Fatalf("simple commit: codes %v", codes)
			}
			epoch := int32(-1)
			if v >= 6 {
				epoch = 5
			}
			want := []newproto.CommittedOffset{
				{Topic: "orders", Partition: 0, Offset: 10, LeaderEpoch: epoch, Metadata: "m0"},
				{Topic: "orders", Partition: 1, Offset: 11, LeaderEpoch: epoch, Metadata: ""},
			}
			if got := fg.committed(simple); !reflect.DeepEqual(got, want) {
				t.Errorf("stored %+v, want %+v", got, want)
			}

			g := fmt.Sprintf("commit-member-v%d", v)
			id, gen := stableAlone(t, c, g, "", []byte{1})
			if r := c.RoundTrip(commitRequest(v, g, "", -1, commitPartition(0, 1, -1, nil))).(*kmsg.OffsetCommitResponse); !allEqual(commitCodes(r), int16(newproto.ErrUnknownMemberID)) {
				t.Errorf("simple commit into a group with members: %v, want UNKNOWN_MEMBER_ID", commitCodes(r))
			}
			if v == 0 {
				return // v0 has no member
			}
			if r := c.RoundTrip(commitRequest(v, g, id, gen+1, commitPartition(0, 1, -1, nil))).(*kmsg.OffsetCommitResponse); !allEqual(commitCodes(r), int16(newproto.ErrIllegalGeneration)) {
				t.Errorf("stale generation: %v, want ILLEGAL_GENERATION", commitCodes(r))
			}
			big := strings.Repeat("x", 4097)
			r = c.RoundTrip(commitRequest(v, g, id, gen,
				commitPartition(0, 100, -1, nil),
				commitPartition(1, 101, -1, &big))).(*kmsg.OffsetCommitResponse)
			if codes := commitCodes(r); !reflect.DeepEqual(codes, []int16{0, int16(newproto.ErrOffsetMetadataTooLarge)}) {
				t.Errorf("member commit: codes %v, want [NONE OFFSET_METADATA_TOO_LARGE]", codes)
			}
			if got := fg.committed(g); len(got) != 1 || got[0].Offset != 100 {
				t.Errorf("stored %+v, want partition 0 at 100 only", got)
			}
		})
	}
}

// v7+: a commit whose group.instance.id maps to another member id is
// fenced (KIP-345).
func TestOffsetCommitInstanceID(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	id, gen := stableAlone(t, c, "commit-static", "inst-c", []byte{1})
	for _, v := range kafkatest.Versions(7, 8) {
		for _, tc := range []struct {
			member string
			want   newproto.ErrorCode
		}{{id, 0}, {"impostor", newproto.ErrFencedInstanceID}} {
			r := commitRequest(v, "commit-static", tc.member, gen, commitPartition(0, 7, -1, nil))
			r.InstanceID = kmsg.StringPtr("inst-c")
			if codes := commitCodes(c.RoundTrip(r).(*kmsg.OffsetCommitResponse)); !allEqual(codes, int16(tc.want)) {
				t.Errorf("v%d member %q: %v, want %s", v, tc.member, codes, tc.want.Name())
			}
		}
	}
}

// A commit of no partitions is answered without asking the engine, as
// Kafka does.
func TestOffsetCommitEmpty(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	r := kmsg.NewPtrOffsetCommitRequest()
	r.SetVersion(8)
	r.Group = "nothing"
	if resp := c.RoundTrip(r).(*kmsg.OffsetCommitResponse); len(resp.Topics) != 0 {
		t.Errorf("topics %v", resp.Topics)
	}
	if evs := fg.eventsOf("nothing"); len(evs) != 0 {
		t.Errorf("engine saw %v", evs)
	}
}

// uncheckedGroups is a Groups that stores ZooKeeper-era commits itself
// (newproto.UncheckedCommits), answering code for each.
type uncheckedGroups struct {
	*fakeGroups
	code newproto.ErrorCode
	mu   sync.Mutex
	got  map[string][]group.OffsetCommitPartition
}

func (u *uncheckedGroups) CommitUnchecked(_ context.Context, g string, offs []group.OffsetCommitPartition) ([]newproto.ErrorCode, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.got[g] = append(u.got[g], offs...)
	codes := make([]newproto.ErrorCode, len(offs))
	for i := range codes {
		codes[i] = u.code
	}
	return codes, nil
}

// Issue 18 item 2: v0, and v1 with generation -1 and neither member id nor
// instance id, are the commits Kafka 0.8.2 brokers stored without a member
// check; they go to UncheckedCommits when Groups has it, with its codes.
// Every other commit goes to the engine, v2+ simple commits included
// (Kafka's rule: UNKNOWN_MEMBER_ID while the group has members).
func TestOffsetCommitZooKeeperEraUnchecked(t *testing.T) {
	u := &uncheckedGroups{fakeGroups: newFakeGroups(t), code: newproto.ErrUnsupportedVersion, got: map[string][]group.OffsetCommitPartition{}}
	ts := startServer(t, newproto.Config{Coordinator: newproto.NewGroupCoordinator(u, newproto.WithUUIDs(seqUUIDs()))})
	c := kafkatest.Dial(t, ts.addr)
	const g = "zk-era"
	stableAlone(t, c, g, "", []byte{1})
	for _, tc := range []struct {
		v         int16
		member    string
		gen       int32
		unchecked bool
	}{
		{0, "", -1, true},
		{1, "", -1, true},
		{1, "someone", -1, false},
		{1, "", 3, false},
		{2, "", -1, false},
		{8, "", -1, false},
	} {
		u.mu.Lock()
		before := len(u.got[g])
		u.mu.Unlock()
		r := c.RoundTrip(commitRequest(tc.v, g, tc.member, tc.gen, commitPartition(2, 42, -1, kmsg.StringPtr("m")))).(*kmsg.OffsetCommitResponse)
		u.mu.Lock()
		took := len(u.got[g]) > before
		u.mu.Unlock()
		want := newproto.ErrUnsupportedVersion
		if !tc.unchecked {
			want = newproto.ErrUnknownMemberID
		}
		if took != tc.unchecked || !allEqual(commitCodes(r), int16(want)) {
			t.Errorf("v%d member %q generation %d: unchecked %v with codes %v, want unchecked %v with %s",
				tc.v, tc.member, tc.gen, took, commitCodes(r), tc.unchecked, want.Name())
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if got := u.got[g]; len(got) != 2 || got[0] != (group.OffsetCommitPartition{Topic: "orders", Partition: 2, Offset: 42, LeaderEpoch: -1, Metadata: "m"}) {
		t.Errorf("unchecked commits %+v", got)
	}
}
