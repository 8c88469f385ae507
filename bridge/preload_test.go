package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// fakePeer is a Kafka listener standing for a bridge's: it takes connections (the survivors'
// probes and the connection they hold open) and holds them, until kill closes it and every
// connection it took, as a killed process's kernel does; then it refuses. revive listens again
// at the same address.
type fakePeer struct {
	t     *testing.T
	addr  string
	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
	took  int
}

func startFakePeer(t *testing.T) *fakePeer {
	f := &fakePeer{t: t}
	f.listen("127.0.0.1:0")
	t.Cleanup(f.kill)
	return f
}

func (f *fakePeer) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.ln, f.addr = ln, ln.Addr().String()
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.took++
			f.mu.Unlock()
		}
	}()
}

func (f *fakePeer) taken() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.took
}

func (f *fakePeer) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

func (f *fakePeer) revive() { f.listen(f.addr) }

// preloadSetup is the groups the failover tests move from 9001 to 9002 (Stable, two static
// members each, their records written by a bridge 9001 of this process), held by 9001 and with
// 9001 registered at peer's address and 9003 at one nothing listens on.
func preloadSetup(t *testing.T, connect string, zk *zkstate.Store, n int, peer *fakePeer) []string {
	t.Helper()
	multiLayout(t, zk)
	names := movingTo9002("prepared", n)
	a := startBridge(t, connect, 9001, nil)
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() { stableGroup(t, a, name, [2]group.InstanceID{"i1", "i2"}) })
	}
	wg.Wait()
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	held := zkstate.Epoch{NodeID: 9001, AcquiredMs: time.Now().UnixMilli()}.Encode()
	for _, name := range names {
		if _, err := zk.Set(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name), held, -1); err != nil {
			t.Fatal(err)
		}
	}
	for id, addr := range map[int32]string{9001: peer.addr, 9003: "127.0.0.1:1"} {
		reg := zkstate.BridgeRegistration{NodeID: id, Kafka: addr, Advertised: addr, StartedMs: time.Now().UnixMilli()}
		if err := zk.CreateEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, id), reg.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// preloadSurvivor starts 9002 behind a proxy of its own to ZooKeeper, waits until it lists the
// three bridges and holds a connection open to 9001's listener, and returns both.
func preloadSurvivor(t *testing.T, connect string, peer *fakePeer) (*zktest.Proxy, *running) {
	t.Helper()
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i])
	b := startBridge(t, proxy.Addr()+connect[i:], 9002, func(c *bridge.Config) { c.WriteTimeout = 10 * time.Second })
	zktest.Eventually(t, 10*time.Second, "9002 sees 9001 and 9003 and reached 9001's listener", func() (bool, string) {
		got := brokersOf(t, b.Addr().String())
		return len(got) == 3 && peer.taken() > 0, fmt.Sprint(got, peer.taken())
	})
	return proxy, b
}

// expireAndAwait9002 deletes 9001's registration, as its session's expiry does, and waits until
// 9002 holds the epoch of every group of names.
func expireAndAwait9002(t *testing.T, zk *zkstate.Store, names []string) {
	t.Helper()
	if err := zk.DeleteEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001)); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 20*time.Second, "9002 holds every group", func() (bool, string) {
		holders, _ := epochsOf(t, zk, names)
		for _, h := range holders {
			if h != 9002 {
				return false, fmt.Sprint(holders)
			}
		}
		return true, ""
	})
}

// epochsOf reads the groups' epochs: who holds each, and its version.
func epochsOf(t *testing.T, zk *zkstate.Store, names []string) (holders []int32, versions []int32) {
	t.Helper()
	holders, stats := epochStats(t, zk, names)
	for _, st := range stats {
		versions = append(versions, st.Version)
	}
	return holders, versions
}

