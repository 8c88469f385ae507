package relay

// Refresh tells a client to refresh its metadata at its next Fetch (drain.go). A consumer's Fetch
// is a long poll: the broker holds it until records come or the client's fetch.max.wait passes
// (500 ms for the Java client, 5 s for kgo), and its client sends the next one only then. A member
// of a group whose coordinator died, fetching only through this bridge, thus learned that the dead
// bridge left Metadata up to fetch.max.wait after it left, and then in two more round trips (an
// incremental fetch refused FETCH_SESSION_ID_NOT_FOUND, the full one NOT_LEADER_OR_FOLLOWER),
// while its heartbeat's group lookups went on meeting the dead bridge's addresses: two refused in a
// row end a kgo member's session (traced in the crash benchmark: docs/benchmarks.md).
//
// So Refresh also answers at once the Fetches already relayed on the proxy listeners and not
// answered yet: FETCH_SESSION_TOPIC_ID_ERROR, with no partition. Both kgo and the Java client reset
// their fetch session on it and refresh their metadata (kgo at once, the Java client at its next
// poll), in this one round trip. The broker's late answer to such a Fetch is read and dropped: the
// client never sees its records, and fetches them again from the same offsets. The error exists
// from Fetch v13 (topic ids); an older Fetch ends as before, at its broker's answer.

import (
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// heldFetchMinVersion is the first Fetch version that has FETCH_SESSION_TOPIC_ID_ERROR.
const heldFetchMinVersion = 13

// answerHeldFetches answers the Fetches relayed on the proxy listeners and not answered yet, for
// Refresh number n.
func (p *Proxy) answerHeldFetches(n int64) {
	p.connsMu.Lock()
	conns := make([]*relayConn, 0, len(p.conns))
	for rc := range p.conns {
		if rc.proxied {
			conns = append(conns, rc)
		}
	}
	p.connsMu.Unlock()
	for _, rc := range conns {
		rc.answerHeld(n)
	}
}

// answerHeld answers this connection's Fetches relayed and not answered yet, unless its client was
// told of Refresh number n already.
func (rc *relayConn) answerHeld(n int64) {
	if rc.refreshed.Load() >= n {
		return
	}
	rc.mu.Lock()
	u := rc.up
	rc.mu.Unlock()
	if u == nil {
		return
	}
	held := u.takeHeldFetches()
	if len(held) == 0 {
		return
	}
	for old := rc.refreshed.Load(); old < n && !rc.refreshed.CompareAndSwap(old, n); old = rc.refreshed.Load() {
	}
	for _, p := range held {
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(p.version)
		resp.ErrorCode = kerr.FetchSessionTopicIDError.Code
		rc.p.metrics.failure("refresh")
		rc.c.Post(newproto.Relayed{Seq: p.seq, CorrelationID: p.corr, Key: p.key, Version: p.version, Raw: answerFrame(p.corr, resp)})
	}
}

// takeHeldFetches marks the Fetches (v13 and later) waiting for their response as answered here,
// and returns them: their responses are dropped when they come (readLoop). When they are all the
// connection waits for, it is retired instead (errRetired): a broker answers a connection's
// requests one at a time, in order, so the client's next Fetch would wait on it behind the one
// answered here until that one's fetch.max.wait passed; the next request dials anew.
func (u *upConn) takeHeldFetches() []pendingReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.dead != nil {
		return nil // run posts their errors
	}
	var held []pendingReq
	for i := range u.pending {
		p := &u.pending[i]
		if p.key == int16(kmsg.Fetch) && p.version >= heldFetchMinVersion && !p.answered && p.reply == nil {
			p.answered = true
			held = append(held, *p)
		}
	}
	if len(held) > 0 && len(held) == len(u.pending) {
		u.failLocked(errRetired)
	}
	return held
}

// errRetired is an upstream connection closed because every request it waited for was answered
// here (takeHeldFetches): a request sent on it is sent again on a new one (Next).
var errRetired = fmt.Errorf("upstream connection retired: its Fetches were answered by the bridge: %w", net.ErrClosed)
