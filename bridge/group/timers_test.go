package group

import (
	"fmt"
	"testing"
	"time"
)

// Every test of the package runs with the timer heap checked against a scan of the machine at
// every nextTimer (timers.go): the datadriven scenarios and the property test are the
// differential test of the heap, and a deadline that some new code assigns directly, bypassing
// setDeadline, fails them.
func init() { checkTimers = true }

// stableRecord is the record of a Stable group of n members m000, m001, … (generation 1).
func stableRecord(n int) Record {
	rec := Record{Version: RecordVersion, Group: "g", Generation: 1, ProtocolType: "consumer", ProtocolName: "range", Leader: "m000"}
	for i := range n {
		rec.Members = append(rec.Members, RecordMember{
			ID: MemberID(fmt.Sprintf("m%03d", i)), Kind: KindKafka, ClientID: "c", ClientHost: "/h",
			SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 60_000, ProtocolType: "consumer",
			Protocols: []RecordProtocol{{Name: "range"}}, Assignment: []byte{},
		})
	}
	return rec
}

// A long run of heartbeats keeps the heap within a constant factor of the armed timers (stale
// entries are dropped), and members whose sessions end at the same instant expire in join
// order, as a scan of the members found them.
func TestTimerHeapStaysBounded(t *testing.T) {
	const n = 200
	m := New(DefaultConfig(), "g")
	now := time.Unix(1_700_000_000, 0)
	m.Step(now, Restore{Record: stableRecord(n), Version: 1})
	if m.State() != Stable || len(m.members) != n {
		t.Fatalf("restored: %s with %d members", m.State(), len(m.members))
	}
	var tok Token
	for range 50 {
		now = now.Add(time.Second)
		for i := range n {
			tok++
			fx := m.Step(now, Heartbeat{Token: tok, MemberID: MemberID(fmt.Sprintf("m%03d", i)), Generation: 1})
			if r, _ := findReply[HeartbeatReply](fx, tok); r.Err != ErrNone {
				t.Fatalf("heartbeat: %+v", r)
			}
		}
		if got, limit := len(m.timers.entries), 2*(len(m.members)+len(m.pending))+64+1; got > limit {
			t.Fatalf("timer heap holds %d entries for %d members, over %d", got, len(m.members), limit)
		}
	}
	// Every member heartbeated last at the same instant: every session ends at once.
	fx := m.Step(now.Add(time.Hour), Tick{})
	if len(m.members) != 0 {
		t.Fatalf("%d members left after every session ended", len(m.members))
	}
	if len(m.timers.ranks) != 0 {
		t.Errorf("%d join ranks kept for members that are gone", len(m.timers.ranks))
	}
	var removed []MemberID
	for _, l := range fx.Logs {
		if l.Msg == "member removed" {
			removed = append(removed, l.Member)
		}
	}
	if len(removed) != n {
		t.Fatalf("%d members removed, want %d", len(removed), n)
	}
	for i, id := range removed {
		if want := MemberID(fmt.Sprintf("m%03d", i)); id != want {
			t.Fatalf("removal %d is %s, want %s (join order)", i, id, want)
		}
	}
}

// BenchmarkJoinStorm steps n members joining one group (each write persisted at once), then
// one heartbeat each: with a scan of every member per Step (the timers before timers.go) this
// was quadratic in n.
func BenchmarkJoinStorm(b *testing.B) {
	checkTimers = false
	defer func() { checkTimers = true }()
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ids := make([]MemberID, n)
			for i := range ids {
				ids[i] = MemberID(fmt.Sprintf("member-%04d", i))
			}
			cfg := DefaultConfig()
			cfg.InitialRebalanceDelay = 0
			for range b.N {
				m := New(cfg, "g")
				now := time.Unix(1_700_000_000, 0)
				var tok Token
				var version int64
				step := func(ev Event) {
					now = now.Add(time.Millisecond)
					for fx := m.Step(now, ev); fx.NeedsWrite(); {
						version++
						fx = m.Step(now, Persisted{Version: version})
					}
				}
				for _, id := range ids {
					tok++
					step(JoinGroup{
						Token: tok, ClientID: "c", SessionTimeout: 45 * time.Second, RebalanceTimeout: time.Minute,
						ProtocolType: "consumer", Protocols: []Protocol{{Name: "range"}}, NewMemberID: id,
					})
				}
				for _, id := range ids {
					tok++
					step(Heartbeat{Token: tok, MemberID: id, Generation: m.Generation()})
				}
			}
		})
	}
}
