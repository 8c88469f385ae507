package bridge

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type fakeLease struct{ ok bool }

func (f *fakeLease) Vouched(time.Time) bool { return f.ok }

// The fetch gate's decisions (fetchgate.go), step by step: with no mixed group holding a
// claim it is open; with one, a lapsed lease closes it; a group fenced by a lost session
// closes it until it claims again, has no member, or its members' longest session timeout has
// passed.
func TestFetchGate(t *testing.T) {
	var g fetchGate
	lease := &fakeLease{ok: true}
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		name string
		do   func()
		at   time.Duration
		want string // "" to allow, else a part of the error
	}{
		{"before the store opens", nil, 0, ""},
		{"vouched", func() { g.lease.Store(voucher(lease)) }, 0, ""},
		{"lease lapsed, no claim to protect", func() { lease.ok = false }, 0, ""},
		{"a mixed group claimed", func() { g.claims.Add(1) }, 0, "nine tenths"},
		{"session lost: the group fenced", func() { g.claims.Add(-1); lease.ok = true; g.fence("g1", t0.Add(45*time.Second)) }, time.Second, `"g1"`},
		{"fenced, lease lapsed again", func() { lease.ok = false }, time.Second, "nine tenths"},
		{"another group fenced", func() { lease.ok = true; g.fence("g2", t0.Add(10*time.Second)) }, time.Second, "not claimed"},
		{"g1 claimed again", func() { g.clear("g1"); g.claims.Add(1) }, 2 * time.Second, `"g2"`},
		{"g2's members gave up by now", nil, 11 * time.Second, ""},
		{"g1 emptied", func() { g.claims.Add(-1) }, 12 * time.Second, ""},
		{"g1 fenced and cleared", func() { g.fence("g1", t0.Add(time.Minute)); g.clear("g1") }, 0, ""},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		err := g.allow(t0.Add(s.at))
		switch {
		case s.want == "" && err != nil:
			t.Errorf("%s: allow = %v, want nil", s.name, err)
		case s.want != "" && (err == nil || !strings.Contains(err.Error(), s.want) || !errors.Is(err, errFetchGated)):
			t.Errorf("%s: allow = %v, want an errFetchGated naming %s", s.name, err, s.want)
		}
	}
	if n := g.n.Load(); n != 0 || len(g.fenced) != 0 {
		t.Errorf("%d groups (%v) still fenced, counted %d", len(g.fenced), g.fenced, n)
	}
}

// The gate runs on every relayed Fetch response: open, it is a few atomic loads and a call.
func BenchmarkFetchGateAllow(b *testing.B) {
	var g fetchGate
	g.lease.Store(voucher(&fakeLease{ok: true}))
	g.claims.Add(1) // the whole path: a mixed group holds a claim
	now := time.Now()
	for b.Loop() {
		if err := g.allow(now); err != nil {
			b.Fatal(err)
		}
	}
}
