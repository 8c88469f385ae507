package newproto_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

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
	c := dial(t, ts.addr)

	for _, v := range versions(0, 8) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			simple := fmt.Sprintf("commit-simple-v%d", v)
			r := c.roundTrip(commitRequest(v, simple, "", -1,
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
			if r := c.roundTrip(commitRequest(v, g, "", -1, commitPartition(0, 1, -1, nil))).(*kmsg.OffsetCommitResponse); !allEqual(commitCodes(r), int16(newproto.ErrUnknownMemberID)) {
				t.Errorf("simple commit into a group with members: %v, want UNKNOWN_MEMBER_ID", commitCodes(r))
			}
			if v == 0 {
				return // v0 has no member
			}
			if r := c.roundTrip(commitRequest(v, g, id, gen+1, commitPartition(0, 1, -1, nil))).(*kmsg.OffsetCommitResponse); !allEqual(commitCodes(r), int16(newproto.ErrIllegalGeneration)) {
				t.Errorf("stale generation: %v, want ILLEGAL_GENERATION", commitCodes(r))
			}
			big := strings.Repeat("x", 4097)
			r = c.roundTrip(commitRequest(v, g, id, gen,
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
	c := dial(t, ts.addr)
	id, gen := stableAlone(t, c, "commit-static", "inst-c", []byte{1})
	for _, v := range versions(7, 8) {
		for _, tc := range []struct {
			member string
			want   newproto.ErrorCode
		}{{id, 0}, {"impostor", newproto.ErrFencedInstanceID}} {
			r := commitRequest(v, "commit-static", tc.member, gen, commitPartition(0, 7, -1, nil))
			r.InstanceID = kmsg.StringPtr("inst-c")
			if codes := commitCodes(c.roundTrip(r).(*kmsg.OffsetCommitResponse)); !allEqual(codes, int16(tc.want)) {
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
	c := dial(t, ts.addr)
	r := kmsg.NewPtrOffsetCommitRequest()
	r.SetVersion(8)
	r.Group = "nothing"
	if resp := c.roundTrip(r).(*kmsg.OffsetCommitResponse); len(resp.Topics) != 0 {
		t.Errorf("topics %v", resp.Topics)
	}
	if evs := fg.eventsOf("nothing"); len(evs) != 0 {
		t.Errorf("engine saw %v", evs)
	}
}
