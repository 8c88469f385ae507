package zkstate

import (
	"bufio"
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
	if err != nil {
		return nil, err
	}
	r.dialed.Store(true)
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, zkReadBuffer)}, nil
}

// bufferedConn is a ZooKeeper connection read through a buffer. go-zookeeper reads each
// response with two reads of the connection, its length and then its body (recvLoop); through
// the buffer one read of the socket takes both, and every other response that arrived with
// them: at hundreds of commits a second, a read system call less per response at least.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// zkReadBuffer holds a burst of responses (a multi's answer is a few hundred bytes).
const zkReadBuffer = 32 << 10

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

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
