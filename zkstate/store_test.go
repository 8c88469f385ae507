package zkstate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

func TestMain(m *testing.M) {
	zkstate.TestConnect = zktest.Connect
	os.Exit(zktest.Main(m))
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestIntegration_BasicOpsWithChroot(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx := timeout(t, 20*time.Second)

	if err := s.Create(ctx, "/a/b/c", []byte("x"), zkstate.CreateOptions{}); !errors.Is(err, zkstate.ErrNoNode) {
		t.Errorf("Create(/a/b/c) without Parents = %v, want ErrNoNode", err)
	}
	if err := s.Create(ctx, "/a/b/c", []byte("x"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatalf("Create(/a/b/c, Parents) = %v", err)
	}
	err := s.Create(ctx, "/a/b/c", nil, zkstate.CreateOptions{})
	var pe *zkstate.PathError
	if !errors.Is(err, zkstate.ErrNodeExists) || !errors.As(err, &pe) || pe.Path != "/a/b/c" {
		t.Errorf("Create(/a/b/c) again = %v, want a *PathError for /a/b/c wrapping ErrNodeExists", err)
	}
	for _, c := range []string{"z", "m", "b2"} {
		if err := s.Create(ctx, "/a/"+c, nil, zkstate.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kids, st, err := s.Children(ctx, "/a")
	if want := []string{"b", "b2", "m", "z"}; err != nil || !slices.Equal(kids, want) || st.NumChildren != 4 {
		t.Errorf("Children(/a) = %v, %+v, %v; want %v sorted with NumChildren 4", kids, st, err, want)
	}
	data, st, err := s.Get(ctx, "/a/b/c")
	if err != nil || string(data) != "x" || st.Version != 0 || st.EphemeralOwner != 0 || st.Ctime.IsZero() {
		t.Errorf("Get(/a/b/c) = %q, %+v, %v; want \"x\" at version 0, persistent", data, st, err)
	}
	if ok, _, err := s.Exists(ctx, "/nope"); ok || err != nil {
		t.Errorf("Exists(/nope) = %v, %v; want false, nil", ok, err)
	}
	if _, _, err := s.Get(ctx, "/nope"); !errors.Is(err, zkstate.ErrNoNode) || !strings.Contains(err.Error(), "/nope") {
		t.Errorf("Get(/nope) = %v, want ErrNoNode naming /nope", err)
	}
	if _, _, err := s.Get(ctx, "relative"); err == nil {
		t.Errorf("Get(relative) = nil error, want an invalid path error")
	}

	// The chroot is really a prefix: a store without it sees the node below the chroot.
	i := strings.IndexByte(connect, '/')
	root := zktest.OpenStore(t, connect[:i])
	if data, _, err := root.Get(ctx, connect[i:]+"/a/b/c"); err != nil || string(data) != "x" {
		t.Errorf("Get(%s/a/b/c) without chroot = %q, %v; want \"x\"", connect[i:], data, err)
	}

	if err := s.DeleteRecursive(ctx, "/a"); err != nil {
		t.Fatalf("DeleteRecursive(/a) = %v", err)
	}
	if ok, _, _ := s.Exists(ctx, "/a"); ok {
		t.Errorf("/a exists after DeleteRecursive")
	}
	if err := s.DeleteRecursive(ctx, "/a"); err != nil {
		t.Errorf("DeleteRecursive of a missing node = %v, want nil", err)
	}
}

func TestIntegration_SetAndDeleteAreVersionChecked(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	if err := s.Create(ctx, "/epoch", []byte("1"), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Set(ctx, "/epoch", []byte("2"), 0)
	if err != nil || st.Version != 1 {
		t.Fatalf("Set(/epoch, version 0) = %+v, %v; want version 1", st, err)
	}
	// A second writer still holding version 0 loses.
	if _, err := s.Set(ctx, "/epoch", []byte("3"), 0); !errors.Is(err, zkstate.ErrBadVersion) {
		t.Errorf("Set(/epoch, stale version 0) = %v, want ErrBadVersion", err)
	}
	if data, _, _ := s.Get(ctx, "/epoch"); string(data) != "2" {
		t.Errorf("after the failed CAS /epoch = %q, want \"2\"", data)
	}
	if _, err := s.Set(ctx, "/epoch", []byte("4"), -1); err != nil {
		t.Errorf("Set(/epoch, any version) = %v", err)
	}
	if err := s.Delete(ctx, "/epoch", 1); !errors.Is(err, zkstate.ErrBadVersion) {
		t.Errorf("Delete(/epoch, stale version 1) = %v, want ErrBadVersion", err)
	}
	if err := s.Create(ctx, "/epoch/child", nil, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "/epoch", -1); !errors.Is(err, zkstate.ErrNotEmpty) {
		t.Errorf("Delete(/epoch) with a child = %v, want ErrNotEmpty", err)
	}
	if _, err := s.Set(ctx, "/missing", nil, -1); !errors.Is(err, zkstate.ErrNoNode) {
		t.Errorf("Set(/missing) = %v, want ErrNoNode", err)
	}
}

func TestIntegration_CancelledContext(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := s.Get(ctx, "/"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled ctx = %v, want context.Canceled", err)
	}
	if _, err := s.Snapshot(ctx, "g"); !errors.Is(err, context.Canceled) {
		t.Errorf("Snapshot with a cancelled ctx = %v, want context.Canceled", err)
	}
}

// kilobyteNodes returns n creates of 1 KiB nodes under dir.
func kilobyteNodes(dir string, n int) []zkstate.Op {
	data := bytes.Repeat([]byte("x"), 1024)
	ops := make([]zkstate.Op, n)
	for i := range ops {
		ops[i] = zkstate.CreateOp(fmt.Sprintf("%s/n%05d", dir, i), data, zkstate.CreateOptions{Parents: true})
	}
	return ops
}

func TestIntegration_MultiSplitsBatchesOverTheRequestLimit(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 40*time.Second)
	// About 3.1 MB: four requests under the 1 MB default.
	ops := kilobyteNodes("/big", 3000)
	if err := s.Multi(ctx, ops...); err != nil {
		t.Fatalf("Multi(3000 x 1 KiB) = %v", err)
	}
	kids, _, err := s.Children(ctx, "/big")
	if err != nil || len(kids) != 3000 {
		t.Errorf("Children(/big) = %d children, %v; want 3000", len(kids), err)
	}

	err = s.MultiAtomic(ctx, kilobyteNodes("/big2", 3000)...)
	if !errors.Is(err, zkstate.ErrMultiTooLarge) {
		t.Errorf("MultiAtomic(3000 x 1 KiB) = %v, want ErrMultiTooLarge", err)
	}
	if ok, _, _ := s.Exists(ctx, "/big2"); ok {
		t.Errorf("a refused MultiAtomic created /big2")
	}
	if err := s.MultiAtomic(ctx, kilobyteNodes("/small", 100)...); err != nil {
		t.Errorf("MultiAtomic(100 x 1 KiB) = %v", err)
	}
}

func TestIntegration_MultiNamesTheFailingOp(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 20*time.Second)
	if err := s.Create(ctx, "/epoch", nil, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := s.Multi(ctx,
		zkstate.CheckOp("/epoch", 0),
		zkstate.CreateOp("/a", nil, zkstate.CreateOptions{}),
		zkstate.SetOp("/missing", []byte("x"), -1),
		zkstate.CreateOp("/b", nil, zkstate.CreateOptions{}))
	var me *zkstate.MultiError
	if !errors.As(err, &me) || me.Index != 2 || !errors.Is(err, zkstate.ErrNoNode) || me.Applied != 0 {
		t.Fatalf("Multi = %v, want a *MultiError for op 2 wrapping ErrNoNode with nothing applied", err)
	}
	if !strings.Contains(err.Error(), "op 2 (set /missing@-1)") {
		t.Errorf("Multi error %q does not name op 2", err)
	}
	if ok, _, _ := s.Exists(ctx, "/a"); ok {
		t.Errorf("/a was created by a failed multi")
	}

	// A stale guard fences the whole batch.
	if _, err := s.Set(ctx, "/epoch", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	err = s.Multi(ctx, zkstate.CheckOp("/epoch", 0), zkstate.CreateOp("/a", nil, zkstate.CreateOptions{}))
	if !errors.As(err, &me) || me.Index != 0 || !errors.Is(err, zkstate.ErrBadVersion) {
		t.Errorf("Multi with a stale guard = %v, want op 0 failing with ErrBadVersion", err)
	}
}

func TestIntegration_MultiSplitReportsAppliedPrefix(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t), func(c *zkstate.Config) { c.MaxMultiBytes = 20_000 })
	ctx := timeout(t, 20*time.Second)
	ops := kilobyteNodes("/split", 60)                                                 // about 3 requests of 20 KB
	ops = append(ops, zkstate.CreateOp("/split/n00000", nil, zkstate.CreateOptions{})) // exists by then
	err := s.Multi(ctx, ops...)
	var me *zkstate.MultiError
	if !errors.As(err, &me) || me.Index != 60 || !errors.Is(err, zkstate.ErrNodeExists) {
		t.Fatalf("Multi = %v, want op 60 failing with ErrNodeExists", err)
	}
	if me.Applied == 0 || me.Applied > 60 {
		t.Errorf("MultiError.Applied = %d, want the ops of the earlier requests (1..60)", me.Applied)
	}
	kids, _, _ := s.Children(ctx, "/split")
	if len(kids) != me.Applied {
		t.Errorf("/split has %d children, want Applied = %d", len(kids), me.Applied)
	}
}

// nextEvent reads one watch event or fails the test after a deadline.
func nextEvent(t *testing.T, ch <-chan zkstate.WatchEvent) zkstate.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("watch channel closed, want an event")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatalf("no watch event within 15s")
	}
	panic("unreachable")
}

func TestIntegration_WatchChildrenKeepsFiring(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 30*time.Second)
	if err := s.Create(ctx, "/w", nil, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ch, err := s.WatchChildren(wctx, "/w")
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.Initial || !ev.Exists || len(ev.Children) != 0 {
		t.Errorf("first event = %+v, want Initial with no children", ev)
	}
	steps := []struct {
		do   func() error
		want []string
	}{
		{func() error { return s.Create(ctx, "/w/a", nil, zkstate.CreateOptions{}) }, []string{"a"}},
		{func() error { return s.Create(ctx, "/w/b", nil, zkstate.CreateOptions{}) }, []string{"a", "b"}},
		{func() error { return s.Delete(ctx, "/w/a", -1) }, []string{"b"}},
		{func() error { return s.Create(ctx, "/w/c", nil, zkstate.CreateOptions{Ephemeral: true}) }, []string{"b", "c"}},
	}
	for i, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		ev := nextEvent(t, ch)
		if ev.Type != zkstate.ChildrenChanged || !slices.Equal(ev.Children, step.want) || ev.Path != "/w" {
			t.Errorf("step %d: event = %+v, want ChildrenChanged on /w with %v", i, ev, step.want)
		}
	}
	// Deleting the node itself, then creating it again.
	if err := s.DeleteRecursive(ctx, "/w"); err != nil {
		t.Fatal(err)
	}
	for {
		ev := nextEvent(t, ch)
		if ev.Type == zkstate.ChildrenChanged {
			continue // the children's deletions, coalesced or not
		}
		if ev.Type != zkstate.Deleted || ev.Exists {
			t.Fatalf("after deleting /w: event = %+v, want Deleted, not existing", ev)
		}
		break
	}
	if err := s.Create(ctx, "/w", nil, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.Created || !ev.Exists {
		t.Errorf("after re-creating /w: event = %+v, want Created", ev)
	}
	stop()
	for range ch {
	}
}

func TestIntegration_WatchDataKeepsFiring(t *testing.T) {
	s := zktest.OpenStore(t, zktest.Connect(t))
	ctx := timeout(t, 30*time.Second)
	ch, err := s.WatchData(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.Initial || ev.Exists {
		t.Errorf("first event on a missing node = %+v, want Initial, not existing", ev)
	}
	if err := s.Create(ctx, "/d", []byte("v0"), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.Created || string(ev.Data) != "v0" {
		t.Errorf("after create: event = %+v, want Created with v0", ev)
	}
	for i := 1; i <= 3; i++ {
		want := fmt.Sprintf("v%d", i)
		if _, err := s.Set(ctx, "/d", []byte(want), -1); err != nil {
			t.Fatal(err)
		}
		ev := nextEvent(t, ch)
		if ev.Type != zkstate.DataChanged || string(ev.Data) != want || ev.Stat.Version != int32(i) {
			t.Errorf("set %d: event = %+v (data %q), want DataChanged with %s at version %d", i, ev, ev.Data, want, i)
		}
	}
	if err := s.Delete(ctx, "/d", -1); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.Deleted || ev.Exists {
		t.Errorf("after delete: event = %+v, want Deleted", ev)
	}
}

func TestIntegration_CloseEndsWatchesAndIsIdempotent(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ch, err := s.WatchChildren(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch)
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	select {
	case _, ok := <-ch:
		if ok {
			t.Errorf("watch delivered after Close")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("watch channel still open 5s after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, _, err := s.Get(t.Context(), "/"); !errors.Is(err, zkstate.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
}

func TestIntegration_UnreachableZooKeeperFailsWithinDeadline(t *testing.T) {
	zktest.Addr(t) // skip with the other integration tests when there is no ZooKeeper
	// A port nobody listens on: go-zookeeper would retry it forever.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	s, err := zkstate.Open(ctx, zkstate.Config{Connect: addr + "/chroot"})
	elapsed := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want an error", addr)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no session within") ||
		!strings.Contains(err.Error(), addr) {
		t.Errorf("Open(%s) = %q, want a deadline error saying no session was established", addr, err)
	}
	if elapsed > 4*time.Second {
		t.Errorf("Open took %v with a 1.5s deadline", elapsed)
	}
	t.Logf("Open(%s): %v after %v", addr, err, elapsed.Round(time.Millisecond))
}

func TestIntegration_OwnedByUsChecksTheSession(t *testing.T) {
	connect := zktest.Connect(t)
	a, b := zktest.OpenStore(t, connect), zktest.OpenStore(t, connect)
	ctx := timeout(t, 20*time.Second)
	if err := b.Create(ctx, "/consumers/g/owners/t/0", []byte("b-0"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.OwnedByUs(ctx, "/consumers/g/owners/t/0"); ok || err != nil {
		t.Errorf("a.OwnedByUs(b's node) = %v, %v; want false", ok, err)
	}
	if ok, err := b.OwnedByUs(ctx, "/consumers/g/owners/t/0"); !ok || err != nil {
		t.Errorf("b.OwnedByUs(its own node) = %v, %v; want true", ok, err)
	}
	if err := a.Create(ctx, "/persistent", nil, zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.OwnedByUs(ctx, "/persistent"); ok || err != nil {
		t.Errorf("OwnedByUs(a persistent node) = %v, %v; want false", ok, err)
	}
	if ok, err := a.OwnedByUs(ctx, "/missing"); ok || err != nil {
		t.Errorf("OwnedByUs(a missing node) = %v, %v; want false, nil", ok, err)
	}
	if err := a.CreateEphemeral(ctx, "/consumers/g/owners/t/0", []byte("a-0")); !errors.Is(err, zkstate.ErrNodeExists) {
		t.Errorf("a.CreateEphemeral over b's node = %v, want ErrNodeExists", err)
	}
	if err := a.DeleteEphemeral(ctx, "/consumers/g/owners/t/0"); !errors.Is(err, zkstate.ErrNotOwner) {
		t.Errorf("a.DeleteEphemeral(b's node) = %v, want ErrNotOwner", err)
	}
	if ok, _, _ := b.Exists(ctx, "/consumers/g/owners/t/0"); !ok {
		t.Errorf("a's DeleteEphemeral removed b's node")
	}
}

func TestIntegration_SessionExpiryReclaimsEphemerals(t *testing.T) {
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	addr, chroot := connect[:i], connect[i:]
	proxy := zktest.StartProxy(t, addr)

	events := make(chan zkstate.SessionEvent, 100)
	s := zktest.OpenStore(t, proxy.Addr()+chroot, func(c *zkstate.Config) {
		c.SessionTimeout = 2 * time.Second
		c.OnSession = func(ev zkstate.SessionEvent) { events <- ev }
	})
	observer := zktest.OpenStore(t, connect)
	ctx := timeout(t, 45*time.Second)

	const c1, c2, c3 = "/consumers/g/ids/c1", "/consumers/g/ids/c2", "/consumers/g/ids/c3"
	for _, p := range []string{c1, c2, c3} {
		if err := s.CreateEphemeral(ctx, p, []byte("data of "+p)); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.OwnedByUs(ctx, p); !ok || err != nil {
			t.Fatalf("OwnedByUs(%s) = %v, %v right after CreateEphemeral", p, ok, err)
		}
	}
	// A forgotten ephemeral is left to its session (another session adopts it) and not made
	// again after the session expires.
	if err := s.ForgetEphemeral(ctx, c3); err != nil {
		t.Fatalf("ForgetEphemeral: %v", err)
	}
	// Rewritten data is what a reclaim brings back (a bridge's registration changes).
	if err := s.SetEphemeral(ctx, c1, []byte("new data of "+c1)); err != nil {
		t.Fatalf("SetEphemeral: %v", err)
	}
	if err := s.SetEphemeral(ctx, "/consumers/g/ids/never", nil); err == nil {
		t.Error("SetEphemeral of a node CreateEphemeral never made succeeded")
	}
	watch, err := s.WatchChildren(ctx, "/consumers/g/ids")
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, watch); !slices.Equal(ev.Children, []string{"c1", "c2", "c3"}) {
		t.Fatalf("initial watch event = %+v, want c1, c2 and c3", ev)
	}
	oldID := s.SessionID()

	proxy.Freeze()
	// The server expires the session once it has not heard from us for the session timeout;
	// the observer sees our ephemerals go.
	zktest.Eventually(t, 20*time.Second, "our ephemeral "+c1+" gone after cutting the connection", func() bool {
		ok, _, err := observer.Exists(ctx, c1)
		return err == nil && !ok
	})
	// Meanwhile another consumer takes c2.
	if err := observer.Create(ctx, c2, []byte("intruder"), zkstate.CreateOptions{Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	proxy.Thaw()

	var seen []zkstate.SessionEvent
	var reclaimed zkstate.SessionEvent
	for reclaimed.State == 0 {
		select {
		case ev := <-events:
			seen = append(seen, ev)
			if ev.State == zkstate.Reclaimed {
				reclaimed = ev
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no Reclaimed event within 20s of reconnecting; events: %+v", seen)
		}
	}
	expired := slices.IndexFunc(seen, func(ev zkstate.SessionEvent) bool {
		return ev.State == zkstate.Expired && ev.SessionID == oldID
	})
	connected := slices.IndexFunc(seen, func(ev zkstate.SessionEvent) bool {
		return ev.State == zkstate.Connected && ev.SessionID != oldID && ev.SessionID != 0
	})
	if expired < 0 || connected < expired {
		t.Errorf("session events = %+v, want Expired(0x%x) then Connected with a new id", seen, oldID)
	}
	newID := s.SessionID()
	if newID == oldID || newID == 0 || reclaimed.SessionID != newID {
		t.Errorf("session id after expiry = 0x%x (Reclaimed says 0x%x), old 0x%x; want a new one", newID, reclaimed.SessionID, oldID)
	}

	// c1 is back, ours, with its data; c2 belongs to the intruder and was not overwritten.
	if ok, err := s.OwnedByUs(ctx, c1); !ok || err != nil {
		t.Errorf("OwnedByUs(%s) after reclaim = %v, %v; want true", c1, ok, err)
	}
	if data, _, _ := s.Get(ctx, c1); string(data) != "new data of "+c1 {
		t.Errorf("%s after reclaim = %q, want the data SetEphemeral gave it", c1, data)
	}
	if ok, _, err := observer.Exists(ctx, c3); ok || err != nil {
		t.Errorf("forgotten %s after reclaim: exists %v (%v), want gone", c3, ok, err)
	}
	conflicts := reclaimed.ReclaimConflicts()
	if len(conflicts) != 1 || conflicts[0].Path != c2 || conflicts[0].Owner != observer.SessionID() ||
		!errors.Is(reclaimed.Err, zkstate.ErrReclaimConflict) {
		t.Errorf("Reclaimed conflicts = %v (err %v), want one for %s held by 0x%x", conflicts, reclaimed.Err, c2, observer.SessionID())
	}
	if ok, _ := s.OwnedByUs(ctx, c2); ok {
		t.Errorf("OwnedByUs(%s) = true for the intruder's node", c2)
	}
	if data, _, _ := s.Get(ctx, c2); string(data) != "intruder" {
		t.Errorf("%s = %q, want the intruder's data untouched", c2, data)
	}

	// The watch survived the expiry and says so.
	for {
		ev := nextEvent(t, watch)
		if ev.Type == zkstate.SessionExpired {
			break
		}
	}

	if err := s.DeleteEphemeral(ctx, c2); !errors.Is(err, zkstate.ErrNotOwner) {
		t.Errorf("DeleteEphemeral(%s) = %v, want ErrNotOwner", c2, err)
	}
	if err := s.DeleteEphemeral(ctx, c1); err != nil {
		t.Errorf("DeleteEphemeral(%s) = %v", c1, err)
	}
	if ok, _, _ := observer.Exists(ctx, c1); ok {
		t.Errorf("%s still exists after DeleteEphemeral", c1)
	}
}

func TestIntegration_DigestProtectsOurNodesOnly(t *testing.T) {
	connect := zktest.Connect(t)
	bridge := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.Digest = "bridge:secret" })
	ctx := timeout(t, 20*time.Second)
	if err := bridge.Create(ctx, "/zkbridge/groups/billing", []byte("v1"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	if err := bridge.Create(ctx, "/consumers/billing/offsets/orders/0", []byte("10"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}

	anonymous := zktest.OpenStore(t, connect)
	if data, _, err := anonymous.Get(ctx, "/zkbridge/groups/billing"); err != nil || string(data) != "v1" {
		t.Errorf("unauthenticated Get = %q, %v; want v1 (world may read)", data, err)
	}
	if _, err := anonymous.Set(ctx, "/zkbridge/groups/billing", []byte("evil"), -1); !errors.Is(err, zkstate.ErrNoAuth) {
		t.Errorf("unauthenticated Set = %v, want ErrNoAuth", err)
	}
	if err := anonymous.Create(ctx, "/zkbridge/groups/other", nil, zkstate.CreateOptions{}); !errors.Is(err, zkstate.ErrNoAuth) {
		t.Errorf("unauthenticated Create under our root = %v, want ErrNoAuth", err)
	}
	if err := anonymous.Delete(ctx, "/zkbridge/groups/billing", -1); !errors.Is(err, zkstate.ErrNoAuth) {
		t.Errorf("unauthenticated Delete = %v, want ErrNoAuth", err)
	}
	// 0.8 consumers never authenticate and must keep committing offsets.
	if _, err := anonymous.Set(ctx, "/consumers/billing/offsets/orders/0", []byte("11"), -1); err != nil {
		t.Errorf("unauthenticated Set of an offset = %v, want nil (the Kafka layout stays open)", err)
	}

	wrong := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.Digest = "bridge:wrong" })
	if _, err := wrong.Set(ctx, "/zkbridge/groups/billing", []byte("evil"), -1); !errors.Is(err, zkstate.ErrNoAuth) {
		t.Errorf("Set with the wrong password = %v, want ErrNoAuth", err)
	}
	if _, err := bridge.Set(ctx, "/zkbridge/groups/billing", []byte("v2"), -1); err != nil {
		t.Errorf("Set by the digest user = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg zkstate.Config
		ok  bool
	}{
		{zkstate.Config{Connect: "h1:2181,h2:2181/kafka"}, true},
		{zkstate.Config{Connect: "h1:2181"}, true},
		{zkstate.Config{Connect: "h1:2181/"}, true},
		{zkstate.Config{Connect: ""}, false},
		{zkstate.Config{Connect: "/kafka"}, false},
		{zkstate.Config{Connect: "h:1/a//b"}, false},
		{zkstate.Config{Connect: "h:1", Digest: "nopassword"}, false},
		{zkstate.Config{Connect: "h:1", Digest: "u:p"}, true},
		{zkstate.Config{Connect: "h:1", MaxMultiBytes: 10 << 20}, false},
		{zkstate.Config{Connect: "h:1", SessionTimeout: -time.Second}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

func TestIntegration_ReconnectKeepsSessionAndWatches(t *testing.T) {
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	events := make(chan zkstate.SessionEvent, 100)
	s := zktest.OpenStore(t, proxy.Addr()+connect[i:], func(c *zkstate.Config) {
		c.SessionTimeout = 8 * time.Second
		c.OnSession = func(ev zkstate.SessionEvent) { events <- ev }
	})
	observer := zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)
	if err := s.CreateEphemeral(ctx, "/consumers/g/ids/c1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := observer.Create(ctx, "/config", []byte("v0"), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	watch, err := s.WatchData(ctx, "/config")
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, watch)
	id := s.SessionID()

	// A blip shorter than the session timeout; the change made meanwhile must still fire the
	// watch, which go-zookeeper sets again on reconnect.
	proxy.Freeze()
	waitSessionState(t, events, zkstate.Disconnected)
	if _, err := observer.Set(ctx, "/config", []byte("v1"), -1); err != nil {
		t.Fatal(err)
	}
	proxy.Thaw()
	if ev := waitSessionState(t, events, zkstate.Connected); ev.SessionID != id {
		t.Errorf("after a short disconnect: Connected 0x%x, want the same session 0x%x", ev.SessionID, id)
	}
	if ev := nextEvent(t, watch); ev.Type != zkstate.DataChanged || string(ev.Data) != "v1" {
		t.Errorf("watch after reconnect = %+v (data %q), want DataChanged to v1", ev, ev.Data)
	}
	if ok, err := s.OwnedByUs(ctx, "/consumers/g/ids/c1"); !ok || err != nil {
		t.Errorf("OwnedByUs after a short disconnect = %v, %v; want true", ok, err)
	}
	for len(events) > 0 {
		if ev := <-events; ev.State == zkstate.Expired || ev.State == zkstate.Reclaimed {
			t.Errorf("unexpected session event %+v after a short disconnect", ev)
		}
	}
}

// waitSessionState returns the next session event in state, skipping others.
func waitSessionState(t *testing.T, events <-chan zkstate.SessionEvent, state zkstate.SessionState) zkstate.SessionEvent {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == state {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v session event within 20s", state)
		}
	}
}

func TestIntegration_CloseStopsEveryGoroutine(t *testing.T) {
	connect := zktest.Connect(t)
	before := runtime.NumGoroutine()
	s, err := zkstate.Open(timeout(t, 15*time.Second), zkstate.Config{Connect: connect})
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 20*time.Second)
	if err := zkstate.LoadLayout(ctx, s, zkstate.ExampleLayout()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateEphemeral(ctx, "/consumers/billing/ids/x", nil); err != nil {
		t.Fatal(err)
	}
	ch, err := s.WatchChildren(context.Background(), "/consumers/billing/ids") // ended by Close only
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var after int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Errorf("%d goroutines after Close, %d before Open:\n%s", after, before, buf[:runtime.Stack(buf, true)])
}
