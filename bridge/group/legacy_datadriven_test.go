package group

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The scenario files in testdata/legacy/*.txt drive the legacy members of one Machine each, in
// the format of testdata/*.txt (datadriven_test.go; rewrite with -rewrite and read the diff).
// Each cites the rule of seed 001 (/work/shared/seeds/001_141185e2e34141d4.txt, "rebalance
// (group)" steps 1-5, lines 5-23; StopRequest, line 196; PingRequest, line 214) or of
// docs/legacy-protocol.md §8 it checks.
//
// Commands (times relative to the start, "@3s"):
//
//	new [delay=0s] [backoff=100ms] [backoff-max=1s]
//	register <id> [ping=1s] [retries=2] [auto] [replaced]
//	leave <id>                              the shell lost the member (connection closed)
//	answer <id> ping|stop|final|start [timeout [late]|fail|refused]
//	late <id> [lost]                        the late answer of the member's oldest ping that
//	                                        timed out with late, or its loss
//	checked needed|unneeded|fail            the shell's answer to a check
//	claimed written|blocked|fail [claim=N]  the claimer's report on claim N (default: the last)
//	trigger <words>                         e.g. partitions of a topic changed
//	tick +1s | tick wake
//
// Every step is also checked against the ordering rules by legacyModel (checkLegacyOrder): a
// Start only after the claim is written; a claim only once every member answered its Stop and
// every auto_commit member its final Ping, with nothing of the attempt in flight; no request to
// a member that is gone.

func TestLegacyScenarios(t *testing.T) {
	runScenarioFiles(t, "testdata/legacy/*.txt", runLegacyScenario)
}

type legacyHarness struct {
	harness
	model *legacyModel
	claim uint64 // the last claim asked for
}

func runLegacyScenario(t *testing.T, path string) {
	h := &legacyHarness{harness: harness{t: t, cfg: DefaultConfig(), now: t0}}
	h.m = New(h.cfg, "g")
	h.model = newLegacyModel()
	playScenario(t, path, func(b block) string {
		got := h.runLegacy(b.cmd)
		for _, l := range h.fx.Logs {
			if !l.Legacy {
				t.Errorf("%s:%d: log %q of a legacy group not marked Legacy (its shell would not log it)", path, b.line, l.Msg)
			}
		}
		h.fx = Effects{}
		return got
	})
}

func (h *legacyHarness) runLegacy(line string) (out string) {
	defer h.recoverCommand(line, &out)
	return h.legacyStep(line)
}

var legacyKinds = map[string]LegacyRequestKind{"ping": LegacyPing, "stop": LegacyStop, "final": LegacyFinalPing, "start": LegacyStart}

func (h *legacyHarness) legacyStep(line string) string {
	cmd, pos, kv := args(line)
	has := func(k string) bool { return slices.Contains(pos, k) }
	get := func(k, def string) string {
		if v, ok := kv[k]; ok {
			return v
		}
		return def
	}
	var ev Event
	switch cmd {
	case "new":
		h.cfg = DefaultConfig()
		h.cfg.Legacy = LegacyConfig{
			RebalanceDelay:  h.dur(get("delay", "0s")),
			RetryBackoff:    h.dur(get("backoff", "100ms")),
			RetryBackoffMax: h.dur(get("backoff-max", "1s")),
		}
		h.m, h.now, h.wake, h.claim = New(h.cfg, "g"), t0, time.Time{}, 0
		h.model = newLegacyModel()
		return "ok"
	case "register":
		ev = LegacyJoin{Member: MemberID(pos[0]), PingInterval: h.dur(get("ping", "1s")),
			MaxPingRetries: int(h.num(get("retries", "2"))), AutoCommit: has("auto"), Replaced: has("replaced")}
	case "leave":
		ev = LegacyLeave{Member: MemberID(pos[0]), Cause: errors.New("connection closed")}
	case "answer":
		kind, ok := legacyKinds[pos[1]]
		if !ok {
			h.fail("unknown request %q", pos[1])
		}
		a := LegacyAnswer{Member: MemberID(pos[0]), Kind: kind}
		switch {
		case has("timeout"):
			a.Outcome, a.Err, a.Late = LegacyTimedOut, errors.New("timed out"), has("late")
		case has("fail"):
			a.Outcome, a.Err = LegacyFailed, errors.New("connection reset")
		case has("refused"):
			a.Outcome, a.Err = LegacyRefused, errors.New("UNKNOWN")
		}
		ev = a
	case "late":
		a := LegacyAnswer{Member: MemberID(pos[0]), Kind: LegacyPing, Late: true}
		if has("lost") {
			a.Outcome, a.Err = LegacyFailed, errors.New("connection closed")
		}
		ev = a
	case "checked":
		switch pos[0] {
		case "needed":
			ev = LegacyChecked{Needed: true, Reason: "3.1 no ownership registered"}
		case "unneeded":
			ev = LegacyChecked{Reason: "3.5"}
		default:
			ev = LegacyChecked{Err: errors.New("reading the owners: zk: connection closed")}
		}
	case "claimed":
		n := uint64(h.num(get("claim", fmt.Sprint(h.claim))))
		switch pos[0] {
		case "written":
			ev = LegacyClaimed{Claim: n, Outcome: LegacyClaimWritten}
		case "blocked":
			ev = LegacyClaimed{Claim: n, Outcome: LegacyClaimBlocked}
		default:
			ev = LegacyClaimed{Claim: n, Outcome: LegacyClaimFailed, Err: errors.New("writing ownership: zk: node exists")}
		}
	case "trigger":
		ev = LegacyTrigger{Reason: strings.Join(pos, " ")}
	case "tick":
		switch {
		case len(pos) == 0:
			h.fail("tick needs +d or wake")
		case pos[0] == "wake":
			if h.wake.IsZero() {
				h.fail("no wake armed")
			}
			h.now = h.wake
		default:
			h.now = h.now.Add(h.dur(strings.TrimPrefix(pos[0], "+")))
		}
		ev = Tick{}
	default:
		h.fail("unknown command %q", cmd)
	}
	fx := h.m.Step(h.now, ev)
	h.wake, h.ev, h.fx = fx.WakeAt, ev, fx
	if fx.Legacy.Claim != nil {
		h.claim = fx.Legacy.Claim.Claim
	}
	if err := h.model.check(ev, fx); err != nil {
		h.t.Errorf("%s: ordering rule broken: %v", line, err)
	}
	return h.formatLegacy(fx)
}

func (h *legacyHarness) formatLegacy(fx Effects) string {
	out := legacyEffectLines(fx)
	for _, l := range fx.Logs {
		out = append(out, "log: "+l.Msg+" ("+l.Reason+")")
	}
	out = append(out, h.legacyStateLine(fx.WakeAt))
	return strings.Join(out, "\n")
}

// legacyEffectLines are the lines of fx's legacy effects, logs left out.
func legacyEffectLines(fx Effects) []string {
	var out []string
	lx := fx.Legacy
	if lx.Accepted {
		out = append(out, "accepted")
	}
	if lx.Commit {
		out = append(out, "commit final offsets")
	}
	for _, d := range lx.Drops {
		if d.Dead {
			out = append(out, fmt.Sprintf("drop %s dead missed=%d interval=%v", d.Member, d.Missed, d.Interval))
		} else {
			out = append(out, fmt.Sprintf("drop %s: %v", d.Member, d.Cause))
		}
	}
	for _, r := range lx.Requests {
		out = append(out, fmt.Sprintf("send %s %v retries=%d", r.Member, r.Kind, r.Retries))
	}
	if lx.Check != nil {
		kafka := ""
		if lx.Check.Kafka {
			kafka = " kafka"
		}
		out = append(out, fmt.Sprintf("check attempt=%d trigger=%q%s", lx.Check.Attempt, lx.Check.Trigger, kafka))
	}
	if lx.Cancel != 0 {
		out = append(out, fmt.Sprintf("cancel claim=%d", lx.Cancel))
	}
	if lx.Claim != nil {
		joint := ""
		if lx.Claim.Joint {
			joint = " joint"
		}
		out = append(out, fmt.Sprintf("claim claim=%d attempt=%d%s", lx.Claim.Claim, lx.Claim.Attempt, joint))
	}
	if b := lx.Blocked; b != nil {
		out = append(out, fmt.Sprintf("blocked tries=%d", b.Tries))
	}
	if f := lx.Failed; f != nil {
		out = append(out, fmt.Sprintf("failed attempt=%d retry-in=%v: %v", f.Attempt, f.RetryIn, f.Err))
	}
	if d := lx.Done; d != nil {
		if d.Unnecessary {
			out = append(out, fmt.Sprintf("done unnecessary attempts=%d members=%d", d.Attempts, d.Members))
		} else {
			out = append(out, fmt.Sprintf("done took=%v attempts=%d members=%d checking=%v stopping=%v claiming=%v starting=%v",
				d.Duration, d.Attempts, d.Members, d.Checking, d.Stopping, d.Claiming, d.Starting))
		}
	}
	return out
}

func (h *legacyHarness) legacyStateLine(wake time.Time) string {
	l := &h.m.legacy
	var ms []string
	for _, id := range l.ids {
		mb := l.members[id]
		var tags []string
		if mb.inAttempt {
			tags = append(tags, "req")
		}
		if mb.pinging {
			tags = append(tags, "ping")
		}
		if mb.missed > 0 {
			tags = append(tags, fmt.Sprintf("missed=%d", mb.missed))
		}
		if l.att != nil && l.att.waiting[id] {
			tags = append(tags, "waited")
		}
		s := string(id)
		if len(tags) > 0 {
			s += "(" + strings.Join(tags, ",") + ")"
		}
		ms = append(ms, s)
	}
	s := fmt.Sprintf("phase=%v members=[%s]", l.phase, strings.Join(ms, " "))
	if l.att != nil && l.att.dirty {
		s += " dirty"
	}
	if !wake.IsZero() {
		s += " wake=" + h.at(wake)
	}
	return s
}

// legacyModel is what the scenarios and the property test know of the group from outside the
// engine: the members, the requests in flight, and what each member answered in the current
// attempt. check enforces the ordering rules of seed 001 step 4 on every Step's effects.
type legacyModel struct {
	auto     map[MemberID]bool                       // registered members → auto_commit
	inflight map[MemberID]map[LegacyRequestKind]bool // requests sent, not answered
	stopped  map[MemberID]bool                       // answered its Stop in this attempt
	final    map[MemberID]bool                       // answered its final Ping in this attempt
	asked    bool                                    // a check's result is due
	claim    uint64                                  // the claim running, 0 when none
	// In the current attempt: a final Ping's offsets were accepted, its claim was written. An
	// attempt that ends (restarted or failed) with the first and not the second has the shell
	// commit them (final_ping.txt, claim_cancel.txt).
	finals, written bool
}

func newLegacyModel() *legacyModel {
	return &legacyModel{auto: map[MemberID]bool{}, inflight: map[MemberID]map[LegacyRequestKind]bool{},
		stopped: map[MemberID]bool{}, final: map[MemberID]bool{}}
}

func (md *legacyModel) check(ev Event, fx Effects) error {
	var errs []error
	switch ev := ev.(type) {
	case LegacyJoin:
		md.auto[ev.Member] = ev.AutoCommit
		if ev.Replaced {
			delete(md.inflight, ev.Member)
		}
		md.stopped[ev.Member], md.final[ev.Member] = false, false
	case LegacyAnswer:
		if ev.Late && ev.Outcome != LegacyTimedOut {
			break // the answer of a request already timed out
		}
		if _, member := md.auto[ev.Member]; member && !md.inflight[ev.Member][ev.Kind] {
			errs = append(errs, fmt.Errorf("answer of %s's %v, which was not sent", ev.Member, ev.Kind))
		}
		delete(md.inflight[ev.Member], ev.Kind)
		if ev.Outcome == LegacyAnswered {
			switch ev.Kind {
			case LegacyStop:
				md.stopped[ev.Member] = true
			case LegacyFinalPing:
				md.final[ev.Member] = true
			}
		}
	case LegacyChecked:
		md.asked = false
	}
	lx := fx.Legacy
	if err := md.checkCommit(ev, lx); err != nil {
		errs = append(errs, err)
	}
	if md.asked {
		// Other events come in while the check reads (on the claimer): nothing of the attempt
		// moves before its result. Pings do go out (sent checks them as any ping): the check may
		// wait for ZooKeeper longer than a ping interval, and a member needs a request at least
		// every interval (docs §8 "Coordinator" 1).
		var req *LegacyRequest
		for i, r := range lx.Requests {
			if r.Kind != LegacyPing {
				req = &lx.Requests[i]
				break
			}
		}
		switch {
		case req != nil:
			errs = append(errs, fmt.Errorf("%v to %s while the check runs", req.Kind, req.Member))
		case lx.Check != nil:
			errs = append(errs, errors.New("a second check while the check runs"))
		case lx.Claim != nil:
			errs = append(errs, errors.New("claim while the check runs"))
		}
	}
	for _, d := range lx.Drops {
		if _, ok := md.auto[d.Member]; !ok {
			errs = append(errs, fmt.Errorf("drop of %s, not a member", d.Member))
		}
		delete(md.auto, d.Member)
		delete(md.inflight, d.Member)
	}
	written := false
	if c, ok := ev.(LegacyClaimed); ok && md.claim != 0 && c.Claim == md.claim {
		written = c.Outcome == LegacyClaimWritten
		if c.Outcome != LegacyClaimBlocked {
			md.claim = 0
		}
	}
	if lx.Cancel != 0 {
		if lx.Cancel != md.claim {
			errs = append(errs, fmt.Errorf("cancel of claim %d, not the one running (%d)", lx.Cancel, md.claim))
		}
		md.claim = 0
	}
	if lx.Check != nil {
		if md.claim != 0 {
			errs = append(errs, fmt.Errorf("check while claim %d runs and is not cancelled", md.claim))
		}
		md.stopped, md.final, md.asked = map[MemberID]bool{}, map[MemberID]bool{}, true
	}
	for _, r := range lx.Requests {
		errs = append(errs, md.sent(written, r)...)
		if md.claim != 0 && r.Kind != LegacyPing {
			errs = append(errs, fmt.Errorf("%v to %s while claim %d runs", r.Kind, r.Member, md.claim))
		}
	}
	if lx.Claim != nil {
		md.claim = lx.Claim.Claim
		for _, id := range slices.Sorted(maps.Keys(md.auto)) {
			switch {
			case !md.stopped[id]:
				errs = append(errs, fmt.Errorf("claim before %s answered its StopRequest (seed step 4.1 precedes the claim)", id))
			case md.auto[id] && !md.final[id]:
				errs = append(errs, fmt.Errorf("claim before auto_commit member %s answered its final PingRequest (docs §8 Coordinator 2)", id))
			}
			for k := range md.inflight[id] {
				if k != LegacyPing {
					errs = append(errs, fmt.Errorf("claim while %s's %v is in flight", id, k))
				}
			}
		}
	}
	if lx.Check != nil && lx.Claim != nil {
		errs = append(errs, errors.New("check and claim in one step"))
	}
	return errors.Join(errs...)
}

// checkCommit checks that an attempt that ends (restarted at the check, or failed) before its
// claim is written (asked for or not) has the shell commit the final offsets it accepted, and
// that no other Step does.
func (md *legacyModel) checkCommit(ev Event, lx LegacyEffects) error {
	if a, ok := ev.(LegacyAnswer); ok && a.Kind == LegacyFinalPing && !a.Late && lx.Accepted {
		md.finals = true
	}
	if c, ok := ev.(LegacyClaimed); ok && md.claim != 0 && c.Claim == md.claim && c.Outcome == LegacyClaimWritten {
		md.written = true
	}
	if lx.Check == nil && lx.Failed == nil {
		if lx.Commit {
			return errors.New("final offsets committed while the attempt goes on")
		}
		return nil
	}
	finals, written := md.finals, md.written
	md.finals, md.written = false, false
	if want := finals && !written; lx.Commit != want {
		return fmt.Errorf("attempt ended with final offsets accepted=%v, claim written=%v: commit=%v, want %v",
			finals, written, lx.Commit, want)
	}
	return nil
}

// sent checks one request against the model and records it.
func (md *legacyModel) sent(written bool, r LegacyRequest) []error {
	var errs []error
	if _, ok := md.auto[r.Member]; !ok {
		errs = append(errs, fmt.Errorf("%v to %s, not a member", r.Kind, r.Member))
	}
	if md.inflight[r.Member] == nil {
		md.inflight[r.Member] = map[LegacyRequestKind]bool{}
	}
	for k := range md.inflight[r.Member] {
		if (k == LegacyPing) == (r.Kind == LegacyPing) {
			errs = append(errs, fmt.Errorf("%v to %s while its %v is in flight", r.Kind, r.Member, k))
		}
	}
	md.inflight[r.Member][r.Kind] = true
	switch r.Kind {
	case LegacyStart:
		if !written {
			errs = append(errs, fmt.Errorf("StartRequest to %s before the claim is written (seed step 4.2 follows the ownership write)", r.Member))
		}
	case LegacyFinalPing:
		if !md.stopped[r.Member] {
			errs = append(errs, fmt.Errorf("final PingRequest to %s before its StopResponse", r.Member))
		}
	}
	return errs
}

// TestLegacyOrderProperty steps random sequences of registrations, departures, answers
// (timeouts, failures, error codes), triggers, clock ticks, check results (whenever the claimer
// sends them, other events coming in meanwhile, as the shell's check reads on the claimer) and
// claim reports (whenever the claimer sends them: blocked rounds, written,
// failed, and late reports on cancelled claims) through the engine, and checks every Step
// against the ordering rules (legacyModel.check); then, once the events stop and every request
// and claim is answered, that the group settles idle.
func TestLegacyOrderProperty(t *testing.T) {
	for seed := range uint64(400) {
		if err := legacyRandomRun(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

type legacyRun struct {
	rng   *rand.Rand
	m     *Machine
	md    *legacyModel
	now   time.Time
	trace []string
	check bool     // a check's result is due
	stale []uint64 // cancelled claims, whose reports may still come
}

func (r *legacyRun) step(ev Event) error {
	fx := r.m.Step(r.now, ev)
	r.trace = append(r.trace, fmt.Sprintf("%T%+v → %v %+v", ev, ev, r.m.LegacyPhase(), fx.Legacy))
	if err := r.md.check(ev, fx); err != nil {
		return fmt.Errorf("%w\ntrace:\n%s", err, strings.Join(r.trace, "\n"))
	}
	r.track(ev, fx)
	return nil
}

// track keeps what the shell owes the machine after ev and its effects: a cancelled claim's
// report may still come, a check's result is due until it is given.
func (r *legacyRun) track(ev Event, fx Effects) {
	if fx.Legacy.Cancel != 0 {
		r.stale = append(r.stale, fx.Legacy.Cancel)
	}
	if _, ok := ev.(LegacyChecked); ok {
		r.check = false
	}
	if fx.Legacy.Check != nil {
		r.check = true
	}
}

func legacyRandomRun(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 14))
	cfg := DefaultConfig()
	cfg.Legacy = LegacyConfig{RebalanceDelay: time.Duration(rng.IntN(3)) * 100 * time.Millisecond,
		RetryBackoff: 100 * time.Millisecond, RetryBackoffMax: time.Second}
	r := &legacyRun{rng: rng, m: New(cfg, "g"), md: newLegacyModel(), now: t0}
	for i := range 300 {
		var ev Event
		switch {
		case r.check && rng.IntN(3) == 0:
			ev = []Event{LegacyChecked{Needed: true}, LegacyChecked{}, LegacyChecked{Err: errors.New("x")}}[rng.IntN(3)]
		case r.md.claim != 0 && rng.IntN(4) == 0:
			ev = []Event{LegacyClaimed{Outcome: LegacyClaimWritten}, LegacyClaimed{Outcome: LegacyClaimWritten},
				LegacyClaimed{Outcome: LegacyClaimBlocked}, LegacyClaimed{Outcome: LegacyClaimFailed, Err: errors.New("x")}}[rng.IntN(4)]
			c := ev.(LegacyClaimed)
			c.Claim = r.md.claim
			ev = c
		case len(r.stale) > 0 && rng.IntN(8) == 0:
			ev = LegacyClaimed{Claim: r.stale[rng.IntN(len(r.stale))], Outcome: LegacyClaimOutcome(rng.IntN(3))}
		default:
			ev = legacyRandomEvent(rng, r.md, i)
			if _, ok := ev.(Tick); ok {
				r.now = r.now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
		}
		if err := r.step(ev); err != nil {
			return err
		}
	}
	return r.settle()
}

// settle answers everything in time, and every check and claim with success, until the group is
// idle with nothing in flight.
func (r *legacyRun) settle() error {
	for range 2000 {
		ev := r.owed()
		if ev == nil {
			if r.m.LegacyPhase() == LegacyIdle && !r.m.legacy.want {
				return nil
			}
			r.now = r.now.Add(2 * time.Second)
			ev = Tick{}
		}
		if err := r.step(ev); err != nil {
			return err
		}
	}
	return fmt.Errorf("the group does not settle: phase %v\ntrace:\n%s", r.m.LegacyPhase(), strings.Join(r.trace[max(0, len(r.trace)-30):], "\n"))
}

// legacyAnswerOne answers one request in flight, in time, or returns nil when none is.
func legacyAnswerOne(md *legacyModel) Event {
	for _, id := range slices.Sorted(maps.Keys(md.inflight)) {
		for _, k := range []LegacyRequestKind{LegacyStop, LegacyFinalPing, LegacyStart, LegacyPing} {
			if md.inflight[id][k] {
				return LegacyAnswer{Member: id, Kind: k}
			}
		}
	}
	return nil
}

func legacyRandomEvent(rng *rand.Rand, md *legacyModel, i int) Event {
	members := slices.Sorted(maps.Keys(md.auto))
	switch n := rng.IntN(10); {
	case n == 0 || len(members) == 0:
		id := MemberID(fmt.Sprintf("c%d", rng.IntN(6)))
		_, exists := md.auto[id]
		return LegacyJoin{Member: id, PingInterval: time.Second, MaxPingRetries: 1 + rng.IntN(3), AutoCommit: rng.IntN(2) == 0, Replaced: exists}
	case n == 1:
		return LegacyLeave{Member: members[rng.IntN(len(members))], Cause: errors.New("closed")}
	case n == 2:
		return LegacyTrigger{Reason: fmt.Sprintf("partitions changed %d", i)}
	case n <= 4:
		return Tick{}
	default:
		var open []LegacyAnswer
		for _, id := range members {
			for _, k := range slices.Sorted(maps.Keys(md.inflight[id])) {
				open = append(open, LegacyAnswer{Member: id, Kind: k})
			}
		}
		if len(open) == 0 {
			return Tick{}
		}
		a := open[rng.IntN(len(open))]
		switch rng.IntN(8) {
		case 0:
			a.Outcome, a.Err = LegacyTimedOut, errors.New("timeout")
		case 1:
			a.Outcome, a.Err = LegacyFailed, errors.New("reset")
		case 2:
			if a.Kind == LegacyStop || a.Kind == LegacyStart {
				a.Outcome, a.Err = LegacyRefused, errors.New("code")
			}
		}
		return a
	}
}

// owed is the next answer a willing shell and willing members give, in the order settle gives
// them: the check's result, the claim's, then one member's answer; nil when nothing is owed.
func (r *legacyRun) owed() Event {
	switch {
	case r.check:
		return LegacyChecked{Needed: true}
	case r.md.claim != 0:
		return LegacyClaimed{Claim: r.md.claim, Outcome: LegacyClaimWritten}
	default:
		return legacyAnswerOne(r.md)
	}
}
