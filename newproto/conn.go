package newproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/authz"
)

// conn serves one client connection with kfake's shape (client_conn.go):
//
//   - the reader goroutine reads frames, stamps each request with a
//     sequence number and starts a handler goroutine for it;
//   - each handler goroutine calls the Handler and posts the result;
//   - the writer (the conn's own goroutine, serve) writes results in
//     sequence order, holding back those that finish early, because the
//     Kafka protocol requires responses in request order per connection.
//
// slots bounds the requests between being read and being written; a
// result is posted into results, which has room for every slot, so a
// handler never blocks on posting and never leaks.
type conn struct {
	s    *Server
	nc   net.Conn
	in   *bufio.Reader // reads nc through activeReader; every frame is read through it
	info ConnInfo
	log  zerolog.Logger
	// relay forwards the requests the Handler does not answer to an
	// upstream broker (relayhook.go); nil without Config.Relay.
	relay RelayConn
	// sasl is the connection's authentication (sasl.go); nil without Config.SASL.
	sasl *saslState

	// cancel cancels the ctx serve was given: the connection must stop
	// at once (serve's end, or the server's Close after its drain
	// deadline).
	cancel context.CancelFunc

	drain     chan struct{} // closed when the server starts a graceful close
	drainOnce sync.Once

	slots     chan struct{}
	results   chan result
	handlers  sync.WaitGroup
	lastWrite atomic.Int64 // unix nanoseconds of the last response written
}

// result is a handled request, ready to be written.
type result struct {
	seq     uint64
	corr    int32
	key     int16
	version int16
	resp    kmsg.Response
	// raw, when set, is a relayed response frame, size prefix included,
	// written as it is instead of resp.
	raw []byte
	// stream, when set, writes a relayed response as it arrives from
	// the broker (large responses are not buffered).
	stream func(io.Writer) error
	err    error
}

// readEnd tells the writer that the reader stopped, after accepted
// requests; drain says whether their responses are still to be written
// (graceful close) or the connection is to close now.
type readEnd struct {
	accepted uint64
	drain    bool
}

func newConn(s *Server, nc net.Conn, id uint64, role listenerRole, cancel context.CancelFunc) *conn {
	info := ConnInfo{ID: id, Remote: nc.RemoteAddr(), Local: nc.LocalAddr(), role: role, Principal: authz.Anonymous}
	c := &conn{
		s:    s,
		nc:   nc,
		info: info,
		log: s.log.With().Uint64("conn", id).
			Str("remote", addrString(info.Remote)).Logger(),
		cancel:  cancel,
		drain:   make(chan struct{}),
		slots:   make(chan struct{}, s.cfg.MaxInflight),
		results: make(chan result, s.cfg.MaxInflight),
	}
	c.in = bufio.NewReaderSize(activeReader{c}, clientReadBuffer)
	if s.cfg.Relay != nil {
		c.relay = s.cfg.Relay.Open(&ClientConn{c})
	}
	if s.cfg.SASL != nil {
		c.sasl = c.newSASLState() // sasl.go; after the relay, which a forwarded exchange uses
	}
	return c
}

// clientReadBuffer is a client connection's read buffer. Read unbuffered, a
// frame took two reads of the socket, its size and then the rest; through
// the buffer, one read takes a request of the group APIs or a Fetch (a few
// hundred bytes) whole, and whatever the client sent after it. A larger
// frame's rest is read straight into its own buffer, as before.
const clientReadBuffer = 2 << 10

// activeReader reads the socket and counts bytes read as activity, as
// Kafka's idle timer does: once some arrive, the read deadline moves a
// whole IdleTimeout on. The reader sets the deadline before a frame
// begins; without the move, a frame that began just before it would be
// cut off by it, because Go fails a Read whose deadline has passed even
// when the bytes are already waiting.
type activeReader struct{ c *conn }

