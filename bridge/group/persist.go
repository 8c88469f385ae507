package group

// Writes: persist before reply. The record and offsets the machine writes, what a Persisted or a
// lost write does to it, and Restore.

import (
	"bytes"
	"slices"
	"strconv"
	"time"
)

// writeRecord queues the group's record and returns the seq of the write that will carry it.
func (m *Machine) writeRecord(rebalancing bool) uint64 {
	rec := m.record(rebalancing)
	return m.queueWrite(&rec, nil)
}

func (m *Machine) writeOffsets(offs []OffsetCommitPartition) uint64 {
	return m.queueWrite(nil, offs)
}

// queueWrite adds to the next write; it is emitted at the end of the Step if none is in flight,
// else when the one in flight is acknowledged. A later record replaces an earlier one; a later
// offset for a partition replaces an earlier one.
func (m *Machine) queueWrite(rec *Record, offs []OffsetCommitPartition) uint64 {
	if m.next == nil {
		m.next = &pendingWrite{}
	}
	if rec != nil {
		m.next.record = rec
	}
	for _, o := range offs {
		i := slices.IndexFunc(m.next.offsets, func(x OffsetCommitPartition) bool {
			return x.Topic == o.Topic && x.Partition == o.Partition
		})
		if i >= 0 {
			m.next.offsets[i] = o
		} else {
			m.next.offsets = append(m.next.offsets, o)
		}
	}
	return m.seq + 1
}

func (m *Machine) flushWrite() {
	if m.inflight || m.next == nil || m.fenced {
		return
	}
	m.seq++
	m.inflight = true
	m.inflightRecord = m.next.record != nil
	m.fx.Persist = m.next.record
	m.fx.Offsets = m.next.offsets
	m.next = nil
}

