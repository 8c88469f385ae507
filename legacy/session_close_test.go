package legacy

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// slowWriteConn is the coordinator's end of a connection whose Write returns only once the
// session has closed: the caller of a request is still on its way to waiting for the answer
// when the answer and the consumer's hang-up have both been read, as a loaded machine may
// schedule it.
type slowWriteConn struct {
	net.Conn
	sess *Session
}

func (c *slowWriteConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		select {
		case <-c.sess.Done():
		case <-time.After(waitLong):
		}
	}
	return n, err
}

// A consumer that answers a PingRequest and hangs up at once (a legacy consumer shutting down
// right after a ping reported its last offsets: the protocol has no leave) has still answered:
// the coordinator must get the PingResponse, whose offsets are the consumer's last, rather than
// ErrSessionClosed because the hang-up was read before the caller looked at the answer. Before
// the fix the caller's select picked between the two at random (TestIntegration_
// MigrateCyclesKeepOffsets saw the offsets of a leaving member's last ping lost under load).
func TestSessionAnswerBeforeHangUpIsKept(t *testing.T) {
	for i := range 40 {
		coordEnd, consumerEnd := net.Pipe()
		conn := &slowWriteConn{Conn: coordEnd}
		s := newSession(conn, *validRegister("c1", time.Second, 3), zerolog.Nop(), 0)
		conn.sess = s
		go s.readLoop()
		go func() {
			defer consumerEnd.Close()
			if _, err := ReadFrame(consumerEnd, 0); err != nil {
				return
			}
			_, _ = consumerEnd.Write(AppendFrame(nil, &PingResponse{HasOffsets: true, Offsets: []PartitionOffset{{Topic: "t", Partition: 0, Offset: 42}}}))
		}()
		resp, err := s.Ping(context.Background(), 0)
		if err != nil {
			t.Fatalf("round %d: Ping answered before the hang-up: %v, want the PingResponse", i, err)
		}
		if len(resp.Offsets) != 1 || resp.Offsets[0].Offset != 42 {
			t.Fatalf("round %d: PingResponse %+v, want offset 42", i, resp)
		}
		waitDone(t, s, "consumer hung up")
	}
}

// stallingConn is the coordinator's end of a connection whose next Write starts late, after
// stall: the writing goroutine was descheduled between setting the deadline and writing, as
// happens on a loaded machine.
type stallingConn struct {
	net.Conn
	stall time.Duration
}

func (c *stallingConn) Write(b []byte) (int, error) {
	if c.stall > 0 {
		time.Sleep(c.stall)
		c.stall = 0
	}
	return c.Conn.Write(b)
}

// A write of a request that starts late because the coordinator itself was slow (a loaded
// machine, a GC pause) is not the consumer's fault: a few small frames never fill a socket
// buffer, so the write deadline is not the consumer's ping interval (100 ms in the mixed tests,
// where a loaded run closed the session with "sending PingRequest: write: i/o timeout", and the
// member lost the offsets it had not reported yet), but a floor of seconds. A consumer that
// does not answer is still found dead by its missed pings.
func TestSessionLateWriteKeepsTheSession(t *testing.T) {
	coordEnd, consumerEnd := net.Pipe()
	const interval = 50 * time.Millisecond
	conn := &stallingConn{Conn: coordEnd, stall: 3 * interval}
	s := newSession(conn, *validRegister("c1", interval, 3), zerolog.Nop(), 0)
	go s.readLoop()
	t.Cleanup(func() { s.Close(nil) })
	go func() {
		defer consumerEnd.Close()
		for {
			if _, err := ReadFrame(consumerEnd, 0); err != nil {
				return
			}
			if _, err := consumerEnd.Write(AppendFrame(nil, &PingResponse{HasOffsets: true})); err != nil {
				return
			}
		}
	}()
	// The first ping's write is late: the ping itself may time out (a missed ping), but the
	// session stays.
	if _, err := s.Ping(context.Background(), 0); err != nil && !errors.Is(err, ErrTimeout) {
		t.Fatalf("late ping: %v, want its answer or ErrTimeout", err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the session closed after a late write: %v", err)
	}
	deadline := time.Now().Add(waitLong)
	for {
		_, err := s.Ping(context.Background(), 0)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrTimeout) || time.Now().After(deadline) {
			t.Fatalf("ping after the late one: %v", err)
		}
	}
}

// slowReaderConn is the coordinator's end of a connection whose reader runs late: its first
// Read starts only once the request marked by failNext has failed to be written and that
// caller has returned (or after waitLong at most), as a loaded machine may schedule the reader
// goroutine. failNext makes the next Write fail as a write to a consumer that reset the
// connection does.
type slowReaderConn struct {
	net.Conn
	failNext atomic.Bool
	readable chan struct{} // closed by the test
	once     sync.Once
}

func (c *slowReaderConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		select {
		case <-c.readable:
		case <-time.After(waitLong):
		}
	})
	return c.Conn.Read(b)
}

func (c *slowReaderConn) Write(b []byte) (int, error) {
	if c.failNext.Load() {
		return 0, syscall.ECONNRESET
	}
	return c.Conn.Write(b)
}

// A consumer that leaves after a late PingResponse (its last offsets) hangs up with the retry
// ping unread, so the coordinator's next write fails with a reset while that answer is still
// in its socket buffer. The failed write must not close the connection under the reader: the
// late answer is read and handed to LateError.Wait first. Before the fix the write's failure
// closed the connection at once and the answer was lost (CI, TestIntegration_
// LegacyLateLastPingIsCommitted: "t-0 at 299", want 300).
func TestSessionFailedWriteKeepsAnswersAlreadySent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	consumerEnd, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer consumerEnd.Close()
	coordEnd, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	const interval = 50 * time.Millisecond
	conn := &slowReaderConn{Conn: coordEnd, readable: make(chan struct{})}
	s := newSession(conn, *validRegister("c1", interval, 3), zerolog.Nop(), 0)
	go s.readLoop()
	t.Cleanup(func() { s.Close(nil) })

	_, err = s.Ping(context.Background(), 0)
	var late *LateError
	if !errors.As(err, &late) {
		t.Fatalf("unanswered ping: %v, want a *LateError", err)
	}
	if _, err := ReadFrame(consumerEnd, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := consumerEnd.Write(AppendFrame(nil, lateOffsets(42))); err != nil {
		t.Fatal(err)
	}
	_ = consumerEnd.Close()

	conn.failNext.Store(true)
	if _, err := s.Ping(context.Background(), 1); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("ping to a consumer that reset the connection: %v, want ErrSessionClosed", err)
	}
	close(conn.readable)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	m, err := late.Wait(ctx)
	if p, ok := m.(*PingResponse); err != nil || !ok || len(p.Offsets) != 1 || p.Offsets[0].Offset != 42 {
		t.Fatalf("late answer: %v, %v; want the PingResponse at offset 42", m, err)
	}
	waitDone(t, s, "consumer reset the connection")
	if err := s.Err(); !strings.Contains(err.Error(), "sending PingRequest") {
		t.Errorf("session closed with %v, want the failed write as its cause", err)
	}
}

func lateOffsets(offset int64) *PingResponse {
	return &PingResponse{HasOffsets: true, Offsets: []PartitionOffset{{Topic: "t", Partition: 0, Offset: offset}}}
}
