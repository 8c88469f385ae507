package bridge

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type fakeLease struct {
	ok    bool
	until time.Time
}

func (f *fakeLease) VouchedUntil(time.Time) (time.Time, bool) {
	if !f.ok {
		return time.Time{}, false
	}
	return f.until, true
}

// The fetch gate's decisions (fetchgate.go), step by step: with no mixed group holding a
// claim it is open; with one, a lapsed lease closes it; a group fenced by a lost session
// closes it until it claims again, has no member, or its members' longest session timeout has
// passed. What it allows while a group holds a claim it allows until the lease lapses, so that a
// response written after that (the bridge was paused after asking) is withheld too; with no
// claim to protect, without a bound.
func TestFetchGate(t *testing.T) {
	var g fetchGate
	t0 := time.Unix(1_700_000_000, 0)
	lease := &fakeLease{ok: true, until: t0.Add(time.Minute)}
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
		{"g1 claimed, lease extended", func() { lease.until = t0.Add(2 * time.Minute) }, 11 * time.Second, ""},
		{"g1 emptied", func() { g.claims.Add(-1) }, 12 * time.Second, ""},
		{"g1 fenced and cleared", func() { g.fence("g1", t0.Add(time.Minute)); g.clear("g1") }, 0, ""},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		until, err := g.allow(t0.Add(s.at))
		var bound time.Time // a claim to protect: no later than the lease
		if g.claims.Load() > 0 || g.n.Load() > 0 {
			bound = lease.until
		}
		switch {
		case s.want == "" && err != nil:
			t.Errorf("%s: allow = %v, want nil", s.name, err)
		case s.want == "" && !until.Equal(bound):
			t.Errorf("%s: allowed until %v, want %v", s.name, until, bound)
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
	g.lease.Store(voucher(&fakeLease{ok: true, until: time.Now().Add(time.Hour)}))
	g.claims.Add(1) // the whole path: a mixed group holds a claim
	now := time.Now()
	for b.Loop() {
		if _, err := g.allow(now); err != nil {
			b.Fatal(err)
		}
	}
}
