package group

import (
	"errors"
	"fmt"
)

// checkInvariants checks the machine's internal consistency; every test calls it after every
// Step.
func (m *Machine) checkInvariants() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if m.fenced && (m.state != Dead || len(m.members) > 0) {
		bad("fenced machine in state %s with %d members", m.state, len(m.members))
	}
	if len(m.order) != len(m.members) {
		bad("order has %d ids, members %d", len(m.order), len(m.members))
	}
	seen := make(map[MemberID]bool)
	for _, id := range m.order {
		mb, ok := m.members[id]
		switch {
		case !ok:
			bad("order names %s, not a member", id)
			continue
		case seen[id]:
			bad("order names %s twice", id)
		case mb.ID != id:
			bad("member %s stored under %s", mb.ID, id)
		}
		seen[id] = true
		if mb.isStatic() && m.static[mb.InstanceID] != id {
			bad("static member %s (%s) not in the instance map (%q)", id, mb.InstanceID, m.static[mb.InstanceID])
		}
		if _, ok := m.pending[id]; ok {
			bad("member %s is also pending", id)
		}
		if mb.joining {
			switch m.state {
			case PreparingRebalance:
			case CompletingRebalance:
				if mb.joinSeq == 0 || mb.joinStatic {
					bad("member %s awaits join in CompletingRebalance without a generation write", id)
				}
			case Stable:
				if mb.joinSeq == 0 || !mb.joinStatic {
					bad("member %s awaits join in Stable without a static-member write", id)
				}
			default:
				bad("member %s awaits join in %s", id, m.state)
			}
		}
		if mb.syncing && m.state != CompletingRebalance {
			bad("member %s awaits sync in %s", id, m.state)
		}
		if mb.joinSeq != 0 && !m.writeCovers(mb.joinSeq) {
			bad("member %s waits for write %d that is not coming (seq %d, inflight %t)", id, mb.joinSeq, m.seq, m.inflight)
		}
		if !mb.joining && !mb.syncing && mb.deadline.IsZero() {
			bad("member %s can never expire", id)
		}
		if (m.state == CompletingRebalance || m.state == Stable) && !mb.supports(m.protocolName) {
			bad("member %s does not support the group's protocol %q", id, m.protocolName)
		}
	}
	parked := 0
	for _, mb := range m.members {
		if mb.beatParked {
			parked++
			if m.state != Stable {
				bad("member %s has a held heartbeat in %s", mb.ID, m.state)
			}
		}
	}
	if parked != m.parkedBeats {
		bad("%d held heartbeats counted, %d members hold one", m.parkedBeats, parked)
	}
	for inst, id := range m.static {
		if mb, ok := m.members[id]; !ok || mb.InstanceID != inst {
			bad("instance %s maps to %s, which is not its member", inst, id)
		}
	}
	if len(m.members) > 0 && (m.leader == "" || m.members[m.leader] == nil) {
		bad("leader %q is not a member", m.leader)
	}
	if len(m.members) == 0 && m.leader != "" {
		bad("leader %q of an empty member list", m.leader)
	}
	if (m.state == Empty || m.state == Dead) && len(m.members) > 0 {
		bad("%s group with %d members", m.state, len(m.members))
	}
	if (m.state == CompletingRebalance || m.state == Stable) && len(m.members) == 0 {
		bad("%s group without members", m.state)
	}
	if m.joinDeadline.IsZero() == (m.state == PreparingRebalance) {
		bad("join deadline %v in state %s", m.joinDeadline, m.state)
	}
	if m.syncDeadline.IsZero() != (len(m.pendingSync) == 0) {
		bad("sync deadline %v with %d pending syncs", m.syncDeadline, len(m.pendingSync))
	}
	for id := range m.pendingSync {
		if m.members[id] == nil {
			bad("pending sync %s is not a member", id)
		}
	}
	if len(m.pendingSync) > 0 && m.state != CompletingRebalance && m.state != Stable {
		bad("pending syncs in %s", m.state)
	}
	if (m.assignSeq != 0) != (m.proposed != nil) || (m.assignSeq != 0 && m.state != CompletingRebalance) {
		bad("assignment write %d (proposed %t) in %s", m.assignSeq, m.proposed != nil, m.state)
	}
	if m.genSeq != 0 && (m.state != CompletingRebalance || !m.writeCovers(m.genSeq)) {
		bad("generation write %d in %s", m.genSeq, m.state)
	}
	if m.assignSeq != 0 && !m.writeCovers(m.assignSeq) {
		bad("assignment waits for write %d that is not coming", m.assignSeq)
	}
	for _, h := range m.held {
		if !m.writeCovers(h.seq) {
			bad("reply to #%d waits for write %d that is not coming", h.reply.RequestToken(), h.seq)
		}
	}
	if m.next != nil && !m.inflight {
		bad("a write is queued but none in flight")
	}
	return errors.Join(errs...)
}

// writeCovers reports whether write seq is in flight or queued.
func (m *Machine) writeCovers(seq uint64) bool {
	return (m.inflight && seq == m.seq) || (m.next != nil && seq == m.seq+1)
}
