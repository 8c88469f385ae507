package newproto_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// JoinGroup at every version: a new member joins an empty group and gets
// generation 1 as its leader, through MEMBER_ID_REQUIRED from v4 (KIP-394),
// with the fields each version carries; the event the engine sees carries
// what the version says (v0: rebalance timeout = session timeout; v8
// reason; v9 SkipAssignment support).
func TestJoinGroupVersions(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)

	for _, v := range kafkatest.Versions(0, 9) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			g := fmt.Sprintf("join-v%d", v)
			req := joinRequest(v, g, "", "")
			req.Reason = kmsg.StringPtr("starting up")
			first := c.RoundTrip(req).(*kmsg.JoinGroupResponse)
			memberID := first.MemberID
			if v >= 4 {
				// KIP-394: the member id comes back with MEMBER_ID_REQUIRED.
				if first.ErrorCode != int16(newproto.ErrMemberIDRequired) || first.Generation != -1 || memberID == "" {
					t.Fatalf("first join: %s generation %d member %q, want MEMBER_ID_REQUIRED -1 and an id",
						codeName(first.ErrorCode), first.Generation, memberID)
				}
				req.MemberID = memberID
				first = c.RoundTrip(req).(*kmsg.JoinGroupResponse)
			}
			r := first
			if r.ErrorCode != 0 || r.Generation != 1 {
				t.Fatalf("join: %s generation %d, want NONE 1", codeName(r.ErrorCode), r.Generation)
			}
			if !bytes.HasPrefix([]byte(r.MemberID), []byte(testClientID+"-uuid-")) || (v >= 4 && r.MemberID != memberID) {
				t.Errorf("member id %q, want %s-uuid-N (and %q from v4)", r.MemberID, testClientID, memberID)
			}
			if r.LeaderID != r.MemberID || r.Protocol == nil || *r.Protocol != "range" {
				t.Errorf("leader %q protocol %v, want %q range", r.LeaderID, r.Protocol, r.MemberID)
			}
			if want := v >= 7; (r.ProtocolType != nil) != want || (want && *r.ProtocolType != "consumer") {
				t.Errorf("protocol type %v, want consumer from v7 only", r.ProtocolType)
			}
			if len(r.Members) != 1 || r.Members[0].MemberID != r.MemberID || !bytes.Equal(r.Members[0].ProtocolMetadata, []byte{1, 2, 3}) {
				t.Errorf("members %+v, want the leader with range's metadata", r.Members)
			}
			if r.SkipAssignment {
				t.Error("SkipAssignment set for a new leader")
			}

			evs := fg.eventsOf(g)
			ev, ok := evs[len(evs)-1].(group.JoinGroup)
			if !ok {
				t.Fatalf("last event %T, want JoinGroup", evs[len(evs)-1])
			}
			wantRebalance := 30 * time.Second
			if v == 0 {
				wantRebalance = 10 * time.Second
			}
			wantReason := ""
			if v >= 8 {
				wantReason = "starting up"
			}
			if ev.SessionTimeout != 10*time.Second || ev.RebalanceTimeout != wantRebalance ||
				ev.RequireKnownMemberID != (v >= 4) || ev.SupportSkipAssignment != (v >= 9) ||
				ev.Reason != wantReason || ev.ClientID != testClientID || ev.ClientHost != "/127.0.0.1" ||
				ev.ProtocolType != "consumer" || len(ev.Protocols) != 2 || ev.Protocols[1].Name != "roundrobin" {
				t.Errorf("event %+v", ev)
			}
		})
	}
}

