package bridge_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkRollingRestartDataPath (issue 15's rolling-restart and fourth-bridge figures, with the
// data path): 3 bridges in this process relaying to a kfake cluster of 3 brokers (6 partitions),
// G groups of 3 static kgo members (session 45 s, every bridge as a seed, auto-commit every
// 200 ms) consuming what a producer keeps sending. Two phases on the same clients:
//
//  1. roll: each bridge in turn is shut down (drain: its groups and brokers handed over), started
//     again 300 ms later on the same Kafka and proxy addresses, and the next one is restarted once every
//     group is held by its placement owner again;
//  2. join: a 4th bridge starts; the phase ends once every group is held by its owner among 4.
//
// Before the phases, the same measures over 10 s in which nothing moves (base-…: the floor the
// commit interval, the fetches and the machine's load give). Per phase: per group, the longest time one of its members went without a successful commit
// (stall-p50-ms, stall-p99-ms, stall-max-ms; the commit interval, 200 ms, is the floor; in the
// join phase over the groups that moved only, join-stayed-… over the others), the groups whose generation changed
// (rebalanced-groups, target 0), the share of groups whose epoch moved to another bridge
// (join-moved-%, target ≤ 30); the same stalls for polls that returned records (…-fetch-…: a
// member commits only what it consumed, so a data-path stall is a commit stall too); per partition,
// the longest time without a record of the producer acknowledged (…-produce-…: while the
// producer is stalled the members have nothing to fetch, and kgo skips a commit with nothing
// new, so a producer stall shows in both stalls above); and over the whole run: partitions assigned to a member while
// another member of its group held them (double-owned, member views), samples where one
// group's owner znodes belonged to two ZooKeeper sessions at once (double-owned-znodes),
// committed 0.8 offsets seen going backwards (offsets-regressed). All targets 0.
//
// G is ZKBRIDGE_BENCH_GROUPS (default 30):
//
//	ZKBRIDGE_BENCH_GROUPS=30 go test -run '^$' -bench RollingRestartDataPath -benchtime 1x -timeout 30m ./bridge/
//
// ZKBRIDGE_BENCH_METADATA_MIN_AGE=250ms sets the members' kgo MetadataMinAge (default 5 s), and
// ZKBRIDGE_BENCH_KGO_LOG=1 logs the first member's client and every group's stalls, and
// ZKBRIDGE_BENCH_KGO_TRACE=1 the requests every member's client retried during the roll, by
// request and error, and the worst members' logs during their stalls (kgo_trace_bench_test.go).
func BenchmarkRollingRestartDataPath(b *testing.B) {
	groups := benchGroups()
	const parts = 6
	for range b.N {
		b.StopTimer()
		connect, zk := startDfBenchCluster(b, parts)

		start := func(id int32, listen string, proxies map[int32]string) *running {
			cfg := testBridgeConfig(connect, id, newLogger(b).Level(zerolog.WarnLevel).With().Int32("test_node", id).Logger())
			cfg.UpstreamFromZK, cfg.ProxyListen, cfg.MetadataMaxAge = true, "127.0.0.1:0", time.Second
			if listen != "" {
				// A restarted bridge keeps its addresses, as a deployment's does (a fixed
				// --proxy-listen base port): its Kafka listener's and its proxy listeners'.
				cfg.KafkaListen, cfg.ProxyMap = listen, proxies
			}
			return runBridge(b, cfg)
		}
		ids := []int32{9001, 9002, 9003}
		bridges := map[int32]*running{}
		var seeds []string
		for _, id := range ids {
			bridges[id] = start(id, "", nil)
			seeds = append(seeds, bridges[id].Addr().String())
		}
		time.Sleep(time.Second) // registrations and proxy maps seen everywhere

		f := newFailoverRunEvery(b, zk, seeds, groups, parts, 200*time.Millisecond)
		f.waitAssigned(b, 60*time.Second+time.Duration(groups)*200*time.Millisecond)
		ctx, stopSampling := context.WithCancel(context.Background())
		var twoSessions atomic.Int64
		var sampling sync.WaitGroup
		sampling.Go(func() { sampleOwnerSessions(ctx, zk, f.names, &twoSessions) })
		time.Sleep(2 * time.Second) // commits flowing

		placed := func(live []int32, limit time.Duration) {
			zktest.Eventually(b, limit, "every group held by its owner", func() (bool, string) {
				h := f.holders(b)
				off := 0
				for _, g := range f.names {
					if o, _ := placement.Owner(g, live); h[g] != o {
						off++
					}
				}
				return off == 0, fmt.Sprintf("%d of %d groups not held by their owner among %v", off, len(f.names), live)
			})
		}
		placed(ids, time.Minute)

		// The floor: the same gaps over 10 s in which nothing moves.
		f.startGaps()
		time.Sleep(10 * time.Second)
		reportStalls(b, "base-", f.stalls(), f.names)
		reportStalls(b, "base-fetch-", f.fetchStalls(), f.names)
		partitions := slices.Sorted(maps.Keys(f.produceStalls()))
		reportStalls(b, "base-produce-", f.produceStalls(), partitions)

		// Phase 1: the rolling restart.
		b.StartTimer()
		gens := f.generations(b)
		rollStart := time.Now()
		f.startGaps()
		for _, id := range ids {
			b.Logf("roll: stopping %d at %s", id, time.Now().Format("15:04:05.000"))
			addr, proxies := bridges[id].Addr().String(), map[int32]string{}
			for k, a := range bridges[id].ProxyAddrs() {
				proxies[k] = a.String()
			}
			if err := bridges[id].stop(); err != nil {
				b.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			bridges[id] = start(id, addr, proxies)
			placed(ids, 2*time.Minute)
			b.Logf("roll: %d stopped, started again, every group back with its owner at %s", id, time.Now().Format("15:04:05.000"))
			time.Sleep(time.Second)
		}
		time.Sleep(5 * time.Second) // a member that would rejoin does so by now
		roll, rollFetch, rollProduce := f.stalls(), f.fetchStalls(), f.produceStalls()
		if kgoTraceOn() {
			kgoTraceReport(rollStart, time.Now(), f.gaps, f.produced)
		}
		b.StopTimer()
		reportStalls(b, "roll-", roll, f.names)
		reportStalls(b, "roll-fetch-", rollFetch, f.names)
		reportStalls(b, "roll-produce-", rollProduce, partitions)
		b.ReportMetric(float64(changed(gens, f.generations(b))), "roll-rebalanced-groups")

		// Phase 2: a 4th bridge joins.
		before := f.holders(b)
		gens = f.generations(b)
		f.startGaps()
		b.StartTimer()
		b.Logf("join: starting 9004 at %s", time.Now().Format("15:04:05.000"))
		bridges[9004] = start(9004, "", nil)
		placed(append(slices.Clone(ids), 9004), 2*time.Minute)
		time.Sleep(5 * time.Second)
		join, joinFetch := f.stalls(), f.fetchStalls()
		b.StopTimer()
		after := f.holders(b)
		var moved, stayed []string
		for _, g := range f.names {
			if after[g] != before[g] {
				moved = append(moved, g)
			} else {
				stayed = append(stayed, g)
			}
		}
		reportStalls(b, "join-", join, moved)
		reportStalls(b, "join-fetch-", joinFetch, moved)
		reportStalls(b, "join-stayed-", join, stayed)
		if os.Getenv("ZKBRIDGE_BENCH_KGO_LOG") != "" {
			b.Logf("roll stalls: %v; join stalls: %v; moved: %v", roll, join, moved)
		}
		b.ReportMetric(100*float64(len(moved))/float64(len(f.names)), "join-moved-%")
		b.ReportMetric(float64(changed(gens, f.generations(b))), "join-rebalanced-groups")

		stopSampling()
		sampling.Wait()
		f.stop()
		b.ReportMetric(float64(f.double.Load()), "double-owned")
		b.ReportMetric(float64(twoSessions.Load()), "double-owned-znodes")
		b.ReportMetric(float64(f.regressed.Load()), "offsets-regressed")
	}
}

// reportStalls reports p50, p99 and the max of the stalls of groups, with prefix.
func reportStalls(b *testing.B, prefix string, stalls map[string]time.Duration, groups []string) {
	var ds []time.Duration
	for _, g := range groups {
		ds = append(ds, stalls[g])
	}
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Milliseconds()), prefix+"stall-p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100].Milliseconds()), prefix+"stall-p99-ms")
	b.ReportMetric(float64(ds[len(ds)-1].Milliseconds()), prefix+"stall-max-ms")
}

// changed counts the groups whose generation differs between before and after.
func changed(before, after map[string]int64) int {
	n := 0
	for g, gen := range before {
		if after[g] != gen {
			n++
		}
	}
	return n
}

// sampleOwnerSessions reads, every 250 ms until ctx ends, the 0.8 owner znodes of every group
// and counts the samples in which one group's owner znodes belonged to two ZooKeeper sessions
// (two bridges claiming partitions of one group at once).
func sampleOwnerSessions(ctx context.Context, zk *zkstate.Store, groups []string, two *atomic.Int64) {
	for ctx.Err() == nil {
		for _, g := range groups {
			owners := zkstate.GroupPath(g) + "/owners/" + dfTopic
			kids, _, err := zk.Children(ctx, owners)
			if err != nil {
				continue
			}
			paths := make([]string, len(kids))
			for i, k := range kids {
				paths[i] = owners + "/" + k
			}
			reads, err := zk.GetMany(ctx, paths)
			if err != nil {
				continue
			}
			sessions := map[int64]bool{}
			for _, r := range reads {
				if r.Err == nil {
					sessions[r.Stat.EphemeralOwner] = true
				}
			}
			if len(sessions) > 1 {
				two.Add(1)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
