package newproto

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The seam between the Server and a relay (package relay, Config.Relay):
// the Server answers the group APIs and ApiVersions itself and hands every
// other request to the relay, which forwards it to a real broker and posts
// the broker's response back into the connection's response order. The
// relay reads each frame itself, so that a relayed request is forwarded as
// it arrives, undecoded.

// Relay forwards the requests the Server does not answer to upstream
// brokers. Package relay implements it.
type Relay interface {
	// Open returns the relay's side of a new client connection.
	Open(c *ClientConn) RelayConn
}

// RelayConn is the relay's side of one client connection.
type RelayConn interface {
	// Next is the connection reader's hook: it reads the next frame
	// (ClientConn.Reader) and either relays it (relayed true: its
	// answer comes later through ClientConn.Post, with seq) or returns
	// it for the Handler (frame, and req when Next had to decode it to
	// decide). err closes the connection; for a frame not begun it is
	// ReadFrameSize's. ctx ends when the connection must stop at once.
	Next(ctx context.Context, seq uint64) (relayed bool, req *Request, frame []byte, err error)
	// APIVersions merges the upstream's ranges for the relayed keys
	// into the Handler's ApiVersions answer.
	APIVersions(ctx context.Context, resp kmsg.Response) (kmsg.Response, error)
	// FetchGate is asked before a relayed Fetch response is written: an
	// error withholds it and closes the connection. until, unless zero,
	// is how long the answer holds: a response not written by then (the
	// process was paused or starved after the answer) is withheld too,
	// and one whose write is still going on is cut, which closes the
	// connection. It runs on the connection's writer, so it must be cheap
	// and must not block.
	FetchGate(now time.Time) (until time.Time, err error)
	// Release takes back a relayed frame (Relayed.Raw) once it was
	// written or dropped: nothing refers to it any more.
	Release(raw []byte)
	// Close closes the connection's upstream side; the connection calls
	// it once its reader stopped, so nothing dials afterwards.
	Close()
}

// Relayed is the answer to a relayed request, written in its turn among
// the connection's responses.
type Relayed struct {
	Seq           uint64 // the seq Next was given
	CorrelationID int32
	Key, Version  int16
	// Raw, when set, is the broker's response frame, size prefix
	// included, written as it is.
	Raw []byte
	// Stream, when set, writes the response as it arrives from the
	// broker (large responses are not buffered).
	Stream func(io.Writer) error
	// Err closes the connection after the responses before this one.
	// With none of the three set, nothing is written (Produce acks=0).
	Err error
}

// ClientConn is a client connection as its relay sees it.
type ClientConn struct{ c *conn }

// Info identifies the connection.
func (cc *ClientConn) Info() ConnInfo { return cc.c.info }

// Reader reads the connection; every frame is read through it.
func (cc *ClientConn) Reader() io.Reader { return cc.c.in }

// MaxFrameBytes is the largest request frame the Server accepts.
func (cc *ClientConn) MaxFrameBytes() int32 { return cc.c.s.cfg.MaxFrameBytes }

// Logger logs for this connection.
func (cc *ClientConn) Logger() *zerolog.Logger { return &cc.c.log }

// Node is the bridge's node as this connection's client must reach it.
func (cc *ClientConn) Node() Broker { return cc.c.s.self(cc.c.info.Local, cc.c.info.role) }

// Post hands a relayed request's answer to the connection's writer. It
// never blocks: the writer has room for every request in flight.
func (cc *ClientConn) Post(r Relayed) {
	cc.c.results <- result{seq: r.Seq, corr: r.CorrelationID, key: r.Key, version: r.Version,
		raw: r.Raw, stream: r.Stream, err: r.Err}
}

// SessionExpired reports whether the connection's SASL session expired (KIP-368): the relay
// then relays nothing but re-authentication, and the connection closes, as a broker closes it.
func (cc *ClientConn) SessionExpired() bool { return cc.c.sessionExpired() }

// Go runs f on its own goroutine, which the connection waits for before
// it is done closing.
func (cc *ClientConn) Go(f func()) {
	cc.c.handlers.Add(1)
	go func() {
		defer cc.c.handlers.Done()
		f()
	}()
}

// UpstreamBroker reports the upstream broker whose listener the
// connection came on (ServeBroker); proxied is false on a bootstrap
// listener (Serve).
func (c ConnInfo) UpstreamBroker() (id int32, proxied bool) { return c.role.broker, c.role.proxied }