// Static membership (KIP-345) at JoinGroup v5-v9: a known group.instance.id
// rejoining with an empty member id (a restart) gets a new member id
// "<instance>-<uuid>" and the same generation, with no rebalance; the old
// id is fenced. From v9 the rejoining leader is told it leads but must
// skip the assignment (KIP-814); before, the reply names the old leader id
// so that the client does not run the assignor.
func TestJoinGroupStaticRejoin(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)

	for _, v := range kafkatest.Versions(5, 9) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			g := fmt.Sprintf("static-v%d", v)
			j := joinAlone(t, c, v, g, "inst-a")
			if want := "inst-a-uuid-"; !bytes.HasPrefix([]byte(j.MemberID), []byte(want)) {
				t.Errorf("static member id %q, want prefix %s", j.MemberID, want)
			}
			if len(j.Members) != 1 || j.Members[0].InstanceID == nil || *j.Members[0].InstanceID != "inst-a" {
				t.Errorf("members %+v, want inst-a", j.Members)
			}
			s := c.RoundTrip(syncRequest(5, g, j.MemberID, j.Generation, map[string][]byte{j.MemberID: {7}})).(*kmsg.SyncGroupResponse)
			if s.ErrorCode != 0 {
				t.Fatalf("sync: %s", codeName(s.ErrorCode))
			}

			r := c.RoundTrip(joinRequest(v, g, "", "inst-a")).(*kmsg.JoinGroupResponse)
			if r.ErrorCode != 0 || r.Generation != j.Generation || r.MemberID == j.MemberID {
				t.Fatalf("rejoin: %s generation %d member %q, want NONE %d and a new id", codeName(r.ErrorCode), r.Generation, r.MemberID, j.Generation)
			}
			if v >= 9 {
				if r.LeaderID != r.MemberID || !r.SkipAssignment || len(r.Members) != 1 {
					t.Errorf("v9 rejoin: leader %q skip %v members %d, want itself, true, 1", r.LeaderID, r.SkipAssignment, len(r.Members))
				}
			} else if r.LeaderID != j.MemberID || r.SkipAssignment || len(r.Members) != 0 {
				t.Errorf("rejoin: leader %q skip %v members %d, want the old id %q, false, 0", r.LeaderID, r.SkipAssignment, len(r.Members), j.MemberID)
			}
			if d := fg.describe(g); d.State != group.Stable || d.Generation != group.Generation(j.Generation) {
				t.Errorf("group %s generation %d, want Stable %d", d.State, d.Generation, j.Generation)
			}

			// The old id is fenced; the new one gets the cached assignment.
			hb := kmsg.NewPtrHeartbeatRequest()
			hb.SetVersion(3)
			hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = g, j.MemberID, j.Generation, kmsg.StringPtr("inst-a")
			if h := c.RoundTrip(hb).(*kmsg.HeartbeatResponse); h.ErrorCode != int16(newproto.ErrFencedInstanceID) {
				t.Errorf("old id heartbeat: %s, want FENCED_INSTANCE_ID", codeName(h.ErrorCode))
			}
			sreq := syncRequest(5, g, r.MemberID, r.Generation, nil)
			sreq.InstanceID = kmsg.StringPtr("inst-a")
			if s := c.RoundTrip(sreq).(*kmsg.SyncGroupResponse); s.ErrorCode != 0 || !bytes.Equal(s.MemberAssignment, []byte{7}) {
				t.Errorf("new id sync: %s assignment %v, want the cached [7]", codeName(s.ErrorCode), s.MemberAssignment)
			}
		})
	}
}

// The engine's refusals reach the client with the member id echoed and
// generation -1.
func TestJoinGroupErrors(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	stableAlone(t, c, "taken", "", []byte{1})

	for _, tc := range []struct {
		name string
		req  func() *kmsg.JoinGroupRequest
		want newproto.ErrorCode
	}{
		{"session timeout below the minimum", func() *kmsg.JoinGroupRequest {
			r := joinRequest(9, "errs", "", "")
			r.SessionTimeoutMillis = 1000
			return r
		}, newproto.ErrInvalidSessionTimeout},
		{"no protocol type", func() *kmsg.JoinGroupRequest {
			r := joinRequest(9, "errs", "", "")
			r.ProtocolType = ""
			return r
		}, newproto.ErrInconsistentGroupProtocol},
		{"no protocol in common", func() *kmsg.JoinGroupRequest {
			r := joinRequest(3, "taken", "", "")
			r.Protocols = []kmsg.JoinGroupRequestProtocol{protocol("sticky")}
			return r
		}, newproto.ErrInconsistentGroupProtocol},
		{"unknown member id", func() *kmsg.JoinGroupRequest {
			return joinRequest(9, "taken", "nobody", "")
		}, newproto.ErrUnknownMemberID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req()
			r := c.RoundTrip(req).(*kmsg.JoinGroupResponse)
			if r.ErrorCode != int16(tc.want) || r.Generation != -1 || r.MemberID != req.MemberID {
				t.Errorf("%s generation %d member %q, want %s -1 %q", codeName(r.ErrorCode), r.Generation, r.MemberID, tc.want.Name(), req.MemberID)
			}
		})
	}
}

