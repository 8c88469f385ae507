package legacy

import (
	"context"
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
