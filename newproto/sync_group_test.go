package newproto_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// SyncGroup at every version: the leader's assignment comes back to it;
// from v5 the protocol type and name are echoed (KIP-559) and mandatory;
// stale generations and unknown members are refused.
func TestSyncGroupVersions(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)

	for _, v := range kafkatest.Versions(0, 5) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			g := fmt.Sprintf("sync-v%d", v)
			j := joinAlone(t, c, 3, g, "")
			assignment := []byte{0, 1, 2, byte(v)}

			for _, tc := range []struct {
				name string
				req  *kmsg.SyncGroupRequest
				want newproto.ErrorCode
			}{
				{"stale generation", syncRequest(v, g, j.MemberID, j.Generation+1, nil), newproto.ErrIllegalGeneration},
				{"unknown member", syncRequest(v, g, "nobody", j.Generation, nil), newproto.ErrUnknownMemberID},
			} {
				if r := c.RoundTrip(tc.req).(*kmsg.SyncGroupResponse); r.ErrorCode != int16(tc.want) || len(r.MemberAssignment) != 0 {
					t.Errorf("%s: %s assignment %v, want %s and none", tc.name, codeName(r.ErrorCode), r.MemberAssignment, tc.want.Name())
				}
			}
			if v >= 5 {
				req := syncRequest(v, g, j.MemberID, j.Generation, nil)
				req.Protocol = nil
				if r := c.RoundTrip(req).(*kmsg.SyncGroupResponse); r.ErrorCode != int16(newproto.ErrInconsistentGroupProtocol) {
					t.Errorf("v5 without protocol name: %s, want INCONSISTENT_GROUP_PROTOCOL", codeName(r.ErrorCode))
				}
				req = syncRequest(v, g, j.MemberID, j.Generation, nil)
				req.Protocol = kmsg.StringPtr("roundrobin")
				if r := c.RoundTrip(req).(*kmsg.SyncGroupResponse); r.ErrorCode != int16(newproto.ErrInconsistentGroupProtocol) {
					t.Errorf("v5 with another protocol: %s, want INCONSISTENT_GROUP_PROTOCOL", codeName(r.ErrorCode))
				}
			}

			r := c.RoundTrip(syncRequest(v, g, j.MemberID, j.Generation, map[string][]byte{j.MemberID: assignment})).(*kmsg.SyncGroupResponse)
			if r.ErrorCode != 0 || !bytes.Equal(r.MemberAssignment, assignment) {
				t.Fatalf("leader sync: %s assignment %v, want NONE %v", codeName(r.ErrorCode), r.MemberAssignment, assignment)
			}
			if v >= 5 {
				if r.ProtocolType == nil || *r.ProtocolType != "consumer" || r.Protocol == nil || *r.Protocol != "range" {
					t.Errorf("protocol type %v name %v, want consumer range", r.ProtocolType, r.Protocol)
				}
			} else if r.ProtocolType != nil || r.Protocol != nil {
				t.Errorf("protocol type %v name %v before v5", r.ProtocolType, r.Protocol)
			}
		})
	}
}
