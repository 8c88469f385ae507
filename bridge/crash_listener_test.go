//go:build linux

package bridge_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A killed bridge's Kafka listener refuses before its clients' connections end (listenLast,
// bridge/listen_last_linux.go): the other bridges learn of the death from it (a refusal while
// the connection held open to it is open), and the clients, refreshing their metadata as their
// connections end, are then answered without the dead bridge. Linux closes a dead process's
// descriptors highest-numbered first, and the listener, opened at start, was among the lowest:
// it took connections until every client connection had ended. Counted, not timed: at the
// listener's first refusal, whether the first client connection made (the last its kernel
// closes) has its end (a FIN or a reset waiting in our socket, peeked at). Before, it and all
// the 2,000 had.
func TestIntegration_KilledBridgeListenerRefusesBeforeItsClientsConnectionsEnd(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{})
	child := startChildBridge(t, childSpec{ZKConnect: e.connect, NodeID: dfNode + 5, ZKSessionTimeout: 10 * time.Second})

	const clients = 2000
	req := kmsg.NewPtrApiVersionsRequest()
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("held")).AppendRequest(nil, req, 1)
	conns := make([]*net.TCPConn, 0, clients)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range clients {
		c, err := net.Dial("tcp", child.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c.(*net.TCPConn))
		// Answered: the child took the connection (accept gave it its number).
		if _, err := c.Write(frame); err != nil {
			t.Fatal(err)
		}
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(size[:]))); err != nil {
			t.Fatal(err)
		}
	}

	type atRefusal struct {
		firstEnded bool // the first client connection's end had come
		ended      int  // the client connections whose end had come, peeked one after the other
	}
	refused := make(chan atRefusal, 1)
	go func() {
		for {
			c, err := net.DialTimeout("tcp", child.addr, time.Second)
			if errors.Is(err, syscall.ECONNREFUSED) {
				r := atRefusal{firstEnded: peerEnded(conns[0])}
				for _, c := range conns {
					if peerEnded(c) {
						r.ended++
					}
				}
				refused <- r
				return
			}
			if c != nil {
				_ = c.Close()
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	time.Sleep(10 * time.Millisecond)
	child.kill()
	select {
	case r := <-refused:
		t.Logf("at the listener's first refusal, the first client connection ended: %v; %d of %d ended by the time they were peeked at", r.firstEnded, r.ended, clients)
		if r.firstEnded {
			t.Errorf("at the killed bridge's listener's first refusal, its first client connection (the last of them its kernel closes) had ended already (%d of %d by the time they were peeked at): its listener closed after them", r.ended, clients)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the killed bridge's listener never refused")
	}
}

// peerEnded reports whether c's far end closed it (a FIN or a reset waits in its socket),
// reading nothing.
func peerEnded(c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ended := false
	var b [1]byte
	_ = raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ended = err == nil && n == 0 || err != nil && !errors.Is(err, syscall.EAGAIN)
	})
	return ended
}
