package group

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestJointProperty drives one machine in joint mode (AssignMode{Server, Joint}) with random
// Kafka clients (joins, syncs, heartbeats, leaves), random legacy events (those of
// TestLegacyOrderProperty) and a shell that answers writes, assignments, checks and claims late
// or at once, with any outcome. It checks after every Step the Kafka invariants and the legacy
// ordering rules (seed 001: no claim before every Stop and final Ping is in, no Start before
// the claim is written), and that a joint claim always comes with the generation's Effects.Assign
// (one claim for both kinds); then, once the clients behave and the shell answers everything
// with success, that the group settles: Kafka members Stable with their assignment, legacy
// members idle, no generation left waiting for a claim.
func TestJointProperty(t *testing.T) {
	for seed := range uint64(300) {
		if err := jointRandomRun(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// jointClient is a Kafka client as the property test plays it.
type jointClient struct {
	name               string
	id                 MemberID
	gen                Generation
	joining, syncing   bool // a JoinGroup or SyncGroup is open
	needJoin, needSync bool
	stable             bool // its last SyncGroup succeeded and nothing told it to rejoin since
}

type jointRun struct {
	legacyRun
	clients []*jointClient
	open    map[Token]*jointClient
	token   Token
	fresh   int
	writing bool
	assign  Generation // the generation whose assignment was asked for and not given; 0 when none
	wake    time.Time
}

func jointRandomRun(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 17))
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = time.Duration(rng.IntN(2)) * 500 * time.Millisecond
	cfg.Legacy = LegacyConfig{RebalanceDelay: time.Duration(rng.IntN(3)) * 100 * time.Millisecond,
		RetryBackoff: 100 * time.Millisecond, RetryBackoffMax: time.Second}
	r := &jointRun{legacyRun: legacyRun{rng: rng, m: New(cfg, "g"), md: newLegacyModel(), now: t0},
		open: map[Token]*jointClient{}}
	for i := range 3 {
		r.clients = append(r.clients, &jointClient{name: fmt.Sprintf("k%d", i), gen: NoGeneration})
	}
	if err := r.jstep(AssignMode{Server: true, Joint: true}); err != nil {
		return err
	}
	for i := range 400 {
		if err := r.jstep(r.randomEvent(i)); err != nil {
			return err
		}
	}
	return r.jsettle()
}

func (r *jointRun) randomEvent(i int) Event {
	rng := r.rng
	switch n := rng.IntN(20); {
	case n < 2 && r.writing:
		return Persisted{Version: 1}
	case n < 4 && r.assign != 0:
		return r.serverAssignment()
	case n < 6 && r.check:
		return []Event{LegacyChecked{Needed: true}, LegacyChecked{Needed: true}, LegacyChecked{}, LegacyChecked{Err: errors.New("x")}}[rng.IntN(4)]
	case n < 8 && r.md.claim != 0:
		outcome := []LegacyClaimOutcome{LegacyClaimWritten, LegacyClaimWritten, LegacyClaimBlocked, LegacyClaimFailed}[rng.IntN(4)]
		return LegacyClaimed{Claim: r.md.claim, Outcome: outcome, Err: errors.New("x")}
	case n < 9 && len(r.stale) > 0:
		return LegacyClaimed{Claim: r.stale[rng.IntN(len(r.stale))], Outcome: LegacyClaimOutcome(rng.IntN(3))}
	case n < 14:
		if ev := r.clientEvent(r.clients[rng.IntN(len(r.clients))], rng.IntN(10) == 0); ev != nil {
			return ev
		}
		return Tick{}
	default:
		ev := legacyRandomEvent(rng, r.md, i)
		if _, ok := ev.(Tick); ok {
			r.now = r.now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
		return ev
	}
}

// clientEvent is what client c does next: what its last reply asked for, else a heartbeat;
// with leave, a LeaveGroup. nil when it waits for a reply.
func (r *jointRun) clientEvent(c *jointClient, leave bool) Event {
	if c.joining || c.syncing {
		return nil
	}
	r.token++
	tok := r.token
	r.open[tok] = c
	switch {
	case leave && c.id != "":
		return LeaveGroup{Token: tok, Members: []LeaveMember{{MemberID: c.id}}}
	case c.needSync:
		c.syncing, c.needSync = true, false
		return SyncGroup{Token: tok, MemberID: c.id, Generation: c.gen}
	case c.id == "" || c.needJoin || !c.stable:
		c.joining, c.needJoin = true, false
		r.fresh++
		return JoinGroup{Token: tok, MemberID: c.id, ClientID: c.name, ClientHost: "h", SessionTimeout: 10 * time.Second,
			RebalanceTimeout: 10 * time.Second, ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: []byte(c.name)}},
			NewMemberID: MemberID(fmt.Sprintf("%s-%d", c.name, r.fresh))}
	}
	return Heartbeat{Token: tok, MemberID: c.id, Generation: c.gen}
}

