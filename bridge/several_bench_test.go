package bridge_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkSeveralBridgesSingleGroup: "being several costs nothing on the single-group path"
// (issue 15, "Measure"). The same measures as BenchmarkJoinToStable (delay 0, 10 and 100
// members) and BenchmarkHeartbeat (10 members), against one bridge and against the owner of
// the group among 3 bridges on one ZooKeeper root, the other two live and registered (in child
// processes: severalTarget). The group names all map to the first bridge among the three; the
// clients are seeded with that bridge (they learn the others from Metadata and may send
// Metadata and FindCoordinator to them: conns/member). One heartbeat op is a burst of hbBurst
// heartbeats, so that one -benchtime Nx runs both kinds.
//
// The control, kfake-brokers=1 and kfake-brokers=3: the same measures against a kfake cluster
// of 1 and of 3 brokers, the groups named so that the first broker coordinates them and the
// clients seeded with it: what a client's join costs more when its cluster has 3 brokers,
// whatever serves them.
//
// On a shared machine the wall times move with the load; the counts do not: zk-reqs/stable
// (the owner's ZooKeeper requests per stable group), zk-reqs-all/stable (every bridge's),
// the clients' requests (metadata-reqs, findcoord-reqs, join-reqs) and, less so, CPU per
// stable group (cpu-s/stable: this process, the clients and the owner; peers-cpu-s/stable:
// the other bridges). Alternate the cases, one process each (see docs/benchmarks.md for the
// loop):
//
//	go test -c -o /tmp/bridge.test ./bridge/ && cd bridge
//	/tmp/bridge.test -test.run '^$' -test.bench 'SeveralBridgesSingleGroup/bridges=1$' -test.benchtime 20x
//	/tmp/bridge.test -test.run '^$' -test.bench 'SeveralBridgesSingleGroup/bridges=3$' -test.benchtime 20x
func BenchmarkSeveralBridgesSingleGroup(b *testing.B) {
	const hbBurst = 20000
	ids := []int32{clientsNode, clientsNode + 1, clientsNode + 2}
	owned := func(base string) string { return ownedBy(base, ids[0], ids) }
	for _, nb := range []int{1, 3} {
		b.Run(fmt.Sprintf("bridges=%d", nb), func(b *testing.B) {
			singleGroupPath(b, hbBurst, func(topic string, partitions int32, gcfg group.Config) (coordinatorTarget, func(string) string) {
				return severalTarget(b, ids[:nb], topic, partitions, gcfg), owned
			})
		})
	}
	for _, nb := range []int{1, 3} {
		b.Run(fmt.Sprintf("kfake-brokers=%d", nb), func(b *testing.B) {
			singleGroupPath(b, hbBurst, func(topic string, partitions int32, _ group.Config) (coordinatorTarget, func(string) string) {
				c, err := kfake.NewCluster(kfake.NumBrokers(nb), kfake.SeedTopics(partitions, topic))
				if err != nil {
					b.Fatalf("kfake: %v", err)
				}
				b.Cleanup(c.Close)
				first := func(base string) string {
					name := base
					for k := 1; c.CoordinatorFor(name) != 0; k++ {
						name = fmt.Sprintf("%s-%d", base, k)
					}
					return name
				}
				return coordinatorTarget{name: "kfake", addr: c.ListenAddrs()[0]}, first
			})
		})
	}
}

// singleGroupPath runs BenchmarkSeveralBridgesSingleGroup's measures against the targets
// target starts, each with the function that names a group the target coordinates.
func singleGroupPath(b *testing.B, hbBurst int, target func(topic string, partitions int32, gcfg group.Config) (coordinatorTarget, func(string) string)) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("join/members=%d", n), func(b *testing.B) {
			gcfg := group.DefaultConfig()
			gcfg.InitialRebalanceDelay = 0
			t, named := target("join", int32(n), gcfg)
			measureJoins(b, t, n, "join", func(i int) string { return named(fmt.Sprintf("join-%d-%d", n, i)) })
		})
	}
	b.Run("heartbeat/members=10", func(b *testing.B) {
		t, named := target("hb", 10, testGroupConfig())
		measureHeartbeats(b, t, named("heartbeats"), "hb", 10, hbBurst)
	})
}

// ownedBy is base, or base with the smallest suffix "-k", that placement gives to owner among
// nodes.
func ownedBy(base string, owner int32, nodes []int32) string {
	name := base
	for k := 1; ; k++ {
		if o, _ := placement.Owner(name, nodes); o == owner {
			return name
		}
		name = fmt.Sprintf("%s-%d", base, k)
	}
}

// severalTarget starts one bridge per node of nodes on one ZooKeeper root with a topic of
// partitions partitions written with a topic id, waits until every bridge's Metadata lists
// them all, and returns the first as the target with the others as its peers. The first runs
// in this process (as startBridgeTB's: warnings only, 10 s session, group config gcfg); the
// others each in a child process (10 s session, warnings only), so that the process's CPU is
// the clients' and the owner's, as with one bridge, and the peers' is counted apart (and the
// peers cannot take the owner's goroutines' turns in this process's scheduler).
// ZKBRIDGE_BENCH_PEERS_IN_PROCESS=1 runs them in this process instead, as the figures before
// 2026-12-05 evening were measured. ZKBRIDGE_BENCH_OWNER=child runs the first in a child
// process too (the peers' group config is gcfg as well then): this process's CPU is the
// clients' alone, and the owner's is owner-cpu-s/stable (hb/owner-cpu-s).
func severalTarget(b *testing.B, nodes []int32, topic string, partitions int32, gcfg group.Config) coordinatorTarget {
	b.Helper()
	connect := zktest.Connect(b)
	loadTopicsWithIDs(b, zktest.OpenStore(b, connect), map[string]int32{topic: partitions})
	start := func(id int32) *running {
		return startBridgeTB(b, connect, func(c *bridge.Config) { c.NodeID, c.Group = id, gcfg })
	}
	child := func(id int32) *childBridge {
		return startChildBridge(b, childSpec{ZKConnect: connect, NodeID: id, ZKSessionTimeout: 10 * time.Second, Group: &gcfg, LogLevel: "warn"})
	}
	t := coordinatorTarget{name: "zkbridge"}
	if os.Getenv("ZKBRIDGE_BENCH_OWNER") == "child" {
		t.child = child(nodes[0])
		t.addr = t.child.addr
	} else {
		t.bridge = start(nodes[0])
		t.addr = t.bridge.Addr().String()
	}
	addrs := []string{t.addr}
	for _, id := range nodes[1:] {
		if os.Getenv("ZKBRIDGE_BENCH_PEERS_IN_PROCESS") != "" {
			p := start(id)
			t.peers = append(t.peers, p)
			addrs = append(addrs, p.Addr().String())
			continue
		}
		c := child(id)
		t.childPeers = append(t.childPeers, c)
		addrs = append(addrs, c.addr)
	}
	for _, addr := range addrs {
		w := dialWire(b, addr)
		zktest.Eventually(b, 20*time.Second, "every bridge listed", func() (bool, string) {
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(7)
			resp, err := w.roundTrip(req)
			if err != nil {
				b.Fatalf("Metadata: %v", err)
			}
			n := len(resp.(*kmsg.MetadataResponse).Brokers)
			return n == len(nodes), fmt.Sprintf("%d brokers listed, want %d", n, len(nodes))
		})
	}
	return t
}
