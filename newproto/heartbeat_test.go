package newproto_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// Heartbeat at every version, against a Stable group of one static member:
// the member's own heartbeat is fine; a stale generation, an unknown member
// and (v3+, KIP-345) an instance id owned by another member id are not.
func TestHeartbeatVersions(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	const g = "hb"
	id, gen := stableAlone(t, c, g, "inst-hb", []byte{1})

	hb := func(v int16, member string, gen int32, instance string) *kmsg.HeartbeatRequest {
		r := kmsg.NewPtrHeartbeatRequest()
		r.SetVersion(v)
		r.Group, r.MemberID, r.Generation = g, member, gen
		if instance != "" {
			r.InstanceID = kmsg.StringPtr(instance)
		}
		return r
	}
	type hbCase struct {
		name string
		req  *kmsg.HeartbeatRequest
		want newproto.ErrorCode
	}
	for _, v := range kafkatest.Versions(0, 4) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			cases := []hbCase{
				{"member", hb(v, id, gen, ""), 0},
				{"stale generation", hb(v, id, gen-1, ""), newproto.ErrIllegalGeneration},
				{"unknown member", hb(v, "nobody", gen, ""), newproto.ErrUnknownMemberID},
			}
			if v >= 3 {
				cases = append(cases,
					hbCase{"member with its instance id", hb(v, id, gen, "inst-hb"), 0},
					hbCase{"instance id of another member", hb(v, "impostor", gen, "inst-hb"), newproto.ErrFencedInstanceID})
			}
			for _, tc := range cases {
				if r := c.RoundTrip(tc.req).(*kmsg.HeartbeatResponse); r.ErrorCode != int16(tc.want) {
					t.Errorf("%s: %s, want %s", tc.name, codeName(r.ErrorCode), tc.want.Name())
				}
			}
		})
	}
}
