package group

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Rule: error codes are Kafka's numbers (org.apache.kafka.common.protocol.Errors), so the Kafka
// adapter passes them through.
func TestErrorCodesAreKafkas(t *testing.T) {
	for _, tc := range []struct {
		code ErrorCode
		num  int16
		name string
	}{
		{ErrNone, 0, "NONE"},
		{ErrOffsetMetadataTooLarge, 12, "OFFSET_METADATA_TOO_LARGE"},
		{ErrCoordinatorNotAvailable, 15, "COORDINATOR_NOT_AVAILABLE"},
		{ErrNotCoordinator, 16, "NOT_COORDINATOR"},
		{ErrIllegalGeneration, 22, "ILLEGAL_GENERATION"},
		{ErrInconsistentGroupProtocol, 23, "INCONSISTENT_GROUP_PROTOCOL"},
		{ErrUnknownMemberID, 25, "UNKNOWN_MEMBER_ID"},
		{ErrInvalidSessionTimeout, 26, "INVALID_SESSION_TIMEOUT"},
		{ErrRebalanceInProgress, 27, "REBALANCE_IN_PROGRESS"},
		{ErrNonEmptyGroup, 68, "NON_EMPTY_GROUP"},
		{ErrGroupIDNotFound, 69, "GROUP_ID_NOT_FOUND"},
		{ErrMemberIDRequired, 79, "MEMBER_ID_REQUIRED"},
		{ErrGroupMaxSizeReached, 81, "GROUP_MAX_SIZE_REACHED"},
		{ErrFencedInstanceID, 82, "FENCED_INSTANCE_ID"},
	} {
		if int16(tc.code) != tc.num || tc.code.String() != tc.name {
			t.Errorf("%s = %d (%s), want %d %s", tc.name, int16(tc.code), tc.code, tc.num, tc.name)
		}
	}
	if got := ErrorCode(99).String(); got != "ERROR_99" {
		t.Errorf("unknown code: %q", got)
	}
}

// Rule: the defaults are Kafka's broker defaults (group.initial.rebalance.delay.ms 3000,
// group.min.session.timeout.ms 6000, group.max.session.timeout.ms 1800000, group.max.size
// unlimited, offset.metadata.max.bytes 4096), and Validate rejects settings out of range.
func TestConfigValidate(t *testing.T) {
	def := DefaultConfig()
	want := Config{3 * time.Second, 6 * time.Second, 30 * time.Minute, 0, 5 * time.Minute, 4096, LegacyConfig{}}
	if def != want {
		t.Fatalf("DefaultConfig() = %+v, want %+v", def, want)
	}
	if err := def.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"negative delay", func(c *Config) { c.InitialRebalanceDelay = -1 }, "InitialRebalanceDelay"},
		{"zero delay is fine", func(c *Config) { c.InitialRebalanceDelay = 0 }, ""},
		{"no min session", func(c *Config) { c.MinSessionTimeout = 0 }, "MinSessionTimeout"},
		{"max below min", func(c *Config) { c.MaxSessionTimeout = time.Second }, "MaxSessionTimeout"},
		{"negative max size", func(c *Config) { c.MaxSize = -1 }, "MaxSize"},
		{"max size 1", func(c *Config) { c.MaxSize = 1 }, ""},
		{"no join timeout", func(c *Config) { c.NewMemberJoinTimeout = 0 }, "NewMemberJoinTimeout"},
		{"negative metadata", func(c *Config) { c.MaxOffsetMetadata = -1 }, "MaxOffsetMetadata"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid config")
		}
	}()
	New(Config{}, "g")
}

