package group

// The joint rebalance of a mixed group's Kafka and legacy members (DESIGN §3: a rebalance of a
// mixed group has two phases for every kind at once, revoke then assign). Without it each kind
// rebalances on its own and learns of the other's changes only through ZooKeeper, so that one
// membership change costs a revoke and a claim per kind. With AssignMode{Server, Joint} set:
//
//   - Triggers are shared. A legacy trigger (a legacy member registered or left, a LegacyTrigger)
//     also prepares a rebalance of the Kafka members, and a Kafka rebalance (any cause) also
//     triggers the legacy members' rebalance (seed 001 "rebalance (group)" runs on every
//     membership change, and a Kafka member is one).
//   - The claim is shared. The legacy members' attempt runs seed 001's steps as before (check,
//     4.1 Stop all, then the final Ping of every auto-commit member, docs §8 "Coordinator" 2);
//     when its final offsets are in while the Kafka members are still in their join phase, the
//     attempt waits for it (LegacyJoining, pinged as in a claim wait). A generation whose join
//     phase ends while a legacy attempt is on its way to its claim (a trigger waiting, its
//     check, its Stops, its final Pings) holds back its Effects.Assign. Once both are there, one
//     Step emits Effects.Assign and Legacy.Claim with Joint set: the shell claims both kinds in
//     one claim and reports it with ServerAssignment (the Kafka members' part) and LegacyClaimed
//     (seed step 4.2, the Starts, follow a written claim as before).
//   - A legacy attempt that does not reach a claim (seed step 3.5, a failed attempt) lets the
//     held generation ask for its assignment alone; a Kafka side with no generation waiting
//     (Stable, Empty) lets the legacy members claim alone. A joint claim that fails abandons the
//     Kafka generation with a rebalance, which the legacy members' retry then joins.
//
// Without Joint (and always without Server) nothing here applies: each kind rebalances alone.
// The bridge does not set Joint yet (docs/ARCHITECTURE.md, "Not yet as the design wants it").

// jointState is the machine's part of the joint rebalance.
type jointState struct {
	on bool // AssignMode.Joint (meaningful with Server only)
	// held: the generation in CompletingRebalance waits for the legacy members' claim before
	// it asks for its assignment (Effects.Assign).
	held bool
	// triggering: a legacy trigger is preparing the Kafka rebalance, which must not trigger
	// the legacy members again.
	triggering bool
	// claim is the number of the joint claim whose result the held generation waits for; 0
	// when none.
	claim uint64
}

// jointOn reports whether the group's Kafka and legacy members rebalance together.
func (m *Machine) jointOn() bool { return m.jt.on && m.serverAssign }

// Joint reports whether the group's Kafka and legacy members rebalance together
// (AssignMode.Joint while the bridge assigns).
func (m *Machine) Joint() bool { return m.jointOn() }

// jointLegacyTrigger prepares the Kafka members' rebalance for a legacy trigger.
func (m *Machine) jointLegacyTrigger(why string) {
	if !m.jointOn() || m.jt.triggering {
		return
	}
	m.jt.triggering = true
	m.rebalance(Rebalance{Reason: "the legacy members rebalance: " + why, Cause: CauseOtherKinds})
	m.jt.triggering = false
}

// jointKafkaTrigger triggers the legacy members' rebalance for a Kafka rebalance just prepared.
func (m *Machine) jointKafkaTrigger(reason string) {
	m.jt.held, m.jt.claim = false, 0
	if !m.jointOn() || m.jt.triggering || len(m.legacy.members) == 0 {
		return
	}
	m.jt.triggering = true
	m.legacyTrigger("the Kafka members rebalance: " + reason)
	m.jt.triggering = false
}

// kafkaJoining reports whether the Kafka members rebalance jointly with the legacy members: a
// join phase, or a generation held for the joint claim.
func (m *Machine) kafkaJoining() bool {
	return m.jointOn() && (m.state == PreparingRebalance || m.kafkaAwaitsJointClaim())
}

// legacyComing reports whether the legacy members are on their way to a claim: a trigger
// waits (its delay), or an attempt checks, stops, collects or waits for the Kafka join phase.
func (m *Machine) legacyComing() bool {
	switch m.legacy.phase {
	case LegacyIdle:
		return m.legacy.want
	case LegacyChecking, LegacyStopping, LegacyCollecting, LegacyJoining:
		return true
	}
	return false
}

// askAssignment asks for the new generation's server-side assignment, or holds the request
// back while the legacy members are on their way to the claim it is to share.
func (m *Machine) askAssignment() {
	if m.jointOn() && m.legacyComing() {
		m.jt.held = true
		m.log("generation waits for the legacy members' claim", "", "the claim of both kinds is one")
		return
	}
	m.requestAssignment()
}

// kafkaAwaitsJointClaim reports whether the Kafka generation waits, held, for a claim it is to
// share with the legacy members.
func (m *Machine) kafkaAwaitsJointClaim() bool {
	return m.jt.held && m.jointOn() && m.state == CompletingRebalance && m.assignSeq == 0
}

// legacyReady is the legacy attempt at its claim (every Stop and final Ping in): it claims
// jointly with the Kafka generation held for it, waits for the Kafka join phase, or claims
// alone.
func (m *Machine) legacyReady() {
	switch {
	case m.kafkaAwaitsJointClaim():
		m.jt.held = false
		m.requestAssignment()
		m.legacyClaim()
		m.fx.Legacy.Claim.Joint = true
		m.jt.claim = m.legacy.claims
	case m.jointOn() && m.state == PreparingRebalance:
		if m.legacy.phase != LegacyJoining {
			m.legacy.phase = LegacyJoining
			m.legacyLog("final offsets in: waiting for the Kafka members' join phase to claim together", "", "")
		}
	default:
		m.legacyClaim()
	}
}

// releaseHeld lets a held generation ask for its assignment alone once the legacy members are
// no longer on their way to a claim (their check found no rebalance needed, their attempt
// failed, their side ended).
func (m *Machine) releaseHeld() {
	if m.kafkaAwaitsJointClaim() && !m.legacyComing() {
		m.jt.held = false
		m.log("legacy members reach no claim: the generation asks for its assignment alone", "", "")
		m.requestAssignment()
	}
}

// jointClaimFailed abandons the Kafka generation that waited for the joint claim numbered n,
// which failed: its assignment will not come.
func (m *Machine) jointClaimFailed(n uint64) {
	if n == 0 || m.jt.claim != n {
		return
	}
	m.jt.claim = 0
	if m.jointOn() && m.state == CompletingRebalance && m.assignSeq == 0 {
		m.prepareRebalance(CauseOther, "the claim of both kinds failed")
	}
}
