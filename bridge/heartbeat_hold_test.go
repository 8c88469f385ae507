package bridge_test

import (
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// held is a wireConn (bench_test.go) of a test, with read deadlines: a test sees when, and
// whether, each answer arrives. Its requests are answered in the order they were sent.
type held struct {
	t       *testing.T
	w       *wireConn
	pending []kmsg.Request
}

func dialHeld(t *testing.T, addr string) *held {
	return &held{t: t, w: dialWire(t, addr)}
}

// send writes req and returns it.
func (h *held) send(req kmsg.Request) kmsg.Request {
	h.t.Helper()
	if err := h.w.send(req); err != nil {
		h.t.Fatalf("write %T: %v", req, err)
	}
	h.pending = append(h.pending, req)
	return req
}

// quiet reports whether no answer arrives within d.
func (h *held) quiet(d time.Duration) bool {
	h.t.Helper()
	_ = h.w.c.SetReadDeadline(time.Now().Add(d))
	_, err := h.w.br.Peek(1)
	_ = h.w.c.SetReadDeadline(time.Time{})
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return true
	}
	if err != nil {
		h.t.Fatalf("read: %v", err)
	}
	return false
}

// must reads the answer to req, which must be the oldest unanswered request, within d.
func (h *held) must(req kmsg.Request, d time.Duration) kmsg.Response {
	h.t.Helper()
	if len(h.pending) == 0 || h.pending[0] != req {
		h.t.Fatalf("waiting for %T out of request order", req)
	}
	if h.quiet(d) {
		h.t.Fatalf("no answer to %T within %v", req, d)
	}
	_ = h.w.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := h.w.recv(req)
	if err != nil {
		h.t.Fatalf("read the answer to %T: %v", req, err)
	}
	h.pending = h.pending[1:]
	return resp
}

func wireJoinReq(g, member string) *kmsg.JoinGroupRequest {
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(5)
	req.Group, req.MemberID = g, member
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 10000, 5000
	req.ProtocolType = "consumer"
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "range", subscription(0, "orders")
	req.Protocols = append(req.Protocols, p)
	return req
}

// boundary heartbeats and waits for the answer, which a Stable member gets when its group's
// holds end: the next hold then ends a whole hold from now.
func (h *held) boundary(g, member string, gen int32, hold time.Duration) {
	h.t.Helper()
	if r := h.must(h.send(wireHeartbeat(g, member, gen)), hold+2*time.Second).(*kmsg.HeartbeatResponse); r.ErrorCode != 0 {
		h.t.Fatalf("heartbeat of %s: error %d", member, r.ErrorCode)
	}
}

func wireHeartbeat(g, member string, gen int32) *kmsg.HeartbeatRequest {
	req := kmsg.NewPtrHeartbeatRequest()
	req.SetVersion(3)
	req.Group, req.MemberID, req.Generation = g, member, gen
	return req
}

// join joins a new member (MEMBER_ID_REQUIRED first, KIP-394) and returns its member id and
// the correlation id of its parked JoinGroup.
func (h *held) join(g string) (string, kmsg.Request) {
	h.t.Helper()
	r := h.must(h.send(wireJoinReq(g, "")), 5*time.Second).(*kmsg.JoinGroupResponse)
	if r.ErrorCode != 79 {
		h.t.Fatalf("first JoinGroup: error %d, want MEMBER_ID_REQUIRED (79)", r.ErrorCode)
	}
	return r.MemberID, h.send(wireJoinReq(g, r.MemberID))
}

// sync sends the SyncGroup of member at gen (with assignments when it leads) and checks it.
func (h *held) sync(g, member string, gen int32, leader bool, members ...string) {
	h.t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.SetVersion(3)
	req.Group, req.MemberID, req.Generation = g, member, gen
	if leader {
		for i, m := range members {
			a := kmsg.NewSyncGroupRequestGroupAssignment()
			a.MemberID, a.MemberAssignment = m, assignment("orders", int32(i))
			req.GroupAssignment = append(req.GroupAssignment, a)
		}
	}
	if r := h.must(h.send(req), 5*time.Second).(*kmsg.SyncGroupResponse); r.ErrorCode != 0 {
		h.t.Fatalf("SyncGroup of %s: error %d", member, r.ErrorCode)
	}
}