// The crash's takeover prepared while the dead bridge's session lives, counted in ZooKeeper round
// trips (docs/several-bridges.md): 9001 holds preparedGroups Stable groups, its Kafka listener
// closes every connection and refuses new ones (a kill), so that 9002 sees it look dead and
// prepares; then its registration is deleted, as ZooKeeper does when it expires the session.
// 9002's ZooKeeper answers all come takeoverRTT late. From the deletion: its notice (the
// registration's watch: no read of the children), then one Multi per group (applied as it
// arrives): every epoch taken within 1 round trip, and its answer with the holder's check beside
// it: every heartbeat answered within 2 (0.9 of margin each). The holder's check is one Exists for
// all the groups, sent as their takeovers start: one a group, each sent beside its group's Multi,
// came back behind the Multis sent before it (a session's answers come in order), up to 350 ms
// after its own Multi's on the survivor of the crash at 300 groups. Without the preparation the rescan
// read the epochs, wrote each, then read the record and checked the holder: 2.2 / 4.2 (3.1 / 5.1
// when the deletion also waited for the children's read).
func TestIntegration_SeveralBridgesPreparedFailoverRoundTrips(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	peer := startFakePeer(t)
	names := preloadSetup(t, connect, zk, failoverGroups, peer)
	bestOfThree(t, "expiry → taken / → answered", func(attempt int) (bool, string) {
		taken, answered := preparedTakeover(t, connect, zk, names, peer, attempt)
		return taken <= 1.9 && answered <= 2.9, fmt.Sprintf("%.1f/%.1f", taken, answered)
	}, "at most 1.9 / 2.9")
}

// preparedTakeover is one attempt of the test above; it puts 9001 back (registration, epochs,
// listener) for the next.
func preparedTakeover(t *testing.T, connect string, zk *zkstate.Store, names []string, peer *fakePeer, attempt int) (taken, answered float64) {
	t.Helper()
	proxy, b := preloadSurvivor(t, connect, peer)
	defer b.stop()
	quiet(t, b)
	rtt := takeoverRTT
	proxy.SetDelay(rtt)
	killAndAwaitPrepared(t, peer, b, len(names))
	before := zkRequestsOf(t, b)
	if err := zk.DeleteEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001)); err != nil {
		t.Fatal(err)
	}
	expired := time.Now()
	for deadline := expired.Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		holders, _ := epochsOf(t, zk, names)
		n := 0
		for _, h := range holders {
			if h == 9002 {
				n++
			}
		}
		if n == len(names) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("9002 holds %d of %d groups 20 s after 9001's registration went", n, len(names))
		}
	}
	took := time.Since(expired)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Duration
	for _, name := range names {
		wg.Go(func() {
			h := do[group.HeartbeatReply](t, b, name, func(tok group.Token) group.Event {
				return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i1", Generation: 1}
			})
			if h.Err != group.ErrNone {
				t.Errorf("heartbeat of %s on 9002 after the takeover: %+v; want the generation restored", name, h)
			}
			mu.Lock()
			last = max(last, time.Since(expired))
			mu.Unlock()
		})
	}
	wg.Wait()
	quiet(t, b)
	by, total := requestsSince(before, zkRequestsOf(t, b))
	taken, answered = float64(took)/float64(rtt), float64(last)/float64(rtt)
	t.Logf("attempt %d, %d groups: expiry → every epoch taken %v (%.1f round trips of %v), → every heartbeat answered %v (%.1f); 9002's ZooKeeper requests %v (%v in all)",
		attempt, len(names), took.Round(time.Millisecond), taken, rtt, last.Round(time.Millisecond), answered, by, total)
	if by[zkstate.ReqMulti] < float64(len(names)) || by[zkstate.ReqSet] > 0 {
		t.Errorf("9002 sent %v after the expiry, want a Multi per group (the prepared takeover) and no Set of an epoch", by)
	}
	if by[zkstate.ReqExists] >= float64(len(names)) {
		t.Errorf("9002 sent %v Exists after the expiry for %d groups, want one check of the dead bridge's registration for all its groups, not one each", by[zkstate.ReqExists], len(names))
	}
	proxy.SetDelay(0)
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	peer.revive()
	held := zkstate.Epoch{NodeID: 9001, AcquiredMs: time.Now().UnixMilli()}.Encode()
	for _, name := range names {
		if _, err := zk.Set(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name), held, -1); err != nil {
			t.Fatal(err)
		}
	}
	reg := zkstate.BridgeRegistration{NodeID: 9001, Kafka: peer.addr, Advertised: peer.addr, StartedMs: time.Now().UnixMilli()}
	if err := zk.CreateEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001), reg.Encode()); err != nil {
		t.Fatal(err)
	}
	return taken, answered
}

