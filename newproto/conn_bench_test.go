//go:build unix

package newproto_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// BenchmarkConnRoundTrip: one small request (ApiVersions v3, 60 bytes) at a time on one
// connection, answered by the server itself: the per-request cost of reading a frame, handling
// it and writing the response, both ends in this process over loopback TCP.
func BenchmarkConnRoundTrip(b *testing.B) {
	ts := startServer(b, newproto.Config{})
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "bench", "1.0.0"
	frame := (&kmsg.RequestFormatter{}).AppendRequest(nil, req, 1)
	br := bufio.NewReader(nc)
	var size [4]byte
	resp := make([]byte, 4096)
	roundTrip := func() {
		if _, err := nc.Write(frame); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, size[:]); err != nil {
			b.Fatal(err)
		}
		n := binary.BigEndian.Uint32(size[:])
		if _, err := io.ReadFull(br, resp[:n]); err != nil {
			b.Fatal(err)
		}
	}
	roundTrip()
	before := cpuTime(b)
	for b.Loop() {
		roundTrip()
	}
	b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's CPU time so far (user and system): both ends of the benchmark's
// connection, where wall time on a loaded machine says little.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
