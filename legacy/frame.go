// Package legacy speaks the coordinator-driven consumer protocol of seed 001 ("Coordinator-
// Consumer Communication") for the bridge's legacy members. Its exact wire format, reconstructed
// where the seed is garbled, is docs/legacy-protocol.md.
//
// The codec (frame.go, messages.go, errors.go) is pure: it does no IO except ReadFrame, which
// only cuts frames out of an io.Reader. Encoding is append-style (AppendFrame, Message.AppendTo)
// so callers reuse buffers; decoding (Decode) uses a sticky-error reader in the style of
// franz-go's kbin.Reader: once a read fails every later read returns a zero value, and the first
// failure is reported once at the end, naming the field.
package legacy

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// Version is the protocol version of every message but ConsultRequest, which also has version
// ConsultVersionGroup. It travels in every frame, right after the type id, as Kafka 0.8
// carries api_version after api_key; the seed's 0.7-style frames had no such field, which is
// why docs/legacy-protocol.md adds it ("so it can evolve", DESIGN §5).
const Version int16 = 0

// ConsultVersionGroup is the version of ConsultRequest that names the consumer's group, so that
// a bridge of several can name the group's own coordinator (docs/legacy-protocol.md §5).
const ConsultVersionGroup int16 = 1

// versioned is a message whose frame may carry a version other than Version.
type versioned interface {
	version() int16
	maxVersion() int16
}

// DefaultMaxFrame is the frame size limit ReadFrame applies when given max <= 0 (1 MiB). A
// StartRequest for 10,000 partitions of 100-byte topic names is about 1.2 MB, so coordinators of
// very wide groups should raise it; nothing legitimate comes close by default.
const DefaultMaxFrame = 1 << 20

const (
	sizePrefixLen = 4 // size int32, not counted in itself
	headerLen     = 4 // request_type_id int16 + version int16, counted in size
)

// Type is the request_type_id of a frame. Responses carry their own type id (the request's id
// with the top bit set) so that a reader, which matches responses to requests by order only,
// can check that it got the answer it expected; see docs/legacy-protocol.md §"Type ids".
type Type int16

// responseBit is OR-ed into a request's type id to form its response's. As an int16 it makes
// every response id negative, which no Kafka api_key (0.7 or later) ever is.
const responseBit = -0x8000

// Type ids. 100..104 stay clear of every Kafka request type of 0.7 (0..4) and 0.8+ api keys, so
// a frame sent to the wrong port is reported as an unknown type instead of being misread.
const (
	TypeConsultRequest  Type = 100
	TypeRegisterRequest Type = 101
	TypePingRequest     Type = 102
	TypeStopRequest     Type = 103
	TypeStartRequest    Type = 104

	TypeConsultResponse  = TypeConsultRequest | responseBit  // 0x8064
	TypeRegisterResponse = TypeRegisterRequest | responseBit // 0x8065, sent only to refuse
	TypePingResponse     = TypePingRequest | responseBit     // 0x8066
	TypeStopResponse     = TypeStopRequest | responseBit     // 0x8067
	TypeStartResponse    = TypeStartRequest | responseBit    // 0x8068
)

var typeNames = map[Type]string{
	TypeConsultRequest:   "ConsultRequest",
	TypeRegisterRequest:  "RegisterRequest",
	TypePingRequest:      "PingRequest",
	TypeStopRequest:      "StopRequest",
	TypeStartRequest:     "StartRequest",
	TypeConsultResponse:  "ConsultResponse",
	TypeRegisterResponse: "RegisterResponse",
	TypePingResponse:     "PingResponse",
	TypeStopResponse:     "StopResponse",
	TypeStartResponse:    "StartResponse",
}

// String returns the message name, e.g. "PingResponse", or Type(0x1234) for unknown ids.
func (t Type) String() string {
	if name, ok := typeNames[t]; ok {
		return name
	}
	return "Type(0x" + strconv.FormatUint(uint64(uint16(t)), 16) + ")"
}