func (r *jointRun) serverAssignment() Event {
	sa := ServerAssignment{Generation: r.assign, Assignments: map[MemberID][]byte{}}
	for _, c := range r.clients {
		if c.id != "" {
			sa.Assignments[c.id] = []byte("p-" + c.name)
		}
	}
	r.assign = 0
	return sa
}

func (r *jointRun) jstep(ev Event) error {
	fx := r.m.Step(r.now, ev)
	r.wake = fx.WakeAt
	r.trace = append(r.trace, fmt.Sprintf("@%v %T%+v → %v %v %+v assign=%v", r.now.Sub(t0), ev, ev, r.m.State(), r.m.LegacyPhase(), fx.Legacy, fx.Assign != nil))
	fail := func(err error) error {
		return fmt.Errorf("%w\ntrace:\n%s", err, strings.Join(r.trace[max(0, len(r.trace)-30):], "\n"))
	}
	if err := r.m.checkInvariants(); err != nil {
		return fail(err)
	}
	if err := r.md.check(ev, fx); err != nil {
		return fail(err)
	}
	if c := fx.Legacy.Claim; c != nil && c.Joint && fx.Assign == nil {
		return fail(errors.New("a joint claim without the generation's assignment request"))
	}
	r.track(ev, fx)
	if _, ok := ev.(Persisted); ok {
		r.writing = false
	}
	if fx.NeedsWrite() {
		r.writing = true
	}
	if fx.Assign != nil {
		r.assign = fx.Assign.Generation
	}
	for _, rep := range fx.Replies {
		r.observe(rep)
	}
	return nil
}

// observe updates the client whose request rep answers.
func (r *jointRun) observe(rep Reply) {
	c := r.open[rep.RequestToken()]
	delete(r.open, rep.RequestToken())
	if c == nil {
		return
	}
	reset := func() { c.id, c.gen, c.stable, c.needSync, c.needJoin = "", NoGeneration, false, false, false }
	switch rep := rep.(type) {
	case JoinReply:
		c.joining = false
		switch rep.Err {
		case ErrNone:
			c.id, c.gen, c.needSync, c.stable = rep.MemberID, rep.Generation, true, false
		case ErrMemberIDRequired:
			c.id, c.needJoin = rep.MemberID, true
		case ErrRebalanceInProgress:
			c.needJoin = true
		default:
			reset()
		}
	case SyncReply:
		c.syncing = false
		switch rep.Err {
		case ErrNone:
			c.stable = true
		case ErrRebalanceInProgress:
			c.stable, c.needJoin = false, true
		default:
			reset()
		}
	case HeartbeatReply:
		switch rep.Err {
		case ErrNone:
		case ErrRebalanceInProgress:
			c.stable, c.needJoin = false, true
		default:
			reset()
		}
	case LeaveReply:
		reset()
	}
}

// jsettle answers everything in time and with success, the clients doing what their replies
// ask, until the group is settled.
func (r *jointRun) jsettle() error {
	for i := range 3000 {
		var ev Event
		switch {
		case r.writing:
			ev = Persisted{Version: 1}
		case r.assign != 0:
			ev = r.serverAssignment()
		default:
			ev = r.owed()
		}
		if ev == nil {
			for _, c := range r.clients[i%len(r.clients):] {
				if ev = r.clientEvent(c, false); ev != nil {
					break
				}
			}
		}
		if ev == nil || i%7 == 0 {
			if r.settled() {
				return nil
			}
			r.now = r.now.Add(300 * time.Millisecond)
			if ev == nil {
				ev = Tick{}
			}
		}
		if err := r.jstep(ev); err != nil {
			return err
		}
	}
	var cs []string
	for _, c := range r.clients {
		cs = append(cs, fmt.Sprintf("%+v", *c))
	}
	return fmt.Errorf("the group does not settle: %v, legacy %v, held %v, clients %v\ntrace:\n%s", r.m.State(), r.m.LegacyPhase(),
		r.m.jt.held, cs, strings.Join(r.trace[max(0, len(r.trace)-40):], "\n"))
}

// settled: every client is a Stable member, the legacy members are idle, nothing is asked.
func (r *jointRun) settled() bool {
	if r.writing || r.assign != 0 || r.check || r.md.claim != 0 || r.m.jt.held {
		return false
	}
	if r.m.LegacyPhase() != LegacyIdle || r.m.legacy.want || r.m.State() != Stable {
		return false
	}
	return !slices.ContainsFunc(r.clients, func(c *jointClient) bool { return !c.stable || r.m.members[c.id] == nil })
}
