package newproto_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// Issue 17 §6: one warn line per bad connection let a scanner flood the log. 50 connections
// sending an unknown api key give at most 10 warn lines in 10 s, and the metric counts all 50.
func TestConnectionWarningsSampled(t *testing.T) {
	var buf syncBuffer
	reg := prometheus.NewRegistry()
	srv, err := newproto.New(newproto.Config{Logger: zerolog.New(&buf), Registerer: reg, Handler: newproto.HandlerFunc(heartbeatOK)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	bad := []byte{0x0f, 0xff, 0, 0, 0, 0, 0, 1, 0, 0}
	frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(bad))), bad...)
	for range 50 {
		c := kafkatest.Dial(t, ln.Addr().String())
		c.Write(frame)
		c.ExpectClosed()
	}
	if got := kafkatest.CounterValue(t, reg, "zkbridge_kafka_frames_rejected_total", map[string]string{"reason": "api_key"}); got != 50 {
		t.Errorf("frames_rejected_total = %v, want 50", got)
	}
	if n := strings.Count(buf.String(), `"level":"warn"`); n == 0 || n > 10 {
		t.Errorf("%d warn lines for 50 bad connections, want 1..10", n)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
