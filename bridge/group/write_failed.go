package group

// writeFailed handles WriteFailed (see the event): the write in flight is over, and what waited
// for it fails with a retriable error instead of the group being fenced.
func (m *Machine) writeFailed(ev WriteFailed) {
	if !m.inflight {
		m.log("ignoring WriteFailed: no write in flight", "", "")
		return
	}
	seq := m.seq
	m.inflight = false
	m.log("write failed; the group stays", "", errString(ev.Err))

	kept := m.held[:0]
	for _, h := range m.held {
		if h.seq != seq {
			kept = append(kept, h)
			continue
		}
		switch r := h.reply.(type) {
		case OffsetCommitReply:
			for i := range r.Partitions {
				r.Partitions[i].Err = ErrCoordinatorNotAvailable
			}
			m.reply(r)
		case DeleteReply:
			r.Err = ErrCoordinatorNotAvailable
			m.reply(r)
		default:
			m.reply(h.reply)
		}
	}
	m.held = kept

	rebalance := ""
	if m.genSeq == seq {
		// The new generation was not stored: the JoinGroups that waited for it fail, and the
		// members join again.
		m.genSeq = 0
		for _, id := range m.order {
			mb := m.members[id]
			if mb.joining && mb.joinSeq == seq {
				m.reply(joinError(mb.joinToken, id, ErrCoordinatorNotAvailable))
				mb.joining, mb.joinSeq, mb.joinStatic = false, 0, false
				m.scheduleSession(mb)
			}
		}
		rebalance = "storing the new generation failed"
	}
	if m.assignSeq == seq && m.state == CompletingRebalance {
		// GroupCoordinator.doSyncGroup: when storing the assignment fails, every parked
		// SyncGroup gets the error and the group rebalances.
		m.assignSeq, m.proposed = 0, nil
		m.resetAndPropagateAssignmentError(ErrCoordinatorNotAvailable)
		rebalance = "storing the assignment failed"
	}
	if rebalance != "" {
		m.maybePrepareRebalance(CauseOther, rebalance)
	} else if m.inflightRecord {
		// Anything else the record carried (a member that left, a static member's new id) is
		// still true: write the record again with the next write.
		m.writeRecord(m.state == PreparingRebalance || m.state == CompletingRebalance)
	}
}
