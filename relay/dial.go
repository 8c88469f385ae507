package relay

// Reaching a broker: the dial, the ApiVersions handshake that starts
// every upstream connection, and what each way of failing means.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// upstreamError is a failure to reach or hear from an upstream broker; the
// connection shell logs it as a warning (the operator's concern), unlike a
// client that leaves.
type upstreamError struct {
	broker int32
	addr   string
	err    error
}

func (e *upstreamError) Error() string {
	return fmt.Sprintf("upstream broker %d (%s): %v", e.broker, e.addr, e.err)
}
func (e *upstreamError) Unwrap() error { return e.err }

// UpstreamBroker says that the error is the upstream broker's: newproto
// logs it as such.
func (e *upstreamError) UpstreamBroker() int32 { return e.broker }

// dial connects to a broker and runs the ApiVersions handshake, recording
// the broker's version table, and whether it is up (setReachable) unless
// ctx ended first (the caller left: that says nothing of the broker). The
// returned reader buffers the connection.
func (u *Upstream) dial(ctx context.Context, id int32) (net.Conn, *bufio.Reader, error) {
	u.mu.Lock()
	b, ok := u.brokers[id]
	var addr string
	if ok {
		addr = b.addr
	}
	u.mu.Unlock()
	if !ok {
		return nil, nil, &upstreamError{broker: id, addr: "?", err: errors.New("not in the upstream broker set")}
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout)
	defer cancel()
	failed := func(err error) (net.Conn, *bufio.Reader, error) {
		if parent.Err() != nil {
			err = fmt.Errorf("%w (%w)", parent.Err(), err)
		} else {
			u.setReachable(id, addr, err)
		}
		return nil, nil, &upstreamError{broker: id, addr: addr, err: err}
	}
	nc, err := u.cfg.Dial(ctx, "tcp", addr)
	if err != nil {
		return failed(fmt.Errorf("dialing: %w", err))
	}
	// The handshake obeys ctx too: a broker that accepts and says
	// nothing must not hold the client.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	br := bufio.NewReaderSize(nc, upstreamReadBuffer)
	versions, err := u.handshake(nc, br)
	if !stop() || err != nil {
		_ = nc.Close()
		if err == nil {
			err = fmt.Errorf("ApiVersions: %w", ctx.Err())
		}
		return failed(err)
	}
	_ = nc.SetDeadline(time.Time{})

	u.mu.Lock()
	if b, ok := u.brokers[id]; ok && b.addr == addr {
		b.versions = versions
	}
	u.mu.Unlock()
	u.setReachable(id, addr, nil)
	return nc, br, nil
}

// upstreamReadBuffer is the read buffer of an upstream connection: it
// holds the small responses that come in a burst (one read for many), and
// the start of a large one, which is streamed (copyResponse).
const upstreamReadBuffer = 64 << 10

// handshake sends ApiVersions v0 and returns the broker's version table.
// Its errors say which way the broker failed to answer: an error wrapping
// errHandshakeClosed for a connection closed or reset before any response
// (a broker older than Kafka 0.10, or something else: explainClosed tells
// which), one wrapping os.ErrDeadlineExceeded for no answer in time (the
// caller's deadline on nc).
func (u *Upstream) handshake(nc net.Conn, br *bufio.Reader) (map[int16]versionRange, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(0)
	start := time.Now()
	resp, err := u.roundTrip(nc, br, req, 0)
	switch {
	case err == nil:
	case closedBeforeResponse(err):
		return nil, &handshakeClosedError{cause: err}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, fmt.Errorf("no answer to ApiVersions within %s: the broker accepts connections but does not answer "+
			"(hung or overloaded, or not speaking the Kafka protocol on this port): %w", time.Since(start).Round(time.Millisecond), err)
	case closedByPeer(err):
		return nil, fmt.Errorf("closed the connection in the middle of its ApiVersions response: %w", err)
	default:
		return nil, fmt.Errorf("ApiVersions: %w", err)
	}
	av := resp.(*kmsg.ApiVersionsResponse)
	if av.ErrorCode != 0 {
		return nil, fmt.Errorf("ApiVersions v0 answered %s", newproto.ErrorCode(av.ErrorCode).Name())
	}
	versions := make(map[int16]versionRange, len(av.ApiKeys))
	for _, k := range av.ApiKeys {
		versions[k.ApiKey] = versionRange{k.MinVersion, k.MaxVersion}
	}
	if _, ok := versions[int16(kmsg.ApiVersions)]; !ok {
		return nil, fmt.Errorf("ApiVersions answer does not list ApiVersions: %w", ErrUpstreamTooOld)
	}
	return versions, nil
}

