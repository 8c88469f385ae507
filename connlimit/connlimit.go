// Package connlimit counts a listener's open connections, in total and per client address, and
// refuses one too many, as a broker's max.connections and max.connections.per.ip do. The Kafka
// listener and the legacy listener share it.
package connlimit

import (
	"net"
	"sync"
)

// Why a connection was refused; also the metric label that counts it.
const (
	RefusedTotal = "max_connections"
	RefusedPerIP = "max_connections_per_ip"
)

// Limits caps connections; Max and PerIP <= 0 mean no limit. The zero value admits everything.
// It is safe for concurrent use.
type Limits struct {
	Max, PerIP int

	mu     sync.Mutex
	open   int
	perIPs map[string]int
}

// Admit counts a new connection from remote and returns its client address, or returns why it
// is refused (RefusedTotal, RefusedPerIP) without counting it.
func (l *Limits) Admit(remote net.Addr) (ip, refused string) {
	ip = Host(remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.Max > 0 && l.open >= l.Max:
		return ip, RefusedTotal
	case l.PerIP > 0 && l.perIPs[ip] >= l.PerIP:
		return ip, RefusedPerIP
	}
	l.open++
	if l.perIPs == nil {
		l.perIPs = map[string]int{}
	}
	l.perIPs[ip]++
	return ip, ""
}

// Done forgets a connection from ip that Admit counted.
func (l *Limits) Done(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.perIPs[ip]--; l.perIPs[ip] <= 0 {
		delete(l.perIPs, ip)
	}
}

// Host is the client address of a connection's remote address, without its port.
func Host(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
