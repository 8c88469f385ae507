package migrate_test

// BenchmarkApplyAll is issue 6's measure: `migrate apply --all` over 1,000 groups, in groups
// per second and ZooKeeper requests per group.
//
//	go test -run '^$' -bench ApplyAll -benchtime 3x ./migrate/
//
// Every iteration migrates 1,000 fresh groups (seeded, with the timer stopped, under a chroot of
// their own) from legacy to mixed, each with one 0.8 consumer registered and an offset, as a
// ZooKeeper-era group looks before its migration. Variants:
//
//	recorded     the groups have a mode record (a bridge served them, or they were planned)
//	unrecorded   no mode record yet: the census applies the default-mode rule first, and the
//	             step creates the record
//	to-kafka     two steps (legacy → mixed → kafka), no member left
//	parallel-N   N groups in flight (default 8)
//
// Metrics: groups/s; zk-requests/group, the requests the ZooKeeper server received meanwhile
// (its `srvr` "Received" count: every client of the server, so run it alone; pings included).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

const benchGroups = 1000

func BenchmarkApplyAll(b *testing.B) {
	for _, v := range []struct {
		name     string
		recorded bool
		members  bool
		target   zkstate.Mode
		parallel int
	}{
		{"recorded", true, true, zkstate.ModeMixed, 8},
		{"unrecorded", false, true, zkstate.ModeMixed, 8},
		{"to-kafka", true, false, zkstate.ModeKafka, 8},
		{"recorded/parallel-1", true, true, zkstate.ModeMixed, 1},
		{"recorded/parallel-32", true, true, zkstate.ModeMixed, 32},
	} {
		b.Run(v.name, func(b *testing.B) {
			var elapsed time.Duration
			requests, groups := 0, 0
			for range b.N {
				b.StopTimer()
				s := zktest.OpenStore(b, zktest.Connect(b))
				seedBench(b, s, v.recorded, v.members)
				ctx := context.Background()
				names, err := migrate.Select(ctx, s, root, migrate.Selector{All: true})
				if err != nil || len(names) != benchGroups {
					b.Fatalf("select: %d groups, %v", len(names), err)
				}
				opts := migrate.ApplyOptions{Request: migrate.Request{Target: v.target}, Who: "bench", Parallel: v.parallel}
				before := zkReceived(b)
				start := time.Now()
				b.StartTimer()
				// What `migrate apply --all` does: list, then apply.
				names, err = migrate.Select(ctx, s, root, migrate.Selector{All: true})
				if err != nil {
					b.Fatal(err)
				}
				res, err := migrate.Apply(ctx, s, root, names, opts)
				b.StopTimer()
				elapsed += time.Since(start)
				requests += zkReceived(b) - before
				groups += len(names)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					if r.Status != migrate.StatusApplied {
						b.Fatalf("%s: %s %s", r.Group, r.Status, r.Reason)
					}
				}
				s.Close()
			}
			b.ReportMetric(float64(groups)/elapsed.Seconds(), "groups/s")
			b.ReportMetric(float64(requests)/float64(groups), "zk-requests/group")
			b.ReportMetric(float64(elapsed.Milliseconds())/float64(b.N), "ms/apply")
		})
	}
}

// seedBench writes benchGroups ZooKeeper-era groups: one 0.8 consumer and one offset each (no
// consumer without members), and a legacy mode record when recorded.
func seedBench(b *testing.B, s *zkstate.Store, recorded, members bool) {
	b.Helper()
	ctx := context.Background()
	p := zkstate.CreateOptions{Parents: true}
	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1700000000000}
	var ops []zkstate.Op
	for i := range benchGroups {
		g := fmt.Sprintf("group-%04d", i)
		if members {
			ops = append(ops, zkstate.CreateOp(zkstate.IDPath(g, g+"_host-1700000000000-1a2b3c4d"), reg.Encode(), p))
		}
		ops = append(ops, zkstate.CreateOp(zkstate.OffsetPath(g, "t", 0), zkstate.FormatOffset(int64(i)), p))
		if recorded {
			rec := zkstate.ModeRecord{Version: 1, Mode: zkstate.ModeLegacy, UpdatedBy: "seed"}
			ops = append(ops, zkstate.CreateOp(zkstate.ModePath(root, g), rec.Encode(), p))
		}
	}
	if err := s.Multi(ctx, ops...); err != nil {
		b.Fatal(err)
	}
}

// zkReceived is the ZooKeeper server's count of requests received (four-letter word srvr).
func zkReceived(tb testing.TB) int {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", zktest.Addr(tb), 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Received: "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	tb.Fatal("srvr: no Received count")
	return 0
}