// A holder that looks dead but still writes (its listener refuses, its session lives) between
// the preparation and the expiry: it rewrites one group's record (a new generation) and commits
// an offset of another. The prepared Multi of the first fails on the record's version and its
// takeover goes the rescan's way, loading the record as the holder left it; the second is taken
// as prepared, and its offset is the holder's: nothing the holder wrote is undone or missed.
func TestIntegration_SeveralBridgesPreparedHolderWrites(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	peer := startFakePeer(t)
	names := preloadSetup(t, connect, zk, 4, peer)
	_, b := preloadSurvivor(t, connect, peer)
	killAndAwaitPrepared(t, peer, b, len(names))
	_, versions := epochsOf(t, zk, names)
	// The holder's writes, each guarded by its epoch as a bridge's are.
	rewritten, committed := names[0], names[1]
	rp := zkstate.GroupRecordPath(bridge.DefaultRoot, rewritten)
	data, st, err := zk.Get(t.Context(), rp)
	if err != nil {
		t.Fatal(err)
	}
	var rec group.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Generation++
	data, _ = json.Marshal(rec)
	if err := zk.Multi(t.Context(), zkstate.CheckOp(zkstate.EpochPath(bridge.DefaultRoot, rewritten), versions[0]), zkstate.SetOp(rp, data, st.Version)); err != nil {
		t.Fatal(err)
	}
	op := zkstate.OwnOffsetPath(bridge.DefaultRoot, committed, "orders", 0)
	own := zkstate.OwnOffset{Offset: 777, LeaderEpoch: -1, CommittedMs: time.Now().UnixMilli()}.Encode()
	if err := zk.Multi(t.Context(), zkstate.CheckOp(zkstate.EpochPath(bridge.DefaultRoot, committed), versions[1]), zkstate.CreateOp(op, own, zkstate.CreateOptions{Parents: true})); err != nil {
		t.Fatal(err)
	}
	expireAndAwait9002(t, zk, names)
	for _, name := range names {
		want, gen := group.ErrNone, group.Generation(1)
		if name == rewritten {
			want = group.ErrIllegalGeneration // the holder's record, generation 2, was loaded
		}
		h := do[group.HeartbeatReply](t, b, name, func(tok group.Token) group.Event {
			return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i1", Generation: gen}
		})
		if h.Err != want {
			t.Errorf("heartbeat of %s (generation 1) on 9002 after the takeover: %+v, want %v", name, h, want)
		}
	}
	if d := describe(t, b, rewritten); d.Err != group.ErrNone {
		t.Errorf("describe %s: %+v", rewritten, d)
	}
	got, _, err := zk.Get(t.Context(), op)
	if o, perr := zkstate.ParseOwnOffset(got); err != nil || perr != nil || o.Offset != 777 {
		t.Errorf("the holder's offset of %s after the takeover: %s (%v, %v), want 777", committed, got, err, perr)
	}
}