func (r activeReader) Read(p []byte) (int, error) {
	n, err := r.c.nc.Read(p)
	// Not while draining: beginDrain moved the deadline to now to stop
	// the reader, and a frame in progress is read whole anyway.
	if idle := r.c.s.cfg.IdleTimeout; n > 0 && idle > 0 && !r.c.draining() {
		_ = r.c.nc.SetReadDeadline(time.Now().Add(idle))
	}
	return n, err
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// beginDrain makes the reader stop at the next frame boundary (or now,
// if it is waiting for one) while the writer flushes what was accepted.
func (c *conn) beginDrain() {
	c.drainOnce.Do(func() {
		close(c.drain)
		// Wakes a reader blocked in Read. The reader re-checks drain
		// after setting its own deadline, so neither order loses.
		_ = c.nc.SetReadDeadline(time.Now())
	})
}

func (c *conn) draining() bool {
	select {
	case <-c.drain:
		return true
	default:
		return false
	}
}

// serve runs the connection until it closes and every goroutine it
// started has exited; ctx ends when the connection must stop at once
// (c.cancel).
func (c *conn) serve(ctx context.Context) {
	c.log.Debug().Msg("connection opened")
	if !c.handshake(ctx) || (c.sasl != nil && !c.authenticate(ctx)) { // tls.go, sasl.go
		c.cancel()
		_ = c.nc.Close()
		if c.relay != nil {
			c.relay.Close()
		}
		return
	}
	ends := make(chan readEnd, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		ends <- c.read(ctx)
	}()

	why := c.write(ctx, ends)

	c.cancel()
	_ = c.nc.Close()
	<-readerDone
	if c.relay != nil {
		// After the reader, the only one that dials: no upstream
		// connection opens after this.
		c.relay.Close()
	}
	c.handlers.Wait()
	c.log.Debug().Str("why", why).Msg("connection closed")
}

// read is the reader goroutine.
func (c *conn) read(ctx context.Context) readEnd {
	var seq uint64
	// last is the Later channel of the last request read (Request.Later).
	var last chan struct{}
	next := func() {
		if last != nil {
			close(last)
			last = nil
		}
	}
	defer next()
	for {
		// A slot first: at MaxInflight the socket is not read, which
		// pushes back on the client.
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return readEnd{accepted: seq}
		case <-c.drain:
			return readEnd{accepted: seq, drain: true}
		}

		var deadline time.Time
		if c.s.cfg.IdleTimeout > 0 {
			deadline = time.Now().Add(c.s.cfg.IdleTimeout)
		}
		_ = c.nc.SetReadDeadline(deadline)
		if c.draining() {
			return readEnd{accepted: seq, drain: true}
		}
		var (
			frame   []byte
			req     *Request
			relayed bool
			err     error
		)
		if c.relay != nil {
			// The relay reads the frame itself: a relayed request
			// is forwarded as it arrives, undecoded, in request
			// order; its response is posted to the writer like the
			// Handler's (relayhook.go).
			relayed, req, frame, err = c.relay.Next(ctx, seq)
		} else {
			frame, err = c.readFrame() // limits.go
		}
		if errors.Is(err, errNoFrame) && c.busy() && !c.draining() {
			<-c.slots
			continue
		}
		if relayed && err == nil {
			next()
			seq++
			continue
		}
		if err == nil && req == nil {
			req, err = parseRequest(frame)
		}
		if err == nil {
			// A request the bridge answers itself (relayed ones went
			// on above, undecoded): one frame, one request.
			err = checkWhole(frame, req)
		}
		if err != nil {
			if c.draining() {
				return readEnd{accepted: seq, drain: true}
			}
			c.readFailed(ctx, err)
			return readEnd{accepted: seq}
		}
		req.Conn = c.info
		if c.sessionExpired() && !isSASL(req.Msg.Key()) { // sasl.go, KIP-368
			c.log.Info().Str("principal", c.info.Principal).Msg("SASL session expired without re-authentication; closing connection")
			return readEnd{accepted: seq}
		}
		next()
		last = make(chan struct{})
		req.later = last
		c.s.metrics.request(req.Msg.Key(), req.Msg.GetVersion())
		if e := c.log.Trace(); e.Enabled() {
			e.Str("api", kmsg.NameForKey(req.Msg.Key())).Int16("version", req.Msg.GetVersion()).
				Int32("correlation_id", req.CorrelationID).Msg("request")
		}

		c.handlers.Add(1)
		if c.sasl != nil && c.s.cfg.SASL.Forward && isSASL(req.Msg.Key()) {
			// A re-authentication goes to the broker in its place among the relayed
			// requests, from this goroutine, the only one that sends them; the broker
			// reads nothing else meanwhile either (KIP-368).
			c.handle(ctx, seq, req)
		} else {
			go c.handle(ctx, seq, req)
		}
		seq++
	}
}