// IsResponse reports whether t is a response type id (top bit set).
func (t Type) IsResponse() bool { return t < 0 }

// Response returns the type id of the answer to a request of type t (t itself if t is already a
// response). RegisterRequest's answer exists only as a refusal; PingRequest's has no error code.
func (t Type) Response() Type { return t | responseBit }

// Request returns the type id of the request that a response of type t answers (t itself if t is
// already a request).
func (t Type) Request() Type { return t &^ responseBit }

// newMessage returns a zero message for a known type id, nil otherwise.
func newMessage(t Type) Message {
	switch t {
	case TypeConsultRequest:
		return new(ConsultRequest)
	case TypeConsultResponse:
		return new(ConsultResponse)
	case TypeRegisterRequest:
		return new(RegisterRequest)
	case TypeRegisterResponse:
		return new(RegisterResponse)
	case TypePingRequest:
		return new(PingRequest)
	case TypePingResponse:
		return new(PingResponse)
	case TypeStopRequest:
		return new(StopRequest)
	case TypeStopResponse:
		return new(StopResponse)
	case TypeStartRequest:
		return new(StartRequest)
	case TypeStartResponse:
		return new(StartResponse)
	}
	return nil
}

// ReadFrame reads one frame from r and returns it without its size prefix, ready for Decode.
// It refuses a declared size below the 4-byte header (ErrMalformed) or above max
// (ErrFrameTooLarge) after reading only the 4-byte prefix and before allocating anything for the
// frame, so a hostile or confused peer cannot make the bridge allocate 2 GiB with four bytes.
// max <= 0 means DefaultMaxFrame.
//
// A clean end of stream before the prefix returns io.EOF; a stream that ends inside a frame
// returns an error wrapping io.ErrUnexpectedEOF. Other errors from r are returned wrapped.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	var prefix [sizePrefixLen]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("legacy: read frame size: %w", err)
	}
	size := int64(int32(binary.BigEndian.Uint32(prefix[:])))
	if size < headerLen {
		return nil, fmt.Errorf("legacy: read frame: %w: size %d is below the %d-byte header", ErrMalformed, size, headerLen)
	}
	if size > int64(max) {
		return nil, fmt.Errorf("legacy: read frame: %w: declared size %d exceeds the limit of %d bytes", ErrFrameTooLarge, size, max)
	}
	frame := make([]byte, size)
	if _, err := io.ReadFull(r, frame); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("legacy: read frame of %d bytes: %w", size, err)
	}
	return frame, nil
}

// AppendFrame appends m as a complete frame — size prefix, type id, version, body — to dst.
// m must be non-nil. Values that fail m.Validate (a string over 32767 bytes, say) produce a frame
// the peer rejects; call Validate first on anything not built by the program itself.
func AppendFrame(dst []byte, m Message) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0) // size, patched below
	dst = appendInt16(dst, int16(m.Type()))
	v := Version
	if vm, ok := m.(versioned); ok {
		v = vm.version()
	}
	dst = appendInt16(dst, v)
	dst = m.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-sizePrefixLen))
	return dst
}

// Decode decodes one frame (the bytes after the size prefix, as ReadFrame returns them). The
// result is a pointer to one of the message types of messages.go. Decode never panics and never
// allocates more than a small multiple of len(frame). It rejects unknown type ids
// (ErrUnknownType), versions other than Version (ErrUnsupportedVersion; the returned
// *DecodeError still carries Type so the caller can answer with the right response type) and
// any deviation from docs/legacy-protocol.md, trailing bytes included (ErrMalformed).
// Decoded strings do not alias frame.
func Decode(frame []byte) (Message, error) {
	r := reader{src: frame}
	return r.decode()
}