// A holder that looks dead and comes back (its listener takes connections again) while its
// session lives: the survivor drops what it prepared and writes nothing; while the holder looks
// dead and stays registered, nothing is written either. Its registration's deletion later is
// taken the rescan's way.
func TestIntegration_SeveralBridgesPreparedHolderBack(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	peer := startFakePeer(t)
	names := preloadSetup(t, connect, zk, 4, peer)
	_, b := preloadSurvivor(t, connect, peer)
	_, was := epochsOf(t, zk, names)
	killAndAwaitPrepared(t, peer, b, len(names))
	time.Sleep(time.Second)
	unchanged := func(when string) {
		t.Helper()
		holders, now := epochsOf(t, zk, names)
		for i := range names {
			if holders[i] != 9001 || now[i] != was[i] {
				t.Fatalf("%s: epoch of %s held by %d at version %d, want 9001's at %d", when, names[i], holders[i], now[i], was[i])
			}
		}
	}
	unchanged("the holder looking dead and registered")
	peer.revive()
	zktest.Eventually(t, 10*time.Second, "9002 drops what it prepared", func() (bool, string) {
		n := bridge.PreparedTakeovers(b.Bridge, 9001)
		return n == -1, fmt.Sprint(n)
	})
	time.Sleep(500 * time.Millisecond)
	unchanged("the holder back")
	before := zkRequestsOf(t, b)
	if err := zk.DeleteEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001)); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		for {
			r, err := b.Do(ctx, name, func(tok group.Token) group.Event {
				return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i1", Generation: 1}
			})
			h, ok := r.(group.HeartbeatReply)
			if err == nil && ok && h.Err == group.ErrNone {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("heartbeat of %s after 9001's registration went: %+v, %v", name, r, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}
	quiet(t, b)
	// The rescan's takeover writes each epoch in a Multi with the check of our own registration.
	if by, _ := requestsSince(before, zkRequestsOf(t, b)); by[zkstate.ReqMulti] < float64(len(names)) {
		t.Errorf("9002's requests after the expiry: %v, want a write of every epoch (the rescan's takeover, nothing prepared)", by)
	}
}

// The rescan after a change that only removed a bridge reads the epochs of the groups that
// moved to this bridge, not every group's: here 9001's registration goes (its listener still
// takes connections: nothing was prepared) while 30 other groups are held by 9003 and stay
// where they are. 9002 reads the moved groups' epochs and records (the loads), and nothing
// of the others, where it read every epoch (a multiRead of 34).
func TestIntegration_SeveralBridgesRescanReadsMovedOnly(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	peer := startFakePeer(t)
	names := preloadSetup(t, connect, zk, 4, peer)
	held := zkstate.Epoch{NodeID: 9003, AcquiredMs: time.Now().UnixMilli()}.Encode()
	for i, n := 0, 0; n < 30; i++ {
		name := fmt.Sprintf("staying-%d", i)
		if o, _ := placement.Owner(name, []int32{9001, 9002, 9003}); o != 9003 {
			continue
		}
		n++
		if err := zk.Create(t.Context(), zkstate.EpochPath(bridge.DefaultRoot, name), held, zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	_, b := preloadSurvivor(t, connect, peer)
	quiet(t, b)
	before := zkRequestsOf(t, b)
	expireAndAwait9002(t, zk, names)
	quiet(t, b)
	by, total := requestsSince(before, zkRequestsOf(t, b))
	// A read of every epoch (34, at least minMultiReadBatch) goes as a multiRead request; the
	// moved groups' four as Gets.
	if by[zkstate.ReqMultiRead] > 0 || by[zkstate.ReqGet] > float64(2*len(names)+1) {
		t.Errorf("9002's requests after 9001's registration went: %v (%v in all); want no multiRead and at most %d Gets: the moved groups' epochs and records", by, total, 2*len(names)+1)
	}
}

// killAndAwaitPrepared kills peer (9001) and waits until survivor b prepared the takeover of its
// n groups.
func killAndAwaitPrepared(t *testing.T, peer *fakePeer, b *running, n int) {
	t.Helper()
	peer.kill()
	zktest.Eventually(t, 20*time.Second, "9002 prepared the takeover of 9001's groups", func() (bool, string) {
		got := bridge.PreparedTakeovers(b.Bridge, 9001)
		return got == n, fmt.Sprint(got)
	})
}

// movingTo9002 is n group names (prefix-<i>) that map to 9001 among 9001-9003 and to 9002 once
// 9001 is gone.
func movingTo9002(prefix string, n int) []string {
	ids := []int32{9001, 9002, 9003}
	var names []string
	for i := 0; len(names) < n; i++ {
		c := fmt.Sprintf("%s-%d", prefix, i)
		all, _ := placement.Owner(c, ids)
		after, _ := placement.Owner(c, ids[1:])
		if all == 9001 && after == 9002 {
			names = append(names, c)
		}
	}
	return names
}
