package group

// Server-side assignment (DESIGN §3): in a mixed group the assignment of
// the Kafka members is not the leader's proposal but the 0.8.2 assignment the bridge computes over
// every member of every kind, because the group's zk members compute exactly that on their own.
// The engine stays pure: it only says when an assignment is needed and waits for it.
//
//   - AssignMode{Server: true} switches the group to server-side assignment. From then on, each
//     generation that reaches CompletingRebalance emits Effects.Assign (the generation and its
//     members with their metadata), and the leader's SyncGroup is parked like a follower's: its
//     assignments are ignored.
//   - The shell computes the assignment, claims the partitions' owner znodes (the revoke-then-
//     assign barrier across kinds), and steps ServerAssignment for that generation. From there
//     it is the leader's path of Kafka's doSyncGroup: the assignment is persisted, then every
//     parked SyncGroup is answered and the group is Stable.
//   - A ServerAssignment for another generation, or when the group is not waiting for one, is
//     ignored: the group moved on (a member joined or left), and the next generation asks again.
//   - Rebalance starts a rebalance from Stable or CompletingRebalance, as Kafka does when a
//     member's metadata changes: the shell steps it when the membership of the other kinds or a
//     subscribed topic's partitions change, since the Kafka members cannot see either.
//   - Switching the mode while a generation waits for its server-side assignment (or for the
//     leader's, when switching on) restarts the rebalance: the generation's members were told
//     nothing yet, and the other source of assignments would never come.

import "strconv"

// AssignMode chooses who assigns partitions: the shell (Server) or the leader (Kafka's way).
type AssignMode struct {
	Server bool
	// Joint: with Server, the group's Kafka and legacy members rebalance and claim together
	// (joint.go).
	Joint bool
}

// ServerAssignment is the shell's assignment for Generation: member id → the bytes its SyncGroup
// reply carries. Members it leaves out get an empty assignment.
type ServerAssignment struct {
	Generation  Generation
	Assignments map[MemberID][]byte
}

// Rebalance asks for a rebalance; Reason is logged.
type Rebalance struct {
	Reason string
	Cause  Cause // for metrics; empty: CauseOther
}

func (AssignMode) isEvent()       {}
func (ServerAssignment) isEvent() {}
func (Rebalance) isEvent()        {}

// AssignRequest asks the shell for the assignment of a generation (Effects.Assign).
type AssignRequest struct {
	Generation   Generation
	ProtocolType string
	ProtocolName string
	// Members are the generation's members in join order, with their metadata for ProtocolName.
	Members []JoinMember
	// Offered maps each member to every protocol it offered, in its order of preference. A
	// KIP-429 member keeps consuming while it rejoins, and says so in the owned partitions of
	// its metadata; the selected protocol's metadata may not list them (franz-go offering
	// cooperative-sticky and range learns only from the selected name that it must revoke
	// everything), so the shell reads them from all of them.
	Offered map[MemberID][]Protocol
}

// ServerAssigns reports whether the group is in server-side assignment.
func (m *Machine) ServerAssigns() bool { return m.serverAssign }

func (m *Machine) setAssignMode(ev AssignMode) {
	if m.jt.on != ev.Joint {
		m.jt.on = ev.Joint
		if !ev.Joint && m.jt.held {
			m.jt.held = false
			m.requestAssignment() // nothing to wait for any more
		}
	}
	if ev.Server == m.serverAssign {
		return
	}
	m.serverAssign = ev.Server
	who := "the leader"
	if ev.Server {
		who = "the bridge"
	}
	m.log("assignor changed", "", "partitions are now assigned by "+who)
	if m.state == CompletingRebalance && m.assignSeq == 0 {
		m.prepareRebalance(CauseAssignorChanged, "assignor changed while the generation waited for its assignment")
	}
}

// requestAssignment emits Effects.Assign for the generation that just entered
// CompletingRebalance.
func (m *Machine) requestAssignment() {
	req := &AssignRequest{Generation: m.generation, ProtocolType: m.protocolType, ProtocolName: m.protocolName,
		Offered: make(map[MemberID][]Protocol, len(m.order))}
	for _, id := range m.order {
		mb := m.members[id]
		req.Members = append(req.Members, JoinMember{MemberID: id, InstanceID: mb.InstanceID, Metadata: mb.metadata(m.protocolName), SessionTimeout: mb.SessionTimeout})
		req.Offered[id] = cloneProtocols(mb.Protocols)
	}
	m.fx.Assign = req
}

func (m *Machine) serverAssignment(ev ServerAssignment) {
	if !m.serverAssign || m.state != CompletingRebalance || ev.Generation != m.generation || m.assignSeq != 0 || m.jt.held {
		m.log("ignoring a server-side assignment", "", "generation "+strconv.Itoa(int(ev.Generation))+
			" while the group is "+m.state.String()+" at generation "+strconv.Itoa(int(m.generation)))
		return
	}
	m.propose(ev.Assignments)
	m.log("assignment computed by the bridge", "", "generation "+strconv.Itoa(int(m.generation)))
}

func (m *Machine) rebalance(ev Rebalance) {
	switch m.state {
	case Stable, CompletingRebalance:
		cause := ev.Cause
		if cause == "" {
			cause = CauseOther
		}
		m.prepareRebalance(cause, ev.Reason)
	}
}
