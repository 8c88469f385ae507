package zkstate_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A healthy connection keeps the lease about four fifths of a session timeout ahead, from
// the moment Open returns (lease.go).
func TestIntegration_LeaseVouchesWhileConnected(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t), func(c *zkstate.Config) { c.SessionTimeout = 4 * time.Second })
	timeout := s.SessionTimeout()
	first := s.LeaseUntil()
	if !s.Vouched(time.Now()) {
		t.Fatalf("not vouched right after Open (lease until %v)", first)
	}
	if ahead := time.Until(first); ahead < timeout/2 || ahead > timeout {
		t.Errorf("lease %v ahead right after Open, want between half and all of the %v timeout", ahead, timeout)
	}
	time.Sleep(timeout / 2)
	if later := s.LeaseUntil(); !later.After(first) || !s.Vouched(time.Now()) {
		t.Errorf("lease not extended after half a timeout: %v, then %v", first, later)
	}
	if s.Vouched(time.Now().Add(timeout)) {
		t.Errorf("vouched a whole timeout from now: no probe can vouch for that")
	}
	// VouchedUntil answers Vouched with the lease it read: until then, and not at all after it.
	if until, ok := s.VouchedUntil(time.Now()); !ok || until.Before(s.LeaseUntil().Add(-timeout/2)) || !time.Now().Before(until) {
		t.Errorf("VouchedUntil(now) = %v, %v, want true and the lease (until %v)", until, ok, s.LeaseUntil())
	}
	if until, ok := s.VouchedUntil(time.Now().Add(timeout)); ok || !until.IsZero() {
		t.Errorf("VouchedUntil a whole timeout from now = %v, %v, want nothing", until, ok)
	}
}

// Cut from the server, the Store stops vouching for its session before the server expires it
// (the observer sees its ephemeral go), and vouches for the next session as soon as it has one.
func TestIntegration_LeaseLapsesBeforeTheServerExpires(t *testing.T) {
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	s := zktest.OpenStore(t, proxy.Addr()+connect[i:], func(c *zkstate.Config) { c.SessionTimeout = 4 * time.Second })
	observer := zktest.OpenStore(t, connect)
	ctx := timeout(t, 45*time.Second)
	const eph = "/consumers/g/ids/c1"
	if err := s.CreateEphemeral(ctx, eph, []byte("x")); err != nil {
		t.Fatal(err)
	}
	old := s.SessionID()

	cut := time.Now()
	proxy.Freeze()
	var lapsed, expired time.Time
	for deadline := time.Now().Add(20 * time.Second); expired.IsZero(); time.Sleep(20 * time.Millisecond) {
		now := time.Now()
		if lapsed.IsZero() && !s.Vouched(now) {
			lapsed = now
		}
		if ok, _, err := observer.Exists(ctx, eph); err == nil && !ok {
			expired = time.Now()
		}
		if now.After(deadline) {
			t.Fatalf("%s still exists 20s after cutting the connection", eph)
		}
	}
	t.Logf("cut at 0: lease lapsed at %v, the server expired the session by %v",
		lapsed.Sub(cut).Round(time.Millisecond), expired.Sub(cut).Round(time.Millisecond))
	if lapsed.IsZero() || !lapsed.Before(expired) {
		t.Fatalf("the lease lapsed at %v, not before the server expired the session (%v)", lapsed.Sub(cut), expired.Sub(cut))
	}

	proxy.Thaw()
	zktest.Eventually(t, 20*time.Second, "a new session, vouched for", func() bool { return s.SessionID() != 0 && s.SessionID() != old && s.Vouched(time.Now()) })
}

// eventually polls cond until it holds or d passes.

// Vouched runs on every relayed Fetch response (bridge/fetchgate.go).
func BenchmarkVouched(b *testing.B) {
	s := zktest.OpenStore(b, zktest.Connect(b))
	for b.Loop() {
		if !s.Vouched(time.Now()) {
			b.Fatal("not vouched")
		}
	}
}

// The lease vouches for a new session only once the session's owner was told the old one
// expired: the bridge fences its groups on that Expired event (bridge/coordinator.go onSession)
// and its fetch gate trusts the lease alone while no group is fenced (bridge/fetchgate.go). A
// lease probe that ran between go-zookeeper's new session and the Expired event's delivery
// vouched for the new session while the groups of the old one still counted as held.
func TestIntegration_LeaseWaitsForTheExpiryToBeDelivered(t *testing.T) {
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	inExpired, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := zktest.OpenStore(t, proxy.Addr()+connect[i:], func(c *zkstate.Config) {
		c.SessionTimeout = 2 * time.Second
		c.OnSession = func(ev zkstate.SessionEvent) {
			if ev.State == zkstate.Expired {
				once.Do(func() { close(inExpired) })
				<-release // the owner still fencing what the old session held
			}
		}
	})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	old := s.SessionID()
	proxy.Freeze()
	time.Sleep(2*s.SessionTimeout() + time.Second) // the server expires the session meanwhile
	proxy.Thaw()
	select {
	case <-inExpired:
	case <-time.After(20 * time.Second):
		t.Fatal("no Expired event 20s after the connection came back")
	}
	zktest.Eventually(t, 20*time.Second, "a new session", func() bool { return s.SessionID() != 0 && s.SessionID() != old })
	// Several lease probe periods (a sixth of the timeout each) with the Expired event not
	// delivered yet: none may vouch for the new session.
	for end := time.Now().Add(s.SessionTimeout()); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if s.Vouched(time.Now()) {
			t.Fatalf("vouched for the new session 0x%x while the expiry of 0x%x was still being delivered", s.SessionID(), old)
		}
	}
	close(release)
	released = true
	zktest.Eventually(t, 20*time.Second, "the new session vouched for once the expiry was delivered", func() bool { return s.Vouched(time.Now()) })
}