// A group of two: the second member's JoinGroup is held until the first
// rejoins (it learns of the rebalance from its heartbeat), both get
// generation 2, and the follower's SyncGroup is held until the leader's
// assignment is persisted, then answered with the follower's part.
func TestJoinSyncTwoMembers(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	a, b := kafkatest.Dial(t, ts.addr), kafkatest.Dial(t, ts.addr)
	const g = "pair"
	aID, gen := stableAlone(t, a, g, "", []byte{1})

	jb := joinRequest(9, g, "", "")
	rb := b.RoundTrip(jb).(*kmsg.JoinGroupResponse) // MEMBER_ID_REQUIRED
	jb.MemberID = rb.MemberID
	b.Send(jb) // held

	waitFor(t, func() bool { return fg.describe(g).State == group.PreparingRebalance })
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.MemberID, hb.Generation = g, aID, gen
	if h := a.RoundTrip(hb).(*kmsg.HeartbeatResponse); h.ErrorCode != int16(newproto.ErrRebalanceInProgress) {
		t.Fatalf("heartbeat during rebalance: %s", codeName(h.ErrorCode))
	}
	ra := a.RoundTrip(joinRequest(9, g, aID, "")).(*kmsg.JoinGroupResponse)
	_, resp := b.Recv(int16(kmsg.JoinGroup), 9)
	rb = resp.(*kmsg.JoinGroupResponse)
	if ra.ErrorCode != 0 || rb.ErrorCode != 0 || ra.Generation != gen+1 || rb.Generation != gen+1 {
		t.Fatalf("rejoin: a %s gen %d, b %s gen %d", codeName(ra.ErrorCode), ra.Generation, codeName(rb.ErrorCode), rb.Generation)
	}
	if ra.LeaderID != aID || len(ra.Members) != 2 || len(rb.Members) != 0 {
		t.Fatalf("leader %q, leader sees %d members, follower %d", ra.LeaderID, len(ra.Members), len(rb.Members))
	}

	b.Send(syncRequest(5, g, rb.MemberID, rb.Generation, nil)) // held
	waitFor(t, func() bool { return fg.waiting(g) == 1 })
	sa := a.RoundTrip(syncRequest(5, g, aID, ra.Generation, map[string][]byte{aID: {0xa}, rb.MemberID: {0xb}})).(*kmsg.SyncGroupResponse)
	_, resp = b.Recv(int16(kmsg.SyncGroup), 5)
	sb := resp.(*kmsg.SyncGroupResponse)
	if sa.ErrorCode != 0 || !bytes.Equal(sa.MemberAssignment, []byte{0xa}) || sb.ErrorCode != 0 || !bytes.Equal(sb.MemberAssignment, []byte{0xb}) {
		t.Errorf("sync: a %s %v, b %s %v", codeName(sa.ErrorCode), sa.MemberAssignment, codeName(sb.ErrorCode), sb.MemberAssignment)
	}
	if d := fg.describe(g); d.State != group.Stable || len(d.Members) != 2 {
		t.Errorf("group %s with %d members, want Stable with 2", d.State, len(d.Members))
	}
}

