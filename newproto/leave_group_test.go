package newproto_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// LeaveGroup v0-v2: one member by id, the outcome in the top-level error.
func TestLeaveGroupSingle(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)

	for _, v := range kafkatest.Versions(0, 2) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			g := fmt.Sprintf("leave-v%d", v)
			id, _ := stableAlone(t, c, g, "", []byte{1})
			leave := func(member string) *kmsg.LeaveGroupResponse {
				r := kmsg.NewPtrLeaveGroupRequest()
				r.SetVersion(v)
				r.Group, r.MemberID = g, member
				return c.RoundTrip(r).(*kmsg.LeaveGroupResponse)
			}
			if r := leave("nobody"); r.ErrorCode != int16(newproto.ErrUnknownMemberID) {
				t.Errorf("unknown member: %s, want UNKNOWN_MEMBER_ID", codeName(r.ErrorCode))
			}
			if r := leave(id); r.ErrorCode != 0 || len(r.Members) != 0 {
				t.Errorf("member: %s members %v, want NONE and none", codeName(r.ErrorCode), r.Members)
			}
			if d := fg.describe(g); len(d.Members) != 0 {
				t.Errorf("group still has %d members", len(d.Members))
			}
		})
	}
}

// LeaveGroup v3-v5: a batch of members by member id and/or group instance
// id (KIP-345), one error per member and the top-level error NONE; v5
// carries a reason per member (KIP-800) to the engine.
func TestLeaveGroupBatch(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)

	for _, v := range kafkatest.Versions(3, 5) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			g := fmt.Sprintf("leave-batch-v%d", v)
			id, _ := stableAlone(t, c, g, "inst-1", []byte{1})

			r := kmsg.NewPtrLeaveGroupRequest()
			r.SetVersion(v)
			r.Group = g
			for _, m := range []struct{ id, inst, reason string }{
				{id, "inst-1", "shutting down"},
				{"", "inst-unknown", ""},
				{"nobody", "", ""},
			} {
				lm := kmsg.NewLeaveGroupRequestMember()
				lm.MemberID = m.id
				if m.inst != "" {
					lm.InstanceID = kmsg.StringPtr(m.inst)
				}
				if m.reason != "" {
					lm.Reason = kmsg.StringPtr(m.reason)
				}
				r.Members = append(r.Members, lm)
			}
			resp := c.RoundTrip(r).(*kmsg.LeaveGroupResponse)
			if resp.ErrorCode != 0 || len(resp.Members) != 3 {
				t.Fatalf("%s with %d members, want NONE and 3", codeName(resp.ErrorCode), len(resp.Members))
			}
			want := []struct {
				id, inst string
				code     newproto.ErrorCode
			}{{id, "inst-1", 0}, {"", "inst-unknown", newproto.ErrUnknownMemberID}, {"nobody", "", newproto.ErrUnknownMemberID}}
			for i, m := range resp.Members {
				inst := ""
				if m.InstanceID != nil {
					inst = *m.InstanceID
				}
				if m.MemberID != want[i].id || inst != want[i].inst || m.ErrorCode != int16(want[i].code) {
					t.Errorf("member %d: %q %q %s, want %q %q %s", i, m.MemberID, inst, codeName(m.ErrorCode), want[i].id, want[i].inst, want[i].code.Name())
				}
			}
			if d := fg.describe(g); d.State != group.Empty {
				t.Errorf("group %s, want Empty", d.State)
			}
			evs := fg.eventsOf(g)
			ev := evs[len(evs)-1].(group.LeaveGroup)
			wantReason := ""
			if v >= 5 {
				wantReason = "shutting down"
			}
			if ev.Members[0].Reason != wantReason {
				t.Errorf("reason %q, want %q", ev.Members[0].Reason, wantReason)
			}
		})
	}
}