// busy reports whether a connection that sent no frame for IdleTimeout
// is still active: it waits for responses (a JoinGroup held through a long
// rebalance), or was written to within IdleTimeout. Kafka's idle timer
// counts both directions too.
func (c *conn) busy() bool {
	inflight := len(c.slots) > 1 // the reader holds one slot itself
	return inflight || time.Since(time.Unix(0, c.lastWrite.Load())) < c.s.cfg.IdleTimeout
}

// warn starts a warning about this connection alone (a rejected frame, a failed request):
// sampled across the server's connections, so that a scanner or a broken fleet cannot flood
// the log; the metrics count every one.
func (c *conn) warn() *zerolog.Event {
	l := c.log.Sample(c.s.connWarns)
	return l.Warn()
}

// readFailed logs why the reader stopped. A client closing its connection
// is routine; a rejected frame is worth a warning and a metric.
func (c *conn) readFailed(ctx context.Context, err error) {
	var (
		fe *frameError
		ue upstreamFailure
	)
	switch {
	case errors.As(err, &ue):
		c.warn().Err(err).Msg("upstream broker unavailable; closing connection")
	case errors.As(err, &fe):
		c.s.metrics.framesRejected.WithLabelValues(fe.reason).Inc()
		c.warn().Err(err).Str("reason", fe.reason).Msg("rejected frame; closing connection")
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), ctx.Err() != nil:
		// The client closed, or we did.
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Debug().Dur("idle_timeout", c.s.cfg.IdleTimeout).Msg("idle connection")
	default:
		c.log.Debug().Err(err).Msg("read failed")
	}
}

// handle runs the Handler for one request on its own goroutine.
func (c *conn) handle(ctx context.Context, seq uint64, req *Request) {
	defer c.handlers.Done()
	key, version := req.Msg.Key(), req.Msg.GetVersion()
	var (
		resp kmsg.Response
		err  error
	)
	if isSASL(key) {
		resp, err = c.reauthenticate(ctx, req) // sasl.go, KIP-368
	} else {
		resp, err = c.callHandler(ctx, req)
	}
	if c.relay != nil && err == nil && key == int16(kmsg.ApiVersions) {
		// The upstream's ranges for the relayed keys.
		resp, err = c.relay.APIVersions(ctx, resp)
	}
	if c.sasl != nil && err == nil && key == int16(kmsg.ApiVersions) {
		resp = withSASLKeys(resp)
	}
	if err == nil && resp != nil {
		if resp.Key() != key {
			err = fmt.Errorf("handler answered %s with a %s response", kmsg.NameForKey(key), kmsg.NameForKey(resp.Key()))
		} else if key != int16(kmsg.ApiVersions) {
			resp.SetVersion(version)
		}
	}
	c.s.metrics.answered(key, resp, err)
	c.results <- result{seq: seq, corr: req.CorrelationID, key: key, version: version, resp: resp, err: err}
}

// callHandler turns a panic into an error: one bad request closes its
// connection, not the daemon.
func (c *conn) callHandler(ctx context.Context, req *Request) (resp kmsg.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error().Interface("panic", p).Bytes("stack", debug.Stack()).Msg("handler panicked")
			resp, err = nil, fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return c.s.handler.Handle(ctx, req)
}

// write is the writer loop; it returns why the connection ends.
func (c *conn) write(ctx context.Context, ends <-chan readEnd) string {
	var (
		next    uint64
		pending = map[uint64]result{} // finished early, waiting for their turn
		end     *readEnd
		buf     []byte
	)
	for {
		if r, ok := pending[next]; ok {
			delete(pending, next)
			next++
			if r.err != nil {
				c.warn().Err(r.err).Str("api", kmsg.NameForKey(r.key)).Int16("version", r.version).
					Int32("correlation_id", r.corr).Msg("request not answered; closing connection")
				return "request failed"
			}
			var until time.Time // a relayed Fetch response's horizon
			if r.key == int16(kmsg.Fetch) && (r.raw != nil || r.stream != nil) {
				var err error
				if until, err = c.fetchGate(); err != nil {
					c.log.Warn().Err(err).Int32("correlation_id", r.corr).
						Msg("relayed Fetch response withheld; closing connection")
					if r.raw != nil {
						c.relay.Release(r.raw) // never written
					}
					// A streamed response is left unread: the
					// upstream side gives up when the relay closes.
					return "fetch gated"
				}
			}
			if r.resp != nil || r.raw != nil || r.stream != nil {
				var err error
				switch {
				case r.stream != nil:
					err = c.writeStream(r.stream, until)
				case r.raw != nil:
					err = c.writeFrame(r.raw, until)
					c.relay.Release(r.raw) // written or dropped: nothing refers to it
				default:
					buf = appendResponse(buf[:0], r.corr, r.resp)
					err = c.writeFrame(buf, time.Time{})
				}
				if errors.Is(err, errFetchLapsed) {
					c.log.Warn().Err(err).Int32("correlation_id", r.corr).
						Msg("relayed Fetch response withheld; closing connection")
					return "fetch gated"
				}
				if err != nil {
					if ctx.Err() == nil {
						c.log.Debug().Err(err).Msg("write failed")
					}
					return "write failed"
				}
			}
			<-c.slots
			continue
		}
		if end != nil && (!end.drain || next == end.accepted) {
			if end.drain {
				return "drained"
			}
			return "reader stopped"
		}
		select {
		case r := <-c.results:
			pending[r.seq] = r
		case e := <-ends:
			end = &e
			ends = nil
		case <-ctx.Done():
			return "cancelled"
		}
	}
}

