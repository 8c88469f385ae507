package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// upConn is one upstream connection of one client connection: requests
// are written in the order the client sent them and responses read in the
// same order (a broker answers each connection in order), so a FIFO of the
// requests that expect a response pairs each response with its request.
//
// The client connection's reader goroutine is the only writer; the upConn's
// own goroutine (run) is the only reader and posts each response to the
// client connection's writer, which puts it in its place among the
// connection's responses.
type upConn struct {
	broker  int32
	addr    string
	nc      net.Conn
	br      *bufio.Reader
	timeout time.Duration
	maxResp int32
	bufs    *bufPool
	// post hands a finished request to the client connection's writer;
	// it never blocks (the writer has room for every request in flight).
	post func(newproto.Relayed)
	// lost is called once if the connection fails with requests in
	// flight: their client connection must close.
	lost func(error)
	// gone is called once if the connection fails other than by being
	// closed on our side (the broker closed it, or did not answer): the
	// broker may be going down, which a dial tells.
	gone func()

	closed chan struct{} // closed with the connection (fail)

	mu      sync.Mutex
	pending []pendingReq
	dead    error // set once; the connection is closed
}

// pendingReq is a relayed request waiting for its response.
type pendingReq struct {
	seq          uint64
	corr         int32
	key, version int16
	sent         time.Time
	// rewrite, when set, edits the response (Metadata and the other
	// responses that name brokers, rewrite.go).
	rewrite func(raw []byte) ([]byte, error)
	// reply, when set, takes the response (or the error) instead of the
	// client connection's writer: the bridge's own request (sasl.go).
	reply func(raw []byte, err error)
	// answered: the client was answered already (heldfetch.go); the
	// broker's response is read and dropped.
	answered bool
}

// resetReadDeadline sets the read deadline for the oldest request still
// waiting (none: no deadline; an idle connection is the broker's to close).
func (u *upConn) resetReadDeadline() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.pending) > 0 {
		_ = u.nc.SetReadDeadline(u.pending[0].sent.Add(u.timeout))
	} else {
		_ = u.nc.SetReadDeadline(time.Time{})
	}
}

// stream hands a large response to the client connection's writer, which
// copies it from the broker's socket when its turn comes, and waits until
// it has: the response's bytes are the next on the socket, so nothing
// else can be read meanwhile. A failure fails the connection; the writer's
// side of it closes the client connection (it wrote part of a frame).
func (u *upConn) stream(p pendingReq, hdr [8]byte, n int32) error {
	done := make(chan error, 1)
	u.post(newproto.Relayed{Seq: p.seq, CorrelationID: p.corr, Key: p.key, Version: p.version, Stream: func(w io.Writer) error {
		err := u.copyResponse(w, hdr, n)
		done <- err
		return err
	}})
	select {
	case err := <-done:
		return err
	case <-u.closed:
		// The client connection closed before (or while) its writer
		// took the response.
		return net.ErrClosed
	}
}

// copyResponse writes a response frame whose first 8 bytes (hdr) were
// read: hdr and what the reader has buffered, then the rest straight from
// the socket, which TCPConn.ReadFrom turns into splice(2) on Linux.
func (u *upConn) copyResponse(w io.Writer, hdr [8]byte, n int32) error {
	// The deadline counts from now: the response may have waited for
	// its turn behind a slow earlier one.
	_ = u.nc.SetReadDeadline(time.Now().Add(u.timeout))
	rest := int(n) - 4
	buffered, _ := u.br.Peek(min(u.br.Buffered(), rest))
	bufs := net.Buffers{hdr[:], buffered}
	if _, err := bufs.WriteTo(w); err != nil {
		return fmt.Errorf("writing to the client: %w", err)
	}
	_, _ = u.br.Discard(len(buffered))
	if left := int64(rest - len(buffered)); left > 0 {
		if m, err := io.CopyN(w, u.nc, left); err != nil {
			if m < left && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("relaying a %d-byte response: %w", n, err)
		}
	}
	return nil
}

// errUpstreamIdle is an upstream connection the broker closed with nothing
// in flight (connections.max.idle.ms): nothing is lost, the next request
// dials again.
var errUpstreamIdle = errors.New("closed by the broker with no request in flight")

