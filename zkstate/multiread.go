package zkstate

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// multiRead batches many reads into one request with ZooKeeper's multiRead operation (opcode 22,
// ZooKeeper 3.6+, ZOOKEEPER-3409): a group of 1,000 partitions is ~2,100 znodes, and even
// pipelined one request each they cost the server ~2,100 request dispatches; as a handful of
// multiReads they cost a handful. go-zookeeper has no multiRead, so this file speaks the jute
// wire format itself, on connections (and sessions) of their own used only for these reads
// (multiReadConns of them).
//
// Wire format (ZooKeeper's jute records, big-endian; see zookeeper.jute):
//
//	frame         int32 length, then the record
//	ConnectReq    int32 protocolVersion, int64 lastZxidSeen, int32 timeOut, int64 sessionId, buffer passwd, bool readOnly
//	ConnectResp   int32 protocolVersion, int32 timeOut, int64 sessionId, buffer passwd[, bool readOnly]
//	RequestHeader int32 xid, int32 type
//	ReplyHeader   int32 xid, int64 zxid, int32 err
//	multiRead     { MultiHeader{int32 type, bool done, int32 err}, op }* MultiHeader{-1, true, -1}
//	GetData/GetChildren request: ustring path, bool watch
//	results       { MultiHeader, GetDataResponse{buffer data, Stat} | GetChildrenResponse{vector<ustring>} | ErrorResult{int32 err} }*, MultiHeader{-1, true, -1}
//
// Each read of a multiRead succeeds or fails on its own (a missing node is an ErrorResult
// -101), unlike a write multi. An older server that does not know opcode 22 answers with an
// error or drops the connection; the Store then falls back to pipelined single reads for good.
const (
	opGetData     = 4
	opGetChildren = 8
	opPing        = 11
	opMultiRead   = 22
	opCloseSess   = -11
	xidPing       = -2
	// the same two negative numbers as they go on the wire
	xidPingWire     = uint32(0xFFFFFFFE)
	opCloseSessWire = uint32(0xFFFFFFF5)

	// maxMultiReadOps bounds one multiRead; the answer must fit the client's and the server's
	// jute.maxbuffer (1 MB by default), and 500 offset or owner znodes are far below that.
	maxMultiReadOps = 500
	// maxReplyBytes is the largest reply frame we accept, ZooKeeper's default jute.maxbuffer
	// with headroom; a longer length prefix means a corrupt stream.
	maxReplyBytes = 16 << 20
)

// errMultiReadUnsupported means the server does not implement multiRead.
var errMultiReadUnsupported = errors.New("zkstate: server does not support multiRead")

// readOp is one read of a multiRead batch.
type readOp struct {
	path     string // full path, chroot included
	children bool
}

// readResult is the answer to one readOp; err is a go-zookeeper error (zk.ErrNoNode, ...) so
// callers treat both read paths alike.
type readResult struct {
	data     []byte
	children []string
	stat     *zk.Stat
	err      error
}

// multiReader is one raw ZooKeeper connection used only for multiRead. It is not safe for
// concurrent use; the Store hands each to one read at a time (multiReads).
type multiReader struct {
	addr    string // the server this connection talks to
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
	xid     int32
	buf     []byte
	lastUse time.Time
}

// dialMultiReader opens a connection and a read-only-capable session to the first server of
// servers that answers.
func dialMultiReader(ctx context.Context, servers []string, sessionTimeout time.Duration) (*multiReader, error) {
	var lastErr error
	for _, addr := range servers {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			lastErr = err
			continue
		}
		m := &multiReader{addr: addr, conn: c, r: bufio.NewReaderSize(c, 64<<10), timeout: sessionTimeout}
		if err := m.handshake(ctx); err != nil {
			c.Close()
			lastErr = err
			continue
		}
		return m, nil
	}
	return nil, fmt.Errorf("zkstate: multiRead connection: %w", lastErr)
}