// FuzzJoinSyncTranslation feeds arbitrary member ids, instance ids,
// protocols, metadata and assignments through JoinGroup and SyncGroup at
// every version, encoded and decoded by kmsg as on the wire: the
// translation never panics and its responses encode at the version.
func FuzzJoinSyncTranslation(f *testing.F) {
	f.Add(int16(9), "", "", "range", []byte{0, 1, 0, 0, 0, 1, 0, 1, 't', 0, 0, 0, 0}, []byte{0, 1}, int32(10000))
	f.Add(int16(0), "m", "", "", []byte(nil), []byte(nil), int32(-1))
	f.Add(int16(5), "", "inst", "roundrobin", []byte{0xff, 0xff, 0xff, 0xff}, []byte{0, 0, 0, 0, 0xff}, int32(6000))
	f.Add(int16(4), "x-uuid-1", "", "range", []byte{}, []byte{}, int32(30000))
	f.Fuzz(func(t *testing.T, v int16, member, instance, proto string, metadata, assignment []byte, session int32) {
		v = (v%10 + 10) % 10
		fg := newFakeGroups(t)
		gc := newproto.NewGroupCoordinator(fg, newproto.WithUUIDs(seqUUIDs()))
		req := &newproto.Request{ClientID: "fuzz"}
		// Nothing here waits for another member: a request that does is
		// a hang, which the deadline turns into a failure.
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()

		jr := kmsg.NewPtrJoinGroupRequest()
		jr.SetVersion(v)
		jr.Group, jr.MemberID, jr.SessionTimeoutMillis, jr.RebalanceTimeoutMillis = "fuzz", member, session, session
		if instance != "" {
			jr.InstanceID = kmsg.StringPtr(instance)
		}
		jr.ProtocolType = "consumer"
		jr.Protocols = []kmsg.JoinGroupRequestProtocol{protocol(proto, metadata...)}
		jr = reencodeRequest(t, jr)
		for range 2 { // the second round uses the id MEMBER_ID_REQUIRED gave
			resp, err := gc.JoinGroup(ctx, req, jr)
			if err != nil {
				t.Fatalf("JoinGroup: %v", err)
			}
			checkResponse(t, resp)
			jr.MemberID = resp.MemberID
		}

		sr := kmsg.NewPtrSyncGroupRequest()
		sr.SetVersion(min(v, 5))
		sr.Group, sr.MemberID, sr.Generation = "fuzz", jr.MemberID, 1
		sr.InstanceID = jr.InstanceID
		sr.ProtocolType, sr.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr(proto)
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID, a.MemberAssignment = jr.MemberID, assignment
		sr.GroupAssignment = append(sr.GroupAssignment, a, a)
		sr = reencodeRequest(t, sr)
		sresp, err := gc.SyncGroup(ctx, req, sr)
		if err != nil {
			t.Fatalf("SyncGroup: %v", err)
		}
		checkResponse(t, sresp)
		if sresp.ErrorCode == 0 && !bytes.Equal(sresp.MemberAssignment, assignment) {
			t.Errorf("assignment %v, want %v", sresp.MemberAssignment, assignment)
		}
	})
}

// reencodeRequest encodes m at its version and decodes it again, as the
// wire does: what does not survive is what that version does not carry.
func reencodeRequest[T kmsg.Request](t *testing.T, m T) T {
	t.Helper()
	out := kmsg.RequestForKey(m.Key())
	out.SetVersion(m.GetVersion())
	if err := out.ReadFrom(m.AppendTo(nil)); err != nil {
		t.Fatalf("%T v%d does not decode its own encoding: %v", m, m.GetVersion(), err)
	}
	return out.(T)
}

// checkResponse checks that a response encodes at its version and decodes
// back to the same bytes.
func checkResponse(t *testing.T, m kmsg.Response) {
	t.Helper()
	b := m.AppendTo(nil)
	out := kmsg.ResponseForKey(m.Key())
	out.SetVersion(m.GetVersion())
	if err := out.ReadFrom(b); err != nil {
		t.Fatalf("%T v%d does not decode its own encoding: %v", m, m.GetVersion(), err)
	}
	if again := out.AppendTo(nil); !bytes.Equal(again, b) {
		t.Fatalf("%T v%d does not re-encode to its bytes", m, m.GetVersion())
	}
}