// send writes one request frame of size bytes to the broker: head, its
// start, then the rest as it comes from src (the client's connection).
// With p == nil the request expects no response (Produce acks=0).
//
// queued reports whether p was recorded: from then on its result is
// posted by run, an error result if the connection fails. When it was not
// (the connection had already failed, or a request without response could
// not be written), the caller answers for the request. Any error fails
// the connection.
func (u *upConn) send(p *pendingReq, size int32, head []byte, src io.Reader) (queued bool, err error) {
	now := time.Now()
	u.mu.Lock()
	if u.dead != nil {
		u.mu.Unlock()
		return false, u.dead
	}
	if p != nil {
		// Recorded before the write, so that run finds it however
		// fast the broker answers.
		p.sent = now
		u.pending = append(u.pending, *p)
		if len(u.pending) == 1 {
			_ = u.nc.SetReadDeadline(now.Add(u.timeout))
		}
	}
	u.mu.Unlock()
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], uint32(size))
	bufs := net.Buffers{prefix[:], head}
	_ = u.nc.SetWriteDeadline(now.Add(u.timeout))
	_, err = bufs.WriteTo(u.nc)
	if rest := int64(size) - int64(len(head)); err == nil && rest > 0 {
		// TCPConn.ReadFrom of a LimitedReader of a TCPConn: splice.
		var n int64
		n, err = io.CopyN(u.nc, src, rest)
		if err != nil && n < rest && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		// run sees the closed connection and fails what is pending,
		// p included.
		err = fmt.Errorf("relaying %s: %w", kmsg.NameForKey(int16(binary.BigEndian.Uint16(head))), err)
		u.fail(err)
		return p != nil, err
	}
	return p != nil, nil
}

// fail marks the connection dead and closes it, once.
func (u *upConn) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.failLocked(err)
}

// failLocked is fail with u.mu held.
func (u *upConn) failLocked(err error) {
	if u.dead == nil {
		u.dead = err
		_ = u.nc.Close()
		close(u.closed)
		if u.gone != nil && !errors.Is(err, net.ErrClosed) {
			u.gone()
		}
	}
}

// failed returns why the connection died, nil while it lives.
func (u *upConn) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.dead
}

// run reads responses until the connection fails or is closed, then fails
// every request still pending.
func (u *upConn) run() {
	err := u.readLoop()
	u.fail(err)
	u.mu.Lock()
	lost := slices.DeleteFunc(u.pending, func(p pendingReq) bool { return p.answered })
	u.pending = nil
	u.mu.Unlock()
	if len(lost) == 0 {
		return
	}
	uerr := &upstreamError{broker: u.broker, addr: u.addr, err: err}
	u.lost(uerr)
	for _, p := range lost {
		if p.reply != nil {
			p.reply(nil, uerr)
			continue
		}
		u.post(newproto.Relayed{Seq: p.seq, CorrelationID: p.corr, Key: p.key, Version: p.version, Err: uerr})
	}
}

func (u *upConn) readLoop() error {
	var hdr [8]byte // size and correlation id
	for {
		if _, err := io.ReadFull(u.br, hdr[:]); err != nil {
			u.mu.Lock()
			idle := len(u.pending) == 0
			u.mu.Unlock()
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				return fmt.Errorf("no response within %s", u.timeout)
			case idle && closedByPeer(err):
				return errUpstreamIdle
			}
			return err
		}
		n := int32(binary.BigEndian.Uint32(hdr[:]))
		if n < 4 || n > u.maxResp {
			return fmt.Errorf("response frame size %d outside [4, %d]", n, u.maxResp)
		}
		u.mu.Lock()
		if len(u.pending) == 0 {
			u.mu.Unlock()
			return fmt.Errorf("response (correlation id %d) to no request", responseCorrelationID(hdr[:]))
		}
		p := u.pending[0]
		if got := responseCorrelationID(hdr[:]); got != p.corr {
			// The pairing is lost: nothing after this can be
			// trusted either.
			u.mu.Unlock()
			return fmt.Errorf("response correlation id %d, want %d (%s)", got, p.corr, kmsg.NameForKey(p.key))
		}
		u.pending[0] = pendingReq{} // drop the rewrite closure
		u.pending = u.pending[1:]
		u.mu.Unlock()

		if p.answered {
			// Answered here already (heldfetch.go): dropped.
			_ = u.nc.SetReadDeadline(time.Now().Add(u.timeout))
			if _, err := u.br.Discard(int(n) - 4); err != nil {
				return fmt.Errorf("dropping a %d-byte response answered already: %w", n, err)
			}
			u.resetReadDeadline()
			continue
		}

		if p.rewrite == nil && p.reply == nil && n > relayStreamBytes {
			if err := u.stream(p, hdr, n); err != nil {
				return err
			}
			u.resetReadDeadline()
			continue
		}
		raw := u.bufs.get(4 + int(n))
		copy(raw, hdr[:])
		if _, err := io.ReadFull(u.br, raw[8:]); err != nil {
			u.bufs.put(raw)
			u.mu.Lock()
			u.pending = append([]pendingReq{p}, u.pending...) // failed with the rest
			u.mu.Unlock()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("no response within %s", u.timeout)
			}
			return fmt.Errorf("reading %d-byte response frame: %w", n, err)
		}
		u.resetReadDeadline()
		if p.reply != nil {
			p.reply(raw, nil)
			continue
		}
		r := newproto.Relayed{Seq: p.seq, CorrelationID: p.corr, Key: p.key, Version: p.version, Raw: raw}
		if p.rewrite != nil {
			var err error
			if r.Raw, err = p.rewrite(raw); err != nil {
				r.Raw, r.Err = nil, &upstreamError{broker: u.broker, addr: u.addr, err: err}
			}
			u.bufs.put(raw) // the rewrite copied what it kept
		}
		u.post(r)
	}
}
