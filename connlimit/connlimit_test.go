package connlimit

import (
	"net"
	"testing"
)

func addr(ip string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }

func TestLimits(t *testing.T) {
	l := &Limits{Max: 3, PerIP: 2}
	steps := []struct {
		remote  net.Addr
		refused string
	}{
		{addr("10.0.0.1", 1), ""},
		{addr("10.0.0.1", 2), ""},
		{addr("10.0.0.1", 3), RefusedPerIP},
		{addr("10.0.0.2", 1), ""},
		{addr("10.0.0.3", 1), RefusedTotal},
	}
	for i, s := range steps {
		if _, got := l.Admit(s.remote); got != s.refused {
			t.Fatalf("step %d: Admit(%v) refused %q, want %q", i, s.remote, got, s.refused)
		}
	}
	l.Done("10.0.0.1")
	if ip, got := l.Admit(addr("10.0.0.1", 4)); got != "" || ip != "10.0.0.1" {
		t.Fatalf("after Done: Admit = %q, %q; want admitted from 10.0.0.1", ip, got)
	}
	if _, got := (&Limits{}).Admit(addr("10.0.0.9", 1)); got != "" {
		t.Fatalf("zero Limits refused: %q", got)
	}
}

func TestHost(t *testing.T) {
	for _, c := range []struct {
		a    net.Addr
		want string
	}{
		{addr("127.0.0.1", 9092), "127.0.0.1"},
		{addr("::1", 9092), "::1"},
		{nil, ""},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, "/tmp/s"},
	} {
		if got := Host(c.a); got != c.want {
			t.Errorf("Host(%v) = %q, want %q", c.a, got, c.want)
		}
	}
}
