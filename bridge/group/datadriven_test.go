package group

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The scenario files in testdata/*.txt drive one Machine each, raft-style (etcd-io/raft's
// interaction tests). A block is a command line, "----", and the expected output up to a blank
// line; lines starting with # are comments. After changing the engine, run
//
//	go test ./bridge/group/ -run TestScenarios -rewrite
//
// and read the diff of testdata/ before keeping it.
//
// Commands (times are relative to the scenario's start, "@3s"):
//
//	new [delay=3s] [min-session=6s] [max-session=30m] [max-size=N] [meta-max=4096]
//	join new=<id> | m=<id>   [inst=I] [proto=range:meta,rr] [type=consumer] [session=10s]
//	                         [rebalance=30s] [req-known] [skip-assign] [client=C] [host=H]
//	    new=<id>: a new member (empty member id); the shell's generated id is <id>.
//	    m=<id>: a member that knows its id.
//	sync m=<id> gen=N [inst=I] [assign=a:p0,b:p1] [ptype=T] [pname=P]
//	hb m=<id> gen=N [inst=I] [hold]     (hold: the shell lets the machine hold the answer)
//	release m=<id> held=N                (the shell releases held heartbeat #N)
//	leave <member>[/<instance>] ...      (an empty member names the instance only: /i1)
//	commit [m=<id>] [gen=N] [inst=I] offsets=t/0@10,t/1@20 [meta=text]
//	describe | delete | tick +3s | tick wake | persisted | persist-fail
//	reload      the same machine loads the last persisted record (Restore)
//	restore [+20s]  a new machine (same config), later by the given time, loads the last
//	                persisted record (a bridge restart: the old machine is dropped)
//	state       the members in detail
//
// Every request gets the next token (#1, #2, ...); "#N held" means it got no reply in that step.
// Each step prints its replies, the write it asks for, its logs and the machine's state line.

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	t       *testing.T
	cfg     Config
	m       *Machine
	now     time.Time
	wake    time.Time
	token   Token
	zk      *Record // the last persisted record
	pending *Record // the record of the write in flight
	version int64
	// ev and fx are the last step's event and effects (the mixed scenarios print the other
	// kind's part of them).
	ev Event
	fx Effects
}

func TestScenarios(t *testing.T) {
	runScenarioFiles(t, "testdata/*.txt", runScenario)
}

type block struct {
	pre    []string // comments and blank lines before the command
	cmd    string
	output string
	line   int
}

func parseScenario(t *testing.T, path string) ([]block, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []block
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := block{pre: pre, cmd: l, line: i + 1}
		pre = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ----", path, i+1)
		}
		i += 2
		var out []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		b.output = strings.Join(out, "\n")
		blocks = append(blocks, b)
		i-- // the blank line is the next pre line
	}
	return blocks, pre
}

func runScenario(t *testing.T, path string) {
	h := &harness{t: t, cfg: DefaultConfig(), now: t0}
	h.m = New(h.cfg, "g")
	playScenario(t, path, func(b block) string {
		got := h.run(b.cmd)
		for _, l := range h.fx.Logs {
			if l.Legacy {
				t.Errorf("%s:%d: log %q of a Kafka group marked Legacy", path, b.line, l.Msg)
			}
		}
		h.fx = Effects{}
		return got
	})
}

// runScenarioFiles runs each scenario file matching pattern as a subtest named after it.
func runScenarioFiles(t *testing.T, pattern string, run func(t *testing.T, path string)) {
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { run(t, f) })
	}
}

// playScenario runs every command of the scenario file at path through step and compares
// what it returns with the file's expected output, or, with -rewrite, writes the outputs
// back into the file.
func playScenario(t *testing.T, path string, step func(b block) string) {
	blocks, tail := parseScenario(t, path)
	var buf strings.Builder
	for _, b := range blocks {
		got := step(b)
		if *rewrite {
			for _, p := range b.pre {
				buf.WriteString(p + "\n")
			}
			buf.WriteString(b.cmd + "\n----\n")
			if got != "" {
				buf.WriteString(got + "\n")
			}
			continue
		}
		if got != b.output {
			t.Errorf("%s:%d: %s\n--- got:\n%s\n--- want:\n%s", path, b.line, b.cmd, got, b.output)
		}
	}
	if *rewrite {
		for _, p := range tail {
			buf.WriteString(p + "\n")
		}
		out := strings.TrimRight(buf.String(), "\n") + "\n"
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// args splits "cmd k=v flag pos" into positional words and key/values.
func args(line string) (string, []string, map[string]string) {
	f := strings.Fields(line)
	kv := make(map[string]string)
	var pos []string
	for _, w := range f[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, w)
		}
	}
	return f[0], pos, kv
}

func (h *harness) dur(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		h.fail("bad duration %q: %v", s, err)
	}
	return d
}

func (h *harness) num(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		h.fail("bad number %q: %v", s, err)
	}
	return n
}

// cmdError is a mistake in a scenario command; run reports it as the command's output, so a
// rewrite shows it in place.
type cmdError string

func (h *harness) fail(format string, a ...any) { panic(cmdError(fmt.Sprintf(format, a...))) }

// recoverCommand, deferred by a command runner, turns the command's failure (h.fail) into a
// test error and the output "error: ..."; any other panic goes on.
func (h *harness) recoverCommand(line string, out *string) {
	if r := recover(); r != nil {
		e, ok := r.(cmdError)
		if !ok {
			panic(r)
		}
		h.t.Errorf("command %q: %s", line, e)
		*out = "error: " + string(e)
	}
}

func (h *harness) run(line string) (out string) {
	defer h.recoverCommand(line, &out)
	return h.step(line)
}

func (h *harness) step(line string) string {
	cmd, pos, kv := args(line)
	has := func(k string) bool { return slices.Contains(pos, k) }
	get := func(k, def string) string {
		if v, ok := kv[k]; ok {
			return v
		}
		return def
	}
	var ev Event
	var tok Token
	request := func() Token { h.token++; tok = h.token; return tok }
	switch cmd {
	case "new":
		h.cfg = DefaultConfig()
		if v, ok := kv["delay"]; ok {
			h.cfg.InitialRebalanceDelay = h.dur(v)
		}
		if v, ok := kv["min-session"]; ok {
			h.cfg.MinSessionTimeout = h.dur(v)
		}
		if v, ok := kv["max-session"]; ok {
			h.cfg.MaxSessionTimeout = h.dur(v)
		}
		if v, ok := kv["max-size"]; ok {
			h.cfg.MaxSize = int(h.num(v))
		}
		if v, ok := kv["meta-max"]; ok {
			h.cfg.MaxOffsetMetadata = int(h.num(v))
		}
		h.m = New(h.cfg, "g")
		h.now, h.wake, h.token, h.zk, h.pending, h.version = t0, time.Time{}, 0, nil, nil, 0
		return "ok"
	case "join":
		j := JoinGroup{
			Token:                 request(),
			MemberID:              MemberID(get("m", "")),
			NewMemberID:           MemberID(get("new", "")),
			InstanceID:            InstanceID(get("inst", "")),
			ClientID:              get("client", "client"),
			ClientHost:            get("host", "/10.0.0.1"),
			SessionTimeout:        h.dur(get("session", "10s")),
			RebalanceTimeout:      h.dur(get("rebalance", "30s")),
			ProtocolType:          get("type", "consumer"),
			RequireKnownMemberID:  has("req-known"),
			SupportSkipAssignment: has("skip-assign"),
			Reason:                get("reason", ""),
		}
		if j.ProtocolType == "-" {
			j.ProtocolType = ""
		}
		if p := get("proto", "range"); p != "-" {
			for _, item := range strings.Split(p, ",") {
				name, meta, _ := strings.Cut(item, ":")
				j.Protocols = append(j.Protocols, Protocol{Name: name, Metadata: h.bytes(meta)})
			}
		}
		ev = j
	case "sync":
		s := SyncGroup{Token: request(), MemberID: MemberID(get("m", "")), InstanceID: InstanceID(get("inst", "")), Generation: Generation(h.num(get("gen", "-1")))}
		if v, ok := kv["ptype"]; ok {
			s.ProtocolType = &v
		}
		if v, ok := kv["pname"]; ok {
			s.ProtocolName = &v
		}
		if v, ok := kv["assign"]; ok {
			s.Assignments = make(map[MemberID][]byte)
			for _, item := range strings.Split(v, ",") {
				id, a, _ := strings.Cut(item, ":")
				s.Assignments[MemberID(id)] = h.bytes(a)
			}
		}
		ev = s
	case "hb":
		ev = Heartbeat{Token: request(), MemberID: MemberID(get("m", "")), InstanceID: InstanceID(get("inst", "")), Generation: Generation(h.num(get("gen", "-1"))), Hold: has("hold")}
	case "release":
		ev = ReleaseHeartbeat{Token: request(), MemberID: MemberID(get("m", "")), Held: Token(h.num(get("held", "0")))}
	case "leave":
		l := LeaveGroup{Token: request()}
		for _, p := range pos {
			id, inst, _ := strings.Cut(p, "/")
			l.Members = append(l.Members, LeaveMember{MemberID: MemberID(id), InstanceID: InstanceID(inst)})
		}
		ev = l
	case "commit":
		c := OffsetCommit{Token: request(), MemberID: MemberID(get("m", "")), InstanceID: InstanceID(get("inst", "")), Generation: Generation(h.num(get("gen", "-1")))}
		for _, item := range strings.Split(get("offsets", ""), ",") {
			tp, off, _ := strings.Cut(item, "@")
			topic, part, _ := strings.Cut(tp, "/")
			c.Offsets = append(c.Offsets, OffsetCommitPartition{Topic: topic, Partition: int32(h.num(part)), Offset: h.num(off), LeaderEpoch: -1, Metadata: get("meta", "")})
		}
		ev = c
	case "describe":
		ev = Describe{Token: request()}
	case "delete":
		ev = Delete{Token: request()}
	case "tick":
		switch {
		case len(pos) == 1 && strings.HasPrefix(pos[0], "+"):
			h.now = h.now.Add(h.dur(pos[0][1:]))
		case len(pos) == 1 && pos[0] == "wake":
			if h.wake.IsZero() {
				h.fail("tick wake: no timer armed")
			}
			h.now = h.wake
		default:
			h.fail("tick +<duration> | tick wake")
		}
		ev = Tick{}
	case "persisted":
		h.version++
		ev = Persisted{Version: h.version}
	case "persist-fail":
		ev = PersistFailed{Err: errors.New("version conflict")}
	case "write-fail":
		ev = WriteFailed{Err: errors.New("write timed out")}
	case "restore":
		if h.zk == nil {
			h.fail("restore: nothing persisted")
		}
		if len(pos) == 1 && strings.HasPrefix(pos[0], "+") {
			h.now = h.now.Add(h.dur(pos[0][1:]))
		}
		h.m = New(h.cfg, "g")
		h.pending = nil
		ev = Restore{Record: *h.zk, Version: h.version}
	case "reload":
		// The same machine loads the last persisted record: the shell's load after ResetKafka.
		if h.zk == nil {
			h.fail("reload: nothing persisted")
		}
		h.pending = nil
		ev = Restore{Record: *h.zk, Version: h.version}
	case "assign-mode":
		if len(pos) < 1 || len(pos) > 2 || (pos[0] != "server" && pos[0] != "leader") || (len(pos) == 2 && pos[1] != "joint") {
			h.fail("assign-mode server|leader [joint]")
		}
		ev = AssignMode{Server: pos[0] == "server", Joint: slices.Contains(pos, "joint")}
	case "server-assign":
		sa := ServerAssignment{Generation: Generation(h.num(get("gen", "-1"))), Assignments: map[MemberID][]byte{}}
		for _, item := range strings.Split(get("assign", ""), ",") {
			if id, a, ok := strings.Cut(item, ":"); ok {
				sa.Assignments[MemberID(id)] = []byte(a)
			}
		}
		ev = sa
	case "rebalance":
		ev = Rebalance{Reason: get("reason", "test")}
	case "state":
		return h.dumpMembers()
	default:
		h.fail("unknown command %q", cmd)
	}
	fx := h.m.Step(h.now, ev)
	h.wake, h.ev, h.fx = fx.WakeAt, ev, fx
	var out []string
	switch ev.(type) {
	case Tick, Restore:
		out = append(out, "now="+h.at(h.now))
	}
	switch ev.(type) {
	case Persisted:
		if h.pending != nil {
			h.zk = h.pending
			h.pending = nil
		}
	case Restore, PersistFailed, WriteFailed:
		h.pending = nil
	}
	answered := false
	for _, r := range fx.Replies {
		if r.RequestToken() == tok {
			answered = true
		}
		out = append(out, formatReply(r))
	}
	if tok != 0 && !answered {
		out = append(out, fmt.Sprintf("#%d held", tok))
	}
	if fx.Persist != nil {
		rec := *fx.Persist
		h.pending = &rec
		out = append(out, "persist "+formatRecord(rec))
	}
	if a := fx.Assign; a != nil {
		var ms []string
		for _, mb := range a.Members {
			ms = append(ms, string(mb.MemberID)+":"+show(mb.Metadata))
		}
		line := fmt.Sprintf("assign gen=%d proto=%s/%s members=[%s]", a.Generation, a.ProtocolType, a.ProtocolName, strings.Join(ms, " "))
		var offered []string
		for _, mb := range a.Members {
			if ps := a.Offered[mb.MemberID]; len(ps) > 1 {
				names := make([]string, len(ps))
				for i, p := range ps {
					names[i] = p.Name
				}
				offered = append(offered, string(mb.MemberID)+":"+strings.Join(names, ","))
			}
		}
		if len(offered) > 0 {
			line += " offered=[" + strings.Join(offered, " ") + "]"
		}
		out = append(out, line)
	}
	if len(fx.Offsets) > 0 {
		var s []string
		for _, o := range fx.Offsets {
			s = append(s, fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.Offset))
		}
		out = append(out, "offsets "+strings.Join(s, " "))
	}
	for _, l := range fx.Logs {
		s := "log: " + l.Msg
		if l.Member != "" {
			s += " [" + string(l.Member) + "]"
		}
		if l.Reason != "" {
			s += " (" + l.Reason + ")"
		}
		out = append(out, s)
	}
	if err := h.m.checkInvariants(); err != nil {
		h.t.Errorf("invariant broken after %q: %v", line, err)
	}
	out = append(out, h.stateLine())
	return strings.Join(out, "\n")
}

func (h *harness) at(t time.Time) string { return "@" + t.Sub(t0).String() }

func (h *harness) stateLine() string {
	m := h.m
	var b strings.Builder
	fmt.Fprintf(&b, "state=%s gen=%d", m.state, m.generation)
	if m.fenced {
		b.WriteString(" fenced")
	}
	if m.protocolType != "" || m.protocolName != "" {
		fmt.Fprintf(&b, " proto=%s/%s", m.protocolType, m.protocolName)
	}
	if m.leader != "" {
		fmt.Fprintf(&b, " leader=%s", m.leader)
	}
	var ms []string
	for _, id := range m.order {
		ms = append(ms, memberTag(m.members[id]))
	}
	fmt.Fprintf(&b, " members=[%s]", strings.Join(ms, " "))
	if len(m.pending) > 0 {
		var ps []string
		for id := range m.pending {
			ps = append(ps, string(id))
		}
		slices.Sort(ps)
		fmt.Fprintf(&b, " pending=[%s]", strings.Join(ps, " "))
	}
	if m.inflight {
		b.WriteString(" writing")
	}
	if !h.wake.IsZero() {
		fmt.Fprintf(&b, " wake=%s", h.at(h.wake))
	}
	return b.String()
}

func memberTag(mb *Member) string {
	s := string(mb.ID)
	if mb.InstanceID != "" {
		s += "/" + string(mb.InstanceID)
	}
	var flags []string
	if mb.joining {
		flags = append(flags, "join")
	}
	if mb.syncing {
		flags = append(flags, "sync")
	}
	if mb.beatParked {
		flags = append(flags, fmt.Sprintf("hb#%d", mb.beatToken))
	}
	if len(flags) > 0 {
		s += "(" + strings.Join(flags, ",") + ")"
	}
	return s
}

func (h *harness) dumpMembers() string {
	m := h.m
	var out []string
	for _, id := range m.order {
		mb := m.members[id]
		var ps []string
		for _, p := range mb.Protocols {
			ps = append(ps, p.Name+":"+show(p.Metadata))
		}
		dl := "-"
		if !mb.deadline.IsZero() {
			dl = h.at(mb.deadline)
		}
		out = append(out, fmt.Sprintf("%s inst=%s kind=%s session=%s rebalance=%s protocols=%s assignment=%q expires=%s new=%t pending-sync=%t",
			memberTag(mb), mb.InstanceID, mb.Kind, mb.SessionTimeout, mb.RebalanceTimeout, strings.Join(ps, ","), show(mb.Assignment), dl, mb.isNew, m.pendingSync[id]))
	}
	if len(out) == 0 {
		return "no members"
	}
	return strings.Join(out, "\n")
}

func formatReply(r Reply) string {
	switch r := r.(type) {
	case JoinReply:
		s := fmt.Sprintf("reply #%d join %s member=%s gen=%d", r.Token, r.Err, r.MemberID, r.Generation)
		if r.Err == ErrNone {
			s += fmt.Sprintf(" proto=%s/%s leader=%s", r.ProtocolType, r.ProtocolName, r.Leader)
		}
		if r.SkipAssignment {
			s += " skip-assignment"
		}
		if r.Members != nil {
			var ms []string
			for _, jm := range r.Members {
				x := string(jm.MemberID)
				if jm.InstanceID != "" {
					x += "/" + string(jm.InstanceID)
				}
				ms = append(ms, x+":"+show(jm.Metadata))
			}
			s += " members=[" + strings.Join(ms, " ") + "]"
		}
		return s
	case SyncReply:
		s := fmt.Sprintf("reply #%d sync %s", r.Token, r.Err)
		if r.Err == ErrNone {
			s += fmt.Sprintf(" proto=%s/%s assignment=%q", r.ProtocolType, r.ProtocolName, show(r.Assignment))
		}
		return s
	case HeartbeatReply:
		return fmt.Sprintf("reply #%d hb %s", r.Token, r.Err)
	case LeaveReply:
		var ms []string
		for _, x := range r.Members {
			id := string(x.MemberID)
			if x.InstanceID != "" {
				id += "/" + string(x.InstanceID)
			}
			ms = append(ms, id+":"+x.Err.String())
		}
		return fmt.Sprintf("reply #%d leave %s [%s]", r.Token, r.Err, strings.Join(ms, " "))
	case OffsetCommitReply:
		var ps []string
		for _, p := range r.Partitions {
			ps = append(ps, fmt.Sprintf("%s/%d:%s", p.Topic, p.Partition, p.Err))
		}
		return fmt.Sprintf("reply #%d commit [%s]", r.Token, strings.Join(ps, " "))
	case DescribeReply:
		d := r.Group
		s := fmt.Sprintf("reply #%d describe %s state=%s gen=%d proto=%s/%s leader=%s", r.Token, r.Err, d.State, d.Generation, d.ProtocolType, d.ProtocolName, d.Leader)
		for _, md := range d.Members {
			s += fmt.Sprintf("\n  member %s inst=%s kind=%s client=%s host=%s metadata=%q assignment=%q", md.MemberID, md.InstanceID, md.Kind, md.ClientID, md.ClientHost, show(md.Metadata), show(md.Assignment))
		}
		return s
	case DeleteReply:
		return fmt.Sprintf("reply #%d delete %s", r.Token, r.Err)
	}
	return fmt.Sprintf("reply %#v", r)
}

func formatRecord(r Record) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "gen=%d", r.Generation)
	if r.ProtocolType != "" || r.ProtocolName != "" {
		fmt.Fprintf(&b, " proto=%s/%s", r.ProtocolType, r.ProtocolName)
	}
	if r.Leader != "" {
		fmt.Fprintf(&b, " leader=%s", r.Leader)
	}
	var ms []string
	for _, mb := range r.Members {
		x := string(mb.ID)
		if mb.InstanceID != "" {
			x += "/" + string(mb.InstanceID)
		}
		ms = append(ms, fmt.Sprintf("%s:%q", x, show(mb.Assignment)))
	}
	fmt.Fprintf(&b, " members=[%s]", strings.Join(ms, " "))
	if r.Rebalancing {
		b.WriteString(" rebalancing")
	}
	if r.Deleted {
		b.WriteString(" deleted")
	}
	return b.String()
}