// listenerRole says what a listener stands for: the bootstrap listener
// (the bridge's node) or the proxy listener of one upstream broker.
type listenerRole struct {
	proxied bool
	broker  int32 // when proxied
}

// upstreamFailure is an error of an upstream broker (the relay's): the
// reader logs it as such.
type upstreamFailure interface {
	error
	UpstreamBroker() int32
}

// self is the bridge's node as clients must reach it: the advertised
// address, or the host the client dialed and the bootstrap listener's port
// (a client on a proxy listener dialed that broker's port, not ours).
func (s *Server) self(local net.Addr, role listenerRole) Broker {
	var bootstrapPort func() int32
	if role.proxied {
		bootstrapPort = s.bootstrapPort
	}
	return advertisedNode(s.cfg.NodeID, s.cfg.AdvertisedHost, s.cfg.AdvertisedPort, local, bootstrapPort)
}

// bootstrapPort is the port of a bootstrap listener, 0 if none is served.
func (s *Server) bootstrapPort() int32 {
	if a := s.Addr(); a != nil {
		_, p := splitAddr(a)
		return p
	}
	return 0
}

// ServeBroker serves ln as the listener of upstream broker id, as Serve
// does a bootstrap listener: the relay's proxy listeners.
func (s *Server) ServeBroker(ctx context.Context, ln net.Listener, id int32) error {
	return s.serve(ctx, ln, listenerRole{proxied: true, broker: id})
}

// Done is closed when Close begins.
func (s *Server) Done() <-chan struct{} { return s.done }

// ProxyAddrs returns the address of each listener being served with
// ServeBroker, by upstream node id.
func (s *Server) ProxyAddrs() map[int32]net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int32]net.Addr{}
	for ln, role := range s.listeners {
		if role.proxied {
			out[role.broker] = ln.Addr()
		}
	}
	return out
}

// What the relay shares of the frame codec (frame.go).

// ReadFrameSize reads a frame's size prefix and checks it against
// maxBytes. A deadline that passed before any byte of the frame arrived
// is an error the reader tells apart (the stream is still in sync).
func ReadFrameSize(r io.Reader, maxBytes int32) (int32, error) { return readFrameSize(r, maxBytes) }

// ParseRequest decodes a frame (without its size) into a Request; every
// error closes the connection and is counted by its reason.
func ParseRequest(frame []byte) (*Request, error) { return parseRequest(frame) }

// Frame rejection reasons, the values of the frames_rejected_total label.
const (
	RejectHeader  = rejectHeader
	RejectVersion = rejectVersion
	RejectBody    = rejectBody
)

// BadFrame is a frame the connection cannot answer: returned by
// RelayConn.Next, it closes the connection and is counted under reason.
func BadFrame(reason, format string, args ...any) error { return badFrame(reason, format, args...) }

// RejectReason returns the reason of a frame error (BadFrame and the
// codec's own); ok is false for any other error.
func RejectReason(err error) (reason string, ok bool) {
	var fe *frameError
	if errors.As(err, &fe) {
		return fe.reason, true
	}
	return "", false
}

// Serves reports whether the Server answers key itself (the group APIs
// and ApiVersions).
func Serves(key int16) bool {
	_, ok := supported[key]
	return ok
}

// FrameReader reads the primitive types of a frame with kbin's
// sticky-error style: after the first short read every read returns zero
// and OK reports false.
type FrameReader struct{ r frameReader }

// NewFrameReader reads b.
func NewFrameReader(b []byte) FrameReader { return FrameReader{r: frameReader{src: b, ok: true}} }

// Take returns the next n bytes.
func (f *FrameReader) Take(n int) []byte { return f.r.take(n) }

// Int16 reads a big-endian int16.
func (f *FrameReader) Int16() int16 { return f.r.int16() }

// NullableString reads an int16-length string; null is "".
func (f *FrameReader) NullableString() string { return f.r.nullableString() }

// Uvarint reads an unsigned varint.
func (f *FrameReader) Uvarint() uint64 { return f.r.uvarint() }

// SkipTags skips a tagged-field section.
func (f *FrameReader) SkipTags() { f.r.skipTags() }

// OK reports whether every read so far was whole.
func (f *FrameReader) OK() bool { return f.r.ok }

// Rest returns what is left unread.
func (f *FrameReader) Rest() []byte { return f.r.src }