func (r *reader) decode() (Message, error) {
	t := Type(r.int16("request_type_id"))
	v := r.int16("version")
	if r.err != nil {
		return nil, r.err
	}
	m := newMessage(t)
	if m == nil {
		return nil, &DecodeError{Type: t, Version: v, Field: "request_type_id", Offset: 0,
			Err: fmt.Errorf("%w: %d (0x%04x)", ErrUnknownType, t, uint16(t))}
	}
	top := Version
	vm, isVersioned := m.(versioned)
	if isVersioned {
		top = vm.maxVersion()
	}
	if v < Version || v > top {
		return nil, &DecodeError{Type: t, Version: v, Field: "version", Offset: 2,
			Err: fmt.Errorf("%w: %v version %d (this codec speaks versions %d to %d)", ErrUnsupportedVersion, t, v, Version, top)}
	}
	r.version = v
	m.readFrom(r)
	if r.err != nil {
		r.err.Type, r.err.Version = t, v
		return nil, r.err
	}
	if rest := len(r.src) - r.off; rest != 0 {
		return nil, &DecodeError{Type: t, Version: v, Offset: r.off,
			Err: fmt.Errorf("%w: %d trailing bytes after the body at offset %d", ErrMalformed, rest, r.off)}
	}
	return m, nil
}

// reader is the sticky-error decoder. Reads past a failure return zero values; the first
// failure is kept in err with the wire name of the field (including array indexes) that caused it.
type reader struct {
	version int16 // the frame's
	src     []byte
	off     int
	err     *DecodeError
	scope   []scope // enclosing array elements, outermost first

	// trace, when set (tests only), is told about every field read successfully: its path,
	// its kind ("int8" for booleans, "int16", "int32", "int64", "string", "count") and its span.
	trace func(path, kind string, start, end int)
}

type scope struct {
	array string
	index int
}

func (r *reader) path(field string) string {
	if len(r.scope) == 0 {
		return field
	}
	p := ""
	for _, s := range r.scope {
		p += s.array + "[" + strconv.Itoa(s.index) + "]."
	}
	return p + field
}

func (r *reader) fail(field string, format string, args ...any) {
	if r.err != nil {
		return
	}
	r.err = &DecodeError{Field: r.path(field), Offset: r.off,
		Err: fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)}
}

func (r *reader) traced(field, kind string, start int) {
	if r.trace != nil {
		r.trace(r.path(field), kind, start, r.off)
	}
}

func (r *reader) remaining() int { return len(r.src) - r.off }

// take returns the next n bytes, or nil (and a sticky error) if there are fewer.
func (r *reader) take(field, kind string, n int) []byte {
	if r.err != nil {
		return nil
	}
	if r.remaining() < n {
		r.fail(field, "%s needs %d bytes, %d left", kind, n, r.remaining())
		return nil
	}
	b := r.src[r.off : r.off+n]
	r.off += n
	r.traced(field, kind, r.off-n)
	return b
}

// peekInt32 returns the next int32 without consuming it; ok is false after a failure or when
// fewer than 4 bytes are left.
func (r *reader) peekInt32() (v int32, ok bool) {
	if r.err != nil || r.remaining() < 4 {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(r.src[r.off:])), true
}

// bool reads a boolean, an int8 that must be 0 or 1 (anything else is rejected so that every
// accepted frame re-encodes to the same bytes).
func (r *reader) bool(field string) bool {
	if r.err != nil {
		return false
	}
	if r.remaining() >= 1 && r.src[r.off] > 1 {
		r.fail(field, "boolean must be 0 or 1, got %d", r.src[r.off])
		return false
	}
	b := r.take(field, "int8", 1)
	return b != nil && b[0] == 1
}

