package zkstate

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// reconnect is go-zookeeper's default HostProvider with one change, so that a bridge serves
// again as soon as ZooKeeper does after a quorum loss.
//
// go-zookeeper sleeps a second each time it has tried every server since its last session
// was established (HostProvider.Next's retryStart), and flushes the requests waiting for a
// connection. That is right while no server answers, but it also sleeps after a round in which
// a server did answer and refused our session because it had expired in the outage: the new
// session then waits a second for nothing. reconnect skips the sleep after a round in which a
// dial succeeded, but never twice in a row: a server without a quorum accepts connections and
// closes them at once, and must not be dialled in a tight loop.
type reconnect struct {
	zk.DNSHostProvider
	dialed  atomic.Bool // a dial succeeded since the last Next that ended a round
	skipped bool        // the last round's sleep was skipped (Next is called by one goroutine)
	tls     *tls.Config // Config.TLS: dial over TLS
}

// dial is go-zookeeper's dialer, remembering a success.
func (r *reconnect) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	var (
		c   net.Conn
		err error
	)
	if r.tls != nil {
		// The handshake completes here, within the dial's timeout, so that a server that
		// does not speak TLS counts as a failed dial.
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, r.tls)
	} else {
		c, err = net.DialTimeout(network, address, timeout)
	}
	if err == nil {
		r.dialed.Store(true)
	}
	return c, err
}

// Next implements zk.HostProvider.
func (r *reconnect) Next() (string, bool) {
	server, retryStart := r.DNSHostProvider.Next()
	if !retryStart {
		return server, false
	}
	if r.dialed.Swap(false) && !r.skipped {
		// A server answered in this round (the session was refused, or the connection dropped
		// after it was made): try again at once.
		r.skipped = true
		return server, false
	}
	r.skipped = false
	return server, true
}
