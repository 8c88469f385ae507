package zktest

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a ZooKeeper server until frozen. A frozen proxy cuts every
// connection and closes new ones at once, so a client can neither ping nor reconnect and the
// server expires its session, as a network partition would; Thaw lets it reconnect.
type Proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	// muted holds the server's replies back (Mute); unmuted is signalled on each change.
	muted   bool
	unmuted *sync.Cond
	// delay holds each of the server's replies back for that long (SetDelay).
	delay time.Duration
	// holdWrites holds each connection's requests from its next write on (HoldWrites); held
	// counts the writes held, released is signalled on Release.
	holdWrites bool
	held       int
	released   *sync.Cond
}

// StartProxy listens on a loopback port and forwards to backend (host:port) until the test ends.
func StartProxy(t testing.TB, backend string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln}
	p.unmuted = sync.NewCond(&p.mu)
	p.released = sync.NewCond(&p.mu)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.frozen {
				p.mu.Unlock()
				c.Close()
				continue
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			go func() { p.request(b, c); b.Close(); c.Close() }()
			go func() { p.reply(c, b); b.Close(); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.Freeze()
	})
	return p
}

// Addr is the proxy's host:port, to connect to instead of the server.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// reply copies the server's bytes to the client, holding each read back while the proxy is
// muted, and for the delay (SetDelay) after it was read: replies read one after the other are
// delayed side by side, so that requests sent together still cost one delay, as on a slow link.
func (p *Proxy) reply(c, b net.Conn) {
	type chunk struct {
		data []byte
		at   time.Time
	}
	out := make(chan chunk, 1024)
	written := make(chan struct{})
	go func() {
		defer close(written)
		for ch := range out {
			if d := time.Until(ch.at); d > 0 {
				time.Sleep(d)
			}
			p.mu.Lock()
			for p.muted && !p.frozen {
				p.unmuted.Wait()
			}
			p.mu.Unlock()
			if _, err := c.Write(ch.data); err != nil {
				c.Close()
				for range out {
				}
				return
			}
		}
	}()
	defer func() { close(out); <-written }()
	buf := make([]byte, 32<<10)
	for {
		n, err := b.Read(buf)
		if n > 0 {
			p.mu.Lock()
			at := time.Now().Add(p.delay)
			p.mu.Unlock()
			out <- chunk{data: append([]byte(nil), buf[:n]...), at: at}
		}
		if err != nil {
			return
		}
	}
}

// request copies the client's requests to the server, frame by frame (ZooKeeper's: a 4-byte
// length, then the request; every request after the connect starts with its xid and opcode),
// holding them back from a write on while HoldWrites is on.
func (p *Proxy) request(b, c net.Conn) {
	connected := false
	var head [4]byte
	for {
		if _, err := io.ReadFull(c, head[:]); err != nil {
			return
		}
		frame := make([]byte, 4+int(binary.BigEndian.Uint32(head[:])))
		copy(frame, head[:])
		if _, err := io.ReadFull(c, frame[4:]); err != nil {
			return
		}
		if connected && len(frame) >= 12 && zkWrite(int32(binary.BigEndian.Uint32(frame[8:12]))) {
			p.mu.Lock()
			if p.holdWrites && !p.frozen {
				p.held++
				for p.holdWrites && !p.frozen {
					p.released.Wait() // this write and every request after it, in order
				}
			}
			p.mu.Unlock()
		}
		connected = true
		if _, err := b.Write(frame); err != nil {
			return
		}
	}
}

// zkWrite reports whether a ZooKeeper opcode changes the tree: create, delete, setData, setACL,
// check, multi, create2, createContainer, deleteContainer, createTTL.
func zkWrite(op int32) bool {
	switch op {
	case 1, 2, 5, 7, 13, 14, 15, 19, 20, 21:
		return true
	}
	return false
}

// HoldWrites holds each connection's next write request (a create, set, delete or multi) and
// every request it sends after it, until Release: the write is sent but has not reached the
// server yet, as on a link that stalls one way, while other clients' writes are applied before
// it. Keep it shorter than the session timeout (pings are held too).
func (p *Proxy) HoldWrites() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdWrites, p.held = true, 0
}

// HeldWrites is the number of writes HoldWrites holds back (one per connection at most).
func (p *Proxy) HeldWrites() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Release sends the requests HoldWrites held back, in order, and holds nothing more.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holdWrites = false
	p.released.Broadcast()
}

// SetDelay holds every answer of the server back for d from now on (0: none), as a link with a
// round trip of d would: a client's sequential requests then take d each, and a count of them
// can be read off a wall time.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Mute holds every answer of the server back until Unmute, while requests still reach it: a
// write is applied and its answer comes too late for the client, as on a link that stalls one
// way. Keep it shorter than the session timeout, or the server expires the session too.
func (p *Proxy) Mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = true
}

// Unmute lets the answers held back by Mute through, in order.
func (p *Proxy) Unmute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = false
	p.unmuted.Broadcast()
}

// Freeze cuts every forwarded connection and refuses new ones until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
	p.unmuted.Broadcast()
	p.released.Broadcast()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Thaw accepts and forwards connections again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = false
}
