package newproto

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file is the pure codec of the connection shell: reading one
// size-prefixed frame, parsing the request header and body, and encoding a
// response with its header. conn.go does the IO around it; fuzz targets
// call it directly.
//
// The Kafka request frame (https://kafka.apache.org/protocol#protocol_messages):
//
//	size           int32  (bytes that follow)
//	api_key        int16
//	api_version    int16
//	correlation_id int32
//	client_id      nullable string, int16 length (absent in ControlledShutdown v0)
//	tagged fields  uvarint count + (uvarint tag, uvarint size, bytes)* (header v2, flexible versions only)
//	body
//
// Even in flexible versions the client id stays a non-compact string
// (KIP-482 keeps it so that a broker of any age can read the header of an
// ApiVersions request).

// Request is one decoded request.
type Request struct {
	// Msg is the decoded body; Msg.Key() and Msg.GetVersion() are the
	// header's api key and version. An ApiVersions request whose version
	// is above our maximum has an empty body (KIP-511: a broker cannot
	// parse a version it does not know).
	Msg kmsg.Request
	// CorrelationID is echoed in the response header.
	CorrelationID int32
	// ClientID is the header's client id; Kafka treats null as "".
	ClientID string
	// Conn identifies the connection the request came on.
	Conn ConnInfo

	// later is closed once the connection read a request after this one,
	// or stopped reading (Later).
	later chan struct{}

	// bodyAt is where the body starts in the frame parseRequest decoded;
	// 0 when the body was not decoded (an ApiVersions of a version above
	// ours).
	bodyAt int
}

// Later returns a channel that is closed once the connection has read a
// request after this one (relayed ones included), or stops reading. A
// handler that could take its time over an answer (a held heartbeat)
// answers when it closes: responses go out in request order, so the
// next answer waits for this one. Nil for a request that did not come
// from a connection.
func (r *Request) Later() <-chan struct{} { return r.later }

// ConnInfo identifies a client connection.
type ConnInfo struct {
	// ID is unique among the connections of one Server.
	ID uint64
	// Remote is the client's address, Local the address it dialed.
	Remote, Local net.Addr
	// TLS is the connection's TLS state (its client certificate with mutual TLS); nil on a
	// plaintext listener.
	TLS *tls.ConnectionState
	// Principal is who the connection authenticated as: "User:<name>" after SASL, the mapped
	// certificate subject with mutual TLS, else authz.Anonymous ("User:ANONYMOUS").
	Principal string

	role listenerRole // the listener it came on (UpstreamBroker)
}

// frameError is a frame the shell cannot answer: the connection is closed.
// reason is the metric label.
type frameError struct {
	reason string
	err    error
}

func (e *frameError) Error() string { return e.err.Error() }
func (e *frameError) Unwrap() error { return e.err }

func badFrame(reason, format string, args ...any) error {
	return &frameError{reason: reason, err: fmt.Errorf(format, args...)}
}

// Frame rejection reasons, the values of the frames_rejected_total label.
const (
	rejectSize    = "size"        // size < 0 or > MaxFrameBytes
	rejectHeader  = "header"      // header short or malformed
	rejectAPIKey  = "api_key"     // key unknown to kmsg
	rejectVersion = "api_version" // version kmsg cannot decode
	rejectBody    = "body"        // body does not decode at its version
	// bytes after the body: more than one request in the frame
	rejectTrailing = "trailing_bytes"
)

// errNoFrame is a read deadline that passed before a frame began.
var errNoFrame = errors.New("no frame before the read deadline")

// readFrame reads one frame and returns what follows the size. It checks
// the size against maxBytes before allocating anything, so a hostile or
// garbled size costs nothing.
func readFrame(r io.Reader, maxBytes int32) ([]byte, error) {
	n, err := readFrameSize(r, maxBytes)
	if err != nil {
		return nil, err
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(r, frame); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %d-byte frame: %w", n, err)
	}
	return frame, nil
}

// readFrameSize reads a frame's size prefix and checks it against maxBytes.
func readFrameSize(r io.Reader, maxBytes int32) (int32, error) {
	var size [4]byte
	if n, err := io.ReadFull(r, size[:]); err != nil {
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			// Nothing of a frame was read: the stream is still in
			// sync and the caller may decide to keep waiting.
			return 0, fmt.Errorf("%w: %w", errNoFrame, err)
		}
		return 0, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > maxBytes {
		return 0, badFrame(rejectSize, "frame size %d outside [0, %d]", n, maxBytes)
	}
	return n, nil
}

