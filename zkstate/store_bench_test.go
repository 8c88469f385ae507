//go:build unix

package zkstate_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkStoreRequests: 64 goroutines reading one znode at once through one session, as a
// bridge's groups write and read side by side; cpu-ns/op is this process's CPU per request
// (the server runs in its own), the client's share of a request: encoding, the connection's
// reads and writes, decoding.
func BenchmarkStoreRequests(b *testing.B) {
	s := zktest.OpenStore(b, zktest.Connect(b))
	ctx := context.Background()
	if err := s.Create(ctx, "/bench", []byte(`{"version":1,"offset":1200,"leader_epoch":-1}`), zkstate.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	const workers = 64
	before := cpuTime(b)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < b.N; i += workers {
				if _, _, err := s.Get(ctx, "/bench"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
