package relay

// One client connection's relay: which requests it forwards, how, and
// the upstream connection it forwards them on.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// relayConn is the relay state of one client connection: its upstream
// connection, dialed on first use.
type relayConn struct {
	p  *Proxy
	c  *newproto.ClientConn
	in io.Reader // c's
	// broker is the upstream broker whose proxy listener c came on;
	// proxied is false on the bootstrap listener.
	broker  int32
	proxied bool

	mu     sync.Mutex
	up     *upConn
	lost   error // requests were lost upstream: the client connection is closing
	closed bool
	// pinned is the upstream connection the client authenticated on (sasl.go): the
	// only one it may use.
	pinned *upConn

	// fetched: the client fetched on this proxy listener; told: a Fetch
	// was refused since the proxy drains (drain.go).
	fetched, told atomic.Bool
	// produced: a Produce was relayed on this proxy listener (drain.go:
	// Producers); producerTold: a Produce was refused since RefuseProducers.
	produced, producerTold atomic.Bool
	// refreshed is the count of Proxy.Refresh calls this connection's client has
	// been made to refresh its metadata for (drain.go).
	refreshed atomic.Int64
}

// Open is the Server's hook for a new client connection
// (newproto.Relay).
func (p *Proxy) Open(c *newproto.ClientConn) newproto.RelayConn {
	rc := &relayConn{p: p, c: c, in: c.Reader()}
	rc.refreshed.Store(p.refresh.Load())
	rc.broker, rc.proxied = c.Info().UpstreamBroker()
	p.track(rc, true)
	return rc
}

// Frames larger than these are not buffered whole: a request is read up
// to relayHeadBytes, which holds everything the relay reads of it (the
// header and, for Produce, the transactional id and acks, unless a client
// id or transactional id is unusually long: then the whole frame is read),
// and the rest copied to the broker as it arrives; a response over
// relayStreamBytes is copied to the client as it arrives. Cut-through
// keeps the relay's latency to one hop instead of a frame's transfer time,
// and its memory to a few kilobytes per request however large the frames
// (Fetch responses are up to fetch.max.bytes, 50 MiB by default). On
// Linux the copies are splice(2)s between the two sockets.
const (
	relayHeadBytes   = 4 << 10
	relayStreamBytes = 64 << 10
)

// coordinatorTransaction is FindCoordinatorRequest.CoordinatorType for a
// transaction coordinator, which the relay asks the real cluster for.
const coordinatorTransaction int8 = 1

