package bridge_test

import (
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
	ids := []int32{9001, 9002, 9003}
	var names []string
	for i := 0; len(names) < n; i++ {
		c := fmt.Sprintf("prepared-%d", i)
		all, _ := placement.Owner(c, ids)
		after, _ := placement.Owner(c, ids[1:])
		if all == 9001 && after == 9002 {
			names = append(names, c)
		}
	}
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

// preloadSurvivor starts 9002 behind proxy, waits until it lists the three bridges and holds a
// connection open to 9001's listener, and returns it.
func preloadSurvivor(t *testing.T, connect string, proxy *zktest.Proxy, peer *fakePeer) *running {
	t.Helper()
	i := strings.IndexByte(connect, '/')
	b := startBridge(t, proxy.Addr()+connect[i:], 9002, func(c *bridge.Config) { c.WriteTimeout = 10 * time.Second })
	zktest.Eventually(t, 10*time.Second, "9002 sees 9001 and 9003 and reached 9001's listener", func() (bool, string) {
		got := brokersOf(t, b.Addr().String())
		return len(got) == 3 && peer.taken() > 0, fmt.Sprint(got, peer.taken())
	})
	return b
}

// epochsOf reads the groups' epochs: who holds each, and its version.
func epochsOf(t *testing.T, zk *zkstate.Store, names []string) (holders []int32, versions []int32) {
	t.Helper()
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = zkstate.EpochPath(bridge.DefaultRoot, name)
	}
	reads, err := zk.GetMany(t.Context(), paths)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reads {
		e, _ := zkstate.ParseEpoch(r.Data)
		if r.Err != nil || e.Released {
			e.NodeID = -1
		}
		holders, versions = append(holders, e.NodeID), append(versions, r.Stat.Version)
	}
	return holders, versions
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
	proxy := zktest.StartProxy(t, connect[:strings.IndexByte(connect, '/')])
	b := preloadSurvivor(t, connect, proxy, peer)
	quiet(t, b)
	before := zkRequestsOf(t, b)
	if err := zk.DeleteEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, 9001)); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 20*time.Second, "9002 holds the moved groups", func() (bool, string) {
		holders, _ := epochsOf(t, zk, names)
		for _, h := range holders {
			if h != 9002 {
				return false, fmt.Sprint(holders)
			}
		}
		return true, ""
	})
	quiet(t, b)
	by, total := requestsSince(before, zkRequestsOf(t, b))
	// A read of every epoch (34, at least minMultiReadBatch) goes as a multiRead request; the
	// moved groups' four as Gets.
	if by[zkstate.ReqMultiRead] > 0 || by[zkstate.ReqGet] > float64(2*len(names)+1) {
		t.Errorf("9002's requests after 9001's registration went: %v (%v in all); want no multiRead and at most %d Gets: the moved groups' epochs and records", by, total, 2*len(names)+1)
	}
}