func (r *reader) int16(field string) int16 {
	if b := r.take(field, "int16", 2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) int32(field string) int32 {
	if b := r.take(field, "int32", 4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *reader) int64(field string) int64 {
	if b := r.take(field, "int64", 8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

// string reads an int16 length and that many bytes of UTF-8. Version 0 has no nullable string,
// so the null length -1 is rejected like any other negative length.
func (r *reader) string(field string) string {
	if r.err != nil {
		return ""
	}
	start := r.off
	if r.remaining() < 2 {
		r.fail(field, "string length needs 2 bytes, %d left", r.remaining())
		return ""
	}
	n := int(int16(binary.BigEndian.Uint16(r.src[r.off:])))
	switch {
	case n == -1:
		r.fail(field, "null string (length -1) is not allowed here")
		return ""
	case n < 0:
		r.fail(field, "negative string length %d", n)
		return ""
	case n > r.remaining()-2:
		r.fail(field, "string length %d exceeds the %d bytes left", n, r.remaining()-2)
		return ""
	}
	b := r.src[r.off+2 : r.off+2+n]
	if !utf8.Valid(b) {
		r.fail(field, "string is not valid UTF-8")
		return ""
	}
	r.off += 2 + n
	r.traced(field, "string", start)
	return string(b)
}

// count reads an array's int32 element count. Version 0 has no nullable array, so -1 is
// rejected. minElem is the smallest encoding of one element: a count that could not fit in the
// bytes left is rejected before anything is allocated for it.
func (r *reader) count(field string, minElem int) int {
	if r.err != nil {
		return 0
	}
	if r.remaining() < 4 {
		r.fail(field, "array count needs 4 bytes, %d left", r.remaining())
		return 0
	}
	n := int64(int32(binary.BigEndian.Uint32(r.src[r.off:])))
	switch {
	case n == -1:
		r.fail(field, "null array (count -1) is not allowed here")
		return 0
	case n < 0:
		r.fail(field, "negative array count %d", n)
		return 0
	case n*int64(minElem) > int64(r.remaining()-4):
		r.fail(field, "array count %d needs at least %d bytes, %d left", n, n*int64(minElem), r.remaining()-4)
		return 0
	}
	r.off += 4
	r.traced(field, "count", r.off-4)
	return int(n)
}

// readArray reads an int32 count and then that many elements with read. It returns nil for an
// empty array (the canonical decoded form) and for any failure.
func readArray[T any](r *reader, field string, minElem int, read func(*reader, *T)) []T {
	n := r.count(field, minElem)
	if n == 0 {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		r.scope = append(r.scope, scope{field, i})
		read(r, &out[i])
		r.scope = r.scope[:len(r.scope)-1]
		if r.err != nil {
			return nil
		}
	}
	return out
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendInt16(dst []byte, v int16) []byte {
	return binary.BigEndian.AppendUint16(dst, uint16(v))
}

func appendInt32(dst []byte, v int32) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(v))
}

func appendInt64(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

func appendString(dst []byte, s string) []byte {
	dst = appendInt16(dst, int16(len(s)))
	return append(dst, s...)
}

func appendArray[T any](dst []byte, elems []T, appendElem func([]byte, *T) []byte) []byte {
	dst = appendInt32(dst, int32(len(elems)))
	for i := range elems {
		dst = appendElem(dst, &elems[i])
	}
	return dst
}

// checkString reports whether s can be encoded: at most 32767 bytes of valid UTF-8.
func checkString(msg Type, field, s string) error {
	if len(s) > math.MaxInt16 {
		return fmt.Errorf("legacy: %v: field %s: %w: string of %d bytes exceeds 32767", msg, field, ErrMalformed, len(s))
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("legacy: %v: field %s: %w: string is not valid UTF-8", msg, field, ErrMalformed)
	}
	return nil
}

// checkCount reports whether an array of n elements can be encoded with an int32 count.
func checkCount(msg Type, field string, n int) error {
	if int64(n) > math.MaxInt32 {
		return fmt.Errorf("legacy: %v: field %s: %w: %d elements exceed the int32 count", msg, field, ErrMalformed, n)
	}
	return nil
}
