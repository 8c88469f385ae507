package newproto

import (
	"testing"
	"time"
)

// Held heartbeats of one group end together, at the group's next multiple of the hold
// (12_heartbeat.go: holdEnd), within one hold, and groups have phases of their own.
func TestHoldEnd(t *testing.T) {
	const hold = 2 * time.Second
	base := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	for _, name := range []string{"orders", "payments", ""} {
		first := base.Add(holdEnd(base, hold, name))
		for _, off := range []time.Duration{0, time.Millisecond, 700 * time.Millisecond, hold - time.Nanosecond} {
			now := base.Add(off)
			d := holdEnd(now, hold, name)
			if d <= 0 || d > hold {
				t.Fatalf("%q at +%v: hold ends in %v, want within (0, %v]", name, off, d, hold)
			}
			end := now.Add(d)
			if gap := end.Sub(first); gap%hold != 0 {
				t.Errorf("%q at +%v: ends at %v, not a multiple of %v after %v", name, off, end, hold, first)
			}
		}
	}
	if holdEnd(base, hold, "orders") == holdEnd(base, hold, "payments") {
		t.Errorf("two groups share a phase (possible, but not for these names)")
	}
}
