package bridge_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkRollingRestart: 3 bridges, G groups of one static member each, every member
// committing in a loop to whichever bridge accepts (as a client follows NOT_COORDINATOR to
// FindCoordinator); each bridge in turn is shut down (drain: its groups handed over) and
// started again (the groups that map to it handed back). Reported: per group, the longest gap
// between two successful commits, median and p99, and the groups whose member was refused as
// stale (a rebalance: ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID), which must be 0.
//
// With ZKBRIDGE_ROLL_LOG=<file>, the bridges log (JSON, millisecond times) into that file and
// every request of each group's longest stall over 900 ms is written to <file>.trace (when,
// which bridge, how long it took, what it answered): how the stall found in the 2026-12-03
// measurements was traced to its cause.
func BenchmarkRollingRestart(b *testing.B) {
	const groups = 60
	connect := zktest.Connect(b)
	ids := []int32{9001, 9002, 9003}
	var mu sync.Mutex
	bridges := map[int32]*running{}
	logOf := func(id int32) zerolog.Logger {
		if f := os.Getenv("ZKBRIDGE_ROLL_LOG"); f != "" {
			w, err := os.OpenFile(f, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { w.Close() })
			zerolog.TimeFieldFormat = "15:04:05.000"
			return zerolog.New(w).With().Timestamp().Int32("test_node", id).Logger()
		}
		return newLogger(b)
	}
	for _, id := range ids {
		bridges[id] = runBridge(b, testBridgeConfig(connect, id, logOf(id)))
	}
	time.Sleep(500 * time.Millisecond) // every bridge sees the others
	get := func(id int32) *running {
		mu.Lock()
		defer mu.Unlock()
		return bridges[id]
	}
	doOn := func(id int32, name string, ev func(group.Token) group.Event) group.Reply {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := get(id).Do(ctx, name, ev)
		if err != nil {
			return nil
		}
		return r
	}
	names := make([]string, groups)
	for i := range names {
		names[i] = fmt.Sprintf("roll-%d", i)
		owner, _ := placement.Owner(names[i], ids)
		// A session far longer than the setup (60 joins one after another take over 30 s, the
		// helpers' session, on a loaded machine): an expiry before the first commit would be
		// counted as a rebalance of the restart.
		join := joinEvent("", "i-a", "10.0.0.1", "orders")
		j := doOn(owner, names[i], func(tok group.Token) group.Event {
			ev := join(tok).(group.JoinGroup)
			ev.SessionTimeout = 5 * time.Minute
			return ev
		}).(group.JoinReply)
		if j.Err != group.ErrNone {
			b.Fatalf("join %s: %v", names[i], j.Err)
		}
		s := doOn(owner, names[i], func(tok group.Token) group.Event {
			return group.SyncGroup{Token: tok, MemberID: j.MemberID, InstanceID: "i-a", Generation: j.Generation,
				Assignments: map[group.MemberID][]byte{j.MemberID: assignment("orders", 0)}}
		}).(group.SyncReply)
		if s.Err != group.ErrNone {
			b.Fatalf("sync %s: %v", names[i], s.Err)
		}
		names[i] = names[i] + "\x00" + string(j.MemberID)
	}
	b.ResetTimer()
	for range b.N {
		ctx, stop := context.WithCancel(context.Background())
		stalls := make([]time.Duration, groups)
		stale := make([]bool, groups)
		type attempt struct {
			at     time.Time
			took   time.Duration
			bridge int32
			code   group.ErrorCode
		}
		traces := make([][]attempt, groups)
		worst := make([][]attempt, groups)
		t0 := time.Now()
		var wg sync.WaitGroup
		for i, nm := range names {
			name, member, _ := strings.Cut(nm, "\x00")
			wg.Go(func() {
				at := ids[0]
				last := time.Now()
				for off := int64(1); ctx.Err() == nil; {
					began := time.Now()
					r := doOn(at, name, func(tok group.Token) group.Event {
						return group.OffsetCommit{Token: tok, MemberID: group.MemberID(member), InstanceID: "i-a", Generation: 1,
							Offsets: []group.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: off, LeaderEpoch: -1}}}
					})
					code := group.ErrNotCoordinator
					if oc, ok := r.(group.OffsetCommitReply); ok && len(oc.Partitions) == 1 {
						code = oc.Partitions[0].Err
					}
					traces[i] = append(traces[i], attempt{began, time.Since(began), at, code})
					switch code {
					case group.ErrNone:
						now := time.Now()
						if now.Sub(last) > stalls[i] {
							worst[i] = traces[i]
						}
						traces[i] = nil
						stalls[i] = max(stalls[i], now.Sub(last))
						last = now
						off++
						time.Sleep(20 * time.Millisecond)
					case group.ErrIllegalGeneration, group.ErrUnknownMemberID:
						stale[i] = true
						if os.Getenv("ZKBRIDGE_ROLL_LOG") != "" {
							b.Logf("group %s refused its member: %v at %s", name, code, time.Now().Format("15:04:05.000"))
						}
						return
					default:
						at = ids[(slices.Index(ids, at)+1)%len(ids)] // find the coordinator again
						time.Sleep(5 * time.Millisecond)
					}
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		for _, id := range ids {
			if err := get(id).stop(); err != nil {
				b.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			r := runBridge(b, testBridgeConfig(connect, id, logOf(id)))
			mu.Lock()
			bridges[id] = r
			mu.Unlock()
			time.Sleep(700 * time.Millisecond)
		}
		stop()
		wg.Wait()
		if f := os.Getenv("ZKBRIDGE_ROLL_LOG"); f != "" {
			tf, err := os.Create(f + ".trace")
			if err != nil {
				b.Fatal(err)
			}
			for i, tr := range worst {
				if stalls[i] < 900*time.Millisecond {
					continue
				}
				name, _, _ := strings.Cut(names[i], "\x00")
				fmt.Fprintf(tf, "group %s stall %v:\n", name, stalls[i])
				for _, a := range tr {
					fmt.Fprintf(tf, "  %s +%v bridge %d took %v -> %v\n", a.at.Format("15:04:05.000"), a.at.Sub(t0).Round(time.Millisecond), a.bridge, a.took.Round(time.Millisecond), a.code)
				}
			}
			tf.Close()
		}
		slices.Sort(stalls)
		n := 0
		for _, s := range stale {
			if s {
				n++
			}
		}
		b.ReportMetric(float64(stalls[len(stalls)/2].Milliseconds()), "stall-p50-ms")
		b.ReportMetric(float64(stalls[len(stalls)*99/100].Milliseconds()), "stall-p99-ms")
		b.ReportMetric(float64(stalls[len(stalls)-1].Milliseconds()), "stall-max-ms")
		b.ReportMetric(float64(n), "rebalanced-groups")
	}
}
