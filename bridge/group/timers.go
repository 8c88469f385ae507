package group

import (
	"container/heap"
	"slices"
	"time"
)

// The machine's timers: every member's session (or new-member join) deadline, every KIP-394
// pending member's expiry, and the join and sync phase deadlines. Every Step asks for the
// earliest (wakeAt, fireTimers), so that must not cost a pass over every member: in a join storm
// of a thousand members that pass made each Step linear and the storm quadratic.
//
// The member and pending deadlines live in a min-heap with lazy deletion: setting a deadline
// pushes an entry, and nothing is removed when a deadline moves or its member goes; an entry is
// dropped when it reaches the top and no longer matches the machine (the member is gone, or its
// deadline or pending expiry is another). The two phase deadlines are fields and are compared
// directly. So a Step costs O(log n) per deadline it sets, and finding the next timer O(1)
// amortized.
//
// The order is exactly the one of a scan (scanTimers): the earliest time first; at equal times
// members in join order, then pending members by id, then the join deadline, then the sync
// deadline. Join order is kept as a rank per *Member, given the first time the member's deadline
// is set, which is right after it joined (addMemberAndRebalance, restore); a static member that
// replaces its member id keeps its *Member, its rank and so its place, as it keeps its place in
// order.
//
// Deadlines are set through setDeadline and setPending only: a deadline assigned directly would
// never fire. The package's tests check every nextTimer against scanTimers (checkTimers).

// checkTimers makes nextTimer compare its answer with scanTimers and panic on a difference; the
// package's tests set it.
var checkTimers = false

// timerEntry is one armed member or pending-member deadline (or a stale one).
type timerEntry struct {
	at   time.Time
	kind timerKind // timerMember or timerPending
	rank uint64    // timerMember: join rank
	mb   *Member   // timerMember
	id   MemberID  // timerPending
}

// timerQueue is the heap of a machine's member and pending-member deadlines. The zero value is
// empty and ready.
type timerQueue struct {
	entries  timerHeap
	ranks    map[*Member]uint64
	nextRank uint64
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	a, b := &h[i], &h[j]
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	if a.kind != b.kind {
		return a.kind < b.kind // members before pending members
	}
	if a.kind == timerMember {
		return a.rank < b.rank
	}
	return a.id < b.id
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = timerEntry{} // let the *Member go
	*h = old[:len(old)-1]
	return e
}

// setDeadline arms (or moves) mb's session timer; a zero at disarms it.
func (m *Machine) setDeadline(mb *Member, at time.Time) {
	if mb.deadline.Equal(at) && !at.IsZero() {
		mb.deadline = at
		return // its entry is in the heap already
	}
	mb.deadline = at
	if at.IsZero() {
		return
	}
	q := &m.timers
	rank, ok := q.ranks[mb]
	if !ok {
		if q.ranks == nil {
			q.ranks = map[*Member]uint64{}
		}
		q.nextRank++
		rank = q.nextRank
		q.ranks[mb] = rank
	}
	m.pushTimer(timerEntry{at: at, kind: timerMember, rank: rank, mb: mb})
}

// setPending remembers a KIP-394 pending member until at.
func (m *Machine) setPending(id MemberID, at time.Time) {
	m.pending[id] = at
	m.pushTimer(timerEntry{at: at, kind: timerPending, id: id})
}

func (m *Machine) pushTimer(e timerEntry) {
	q := &m.timers
	heap.Push(&q.entries, e)
	if live := len(m.members) + len(m.pending); len(q.entries) > 2*live+64 {
		m.compactTimers()
	}
}

// live reports whether e is still armed as it says.
func (m *Machine) live(e *timerEntry) bool {
	switch e.kind {
	case timerMember:
		return m.members[e.mb.ID] == e.mb && e.mb.deadline.Equal(e.at)
	case timerPending:
		at, ok := m.pending[e.id]
		return ok && at.Equal(e.at)
	}
	return false
}

// compactTimers drops the stale entries (and the ranks of members that are gone): it keeps the
// heap within a constant factor of the armed timers however often they move.
func (m *Machine) compactTimers() {
	q := &m.timers
	q.entries = slices.DeleteFunc(q.entries, func(e timerEntry) bool { return !m.live(&e) })
	heap.Init(&q.entries)
	for mb := range q.ranks {
		if m.members[mb.ID] != mb {
			delete(q.ranks, mb)
		}
	}
}

// nextTimer returns the earliest armed timer (ties: members in join order, pending members by
// id, then the join and sync deadlines).
func (m *Machine) nextTimer() (at time.Time, kind timerKind, id MemberID) {
	q := &m.timers
	for len(q.entries) > 0 && !m.live(&q.entries[0]) {
		e := heap.Pop(&q.entries).(timerEntry)
		if e.kind == timerMember && m.members[e.mb.ID] != e.mb {
			delete(q.ranks, e.mb)
		}
	}
	if len(q.entries) > 0 {
		e := &q.entries[0]
		at, kind = e.at, e.kind
		if kind == timerMember {
			id = e.mb.ID
		} else {
			id = e.id
		}
	}
	if t := m.joinDeadline; !t.IsZero() && (at.IsZero() || t.Before(at)) {
		at, kind, id = t, timerJoin, ""
	}
	if t := m.syncDeadline; !t.IsZero() && (at.IsZero() || t.Before(at)) {
		at, kind, id = t, timerSync, ""
	}
	if checkTimers {
		wat, wkind, wid := m.scanTimers()
		if !at.Equal(wat) || kind != wkind || id != wid {
			panic("group: timer heap says " + timerString(at, kind, id) + ", a scan of the machine " + timerString(wat, wkind, wid))
		}
	}
	return at, kind, id
}

// scanTimers is nextTimer by looking at every member and pending member: the reference the heap
// is checked against.
func (m *Machine) scanTimers() (at time.Time, kind timerKind, id MemberID) {
	consider := func(t time.Time, k timerKind, i MemberID) {
		if !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at, kind, id = t, k, i
		}
	}
	for _, mid := range m.order {
		consider(m.members[mid].deadline, timerMember, mid)
	}
	if len(m.pending) > 0 {
		ids := make([]MemberID, 0, len(m.pending))
		for pid := range m.pending {
			ids = append(ids, pid)
		}
		slices.Sort(ids)
		for _, pid := range ids {
			consider(m.pending[pid], timerPending, pid)
		}
	}
	consider(m.joinDeadline, timerJoin, "")
	consider(m.syncDeadline, timerSync, "")
	return at, kind, id
}

func timerString(at time.Time, kind timerKind, id MemberID) string {
	if at.IsZero() {
		return "no timer"
	}
	names := [...]string{timerMember: "member", timerPending: "pending", timerJoin: "join", timerSync: "sync"}
	return names[kind] + " " + string(id) + " at " + at.String()
}