func (m *multiReader) deadline(ctx context.Context) {
	d := time.Now().Add(m.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(d) {
		d = dl
	}
	_ = m.conn.SetDeadline(d)
}

func (m *multiReader) handshake(ctx context.Context) error {
	m.deadline(ctx)
	b := m.buf[:0]
	b = binary.BigEndian.AppendUint32(b, 0) // length, patched below
	b = binary.BigEndian.AppendUint32(b, 0) // protocolVersion
	b = binary.BigEndian.AppendUint64(b, 0) // lastZxidSeen
	b = binary.BigEndian.AppendUint32(b, uint32(m.timeout.Milliseconds()))
	b = binary.BigEndian.AppendUint64(b, 0) // sessionId: a new session
	b = appendBuffer(b, make([]byte, 16))
	b = append(b, 0) // readOnly false
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	m.buf = b
	if _, err := m.conn.Write(b); err != nil {
		return err
	}
	resp, err := m.readFrame()
	if err != nil {
		return fmt.Errorf("connect response: %w", err)
	}
	d := decoder{b: resp}
	d.int32() // protocolVersion
	negotiated := d.int32()
	sid := d.int64()
	d.buffer()
	if d.err != nil {
		return fmt.Errorf("connect response: %w", d.err)
	}
	if sid == 0 || negotiated <= 0 {
		return errors.New("connect refused by the server (session expired or too many connections)")
	}
	// The server may have clamped the timeout; pinging at a third of it keeps the session.
	m.timeout = time.Duration(negotiated) * time.Millisecond
	m.lastUse = time.Now()
	return nil
}

// read runs ops as one or more multiRead requests and returns their results in order.
func (m *multiReader) read(ctx context.Context, ops []readOp) ([]readResult, int, error) {
	out := make([]readResult, 0, len(ops))
	requests := 0
	for start := 0; start < len(ops); start += maxMultiReadOps {
		chunk := ops[start:min(start+maxMultiReadOps, len(ops))]
		res, err := m.readChunk(ctx, chunk)
		requests++
		if err != nil {
			return nil, requests, err
		}
		out = append(out, res...)
	}
	return out, requests, nil
}

func (m *multiReader) readChunk(ctx context.Context, ops []readOp) ([]readResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.deadline(ctx)
	m.xid++
	if m.xid <= 0 {
		m.xid = 1
	}
	xid := m.xid
	b := m.buf[:0]
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(xid))
	b = binary.BigEndian.AppendUint32(b, opMultiRead)
	for _, op := range ops {
		t := int32(opGetData)
		if op.children {
			t = opGetChildren
		}
		b = appendMultiHeader(b, t, false, -1)
		b = appendString(b, op.path)
		b = append(b, 0) // watch false
	}
	b = appendMultiHeader(b, -1, true, -1)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	m.buf = b
	if _, err := m.conn.Write(b); err != nil {
		return nil, err
	}
	for {
		frame, err := m.readFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				// 3.4/3.5 servers close the connection on an opcode they do not know.
				return nil, fmt.Errorf("%w (connection closed: %v)", errMultiReadUnsupported, err)
			}
			return nil, err
		}
		d := decoder{b: frame}
		rx := d.int32()
		d.int64() // zxid
		code := d.int32()
		if d.err != nil {
			return nil, d.err
		}
		if rx == xidPing || rx == -1 { // a ping answer or a watch event: not ours
			continue
		}
		if rx != xid {
			return nil, fmt.Errorf("zkstate: multiRead: reply xid %d, want %d", rx, xid)
		}
		if code != 0 {
			if code == codeUnimplemented || code == codeMarshalling {
				return nil, fmt.Errorf("%w (error %d)", errMultiReadUnsupported, code)
			}
			return nil, fmt.Errorf("zkstate: multiRead: %w", zkError(code))
		}
		m.lastUse = time.Now()
		return decodeMultiRead(&d, len(ops))
	}
}

func decodeMultiRead(d *decoder, n int) ([]readResult, error) {
	out := make([]readResult, 0, n)
	for {
		t := d.int32()
		done := d.bool()
		d.int32() // err of the header; the ErrorResult carries the op's error
		if d.err != nil {
			return nil, fmt.Errorf("zkstate: multiRead reply: %w", d.err)
		}
		if done {
			break
		}
		var r readResult
		switch t {
		case opGetData:
			r.data = d.buffer()
			r.stat = d.stat()
		case opGetChildren:
			r.children = d.strings()
		case -1:
			r.err = zkError(d.int32())
		default:
			return nil, fmt.Errorf("zkstate: multiRead reply: unexpected result type %d", t)
		}
		if d.err != nil {
			return nil, fmt.Errorf("zkstate: multiRead reply: %w", d.err)
		}
		out = append(out, r)
	}
	if len(out) != n {
		return nil, fmt.Errorf("zkstate: multiRead reply: %d results for %d reads", len(out), n)
	}
	return out, nil
}

