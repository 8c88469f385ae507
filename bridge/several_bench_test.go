package bridge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkSeveralBridgesSingleGroup: "being several costs nothing on the single-group path"
// (issue 15, "Measure"). The same measures as BenchmarkJoinToStable (delay 0, 10 and 100
// members) and BenchmarkHeartbeat (10 members), against one bridge and against the owner of
// the group among 3 bridges on one ZooKeeper root, the other two live and registered. The
// group names are the same in both cases and all map to the first bridge among the three;
// the clients are seeded with that bridge (they learn the others from Metadata and may send
// Metadata to them). One heartbeat op is a burst of hbBurst heartbeats, so that one
// -benchtime Nx runs both kinds.
//
// On a shared machine the wall times move with the load; the counts do not: zk-reqs/stable
// (the owner's ZooKeeper requests per stable group), zk-reqs-all/stable (every bridge's),
// the clients' requests (metadata-reqs, findcoord-reqs, join-reqs) and, less so, CPU per
// stable group (cpu-s/stable, the whole process: clients and every bridge). Alternate the
// two cases, one process each (see docs/benchmarks.md for the loop):
//
//	go test -c -o /tmp/bridge.test ./bridge/ && cd bridge
//	/tmp/bridge.test -test.run '^$' -test.bench 'SeveralBridgesSingleGroup/bridges=1$' -test.benchtime 10x
//	/tmp/bridge.test -test.run '^$' -test.bench 'SeveralBridgesSingleGroup/bridges=3$' -test.benchtime 10x
func BenchmarkSeveralBridgesSingleGroup(b *testing.B) {
	const hbBurst = 20000
	ids := []int32{clientsNode, clientsNode + 1, clientsNode + 2}
	owned := func(base string) string { return ownedBy(base, ids[0], ids) }
	for _, nb := range []int{1, 3} {
		b.Run(fmt.Sprintf("bridges=%d", nb), func(b *testing.B) {
			for _, n := range []int{10, 100} {
				b.Run(fmt.Sprintf("join/members=%d", n), func(b *testing.B) {
					gcfg := group.DefaultConfig()
					gcfg.InitialRebalanceDelay = 0
					t := severalTarget(b, ids[:nb], "join", int32(n), gcfg)
					measureJoins(b, t, n, "join", func(i int) string { return owned(fmt.Sprintf("join-%d-%d", n, i)) })
				})
			}
			b.Run("heartbeat/members=10", func(b *testing.B) {
				t := severalTarget(b, ids[:nb], "hb", 10, testGroupConfig())
				measureHeartbeats(b, t, owned("heartbeats"), "hb", 10, hbBurst)
			})
		})
	}
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

// severalTarget starts one bridge per node of nodes on one ZooKeeper root (each as
// startBridgeTB's: warnings only, 10 s session) with a topic of partitions partitions written
// with a topic id, waits until every bridge's Metadata lists them all, and returns the first
// as the target with the others as its peers.
func severalTarget(b *testing.B, nodes []int32, topic string, partitions int32, gcfg group.Config) coordinatorTarget {
	b.Helper()
	connect := zktest.Connect(b)
	loadTopicsWithIDs(b, zktest.OpenStore(b, connect), map[string]int32{topic: partitions})
	var brs []*running
	for _, id := range nodes {
		brs = append(brs, startBridgeTB(b, connect, func(c *bridge.Config) {
			c.NodeID, c.Group = id, gcfg
		}))
	}
	for _, br := range brs {
		w := dialWire(b, br.Addr().String())
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
	return coordinatorTarget{name: "zkbridge", addr: brs[0].Addr().String(), bridge: brs[0], peers: brs[1:]}
}
