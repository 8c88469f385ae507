package group

import (
	"testing"
	"time"
)

// The line that starts a rebalance carries its cause, which the shell counts
// (rebalances_total{cause}); it used to parse the reason's words instead.
func TestRebalanceCauses(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	stable := func(t *testing.T) *Machine {
		m := New(DefaultConfig(), "g")
		m.Step(now, Restore{Record: stableRecord(2), Version: 1})
		if m.State() != Stable {
			t.Fatalf("restored: %s", m.State())
		}
		return m
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T) Effects
		want Cause
	}{
		{"new member", func(t *testing.T) Effects {
			return New(DefaultConfig(), "g").Step(now, JoinGroup{Token: 1, ClientID: "c", SessionTimeout: 10 * time.Second,
				RebalanceTimeout: time.Minute, ProtocolType: "consumer", Protocols: []Protocol{{Name: "range"}}, NewMemberID: "a"})
		}, CauseMemberJoin},
		{"member leaves", func(t *testing.T) Effects {
			return stable(t).Step(now, LeaveGroup{Token: 1, Members: []LeaveMember{{MemberID: "m001"}}})
		}, CauseMemberLeave},
		{"session ends", func(t *testing.T) Effects {
			m := stable(t)
			m.Step(now.Add(5*time.Second), Heartbeat{Token: 1, MemberID: "m000", Generation: 1})
			return m.Step(now.Add(11*time.Second), Tick{})
		}, CauseMemberLeave},
		{"member rejoins with new metadata", func(t *testing.T) Effects {
			return stable(t).Step(now, JoinGroup{Token: 1, MemberID: "m001", ClientID: "c", SessionTimeout: 10 * time.Second,
				RebalanceTimeout: time.Minute, ProtocolType: "consumer", Protocols: []Protocol{{Name: "range", Metadata: []byte{1}}}})
		}, CauseMemberRejoin},
		{"shell's cause", func(t *testing.T) Effects {
			return stable(t).Step(now, Rebalance{Reason: "zk members changed", Cause: CauseOtherKinds})
		}, CauseOtherKinds},
		{"shell without a cause", func(t *testing.T) Effects {
			return stable(t).Step(now, Rebalance{Reason: "why not"})
		}, CauseOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var causes []Cause
			for _, l := range tc.run(t).Logs {
				if l.Cause != "" {
					if l.Msg != "preparing rebalance" {
						t.Errorf("cause %s on %q", l.Cause, l.Msg)
					}
					causes = append(causes, l.Cause)
				}
			}
			if len(causes) != 1 || causes[0] != tc.want {
				t.Errorf("causes %v, want [%s]", causes, tc.want)
			}
		})
	}
}