// Held heartbeats (bridge/group/heartbeat_hold.go, newproto/12_heartbeat.go), over the wire
// against a real ZooKeeper: a Stable member's heartbeat is answered when the group rebalances
// (REBALANCE_IN_PROGRESS at once, not at the member's next heartbeat), when its connection sends
// another request (responses go in request order: a commit is not held up), or when the hold is
// over.
func TestIntegration_HeartbeatHold(t *testing.T) {
	const hold = 1500 * time.Millisecond
	b := startBridge(t, zktest.Connect(t), 1, func(c *bridge.Config) { c.HeartbeatHold = hold })
	addr := b.Addr().String()
	const g = "held"

	a := dialHeld(t, addr)
	ida, corr := a.join(g)
	ja := a.must(corr, 5*time.Second).(*kmsg.JoinGroupResponse)
	if ja.ErrorCode != 0 || ja.LeaderID != ida {
		t.Fatalf("JoinGroup of a: error %d leader %q, want 0 and %q", ja.ErrorCode, ja.LeaderID, ida)
	}
	a.sync(g, ida, ja.Generation, true, ida)

	// The hold is over: answered NONE at the group's next multiple of the hold (holds end
	// together); the next heartbeat, sent at once, waits a whole hold.
	a.boundary(g, ida, ja.Generation, hold)
	start := time.Now()
	hb := a.send(wireHeartbeat(g, ida, ja.Generation))
	r := a.must(hb, 2*hold).(*kmsg.HeartbeatResponse)
	if took := time.Since(start); r.ErrorCode != 0 || took < hold*8/10 {
		t.Fatalf("held heartbeat: error %d after %v, want 0 after about %v", r.ErrorCode, took, hold)
	}

	// A later request on the connection releases the held heartbeat: both answers come at once,
	// in request order. (Sent right after an answer: the hold ends a whole hold later.)
	hb = a.send(wireHeartbeat(g, ida, ja.Generation))
	if !a.quiet(200 * time.Millisecond) {
		t.Fatalf("heartbeat answered at once, want it held")
	}
	oc := wireCommit(g, ida, ja.Generation, "orders", 0, 42)
	oc.SetVersion(7)
	start = time.Now()
	commit := a.send(oc)
	if r := a.must(hb, hold/3).(*kmsg.HeartbeatResponse); r.ErrorCode != 0 {
		t.Fatalf("heartbeat released by a commit: error %d, want 0", r.ErrorCode)
	}
	cr := a.must(commit, hold/3).(*kmsg.OffsetCommitResponse)
	if code := cr.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit behind a held heartbeat: error %d", code)
	}
	t.Logf("heartbeat and commit answered %v after the commit was sent", time.Since(start))

	// A rebalance answers the held heartbeat REBALANCE_IN_PROGRESS at once.
	a.boundary(g, ida, ja.Generation, hold)
	hb = a.send(wireHeartbeat(g, ida, ja.Generation))
	if !a.quiet(200 * time.Millisecond) {
		t.Fatalf("heartbeat answered at once, want it held")
	}
	bc := dialHeld(t, addr)
	idb, corrB := bc.join(g)
	start = time.Now()
	if r := a.must(hb, hold/3).(*kmsg.HeartbeatResponse); r.ErrorCode != 27 {
		t.Fatalf("held heartbeat during a rebalance: error %d, want REBALANCE_IN_PROGRESS (27)", r.ErrorCode)
	}
	t.Logf("held heartbeat answered REBALANCE_IN_PROGRESS %v after the new member's join", time.Since(start))

	// The rebalance completes with both members.
	corrA := a.send(wireJoinReq(g, ida))
	ja = a.must(corrA, 5*time.Second).(*kmsg.JoinGroupResponse)
	jb := bc.must(corrB, 5*time.Second).(*kmsg.JoinGroupResponse)
	if ja.ErrorCode != 0 || jb.ErrorCode != 0 || ja.Generation != jb.Generation {
		t.Fatalf("rejoin: errors %d/%d generations %d/%d", ja.ErrorCode, jb.ErrorCode, ja.Generation, jb.Generation)
	}
	a.sync(g, ida, ja.Generation, true, ida, idb)
	bc.sync(g, idb, jb.Generation, false)

	// A member that leaves gets its held heartbeat answered UNKNOWN_MEMBER_ID.
	bc.boundary(g, idb, jb.Generation, hold)
	hb = bc.send(wireHeartbeat(g, idb, jb.Generation))
	if !bc.quiet(200 * time.Millisecond) {
		t.Fatalf("heartbeat answered at once, want it held")
	}
	lg := kmsg.NewPtrLeaveGroupRequest()
	lg.SetVersion(3)
	lg.Group = g
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID = idb
	lg.Members = append(lg.Members, lm)
	if r := kafkaRoundTrip(t, addr, lg).(*kmsg.LeaveGroupResponse); r.ErrorCode != 0 {
		t.Fatalf("LeaveGroup: error %d", r.ErrorCode)
	}
	if r := bc.must(hb, hold/3).(*kmsg.HeartbeatResponse); r.ErrorCode != 25 {
		t.Fatalf("held heartbeat of a member that left: error %d, want UNKNOWN_MEMBER_ID (25)", r.ErrorCode)
	}
}
