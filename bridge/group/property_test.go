package group

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestRandomized drives machines with seeded random event sequences from a handful of clients
// that behave like Kafka clients (and sometimes do not) and checks, after every step:
//
//   - the machine's internal invariants (checkInvariants);
//   - never two members with the same instance id (KIP-345);
//   - the generation never decreases, except by a Restore or a fence, and a Restore never goes
//     back behind a generation a member was told (no generation is handed out twice);
//   - persist before reply: a successful JoinGroup reply never names a generation that is not
//     persisted, a successful SyncGroup reply returns exactly the persisted assignment of its
//     generation, and a successful offset commit is answered only by the step that reports its
//     write done;
//   - at most one write is outstanding, and WakeAt is never in the past;
//   - every request is answered exactly once: at the end the machine is driven to quiescence
//     (writes acknowledged, timers fired) and no request may be left unanswered.
var randSeeds = flag.Int("seeds", 400, "TestRandomized: number of seeds")

func TestRandomized(t *testing.T) {
	seeds, steps := *randSeeds, 300
	if testing.Short() {
		seeds = 50
	}
	for seed := 1; seed <= seeds; seed++ {
		if err := runRandomized(uint64(seed), steps); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

type simClient struct {
	name     string
	inst     InstanceID
	id       MemberID
	gen      Generation
	leader   bool
	members  []MemberID
	protos   []Protocol
	needSync bool // got a JoinGroup reply, has not synced yet
	needJoin bool // told to rejoin
}

type simRequest struct {
	client *simClient
	ev     Event
}

type sim struct {
	rng      *rand.Rand
	m        *Machine
	now      time.Time
	clients  []*simClient
	token    Token
	open     map[Token]simRequest
	writing  bool
	inflight Effects // the write in flight
	acked    *Record // the record ZooKeeper holds
	version  int64
	lastGen  Generation
	told     Generation // the highest generation a successful JoinGroup reply named
	fresh    int
	trace    []string
	hook     func(*Machine, Event, Effects)
}

func runRandomized(seed uint64, steps int) error { return runRandomizedDebug(seed, steps, nil) }

func runRandomizedDebug(seed uint64, steps int, hook func(*Machine, Event, Effects)) (err error) {
	s := &sim{
		hook: hook,
		rng:  rand.New(rand.NewPCG(seed, seed*7919)),
		now:  t0,
		open: make(map[Token]simRequest),
	}
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = time.Duration(s.rng.IntN(4)) * time.Second
	if s.rng.IntN(3) == 0 {
		cfg.MaxSize = 2 + s.rng.IntN(3)
	}
	cfg.MaxOffsetMetadata = 8
	s.m = New(cfg, "g")
	for i := range 6 {
		c := &simClient{name: fmt.Sprintf("c%d", i), gen: NoGeneration}
		if i < 3 {
			c.inst = InstanceID(fmt.Sprintf("i%d", i))
		}
		s.clients = append(s.clients, c)
	}
	defer func() {
		if err != nil {
			n := len(s.trace)
			err = fmt.Errorf("%w\nlast steps:\n%s", err, joinLines(s.trace[max(0, n-25):]))
		}
	}()
	for range steps {
		if err := s.step(s.randomEvent()); err != nil {
			return err
		}
	}
	// Quiescence: acknowledge writes and fire timers until nothing is left to do.
	for range 10000 {
		held, isHeld := s.heldBeat()
		switch {
		case isHeld:
			// The shell bounds every hold (heartbeat_hold.go): a held heartbeat is released.
			err = s.step(s.release(held))
		case s.writing:
			err = s.step(Persisted{Version: s.version + 1})
		case !s.wake().IsZero():
			s.now = s.wake()
			err = s.step(Tick{})
		default:
			if len(s.open) > 0 {
				return fmt.Errorf("quiescent with %d unanswered requests: %v", len(s.open), s.openTokens())
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
	return errors.New("no quiescence after 10000 steps")
}

func joinLines(ls []string) string {
	out := ""
	for _, l := range ls {
		out += "  " + l + "\n"
	}
	return out
}

func (s *sim) openTokens() []Token {
	var ts []Token
	for t := range s.open {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

var simWake time.Time

func (s *sim) wake() time.Time { return simWake }

func (s *sim) pick(n int) int { return s.rng.IntN(n) }

func (s *sim) randomEvent() Event {
	// The shell's side: a deleted group gets a new machine, a fenced one is restored.
	switch {
	case s.m.state == Dead && !s.m.fenced && !s.writing && s.pick(3) == 0:
		s.m = New(s.m.cfg, "g")
		s.lastGen, s.told = 0, 0 // a new incarnation of the group starts at generation 0, as in Kafka
		return Tick{}
	case s.m.fenced && s.acked != nil && s.pick(3) == 0:
		return Restore{Record: *s.acked, Version: s.version}
	case s.writing && s.pick(4) == 0:
		return Persisted{Version: s.version + 1}
	}
	c := s.clients[s.pick(len(s.clients))]
	s.token++
	tok := s.token
	id := c.id
	if s.pick(15) == 0 {
		id = MemberID([]string{"", "zz", "c0-1"}[s.pick(3)])
	}
	gen := c.gen
	if s.pick(15) == 0 {
		gen = Generation(s.pick(4)) - 1
	}
	inst := c.inst
	if s.pick(30) == 0 {
		inst = InstanceID(fmt.Sprintf("i%d", s.pick(4)))
	}
	r := s.pick(100)
	// Well-behaved clients mostly do what their last reply asked for.
	switch {
	case c.needSync && s.pick(3) != 0:
		r = 20
	case c.needJoin && s.pick(3) != 0:
		r = 0
	}
	var ev Event
	switch {
	case r < 18:
		if c.protos == nil || s.pick(8) == 0 {
			c.protos = randomProtocols(s)
		}
		if s.pick(4) == 0 {
			id = ""
		}
		s.fresh++
		ptype := "consumer"
		if s.pick(40) == 0 {
			ptype = "connect"
		}
		session := []time.Duration{6 * time.Second, 10 * time.Second, 20 * time.Second, time.Second}[min(s.pick(20), 3)/1]
		if s.pick(20) != 0 && session == time.Second {
			session = 10 * time.Second
		}
		ev = JoinGroup{
			Token: tok, MemberID: id, InstanceID: inst, ClientID: c.name, ClientHost: "h",
			SessionTimeout: session, RebalanceTimeout: []time.Duration{10 * time.Second, 30 * time.Second, 0}[s.pick(3)],
			ProtocolType: ptype, Protocols: c.protos, RequireKnownMemberID: s.pick(2) == 0,
			SupportSkipAssignment: s.pick(2) == 0,
			NewMemberID:           MemberID(fmt.Sprintf("%s-%d", c.name, s.fresh)),
		}
		c.needJoin = false
	case r < 32:
		sg := SyncGroup{Token: tok, MemberID: id, InstanceID: inst, Generation: gen}
		if c.leader || s.pick(10) == 0 {
			sg.Assignments = make(map[MemberID][]byte)
			for i, mid := range c.members {
				if s.pick(6) != 0 {
					sg.Assignments[mid] = fmt.Appendf(nil, "g%d-p%d", gen, i)
				}
			}
		}
		ev = sg
		c.needSync = false
	case r < 52:
		if held, ok := s.heldBeat(); ok && s.pick(3) == 0 {
			s.token--
			return s.release(held)
		}
		ev = Heartbeat{Token: tok, MemberID: id, InstanceID: inst, Generation: gen, Hold: s.pick(2) == 0}
	case r < 55:
		lm := LeaveMember{MemberID: id, InstanceID: inst}
		if s.pick(3) == 0 {
			lm.MemberID = ""
		}
		lg := LeaveGroup{Token: tok, Members: []LeaveMember{lm}}
		if s.pick(4) == 0 {
			o := s.clients[s.pick(len(s.clients))]
			lg.Members = append(lg.Members, LeaveMember{MemberID: o.id, InstanceID: o.inst})
		}
		ev = lg
	case r < 65:
		oc := OffsetCommit{Token: tok, MemberID: id, InstanceID: inst, Generation: gen}
		if s.pick(4) == 0 {
			oc.MemberID, oc.InstanceID, oc.Generation = "", "", NoGeneration
		}
		for range 1 + s.pick(3) {
			meta := ""
			if s.pick(10) == 0 {
				meta = "much too long"
			}
			oc.Offsets = append(oc.Offsets, OffsetCommitPartition{Topic: "t", Partition: int32(s.pick(4)), Offset: int64(s.pick(1000)), Metadata: meta})
		}
		ev = oc
	case r < 67:
		ev = Describe{Token: tok}
	case r < 68:
		ev = Delete{Token: tok}
	case r < 85:
		s.token--
		d := time.Duration(s.pick(3000)) * time.Millisecond
		if s.pick(6) == 0 {
			d = time.Duration(s.pick(20000)) * time.Millisecond
		}
		s.now = s.now.Add(d)
		return Tick{}
	case r < 98:
		s.token--
		if s.writing {
			return Persisted{Version: s.version + 1}
		}
		return Tick{}
	case r < 99:
		s.token--
		if s.writing && s.pick(2) == 0 {
			return PersistFailed{Err: errors.New("conflict")}
		}
		return Tick{}
	default:
		s.token--
		if s.acked != nil {
			return Restore{Record: *s.acked, Version: s.version}
		}
		return Tick{}
	}
	s.open[tok] = simRequest{client: c, ev: ev}
	return ev
}

// heldBeat returns an open heartbeat that the machine may be holding (the lowest token, so that
// a seed replays the same).
func (s *sim) heldBeat() (Token, bool) {
	var best Token
	for t, r := range s.open {
		if hb, ok := r.ev.(Heartbeat); ok && hb.Hold && (best == 0 || t < best) {
			best = t
		}
	}
	return best, best != 0
}

// release is the shell ending the hold of heartbeat held.
func (s *sim) release(held Token) Event {
	hb := s.open[held].ev.(Heartbeat)
	s.token++
	ev := ReleaseHeartbeat{Token: s.token, MemberID: hb.MemberID, Held: held}
	s.open[s.token] = simRequest{client: s.open[held].client, ev: ev}
	return ev
}

func randomProtocols(s *sim) []Protocol {
	switch s.pick(4) {
	case 0:
		return []Protocol{{Name: "range", Metadata: []byte("r")}}
	case 1:
		return []Protocol{{Name: "roundrobin", Metadata: []byte("w")}, {Name: "range", Metadata: []byte("r")}}
	case 2:
		return []Protocol{{Name: "range", Metadata: []byte("r2")}, {Name: "roundrobin", Metadata: []byte("w")}}
	default:
		return []Protocol{{Name: "sticky", Metadata: []byte("s")}}
	}
}

func (s *sim) step(ev Event) error {
	s.trace = append(s.trace, fmt.Sprintf("@%v %T%+v", s.now.Sub(t0), ev, ev))
	if r, ok := ev.(Restore); ok && r.Record.Generation < s.told {
		return fmt.Errorf("restore to generation %d behind generation %d already told to a member", r.Record.Generation, s.told)
	}
	fx := s.m.Step(s.now, ev)
	if s.hook != nil {
		s.hook(s.m, ev, fx)
	}
	simWake = fx.WakeAt
	if err := s.m.checkInvariants(); err != nil {
		return fmt.Errorf("invariants: %w", err)
	}
	// Never two members with the same instance id.
	seen := make(map[InstanceID]MemberID)
	for id, mb := range s.m.members {
		if mb.InstanceID == "" {
			continue
		}
		if other, ok := seen[mb.InstanceID]; ok {
			return fmt.Errorf("instance %s held by %s and %s", mb.InstanceID, other, id)
		}
		seen[mb.InstanceID] = id
	}
	// The generation never decreases but by a Restore or a fence.
	_, restore := ev.(Restore)
	if s.m.generation < s.lastGen && !restore && !s.m.fenced {
		return fmt.Errorf("generation went from %d to %d", s.lastGen, s.m.generation)
	}
	s.lastGen = s.m.generation
	if !fx.WakeAt.IsZero() && !fx.WakeAt.After(s.now) {
		return fmt.Errorf("WakeAt %v is not after now %v", fx.WakeAt, s.now)
	}

	var ackedOffsets []OffsetCommitPartition
	switch ev.(type) {
	case Persisted:
		if s.writing {
			if s.inflight.Persist != nil {
				rec := *s.inflight.Persist
				s.acked = &rec
			}
			ackedOffsets = s.inflight.Offsets
			s.writing = false
			s.version++
		}
	case PersistFailed, Restore:
		s.writing = false
	}
	if fx.NeedsWrite() {
		if s.writing {
			return errors.New("a second write while one is outstanding")
		}
		s.writing = true
		s.inflight = fx
	}
	for _, r := range fx.Replies {
		if err := s.observe(r, ackedOffsets); err != nil {
			return err
		}
	}
	return nil
}

// observe checks one reply and updates the client that sent the request.
func (s *sim) observe(r Reply, ackedOffsets []OffsetCommitPartition) error {
	req, ok := s.open[r.RequestToken()]
	if !ok {
		return fmt.Errorf("reply %+v answers no open request", r)
	}
	delete(s.open, r.RequestToken())
	c := req.client
	switch r := r.(type) {
	case JoinReply:
		if _, ok := req.ev.(JoinGroup); !ok {
			return fmt.Errorf("join reply to %T", req.ev)
		}
		switch r.Err {
		case ErrNone:
			if s.acked == nil || s.acked.Generation < r.Generation {
				return fmt.Errorf("JoinGroup reply names generation %d, persisted is %v", r.Generation, s.acked)
			}
			s.told = max(s.told, r.Generation)
			c.id, c.gen, c.leader = r.MemberID, r.Generation, r.Leader == r.MemberID && r.Members != nil
			c.needSync = true
			c.members = nil
			for _, jm := range r.Members {
				c.members = append(c.members, jm.MemberID)
			}
		case ErrMemberIDRequired:
			c.id, c.needJoin = r.MemberID, true
		case ErrUnknownMemberID, ErrFencedInstanceID:
			c.id, c.gen, c.leader, c.needJoin = "", NoGeneration, false, true
		case ErrRebalanceInProgress:
			c.needJoin = true
		}
	case SyncReply:
		sg, ok := req.ev.(SyncGroup)
		if !ok {
			return fmt.Errorf("sync reply to %T", req.ev)
		}
		if r.Err == ErrNone {
			if s.acked == nil || s.acked.Generation != sg.Generation || s.acked.Rebalancing {
				return fmt.Errorf("SyncGroup reply for generation %d, persisted is %v", sg.Generation, s.acked)
			}
			i := slices.IndexFunc(s.acked.Members, func(rm RecordMember) bool { return rm.ID == sg.MemberID })
			if i < 0 || string(s.acked.Members[i].Assignment) != string(r.Assignment) {
				return fmt.Errorf("SyncGroup reply to %s with assignment %q, persisted record %+v", sg.MemberID, r.Assignment, s.acked)
			}
		}
		if r.Err == ErrRebalanceInProgress || r.Err == ErrIllegalGeneration || r.Err == ErrUnknownMemberID {
			c.leader, c.needJoin = false, true
		}
	case OffsetCommitReply:
		oc, ok := req.ev.(OffsetCommit)
		if !ok {
			return fmt.Errorf("commit reply to %T", req.ev)
		}
		for i, p := range r.Partitions {
			if p.Err != ErrNone {
				continue
			}
			want := oc.Offsets[i]
			if !slices.ContainsFunc(ackedOffsets, func(o OffsetCommitPartition) bool {
				return o.Topic == want.Topic && o.Partition == want.Partition
			}) {
				return fmt.Errorf("offset commit %s/%d answered NONE by a step that persisted %v", want.Topic, want.Partition, ackedOffsets)
			}
		}
	case HeartbeatReply:
		switch r.Err {
		case ErrUnknownMemberID, ErrFencedInstanceID:
			c.id, c.gen, c.needJoin = "", NoGeneration, true
		case ErrRebalanceInProgress, ErrIllegalGeneration:
			c.needJoin = true
		}
	}
	return nil
}