// errHandshakeClosed is wrapped by handshakeClosedError.
var errHandshakeClosed = errors.New("closed the connection without answering ApiVersions")

// handshakeClosedError is a broker that closed (or reset) the connection
// before answering ApiVersions: a broker older than Kafka 0.10 does, on an
// api key it does not know; so does a listener that is not Kafka's
// PLAINTEXT (SSL, SASL_*, another service) and a broker going down.
type handshakeClosedError struct{ cause error }

func (e *handshakeClosedError) Error() string {
	return fmt.Sprintf("%v (%v)", errHandshakeClosed, e.cause)
}
func (e *handshakeClosedError) Unwrap() []error { return []error{errHandshakeClosed, e.cause} }

// explainClosed tells the two kinds of handshakeClosedError apart (closed,
// from handshake, for the broker at addr): a broker older than 0.10 answers
// Metadata v0, an api key it knows, on a fresh connection; anything else
// closes that one too, or fails otherwise.
func (u *Upstream) explainClosed(ctx context.Context, addr string, closed error) error {
	var hc *handshakeClosedError
	if !errors.As(closed, &hc) {
		return closed
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.DialTimeout)
	defer cancel()
	nc, err := u.cfg.Dial(ctx, "tcp", addr)
	if err == nil {
		stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
		// Metadata v0 with no topics asks for all of them: v0 has no
		// way to ask for none, and naming one could create it on a
		// broker with auto.create.topics.enable.
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(0)
		_, err = u.roundTrip(nc, bufio.NewReader(nc), req, 0)
		stop()
		_ = nc.Close()
	}
	if err == nil {
		return fmt.Errorf("closed the connection on ApiVersions (%v) but answers Metadata v0: a Kafka broker older than 0.10: %w",
			hc.cause, ErrUpstreamTooOld)
	}
	return fmt.Errorf("%w (%v), and a Metadata v0 request too (%v): not a Kafka broker's PLAINTEXT listener "+
		"(an SSL or SASL listener, or another service), or a broker shutting down", errHandshakeClosed, hc.cause, err)
}

// closedByPeer reports an error of a connection the peer closed or reset.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// closedBeforeResponse reports a connection closed or reset before any
// byte of the response (a frame cut short is io.ErrUnexpectedEOF).
func closedBeforeResponse(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// roundTrip writes req with correlation id corr and decodes the response:
// the bridge's own requests, on a connection that carries nothing else at
// the time.
func (u *Upstream) roundTrip(nc net.Conn, br *bufio.Reader, req kmsg.Request, corr int32) (kmsg.Response, error) {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID(u.cfg.ClientID))
	if _, err := nc.Write(f.AppendRequest(nil, req, corr)); err != nil {
		return nil, fmt.Errorf("writing %s: %w", kmsg.NameForKey(req.Key()), err)
	}
	raw, err := readResponseFrame(br, u.cfg.MaxResponseBytes)
	if err != nil {
		return nil, fmt.Errorf("reading %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	if got := responseCorrelationID(raw); got != corr {
		return nil, fmt.Errorf("%s response has correlation id %d, want %d", kmsg.NameForKey(req.Key()), got, corr)
	}
	resp := req.ResponseKind()
	body, err := responseBody(raw, resp.Key(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decoding %s v%d response: %w", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp, nil
}

// readResponseFrame reads one response frame, size prefix included.
func readResponseFrame(r io.Reader, maxBytes int32) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 4 || n > maxBytes {
		return nil, fmt.Errorf("response frame size %d outside [4, %d]", n, maxBytes)
	}
	raw := make([]byte, 4+int(n))
	copy(raw, size[:])
	if _, err := io.ReadFull(r, raw[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %d-byte response frame: %w", n, err)
	}
	return raw, nil
}
