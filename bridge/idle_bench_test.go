package bridge_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkIdleGroups: what a Stable group costs a bridge while nothing happens in it (issue 15,
// "Measure"). One bridge in this process; N groups (ZKBRIDGE_IDLE_GROUPS, 10,000 by default) of
// M static members each (1 and 3) are formed, then the process is left idle for 10 s. Reported
// per group: the growth of the resident set and of the Go heap in use, and the goroutines; for
// the whole process: CPU (user + system) per second of idleness. The members never heartbeat
// (their session is 30 min), so the idle CPU is the bridge's own (timers, ZooKeeper pings).
// Each member costs (figure at M=3 - figure at M=1) / 2. ZKBRIDGE_IDLE_DUMP=<file> writes the
// goroutines at the end of the idle time, grouped by stack, to <file>.groups=N.members=M, and
// a heap profile to the same name with ".heap".
func BenchmarkIdleGroups(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("ZKBRIDGE_IDLE_GROUPS")); err == nil && v > 0 {
		n = v
	}
	for _, members := range []int{1, 3} {
		b.Run(fmt.Sprintf("groups=%d/members=%d", n, members), func(b *testing.B) {
			for range b.N {
				idleGroups(b, n, members)
			}
		})
	}
}

func idleGroups(b *testing.B, n, members int) {
	connect := zktest.Connect(b)
	br := runBridge(b, testBridgeConfig(connect, 9001, zerolog.Nop()))
	rss0, heap0, gr0 := processFootprint()
	stack0 := stackInuse()
	do := func(name string, ev func(group.Token) group.Event) group.Reply {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r, err := br.Do(ctx, name, ev)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return r
	}
	form := func(name string) {
		joins := make([]group.JoinReply, members)
		var wg sync.WaitGroup
		for m := range members {
			wg.Go(func() {
				join := joinEvent("", group.InstanceID(fmt.Sprintf("i-%d", m)), "10.0.0.1", "orders")
				joins[m] = do(name, func(tok group.Token) group.Event {
					ev := join(tok).(group.JoinGroup)
					ev.SessionTimeout = 30 * time.Minute
					return ev
				}).(group.JoinReply)
			})
		}
		wg.Wait()
		assign := map[group.MemberID][]byte{}
		for m, j := range joins {
			if j.Err != group.ErrNone {
				b.Fatalf("join %s: %v", name, j.Err)
			}
			assign[j.MemberID] = assignment("orders", int32(m))
		}
		for m, j := range joins {
			wg.Go(func() {
				ev := group.SyncGroup{MemberID: j.MemberID, InstanceID: group.InstanceID(fmt.Sprintf("i-%d", m)), Generation: j.Generation}
				if j.Leader == j.MemberID {
					ev.Assignments = assign
				}
				s := do(name, func(tok group.Token) group.Event { ev.Token = tok; return ev }).(group.SyncReply)
				if s.Err != group.ErrNone {
					b.Errorf("sync %s: %v", name, s.Err)
				}
			})
		}
		wg.Wait()
	}
	start := time.Now()
	names := make(chan string)
	var workers sync.WaitGroup
	for range 64 {
		workers.Go(func() {
			for name := range names {
				form(name)
			}
		})
	}
	for i := range n {
		names <- fmt.Sprintf("idle-%d", i)
	}
	close(names)
	workers.Wait()
	formed := time.Since(start)
	time.Sleep(2 * time.Second) // the mirrors' writes settle
	rss1, heap1, gr1 := processFootprint()
	stack1 := stackInuse()
	cpu0 := processCPU()
	const idle = 10 * time.Second
	time.Sleep(idle)
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(rss1-rss0)/float64(n), "rss-bytes/group")
	b.ReportMetric(float64(heap1-heap0)/float64(n), "heap-bytes/group")
	// The goroutines' stacks, outside the heap: what a goroutine per group costs.
	b.ReportMetric(float64(stack1-stack0)/float64(n), "stack-bytes/group")
	b.ReportMetric(float64(gr1-gr0)/float64(n), "goroutines/group")
	b.ReportMetric(100*cpu.Seconds()/idle.Seconds(), "idle-cpu-%")
	b.ReportMetric(formed.Seconds(), "form-s")
	b.ReportMetric(float64(heap1)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(rss1)/(1<<20), "rss-MiB")
	if f := os.Getenv("ZKBRIDGE_IDLE_DUMP"); f != "" {
		// Which goroutines a group keeps: the goroutines grouped by stack, with their counts.
		w, err := os.Create(fmt.Sprintf("%s.groups=%d.members=%d", f, n, members))
		if err != nil {
			b.Fatal(err)
		}
		_ = pprof.Lookup("goroutine").WriteTo(w, 1)
		w.Close()
		// And what the heap holds (go tool pprof -sample_index=inuse_space).
		h, err := os.Create(fmt.Sprintf("%s.groups=%d.members=%d.heap", f, n, members))
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		_ = pprof.Lookup("heap").WriteTo(h, 0)
		h.Close()
	}
	if err := br.stop(); err != nil {
		b.Fatal(err)
	}
}

// processFootprint is the resident set (VmRSS), the Go heap in use after a GC, and the
// goroutine count.
func processFootprint() (rss, heap uint64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				rss = kb * 1024
			}
		}
	}
	return rss, ms.HeapInuse, runtime.NumGoroutine()
}

// stackInuse is the memory of the goroutines' stacks.
func stackInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.StackInuse
}

// processCPU is the user and system CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