// Next is the reader's hook (newproto.RelayConn): it reads the next frame
// and either relays it (relayed true) or returns it for the Handler
// (frame, and req when Next had to decode it to decide). err closes the
// connection; it is newproto.ReadFrameSize's for a frame not begun.
func (rc *relayConn) Next(ctx context.Context, seq uint64) (relayed bool, req *newproto.Request, frame []byte, err error) {
	c := rc.c
	n, err := newproto.ReadFrameSize(rc.in, c.MaxFrameBytes())
	if err != nil {
		return false, nil, nil, err
	}
	head := rc.p.bufs.get(int(min(n, relayHeadBytes)))
	if _, err := io.ReadFull(rc.in, head); err != nil {
		return false, nil, nil, shortFrame(n, err)
	}
	// whole reads the rest of the frame after head.
	whole := func() ([]byte, error) {
		if int(n) == len(head) {
			return head, nil
		}
		f := make([]byte, n)
		got := copy(f, head)
		rc.p.bufs.put(head)
		head = f
		if _, err := io.ReadFull(rc.in, f[got:]); err != nil {
			return nil, shortFrame(n, err)
		}
		return f, nil
	}
	h, err := peekHeader(head)
	if err != nil {
		frame, err := whole()
		return false, nil, frame, err // newproto.ParseRequest rejects it
	}
	if c.SessionExpired() && routeOf(h.key) != routeLocal {
		// KIP-368: a broker closes a connection whose session expired at its next
		// request; newproto does for the requests it answers.
		return false, nil, nil, errSessionExpired
	}
	p := &pendingReq{seq: seq, corr: h.corr, key: h.key, version: h.version}
	switch routeOf(h.key) {
	case routeLocal, routeRefuse:
		frame, err := whole()
		return false, nil, frame, err

	case routeFindCoordinator:
		if head, err = whole(); err != nil {
			return false, nil, nil, err
		}
		req, err := newproto.ParseRequest(head)
		if err != nil {
			return false, nil, nil, err
		}
		if req.Msg.(*kmsg.FindCoordinatorRequest).CoordinatorType != coordinatorTransaction {
			return false, req, head, nil
		}
		p.rewrite = rc.rewriter(h, (*addressBook).rewriteFindCoordinator)

	case routeRewrite:
		if kmsg.ResponseForKey(h.key).MaxVersion() < h.version || h.version < 0 {
			return false, nil, nil, newproto.BadFrame(newproto.RejectVersion, "%s v%d cannot be rewritten (codec knows v0-v%d)",
				kmsg.NameForKey(h.key), h.version, kmsg.ResponseForKey(h.key).MaxVersion())
		}
		edit := (*addressBook).rewriteMetadata
		if h.key == int16(kmsg.DescribeCluster) {
			edit = (*addressBook).rewriteDescribeCluster
		}
		p.rewrite = rc.rewriter(h, edit)

	case routeRelay:
		if h.key == int16(kmsg.Fetch) {
			// Only a Fetch marks the connection as fetching (drain.go: Untold):
			// a connection that produced or listed offsets here is reached by
			// no Fetch refusal.
			if refuse, refresh := rc.refusesFetch(); refuse {
				if err := rc.answerFetch(seq, h, refresh, whole); err != nil {
					return false, nil, nil, err
				}
				return true, nil, nil, nil
			}
		}
		if h.key == int16(kmsg.Produce) {
			answered, noResponse, err := rc.inspectProduce(seq, h, n, head, whole)
			if err != nil || answered {
				return answered, nil, nil, err
			}
			if noResponse {
				p = nil
			}
		}
	}

	rc.p.metrics.relayed(h.key)
	up, err := rc.upstream(ctx)
	if err != nil {
		return false, nil, nil, err
	}
	queued, err := up.send(p, n, head, rc.in)
	if !queued && errors.Is(err, errRetired) {
		// Retired since upstream returned it (heldfetch.go), nothing of
		// the frame sent: on a new one.
		if up, err = rc.upstream(ctx); err != nil {
			return false, nil, nil, err
		}
		queued, err = up.send(p, n, head, rc.in)
	}
	rc.p.bufs.put(head) // written: nothing refers to it
	switch {
	case err != nil && (queued || int(n) > len(head)):
		// The frame may have gone out in part, or the client's
		// stream stopped in the middle of it: neither stream can be
		// trusted. The upstream connection fails what it has
		// pending, this request included.
		return false, nil, nil, err
	case err != nil:
		c.Post(newproto.Relayed{Seq: seq, CorrelationID: h.corr, Key: h.key, Version: h.version,
			Err: &upstreamError{broker: up.broker, addr: up.addr, err: err}})
	case queued:
		// Answered by up.run, with a response or an error, unless a Refresh
		// came since refusesFetch looked and missed it (heldfetch.go).
		if n := rc.p.refresh.Load(); h.key == int16(kmsg.Fetch) && rc.proxied && rc.refreshed.Load() < n {
			rc.answerHeld(n)
		}
	default:
		// acks=0: nothing to write; the writer frees the slot in
		// its turn.
		c.Post(newproto.Relayed{Seq: seq, CorrelationID: h.corr, Key: h.key, Version: h.version})
	}
	return true, nil, nil, nil
}

// answerFetch answers a Fetch refusesFetch refused (refresh: its Refresh
// count, 0 for a drain's refusal). whole is Next's.
func (rc *relayConn) answerFetch(seq uint64, h relayHeader, refresh int64, whole func() ([]byte, error)) error {
	head, err := whole()
	if err != nil {
		return err
	}
	raw, full, err := refuseFetch(head)
	rc.p.bufs.put(head)
	if err != nil {
		return err
	}
	if refresh == 0 {
		rc.told.Store(true)
		rc.p.metrics.failure("draining")
	} else {
		if full {
			rc.refreshed.Store(refresh)
		}
		rc.p.metrics.failure("refresh")
	}
	rc.c.Post(newproto.Relayed{Seq: seq, CorrelationID: h.corr, Key: h.key, Version: h.version, Raw: raw})
	return nil
}