func TestRecordValidate(t *testing.T) {
	good := Record{
		Version: RecordVersion, Group: "g", Generation: 3, ProtocolType: "consumer", ProtocolName: "range", Leader: "a",
		Members: []RecordMember{
			{ID: "a", InstanceID: "i1", Kind: KindKafka, Protocols: []RecordProtocol{{Name: "range"}}},
			{ID: "b", Kind: KindKafka, Protocols: []RecordProtocol{{Name: "range"}}},
		},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good record: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Record)
	}{
		{"future version", func(r *Record) { r.Version = RecordVersion + 1 }},
		{"no version", func(r *Record) { r.Version = 0 }},
		{"negative generation", func(r *Record) { r.Generation = -1 }},
		{"duplicate member", func(r *Record) { r.Members[1].ID = "a" }},
		{"duplicate instance", func(r *Record) { r.Members[1].InstanceID = "i1" }},
		{"empty member id", func(r *Record) { r.Members[1].ID = "" }},
		{"unknown kind", func(r *Record) { r.Members[1].Kind = "zk" }},
		{"leader not a member", func(r *Record) { r.Leader = "x" }},
		{"no protocol", func(r *Record) { r.ProtocolName = "" }},
		{"unsupported protocol", func(r *Record) { r.Members[1].Protocols[0].Name = "roundrobin" }},
	} {
		r := good
		r.Members = append([]RecordMember(nil), good.Members...)
		r.Members[1].Protocols = []RecordProtocol{{Name: "range"}}
		tc.edit(&r)
		if r.Validate() == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// Record is plain data with JSON tags and a version field; it round-trips through encoding/json.
func TestRecordJSON(t *testing.T) {
	_, h := newTestGroup(t)
	rec := h.lastRecord
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"version":1`, `"generation":2`, `"instance_id":"i1"`, `"assignment":`, `"session_timeout_ms":10000`, `"protocols":`} {
		if !strings.Contains(string(data), field) {
			t.Errorf("JSON %s lacks %s", data, field)
		}
	}
	var back Record
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rec) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, rec)
	}
	if err := back.Validate(); err != nil {
		t.Fatal(err)
	}
}

// testHarness is a minimal driver for Go tests.
type testHarness struct {
	t          *testing.T
	m          *Machine
	now        time.Time
	tok        Token
	lastRecord Record
}

func (h *testHarness) step(ev Event) Effects {
	h.t.Helper()
	fx := h.m.Step(h.now, ev)
	if fx.Persist != nil {
		h.lastRecord = *fx.Persist
	}
	if err := h.m.checkInvariants(); err != nil {
		h.t.Fatalf("after %T: %v", ev, err)
	}
	return fx
}

func (h *testHarness) next() Token { h.tok++; return h.tok }

func (h *testHarness) join(id, newID MemberID, inst InstanceID) (Token, Effects) {
	t := h.next()
	return t, h.step(JoinGroup{Token: t, MemberID: id, NewMemberID: newID, InstanceID: inst, ClientID: "c",
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second, ProtocolType: "consumer",
		Protocols: []Protocol{{Name: "range", Metadata: []byte(newID + id)}}})
}

// newTestGroup returns a Stable group at generation 1: a (static, i1, leader) and b.
func newTestGroup(t *testing.T) (*Machine, *testHarness) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	h := &testHarness{t: t, m: New(cfg, "g"), now: t0}
	h.join("", "a", "i1")
	h.step(Persisted{Version: 1})
	h.join("", "b", "")
	h.join("a", "", "i1")
	h.step(Persisted{Version: 2})
	h.step(SyncGroup{Token: h.next(), MemberID: "a", InstanceID: "i1", Generation: 2, Assignments: map[MemberID][]byte{"a": []byte("A"), "b": []byte("B")}})
	h.step(Persisted{Version: 3})
	if h.m.State() != Stable || h.m.Generation() != 2 {
		t.Fatalf("setup: %s generation %d", h.m.State(), h.m.Generation())
	}
	return h.m, h
}

func findReply[R Reply](fx Effects, tok Token) (R, bool) {
	for _, r := range fx.Replies {
		if x, ok := r.(R); ok && r.RequestToken() == tok {
			return x, true
		}
	}
	var zero R
	return zero, false
}

// Rule: persist before reply (DESIGN §3, raft's "save before send"): after the leader's
// SyncGroup no SyncGroup reply (the leader's or a follower's) comes out, whatever else happens,
// until the shell reports the write done.
func TestPersistBeforeSyncReply(t *testing.T) {
	_, h := newTestGroup(t)
	h.join("a", "", "i1") // the leader rejoins: a new rebalance
	h.join("b", "", "")
	if h.m.State() != CompletingRebalance {
		t.Fatalf("state %s", h.m.State())
	}
	h.step(Persisted{Version: 4}) // generation 3 is durable; JoinGroup replies go out
	follower := h.next()
	fx := h.step(SyncGroup{Token: follower, MemberID: "b", Generation: 3})
	leader := h.next()
	fx2 := h.step(SyncGroup{Token: leader, MemberID: "a", InstanceID: "i1", Generation: 3, Assignments: map[MemberID][]byte{"a": []byte("A3"), "b": []byte("B3")}})
	if fx2.Persist == nil || string(fx2.Persist.Members[1].Assignment) != "B3" {
		t.Fatalf("leader's SyncGroup did not write the assignment: %+v", fx2.Persist)
	}
	for _, ev := range []Event{
		Heartbeat{Token: h.next(), MemberID: "b", Generation: 3},
		Heartbeat{Token: h.next(), MemberID: "a", InstanceID: "i1", Generation: 3},
		Describe{Token: h.next()},
		OffsetCommit{Token: h.next(), MemberID: "b", Generation: 3, Offsets: []OffsetCommitPartition{{Topic: "t", Offset: 1}}},
		Tick{},
	} {
		h.now = h.now.Add(time.Second)
		fx = h.step(ev)
		for _, r := range append(fx.Replies, fx2.Replies...) {
			if _, ok := r.(SyncReply); ok {
				t.Fatalf("SyncGroup reply %+v before Persisted (after %T)", r, ev)
			}
		}
	}
	fx = h.step(Persisted{Version: 5})
	for tok, want := range map[Token]string{follower: "B3", leader: "A3"} {
		r, ok := findReply[SyncReply](fx, tok)
		if !ok || r.Err != ErrNone || string(r.Assignment) != want {
			t.Errorf("after Persisted, SyncGroup #%d: %+v (found %t), want assignment %s", tok, r, ok, want)
		}
	}
}

// Rule: a Restore answers whatever was parked with NOT_COORDINATOR, lifts a fence, and loads the
// record (GroupMetadata.loadGroup).
func TestRestoreAnswersParkedAndLiftsFence(t *testing.T) {
	m, h := newTestGroup(t)
	rec := h.lastRecord
	parked := h.next()
	h.step(OffsetCommit{Token: parked, MemberID: "b", Generation: 2, Offsets: []OffsetCommitPartition{{Topic: "t", Offset: 7}}})
	leaderJoin, _ := h.join("a", "", "i1") // parked in PreparingRebalance
	fx := h.step(Restore{Record: rec, Version: 9})
	for _, tok := range []Token{parked, leaderJoin} {
		found := false
		for _, r := range fx.Replies {
			if r.RequestToken() != tok {
				continue
			}
			found = true
			switch r := r.(type) {
			case OffsetCommitReply:
				if r.Partitions[0].Err != ErrNotCoordinator {
					t.Errorf("parked commit: %+v", r)
				}
			case JoinReply:
				if r.Err != ErrNotCoordinator {
					t.Errorf("parked join: %+v", r)
				}
			}
		}
		if !found {
			t.Errorf("parked request #%d not answered by Restore", tok)
		}
	}
	if m.State() != Stable || m.Generation() != 2 || m.Describe().Version != 9 {
		t.Fatalf("restored: %s gen %d version %d", m.State(), m.Generation(), m.Describe().Version)
	}

	h.step(PersistFailed{Err: nil})
	if !m.Fenced() || m.State() != Dead {
		t.Fatalf("not fenced: %s", m.State())
	}
	tok := h.next()
	fx = h.step(Heartbeat{Token: tok, MemberID: "b", Generation: 2})
	if r, _ := findReply[HeartbeatReply](fx, tok); r.Err != ErrNotCoordinator || !fx.WakeAt.IsZero() {
		t.Fatalf("fenced heartbeat: %+v wake %v", r, fx.WakeAt)
	}
	h.step(Restore{Record: rec, Version: 10})
	tok = h.next()
	fx = h.step(Heartbeat{Token: tok, MemberID: "b", Generation: 2})
	if r, _ := findReply[HeartbeatReply](fx, tok); r.Err != ErrNone || m.Fenced() {
		t.Fatalf("heartbeat after restore: %+v", r)
	}

	bad := rec
	bad.Version = 99
	h.step(Restore{Record: bad})
	if !m.Fenced() {
		t.Fatal("an unreadable record did not fence the machine")
	}
}

// Time never runs backwards: a Step with an earlier now counts as the latest one, so a late
// event cannot revive an expired session.
func TestTimeNeverRunsBackwards(t *testing.T) {
	m, h := newTestGroup(t)
	h.now = h.now.Add(time.Minute)
	h.step(Tick{}) // both sessions ended: the group rebalances, then empties
	h.now = t0
	tok := h.next()
	fx := h.step(Heartbeat{Token: tok, MemberID: "b", Generation: 2})
	if r, _ := findReply[HeartbeatReply](fx, tok); r.Err != ErrUnknownMemberID {
		t.Fatalf("heartbeat from the past: %+v (state %s)", r, m.State())
	}
}

// The shell generates member ids; if it gives none (or a taken one) the engine makes a
// deterministic one rather than failing the join.
func TestNewMemberIDFallback(t *testing.T) {
	_, h := newTestGroup(t)
	tok, _ := h.join("", "", "")
	tok2, _ := h.join("", "b", "") // "b" is taken
	h.join("a", "", "i1")
	h.join("b", "", "")
	fx := h.step(Persisted{Version: 4})
	r1, _ := findReply[JoinReply](fx, tok)
	r2, _ := findReply[JoinReply](fx, tok2)
	if r1.Err != ErrNone || r2.Err != ErrNone || r1.MemberID == "" || r2.MemberID == "" || r1.MemberID == r2.MemberID || r2.MemberID == "b" {
		t.Fatalf("fallback ids: %+v %+v", r1, r2)
	}
}

func TestStateNames(t *testing.T) {
	for s, want := range map[State]string{Empty: "Empty", PreparingRebalance: "PreparingRebalance",
		CompletingRebalance: "CompletingRebalance", Stable: "Stable", Dead: "Dead", State(9): "State(9)"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
}

// Rule: a group loaded over group.max.size rebalances at once, so that the members beyond the
// limit are shed (Kafka's onGroupLoaded, groupIsOverCapacity).
func TestRestoreOverCapacityRebalances(t *testing.T) {
	_, h := newTestGroup(t)
	rec := h.lastRecord
	cfg := DefaultConfig()
	cfg.MaxSize = 1
	h.m = New(cfg, "g")
	h.step(Restore{Record: rec, Version: 1})
	if h.m.State() != PreparingRebalance || h.m.Generation() != 2 {
		t.Fatalf("restored over capacity: %s gen %d", h.m.State(), h.m.Generation())
	}
}