// record is the group's Record now (with the leader's assignment while it is being persisted).
func (m *Machine) record(rebalancing bool) Record {
	r := Record{
		Version:      RecordVersion,
		Group:        m.group,
		Generation:   m.generation,
		ProtocolType: m.protocolType,
		ProtocolName: m.protocolName,
		Leader:       m.leader,
		Members:      make([]RecordMember, 0, len(m.order)),
		Rebalancing:  rebalancing,
	}
	for _, id := range m.order {
		mb := m.members[id]
		a := mb.Assignment
		if m.proposed != nil {
			a = m.proposed[id]
		}
		rm := RecordMember{
			ID:                 id,
			InstanceID:         mb.InstanceID,
			Kind:               mb.Kind,
			ClientID:           mb.ClientID,
			ClientHost:         mb.ClientHost,
			SessionTimeoutMs:   mb.SessionTimeout.Milliseconds(),
			RebalanceTimeoutMs: mb.RebalanceTimeout.Milliseconds(),
			ProtocolType:       mb.ProtocolType,
			Assignment:         bytes.Clone(a),
		}
		for _, p := range mb.Protocols {
			rm.Protocols = append(rm.Protocols, RecordProtocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
		}
		r.Members = append(r.Members, rm)
	}
	return r
}

// persisted releases what waited for the write in flight.
func (m *Machine) persisted(ev Persisted) {
	if !m.inflight {
		m.log("ignoring Persisted: no write in flight", "", "")
		return
	}
	seq := m.seq
	m.inflight = false
	m.version = ev.Version
	kept := m.held[:0]
	for _, h := range m.held {
		if h.seq == seq {
			m.reply(h.reply)
		} else {
			kept = append(kept, h)
		}
	}
	m.held = kept
	if m.genSeq == seq {
		m.genSeq = 0
	}
	for _, id := range slices.Clone(m.order) {
		mb := m.members[id]
		if !mb.joining || mb.joinSeq != seq {
			continue
		}
		mb.joinSeq = 0
		switch {
		case mb.joinStatic && m.state == Stable:
			// updateStaticMemberAndRebalance's storeGroup callback. Before KIP-814 (v9) the reply
			// names the previous leader, so that a replaced leader does not run the assignor.
			mb.joinStatic = false
			if mb.joinSkip {
				lead := id == m.leader
				m.reply(m.joinResult(mb.joinToken, id, m.leader, lead, lead))
			} else {
				m.reply(m.joinResult(mb.joinToken, id, mb.joinLeader, false, false))
			}
			mb.joining = false
			m.scheduleSession(mb)
		case !mb.joinStatic && m.state == CompletingRebalance:
			m.reply(m.joinResult(mb.joinToken, id, m.leader, id == m.leader, false))
			mb.joining = false
			m.scheduleSession(mb)
		}
	}
	if m.assignSeq == seq && m.state == CompletingRebalance {
		// setAndPropagateAssignment, then Stable.
		m.assignSeq = 0
		for _, id := range m.order {
			m.members[id].Assignment = m.proposed[id]
		}
		m.proposed = nil
		m.prevState, m.state = m.state, Stable
		m.log("group is stable", m.leader, "generation "+strconv.Itoa(int(m.generation)))
		for _, id := range m.order {
			mb := m.members[id]
			if mb.syncing {
				m.reply(SyncReply{Token: mb.syncToken, ProtocolType: m.protocolType, ProtocolName: m.protocolName, Assignment: mb.Assignment})
				mb.syncing = false
				m.scheduleSession(mb)
			}
		}
	}
}

// fence stops the machine: another bridge owns the group (Kafka's onGroupUnloaded answers
// parked requests with NOT_COORDINATOR).
func (m *Machine) fence(reason string) {
	m.abandon(ErrNotCoordinator)
	m.reset()
	m.state, m.fenced = Dead, true
	m.log("fenced", "", reason)
}

// abandon answers every parked request with err.
func (m *Machine) abandon(err ErrorCode) {
	for _, id := range m.order {
		mb := m.members[id]
		if mb.joining {
			m.reply(joinError(mb.joinToken, id, err))
			mb.joining = false
		}
		if mb.syncing {
			m.reply(SyncReply{Token: mb.syncToken, Err: err})
			mb.syncing = false
		}
		m.answerBeat(mb, err)
	}
	for _, h := range m.held {
		switch r := h.reply.(type) {
		case OffsetCommitReply:
			for i := range r.Partitions {
				r.Partitions[i].Err = err
			}
			m.reply(r)
		case DeleteReply:
			r.Err = err
			m.reply(r)
		}
	}
	m.held = nil
}

// restore loads the group from its record (Kafka's GroupMetadata.loadGroup and onGroupLoaded).
func (m *Machine) restore(ev Restore) {
	rec := ev.Record
	if err := rec.Validate(); err != nil {
		m.fence("cannot restore: " + err.Error())
		return
	}
	m.abandon(ErrNotCoordinator)
	m.reset()
	m.version = ev.Version
	if rec.Deleted {
		m.state = Dead
		m.log("restored a deleted group", "", "")
		return
	}
	m.generation = rec.Generation
	m.protocolType = rec.ProtocolType
	m.protocolName = rec.ProtocolName
	m.leader = rec.Leader
	for _, rm := range rec.Members {
		mb := &Member{
			ID:               rm.ID,
			InstanceID:       rm.InstanceID,
			Kind:             rm.Kind,
			ClientID:         rm.ClientID,
			ClientHost:       rm.ClientHost,
			SessionTimeout:   time.Duration(rm.SessionTimeoutMs) * time.Millisecond,
			RebalanceTimeout: time.Duration(rm.RebalanceTimeoutMs) * time.Millisecond,
			ProtocolType:     rm.ProtocolType,
			Assignment:       bytes.Clone(rm.Assignment),
		}
		for _, p := range rm.Protocols {
			mb.Protocols = append(mb.Protocols, Protocol{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
		}
		m.members[mb.ID] = mb
		m.order = append(m.order, mb.ID)
		if mb.isStatic() {
			m.static[mb.InstanceID] = mb.ID
		}
		m.scheduleSession(mb) // sessions restart at load time
	}
	if len(m.members) == 0 {
		m.state, m.leader, m.protocolName = Empty, "", ""
		m.log("restored an empty group", "", "generation "+strconv.Itoa(int(m.generation)))
		return
	}
	m.state = Stable
	m.markResuming()
	m.log("restored", m.leader, "generation "+strconv.Itoa(int(m.generation)))
	switch {
	case rec.Rebalancing:
		m.prepareRebalance(CauseRestore, "restored in the middle of a rebalance")
	case m.cfg.MaxSize > 0 && len(m.members) > m.cfg.MaxSize:
		m.prepareRebalance(CauseRestore, "restored group is over group.max.size")
	}
}