// inspectProduce reads a Produce's acks (noResponse: acks=0, the broker
// sends nothing) and, once the proxy refuses producers (drain.go:
// RefuseProducers), answers it here instead of relaying it (answered).
// whole is Next's: it reads the rest of the frame after head.
func (rc *relayConn) inspectProduce(seq uint64, h relayHeader, n int32, head []byte, whole func() ([]byte, error)) (answered, noResponse bool, err error) {
	if rc.proxied {
		rc.produced.Store(true)
	}
	acks, err := produceAcks(head, h.version)
	if err != nil && int(n) > len(head) {
		// A long client or transactional id: acks lies past the head.
		if head, err = whole(); err == nil {
			acks, err = produceAcks(head, h.version)
		}
	}
	switch {
	case err != nil:
		return false, false, err
	case acks == 0:
		return false, true, nil
	case !rc.refusesProduce():
		return false, false, nil
	}
	if head, err = whole(); err != nil {
		return false, false, err
	}
	raw, err := refuseProduce(head)
	rc.p.bufs.put(head)
	if err != nil {
		return false, false, err
	}
	rc.producerTold.Store(true)
	rc.p.metrics.failure("draining")
	rc.c.Post(newproto.Relayed{Seq: seq, CorrelationID: h.corr, Key: h.key, Version: h.version, Raw: raw})
	return true, false, nil
}

// shortFrame is a frame that ended early: the client closed or stalled.
func shortFrame(n int32, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading %d-byte frame: %w", n, err)
}

// rewriter returns the response rewrite for a request of this connection.
// The address book is taken when the response arrives, so a proxy
// listener opened meanwhile is in it, and once no peer that just hung up
// on this bridge awaits its probe (newproto.PeerSettling: a killed
// bridge's clients ask for Metadata the moment their fetches through it
// end, and must not be told its addresses).
func (rc *relayConn) rewriter(h relayHeader, edit func(*addressBook, kmsg.Response)) func([]byte) ([]byte, error) {
	return func(raw []byte) ([]byte, error) {
		if rc.p.cfg.Peers != nil {
			newproto.AwaitPeersSettled(context.Background(), rc.p.cfg.Peers)
		}
		book := rc.p.addressBook(rc.c)
		return rewriteResponse(raw, h.key, h.version, func(r kmsg.Response) { edit(book, r) })
	}
}

// upstream returns the connection's live upstream connection, dialing one
// if there is none: to the listener's broker, or for the bootstrap
// listener to the first broker that accepts, starting at an offset that
// spreads connections over the brokers.
func (rc *relayConn) upstream(ctx context.Context) (*upConn, error) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	switch {
	case rc.closed:
		return nil, net.ErrClosed
	case rc.lost != nil:
		return nil, rc.lost
	case rc.up != nil && rc.up.failed() == nil:
		return rc.up, nil
	case rc.pinned != nil:
		return nil, &upstreamError{broker: rc.pinned.broker, addr: rc.pinned.addr, err: errUnpinned}
	}
	rc.up = nil

	var candidates []int32
	if rc.proxied {
		candidates = []int32{rc.broker}
	} else {
		ids := rc.p.up.brokerIDs()
		if len(ids) == 0 {
			return nil, errors.New("no upstream brokers")
		}
		start := int(rc.c.Info().ID % uint64(len(ids)))
		candidates = append(ids[start:], ids[:start]...)
		// Brokers known to be down last: they are tried, but
		// only when no other answers.
		down := rc.p.up.downBrokers()
		slices.SortStableFunc(candidates, func(a, b int32) int {
			return cmpBool(down[a], down[b])
		})
	}
	var errs []error
	for _, id := range candidates {
		nc, br, err := rc.p.up.dial(ctx, id)
		if err != nil {
			rc.p.metrics.failure("dial")
			errs = append(errs, err)
			continue
		}
		u := &upConn{
			broker:  id,
			addr:    nc.RemoteAddr().String(),
			nc:      nc,
			br:      br,
			timeout: rc.p.up.cfg.RequestTimeout,
			maxResp: rc.p.up.cfg.MaxResponseBytes,
			bufs:    rc.p.bufs,
			gone:    func() { rc.p.suspect(id) },
			closed:  make(chan struct{}),
			post:    rc.c.Post,
			lost:    rc.setLost,
		}
		rc.up = u
		rc.p.metrics.upstreamOpen.Inc()
		rc.c.Go(func() {
			defer rc.p.metrics.upstreamOpen.Dec()
			u.run()
		})
		rc.c.Logger().Debug().Int32("broker", id).Str("upstream", u.addr).Msg("upstream connection opened")
		return u, nil
	}
	return nil, errors.Join(errs...)
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// setLost records that requests were lost upstream: the client connection
// is closing (its writer reaches the error result), so no new upstream
// connection is dialed for it.
func (rc *relayConn) setLost(err error) {
	rc.p.metrics.failure("lost")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.lost == nil {
		rc.lost = err
	}
}

