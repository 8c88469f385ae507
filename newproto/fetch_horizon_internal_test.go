package newproto

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// unenforced is a connection whose write deadline is not enforced yet: as
// right after a SIGCONT, when the runtime's deadline timer has not fired
// and a write goes through although its deadline has passed.
type unenforced struct{ net.Conn }

func (unenforced) SetWriteDeadline(time.Time) error { return nil }

// A relayed Fetch response streamed in pieces, whose process is paused
// between two of them past the fetch gate's horizon, writes nothing more
// (a mixed group's 0.8 member may own the partitions by then). Before,
// only the first piece was checked against the horizon, and the rest
// relied on the write deadline: TestIntegration_MixedBridgeKilled/paused
// once saw a Kafka member get records 3 ms after the bridge resumed, while
// the 0.8 member that took the partitions consumed them.
func TestWriteStreamStopsAtTheHorizon(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	c := &conn{s: &Server{}, nc: unenforced{server}}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(client)
		got <- b
	}()
	until := time.Now().Add(20 * time.Millisecond)
	err := c.writeStream(func(w io.Writer) error {
		if _, err := w.Write([]byte("head")); err != nil {
			return err
		}
		time.Sleep(40 * time.Millisecond) // paused past the horizon
		_, err := w.Write([]byte("records"))
		return err
	}, until)
	server.Close()
	if !errors.Is(err, errFetchLapsed) {
		t.Errorf("writeStream past the horizon: %v, want errFetchLapsed", err)
	}
	if b := <-got; string(b) != "head" {
		t.Errorf("the client got %q, want only what was written before the horizon (%q)", b, "head")
	}
}
