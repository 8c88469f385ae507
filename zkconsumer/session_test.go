package zkconsumer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A member whose session expires loses its registration and owners at once; the others take
// its partitions while it still believes it owns them (it hears nothing while cut off), and
// when it is back it forgets them without committing (resetState), registers again and the
// group converges again (ZKSessionExpireListener.handleNewSession, ZCC:476-490).
func TestIntegration_SessionExpiryReregistersAndRebalances(t *testing.T) {
	cl := newCluster(t, 3, twoTopics)
	i := strings.IndexByte(cl.connect, '/')
	proxy := zktest.StartProxy(t, cl.connect[:i])
	tr := newTracker()
	c1 := cl.start(tr, "c1", func(c *zkconsumer.Config) {
		c.Connect = proxy.Addr() + cl.connect[i:]
		c.SessionTimeout = 2 * time.Second
	})
	c2 := cl.start(tr, "c2")
	both := []*member{c1, c2}
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, both...), both...)
	o0 := tp{Topic: "orders", Partition: 0}
	if c1.c.Assignment()[o0] == "" {
		t.Fatalf("fixture: c1 does not own orders-0: c1 %v c2 %v", c1.c.Assignment(), c2.c.Assignment())
	}
	c1.c.Commit(o0, 77) // consumed, not yet committed (the auto-commit interval is 60 s)
	oldSession := c1.c.SessionID()

	proxy.Freeze()
	cutAt := time.Now()
	// c2 alone converges on every partition, while c1 still holds its old view.
	ctx := timeout(t, 40*time.Second)
	zktest.Eventually(t, 20*time.Second, "c2 takes over after c1's session expired", func() bool {
		ok, _ := cl.converged(ctx, cl.expected(legacy.StrategyRange, c2), c2)
		return ok
	})
	if got := c1.c.Assignment()[o0]; got == "" {
		t.Errorf("cut-off c1 already forgot orders-0; it cannot have heard of the expiry")
	}
	t.Logf("c2 took over %v after the cut; c1 still believes it owns %d partitions",
		time.Since(cutAt).Round(time.Millisecond), len(c1.c.Assignment()))

	proxy.Thaw()
	cl.waitConverged(20*time.Second, cl.expected(legacy.StrategyRange, both...), both...)
	if c1.c.SessionID() == oldSession {
		t.Fatalf("c1 kept session 0x%x", oldSession)
	}
	data, st, err := cl.admin.Get(ctx, zkstate.IDPath(group, "g_c1"))
	if err != nil || st.EphemeralOwner != c1.c.SessionID() {
		t.Errorf("c1's registration = %s, owner 0x%x, %v; want one of its new session", data, st.EphemeralOwner, err)
	}
	// resetState dropped the registry without committing: the 77 is lost.
	if off, ok := readOffset(t, cl.admin, o0); ok {
		t.Errorf("offset of orders-0 = %d; 0.8.2 commits nothing on a session expiry", off)
	}
	tr.waitStartOffset(t, "g_c1", o0, zkconsumer.OffsetLatest)
}