// versions returns the upstream version table this connection's
// ApiVersions answer is built from: the one learned by the last handshake
// with the broker (for the bootstrap listener, what every known broker
// serves), or if there is none yet, the one the handshake of this
// connection's own upstream connection learns. A client that only talks to
// the group coordinator thus costs no upstream connection.
func (rc *relayConn) versions(ctx context.Context) (map[int16]versionRange, error) {
	if rc.proxied {
		if v := rc.p.up.versionsOf(rc.broker); v != nil {
			return v, nil
		}
	} else if v := rc.p.up.commonVersions(); v != nil {
		return v, nil
	}
	up, err := rc.upstream(ctx)
	if err != nil {
		return nil, err
	}
	if rc.proxied {
		if v := rc.p.up.versionsOf(up.broker); v != nil {
			return v, nil
		}
	} else if v := rc.p.up.commonVersions(); v != nil {
		return v, nil
	}
	// The broker was replaced in the set since the dial; the client
	// reconnects and asks again.
	return nil, &upstreamError{broker: up.broker, addr: up.addr, err: errors.New("version table unknown")}
}

// APIVersions is the hook for ApiVersions answers (newproto.RelayConn):
// the Handler's table merged with the upstream's.
func (rc *relayConn) APIVersions(ctx context.Context, resp kmsg.Response) (kmsg.Response, error) {
	av, ok := resp.(*kmsg.ApiVersionsResponse)
	if !ok || len(av.ApiKeys) == 0 {
		return resp, nil // INVALID_REQUEST: no table
	}
	// The KIP-511 answer (UNSUPPORTED_VERSION at v0) is merged too: it
	// carries the whole table, and kgo uses that table as it is instead
	// of asking again.

	v, err := rc.versions(ctx)
	if err != nil {
		return nil, err
	}
	av.ApiKeys = mergeAPIVersions(av.ApiKeys, v)
	return av, nil
}

// FetchGate asks Config.FetchGate whether a relayed Fetch response may be
// written now, and until when, and counts a refusal.
func (rc *relayConn) FetchGate(now time.Time) (time.Time, error) {
	if rc.p.cfg.FetchGate == nil {
		return time.Time{}, nil
	}
	until, err := rc.p.cfg.FetchGate(now)
	if err != nil {
		rc.p.metrics.failure("fetch_gated")
	}
	return until, err
}

// Release recycles a relayed response frame the writer is done with.
func (rc *relayConn) Release(raw []byte) { rc.p.bufs.put(raw) }

// Close closes the upstream connection; its goroutine then fails what was
// in flight (nobody reads it: the client connection is gone) and exits.
func (rc *relayConn) Close() {
	rc.p.track(rc, false)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.closed = true
	if rc.up != nil {
		rc.up.fail(net.ErrClosed)
	}
}