// ping keeps an idle session alive; the Store calls it before reuse after a third of the
// session timeout, since this connection has no background loop of its own.
func (m *multiReader) stale() bool { return time.Since(m.lastUse) > m.timeout/3 }

func (m *multiReader) ping(ctx context.Context) error {
	m.deadline(ctx)
	b := m.buf[:0]
	b = binary.BigEndian.AppendUint32(b, 8)
	b = binary.BigEndian.AppendUint32(b, xidPingWire)
	b = binary.BigEndian.AppendUint32(b, opPing)
	m.buf = b
	if _, err := m.conn.Write(b); err != nil {
		return err
	}
	frame, err := m.readFrame()
	if err != nil {
		return err
	}
	d := decoder{b: frame}
	if rx := d.int32(); rx != xidPing || d.err != nil {
		return fmt.Errorf("zkstate: multiRead ping: unexpected reply xid %d", rx)
	}
	m.lastUse = time.Now()
	return nil
}

// close ends the session at once (its server-side state goes now, not after the timeout).
func (m *multiReader) close() {
	_ = m.conn.SetDeadline(time.Now().Add(time.Second))
	b := binary.BigEndian.AppendUint32(nil, 8)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, opCloseSessWire)
	_, _ = m.conn.Write(b)
	_, _ = m.readFrame()
	_ = m.conn.Close()
}

func (m *multiReader) readFrame() ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(m.r, hdr[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(hdr[:]))
	if n < 0 || n > maxReplyBytes {
		return nil, fmt.Errorf("zkstate: multiRead: reply length %d out of range", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(m.r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// zkError maps a ZooKeeper error code to go-zookeeper's error value, so the rest of zkstate
// maps it once (mapError).
func zkError(code int32) error {
	if code == 0 {
		return nil
	}
	if err, ok := zkErrors[code]; ok {
		return err
	}
	return fmt.Errorf("zookeeper error %d", code)
}

// ZooKeeper's error codes (KeeperException.Code); go-zookeeper keeps its table unexported.
const (
	codeConnectionLoss = -4
	codeMarshalling    = -5
	codeUnimplemented  = -6
	codeBadArguments   = -8
	codeNoNode         = -101
	codeNoAuth         = -102
	codeSessionExpired = -112
)

var zkErrors = map[int32]error{
	codeNoNode:         zk.ErrNoNode,
	codeNoAuth:         zk.ErrNoAuth,
	codeSessionExpired: zk.ErrSessionExpired,
	codeConnectionLoss: zk.ErrConnectionClosed,
	codeBadArguments:   zk.ErrBadArguments,
}

func appendMultiHeader(b []byte, t int32, done bool, err int32) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(t))
	if done {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return binary.BigEndian.AppendUint32(b, uint32(err))
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBuffer(b, p []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// decoder reads jute records with a sticky error: after a short read every later read returns
// zero values and err says what ran out.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = fmt.Errorf("record truncated: want %d bytes, have %d", n, len(d.b))
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) int32() int32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(p))
}

func (d *decoder) int64() int64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(p))
}

func (d *decoder) bool() bool {
	p := d.take(1)
	return p != nil && p[0] != 0
}

// buffer reads a jute buffer; length -1 is null (nil).
func (d *decoder) buffer() []byte {
	n := d.int32()
	if n == -1 || d.err != nil {
		return nil
	}
	p := d.take(int(n))
	if p == nil {
		return nil
	}
	return append([]byte(nil), p...)
}

func (d *decoder) strings() []string {
	n := d.int32()
	if n == -1 || d.err != nil {
		return nil
	}
	if n < 0 || int(n) > len(d.b)/4 {
		d.err = fmt.Errorf("vector length %d out of range", n)
		return nil
	}
	out := make([]string, 0, n)
	for i := int32(0); i < n; i++ {
		l := d.int32()
		p := d.take(int(l))
		if d.err != nil {
			return nil
		}
		out = append(out, string(p))
	}
	return out
}

