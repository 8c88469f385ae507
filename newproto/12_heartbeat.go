package newproto

// Heartbeat, key 12: versions 0-4.
//
// Version notes:
//   - v0: group, generation, member id; out: error. REBALANCE_IN_PROGRESS
//     tells a member to rejoin.
//   - v1: ThrottleMillis (always 0).
//   - v2: no change in the body (throttle after response, KIP-219).
//   - v3: group instance id (KIP-345): a heartbeat whose instance id maps
//     to another member id is FENCED_INSTANCE_ID.
//   - v4: flexible versions.
//
// Held heartbeats (WithHeartbeatHold, bridge/group/heartbeat_hold.go):
// a Stable member's heartbeat may be answered later than Kafka would,
// as soon as the group rebalances, so the member rejoins at once rather
// than at its next heartbeat. The hold ends, with the answer a heartbeat
// gets then, when the connection has read another request (responses go
// out in request order: a held heartbeat must not delay a commit behind
// it), when the connection closes, or at the latest when the hold is
// over. The holds of one group end together, at the group's next multiple
// of the hold (holdEnd): a member (franz-go, sarama) heartbeats again one
// interval after each answer, and a rebalance finds only the members in
// that interval not waiting; aligned, those intervals coincide, so a
// rebalance finds every member waiting but in one interval per hold,
// instead of finding some member outside its wait most of the time.

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

func init() { regKey(kmsg.Heartbeat, 0, 4) }

// releaseTimeout bounds the ReleaseHeartbeat that ends a hold.
const releaseTimeout = 10 * time.Second

// Heartbeat implements Coordinator.
func (gc *GroupCoordinator) Heartbeat(ctx context.Context, req *Request, m *kmsg.HeartbeatRequest) (*kmsg.HeartbeatResponse, error) {
	if err := checkGroupID(m.Group); err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	ev := group.Heartbeat{
		MemberID:   group.MemberID(m.MemberID),
		InstanceID: group.InstanceID(optString(m.InstanceID)),
		Generation: group.Generation(m.Generation),
	}
	var later <-chan struct{}
	if req != nil {
		later = req.Later()
	}
	var held chan group.Token
	if gc.hold > 0 && later != nil {
		ev.Hold = true
		held = make(chan group.Token, 1)
		done := make(chan struct{})
		defer close(done)
		go gc.release(ctx, m.Group, ev.MemberID, held, later, done)
	}
	r, err := do[group.HeartbeatReply](ctx, gc.groups, m.Group, func(t group.Token) group.Event {
		ev.Token = t
		if held != nil {
			held <- t
		}
		return ev
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat to group %q: %w", m.Group, err)
	}
	resp := kmsg.NewPtrHeartbeatResponse()
	resp.SetVersion(m.Version)
	resp.ErrorCode = wireCode(r.Err)
	return resp, nil
}

// release ends the hold of the heartbeat whose token comes on held, once
// the connection has a later request (and again when the hold is over, in
// case that release overtook the heartbeat), the hold is over, or ctx ends
// (the connection closes: the machine must not keep the heartbeat); it
// does nothing once done is closed (the heartbeat was answered).
func (gc *GroupCoordinator) release(ctx context.Context, name string, id group.MemberID, held <-chan group.Token, later <-chan struct{}, done <-chan struct{}) {
	var tok group.Token
	select {
	case tok = <-held:
	case <-done:
		return
	}
	t := time.NewTimer(holdEnd(time.Now(), gc.hold, name))
	defer t.Stop()
	for {
		last := true
		select {
		case <-later:
			// A pipelining client's next request may be read before its heartbeat reached
			// the group's actor: this release can overtake the heartbeat and find nothing
			// parked. The hold's end releases it again (a no-op once it was answered).
			later, last = nil, false
		case <-t.C:
		case <-ctx.Done():
		case <-done:
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_, err := gc.groups.Do(rctx, name, func(t group.Token) group.Event {
			return group.ReleaseHeartbeat{Token: t, MemberID: id, Held: tok}
		})
		cancel()
		if err != nil {
			gc.log.Debug().Err(err).Str("group", name).Str("member", string(id)).Msg("releasing a held heartbeat")
		}
		if last {
			return
		}
	}
}

// holdEnd returns how long after now the holds of group name end: at the
// next multiple of hold, shifted by a phase of the group's own so that
// the groups of a bridge do not all answer at the same instant.
func holdEnd(now time.Time, hold time.Duration, name string) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	phase := time.Duration(h.Sum64() % uint64(hold))
	at := now.Add(-phase).Truncate(hold).Add(hold + phase)
	return at.Sub(now)
}
