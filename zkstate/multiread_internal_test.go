package zkstate

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeOldServer accepts one connection, completes the session handshake as ZooKeeper 3.4
// would, then drops the connection at the first request it does not know, as 3.4 does for
// opcode 22.
func fakeOldServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		readFrame := func() []byte {
			var h [4]byte
			if _, err := io.ReadFull(c, h[:]); err != nil {
				return nil
			}
			b := make([]byte, binary.BigEndian.Uint32(h[:]))
			io.ReadFull(c, b)
			return b
		}
		readFrame()
		resp := binary.BigEndian.AppendUint32(nil, 0)
		resp = binary.BigEndian.AppendUint32(resp, 0)    // protocolVersion
		resp = binary.BigEndian.AppendUint32(resp, 6000) // timeOut
		resp = binary.BigEndian.AppendUint64(resp, 0x1234)
		resp = appendBuffer(resp, make([]byte, 16))
		binary.BigEndian.PutUint32(resp, uint32(len(resp)-4))
		c.Write(resp)
		readFrame() // the multiRead: unknown to this server
	}()
	return ln.Addr().String()
}

func TestMultiReadReportsAnOldServerAsUnsupported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := dialMultiReader(ctx, []string{fakeOldServer(t)}, 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.conn.Close()
	_, _, err = m.read(ctx, []readOp{{path: "/a"}})
	if !errors.Is(err, errMultiReadUnsupported) {
		t.Fatalf("read on a server without multiRead = %v, want errMultiReadUnsupported", err)
	}
}

func TestDecodeMultiRead(t *testing.T) {
	var b []byte
	b = appendMultiHeader(b, opGetData, false, 0)
	b = appendBuffer(b, []byte("42"))
	b = append(b, make([]byte, 68)...) // a zero Stat
	b = appendMultiHeader(b, -1, false, codeNoNode)
	b = binary.BigEndian.AppendUint32(b, uint32(0xFFFFFF9B)) // ErrorResult -101
	b = appendMultiHeader(b, opGetChildren, false, 0)
	b = binary.BigEndian.AppendUint32(b, 2)
	b = appendString(b, "x")
	b = appendString(b, "y")
	b = appendMultiHeader(b, -1, true, -1)
	res, err := decodeMultiRead(&decoder{b: b}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if string(res[0].data) != "42" || res[0].stat == nil {
		t.Errorf("getData result = %+v", res[0])
	}
	if res[1].err == nil || res[1].err.Error() != "zk: node does not exist" {
		t.Errorf("error result = %v, want no node", res[1].err)
	}
	if len(res[2].children) != 2 || res[2].children[1] != "y" {
		t.Errorf("children = %v", res[2].children)
	}
	// Every truncation is an error, never a panic.
	for i := 0; i < len(b); i++ {
		if _, err := decodeMultiRead(&decoder{b: b[:i]}, 3); err == nil {
			t.Errorf("truncated at %d: no error", i)
		}
	}
}

// FuzzDecodeMultiRead feeds arbitrary reply bodies to the multiRead decoder: it must never
// panic nor allocate beyond its input.
func FuzzDecodeMultiRead(f *testing.F) {
	var b []byte
	b = appendMultiHeader(b, opGetChildren, false, 0)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = appendString(b, "x")
	b = appendMultiHeader(b, -1, true, -1)
	f.Add(b, 1)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0}, 0)
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < 0 || n > 1000 {
			return
		}
		res, err := decodeMultiRead(&decoder{b: body}, n)
		if err == nil && len(res) != n {
			t.Fatalf("%d results for %d reads without error", len(res), n)
		}
	})
}

// A read does not wait for another to finish with the multiRead connection while a second one
// is free (multiReadConns): a claim's few znodes do not queue behind another coordinator's whole
// group. Only when every connection is taken does a read wait, and then its context bounds the
// wait: it falls back to pipelined reads on the Store's own connection.
func TestIntegration_MultiReadConnectionsServeReadsSideBySide(t *testing.T) {
	s := openInternalStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Create(ctx, "/a", []byte("x"), CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	read := func(ctx context.Context) (time.Duration, bool) {
		_, _, queued, ok := s.tryMultiRead(ctx, []readOp{{path: s.full("/a")}})
		return queued, ok
	}
	if _, ok := read(ctx); !ok {
		t.Fatal("no multiRead on a 3.8 server")
	}
	// A read in progress on the connection just opened.
	s.mreads.slots <- struct{}{}
	busy, _ := s.mreads.take()
	if busy == nil {
		t.Fatal("the first read left no connection open")
	}
	if queued, ok := read(ctx); !ok || queued > 100*time.Millisecond {
		t.Errorf("with one connection in use, a read went through %v after %v; want at once on the other", ok, queued)
	}
	s.mreads.slots <- struct{}{} // and on the other
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if queued, ok := read(short); ok || queued < 40*time.Millisecond { // the context's 50 ms, less the time to call
		t.Errorf("with every connection in use, a read went through %v after %v; want it to wait until its context ends", ok, queued)
	}
	s.mreads.put(busy)
	<-s.mreads.slots
	<-s.mreads.slots
	if n := len(s.mreads.idle); n != multiReadConns {
		t.Errorf("%d connections kept open, want %d", n, multiReadConns)
	}
}

func openInternalStore(t *testing.T) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Connect: TestConnect(t), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
