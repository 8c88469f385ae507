package legacy

import (
	"context"
	"errors"
	"net"
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