func (d *decoder) stat() *zk.Stat {
	s := &zk.Stat{
		Czxid: d.int64(), Mzxid: d.int64(), Ctime: d.int64(), Mtime: d.int64(),
		Version: d.int32(), Cversion: d.int32(), Aversion: d.int32(),
		EphemeralOwner: d.int64(), DataLength: d.int32(), NumChildren: d.int32(), Pzxid: d.int64(),
	}
	if d.err != nil {
		return nil
	}
	return s
}

// multiReadConns is how many multiRead connections a Store keeps. Each carries one request at a
// time; with two, a small read (a claim's registrations) does not wait on the client for a
// large one (another coordinator's read of a whole group) to be sent, answered and decoded.
// The server still runs them in the order they arrive.
const multiReadConns = 2

// multiReads are the Store's lazily opened multiRead connections.
type multiReads struct {
	slots       chan struct{} // one per connection in use; multiReadConns of them
	mu          sync.Mutex
	idle        []*multiReader // open and not in use
	unsupported bool
}

func (mr *multiReads) init(unsupported bool) {
	mr.slots = make(chan struct{}, multiReadConns)
	mr.unsupported = unsupported
}

// take returns an open connection to reuse, or nil when one must be dialed; ok is false when
// multiRead is not to be used.
func (mr *multiReads) take() (m *multiReader, ok bool) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.unsupported {
		return nil, false
	}
	if n := len(mr.idle); n > 0 {
		m, mr.idle = mr.idle[n-1], mr.idle[:n-1]
	}
	return m, true
}

// put gives back a connection that still works, or closes it once multiRead is off.
func (mr *multiReads) put(m *multiReader) {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.unsupported {
		m.close()
		return
	}
	mr.idle = append(mr.idle, m)
}

// tryMultiRead runs ops as multiReads when the server supports them. ok=false means the caller
// must use the pipelined path (never supported, disabled, or the connection failed this time:
// a later call dials again). queued is how long it waited for a connection.
func (s *Store) tryMultiRead(ctx context.Context, ops []readOp) (res []readResult, requests int, queued time.Duration, ok bool) {
	mr := &s.mreads
	if mr.slots == nil {
		return nil, 0, 0, false // a Store not made by Open
	}
	start := time.Now()
	select {
	case mr.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, time.Since(start), false
	}
	defer func() { <-mr.slots }()
	queued = time.Since(start)
	m, use := mr.take()
	if !use || s.closed.Load() {
		if m != nil {
			m.close()
		}
		return nil, 0, queued, false
	}
	// Read on the server our main session uses: ZooKeeper orders a session's reads after its
	// own writes, but another session on another server of an ensemble may lag them; a
	// session on the same server sees every write that server has acknowledged to us.
	servers := s.servers
	if cur := s.conn.Server(); cur != "" {
		servers = append([]string{cur}, servers...)
		if m != nil && m.addr != cur {
			m.close()
			m = nil
		}
	}
	if m != nil && m.stale() {
		if err := m.ping(ctx); err != nil {
			m.conn.Close()
			m = nil
		}
	}
	if m == nil {
		var err error
		if m, err = dialMultiReader(ctx, servers, s.sessionTimeout); err != nil {
			s.log.Debug().Err(err).Msg("multiRead connection failed; using pipelined reads")
			return nil, 0, queued, false
		}
	}
	res, requests, err := m.read(ctx, ops)
	s.reqs.add(ReqMultiRead, requests)
	if err != nil {
		m.conn.Close()
		if errors.Is(err, errMultiReadUnsupported) {
			mr.mu.Lock()
			mr.unsupported = true
			mr.mu.Unlock()
			s.log.Info().Err(err).Msg("ZooKeeper has no multiRead (before 3.6); snapshots use pipelined reads")
		} else {
			s.log.Debug().Err(err).Msg("multiRead failed; using pipelined reads")
		}
		return nil, requests, queued, false
	}
	mr.put(m)
	for _, r := range res {
		if errors.Is(r.err, zk.ErrNoAuth) {
			// This connection never authenticates; the Store's own session may read what
			// this one may not (Config.Digest), so let it.
			return nil, requests, queued, false
		}
	}
	return res, requests, queued, true
}

func (s *Store) closeMultiRead() {
	mr := &s.mreads
	mr.mu.Lock()
	defer mr.mu.Unlock()
	for _, m := range mr.idle {
		m.close()
	}
	mr.idle = nil
	mr.unsupported = true // connections in use are closed when they come back (put)
}