// fetchGate asks the relay whether a relayed Fetch response may be
// written now, and until when (zero: no bound).
func (c *conn) fetchGate() (time.Time, error) {
	if c.relay == nil {
		return time.Time{}, nil
	}
	return c.relay.FetchGate(time.Now())
}

// errFetchLapsed: the FetchGate's answer lapsed before its response was
// written.
var errFetchLapsed = errors.New("the fetch gate's answer lapsed before the response was written (the process was paused or starved between the two)")

// writeDeadline is the deadline of a write: IdleTimeout on, and no later
// than until (a Fetch response's horizon; zero: none), which is checked
// right before the write: a process paused after the gate's answer must
// not write the response once it may be another consumer's.
func (c *conn) writeDeadline(until time.Time) time.Time {
	var deadline time.Time
	if c.s.cfg.IdleTimeout > 0 {
		deadline = time.Now().Add(c.s.cfg.IdleTimeout)
	}
	if !until.IsZero() && (deadline.IsZero() || until.Before(deadline)) {
		deadline = until
	}
	return deadline
}

// lapsed reports whether now is past until, by either clock (a stopped
// process keeps the monotonic one going, a suspended machine the wall
// clock); a zero until never lapses.
func lapsed(until time.Time) bool {
	if until.IsZero() {
		return false
	}
	now := time.Now()
	return !now.Before(until) || !now.Round(0).Before(until.Round(0))
}

// writeStream writes a streamed response under the same deadline as a
// frame, and checks until before each of its writes: a stream is written
// in pieces, and a process paused between two of them must not write the
// rest once it may be another consumer's. The write deadline alone does
// not cover that: the runtime enforces it with a timer, and right after a
// pause (SIGCONT) the writer can run before that timer has fired.
func (c *conn) writeStream(stream func(io.Writer) error, until time.Time) error {
	_ = c.nc.SetWriteDeadline(c.writeDeadline(until))
	if lapsed(until) {
		return errFetchLapsed
	}
	var w io.Writer = c.nc
	if !until.IsZero() {
		w = horizonWriter{w: c.nc, until: until}
	}
	err := stream(w)
	c.lastWrite.Store(time.Now().UnixNano())
	return lapsedWrite(err, until)
}

// horizonWriter fails every write once until has passed (errFetchLapsed).
type horizonWriter struct {
	w     io.Writer
	until time.Time
}

func (h horizonWriter) Write(p []byte) (int, error) {
	if lapsed(h.until) {
		return 0, errFetchLapsed
	}
	return h.w.Write(p)
}

// writeFrame writes one frame, no later than until (zero: no bound).
func (c *conn) writeFrame(buf []byte, until time.Time) error {
	_ = c.nc.SetWriteDeadline(c.writeDeadline(until))
	if lapsed(until) {
		return errFetchLapsed
	}
	_, err := c.nc.Write(buf)
	c.lastWrite.Store(time.Now().UnixNano())
	return lapsedWrite(err, until)
}

// lapsedWrite is a write's error, errFetchLapsed when its deadline was
// until's: the client got part of the frame at most, and the connection
// closes.
func lapsedWrite(err error, until time.Time) error {
	if errors.Is(err, errFetchLapsed) {
		return err
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && lapsed(until) {
		return fmt.Errorf("%w: %w", errFetchLapsed, err)
	}
	return err
}
