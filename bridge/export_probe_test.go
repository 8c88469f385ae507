package bridge

import (
	"net"
	"time"
)

// DelayProbes makes every dial of the other bridges' Kafka listeners that b's probes make (the
// watch's, the connection held open's, FindCoordinator's hold's) wait d first: a killed peer is
// seen dead d after its hang-up instead of within a dial.
func DelayProbes(b *Bridge, d time.Duration) {
	l := &b.peers.probes
	l.mu.Lock()
	defer l.mu.Unlock()
	dial := l.dial
	l.dial = func(network, addr string, timeout time.Duration) (net.Conn, error) {
		time.Sleep(d)
		return dial(network, addr, timeout)
	}
}