// parseRequest decodes a frame (without its size) into a Request. It never
// panics on any input; every error is a *frameError.
func parseRequest(frame []byte) (*Request, error) {
	b := frameReader{src: frame, ok: true}
	key := b.int16()
	version := b.int16()
	corr := b.int32()
	if !b.ok {
		return nil, badFrame(rejectHeader, "header shorter than 8 bytes (%d)", len(frame))
	}
	msg := kmsg.RequestForKey(key)
	if msg == nil {
		// Kafka fails RequestHeader.parse for an unknown key and closes
		// the connection; there is no response type to answer with.
		return nil, badFrame(rejectAPIKey, "unknown api key %d", key)
	}
	msg.SetVersion(version)
	var clientID string
	if key != int16(kmsg.ControlledShutdown) || version != 0 {
		clientID = b.nullableString()
	}
	if msg.IsFlexible() {
		b.skipTags()
	}
	if !b.ok {
		return nil, badFrame(rejectHeader, "malformed %s v%d request header", kmsg.NameForKey(key), version)
	}
	req := &Request{Msg: msg, CorrelationID: corr, ClientID: clientID}

	if key == int16(kmsg.ApiVersions) && version > apiVersionsMax() {
		// KIP-511: the body of an ApiVersions version we do not know is
		// not parsed; the answer is UNSUPPORTED_VERSION at v0.
		return req, nil
	}
	if version < 0 || version > msg.MaxVersion() {
		// Kafka closes the connection for a version it does not serve
		// (SocketServer.parseRequestHeader): without the schema of
		// that version the body cannot be read, nor the response
		// shaped.
		return nil, badFrame(rejectVersion, "%s v%d cannot be decoded (codec knows v0-v%d)", kmsg.NameForKey(key), version, msg.MaxVersion())
	}
	if err := msg.ReadFrom(b.src); err != nil {
		return nil, &frameError{reason: rejectBody, err: fmt.Errorf("decoding %s v%d body: %w", kmsg.NameForKey(key), version, err)}
	}
	req.bodyAt = len(frame) - len(b.src)
	return req, nil
}

// checkWhole rejects a frame that holds more than the request parseRequest
// decoded from it: a frame is exactly one request, and bytes after its body
// (a second request concatenated into the frame, or garbage) make it
// malformed. Only requests the bridge answers itself are checked; a relayed
// frame is the upstream broker's to judge.
//
// kmsg's decoders do not report how much they read, but they read a frame
// front to back, each read depending only on what came before it: a body
// whose decoding does not need its last byte decodes from all but that
// byte too. So the body is decoded once more without its last byte (with
// UnsafeReadFrom, which copies no strings): success means trailing bytes.
func checkWhole(frame []byte, req *Request) error {
	if req.bodyAt == 0 || req.bodyAt >= len(frame) {
		return nil // not decoded, or an empty body: nothing can trail it
	}
	key, version := req.Msg.Key(), req.Msg.GetVersion()
	probe := kmsg.RequestForKey(key)
	probe.SetVersion(version)
	body := frame[req.bodyAt:]
	if decodeProbe(probe, body[:len(body)-1]) != nil {
		return nil // the body needs every byte of the frame
	}
	return badFrame(rejectTrailing, "%s v%d: bytes after the request body in its %d-byte frame (a frame must hold exactly one request)",
		kmsg.NameForKey(key), version, len(frame))
}

// decodeProbe decodes src into probe, without copying strings when the
// type can (every kmsg request can; the result is thrown away).
func decodeProbe(probe kmsg.Request, src []byte) error {
	if u, ok := probe.(interface{ UnsafeReadFrom([]byte) error }); ok {
		return u.UnsafeReadFrom(src)
	}
	return probe.ReadFrom(src)
}

// appendResponse appends the size, the response header and the body.
// Flexible responses use header v1 (correlation id + tagged fields), all
// others header v0, except ApiVersions, whose response header is always v0
// so that a client that does not know the broker yet can read it (KIP-511).
func appendResponse(dst []byte, corr int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // size, patched below
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		dst = append(dst, 0) // no tagged fields
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// frameReader reads the header with kbin's sticky-error style: after the
// first short read every read returns zero and ok stays false.
type frameReader struct {
	src []byte
	ok  bool
}

func (b *frameReader) take(n int) []byte {
	if !b.ok || n < 0 || len(b.src) < n {
		b.fail()
		return nil
	}
	p := b.src[:n]
	b.src = b.src[n:]
	return p
}

func (b *frameReader) fail() { b.ok, b.src = false, nil }

func (b *frameReader) int16() int16 {
	if p := b.take(2); p != nil {
		return int16(binary.BigEndian.Uint16(p))
	}
	return 0
}

func (b *frameReader) int32() int32 {
	if p := b.take(4); p != nil {
		return int32(binary.BigEndian.Uint32(p))
	}
	return 0
}

func (b *frameReader) nullableString() string {
	n := b.int16()
	if n < 0 {
		return "" // null; Kafka treats a null client id as ""
	}
	return string(b.take(int(n)))
}

func (b *frameReader) uvarint() uint64 {
	if !b.ok {
		return 0
	}
	v, n := binary.Uvarint(b.src)
	if n <= 0 {
		b.fail()
		return 0
	}
	b.src = b.src[n:]
	return v
}

// skipTags skips a tagged-field section; the header defines no tags we use.
func (b *frameReader) skipTags() {
	for n := b.uvarint(); n > 0 && b.ok; n-- {
		b.uvarint() // tag
		size := b.uvarint()
		if size > uint64(len(b.src)) {
			b.fail()
			return
		}
		b.take(int(size))
	}
}
