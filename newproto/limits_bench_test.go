package newproto_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/newproto"
)

// BenchmarkStalledFrames measures the resident memory of a server while 10 clients each send
// 60 MiB of a 100 MiB frame and stall (issue 17 §3: 823 MB before the frame budget), and after
// they close. It reports the peak RSS over the baseline (stalled_MB), the RSS over the baseline
// two seconds after they closed (after_MB), and how many frames were refused (refused).
//
//	go test -run '^$' -bench StalledFrames -benchtime 1x ./newproto
//	ZKBRIDGE_BENCH_QUEUED=-1 ...  (no budget, as before)
func BenchmarkStalledFrames(b *testing.B) {
	queued := newproto.DefaultMaxQueuedBytes
	if v, err := strconv.ParseInt(os.Getenv("ZKBRIDGE_BENCH_QUEUED"), 10, 64); err == nil {
		queued = v
	}
	for range b.N {
		srv, err := newproto.New(newproto.Config{Handler: newproto.HandlerFunc(heartbeatOK), MaxQueuedBytes: queued})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = srv.Serve(context.Background(), ln) }()
		runtime.GC()
		debug.FreeOSMemory()
		base := rssMB(b)
		chunk := make([]byte, 1<<20)
		var conns []net.Conn
		refused := 0
		for range 10 {
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, nc)
			_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := nc.Write(binary.BigEndian.AppendUint32(nil, 100<<20)); err != nil {
				refused++
				continue
			}
			for range 60 {
				if _, err := nc.Write(chunk); err != nil {
					refused++
					break
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
		stalled := rssMB(b) - base
		for _, nc := range conns {
			nc.Close()
		}
		time.Sleep(2 * time.Second)
		after := rssMB(b) - base
		_ = srv.Close()
		b.ReportMetric(stalled, "stalled_MB")
		b.ReportMetric(after, "after_MB")
		b.ReportMetric(float64(refused), "refused")
		b.ReportMetric(float64(queued>>20), "cap_MiB")
	}
}

// rssMB is the process's resident set size (VmRSS) in MB.
func rssMB(b *testing.B) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1000
		}
	}
	b.Skip("no VmRSS")
	return 0
}
