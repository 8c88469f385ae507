package newproto

import (
	"net"
	"regexp"
	"testing"
)

// Member hosts read as Kafka's InetAddress.toString(): "/" and the IP,
// IPv6 uncompressed.
func TestClientHost(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5000}, "/10.1.2.3"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 5000}, "/0:0:0:0:0:0:0:1"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::ff00:42:8329"), Port: 1}, "/2001:db8:0:0:0:ff00:42:8329"},
		{&net.UnixAddr{Name: "@sock", Net: "unix"}, "/@sock"},
		{nil, ""},
	} {
		if got := clientHost(tc.addr); got != tc.want {
			t.Errorf("clientHost(%v) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// The default member-id randomness is a version 4 UUID in Java's text
// form.
func TestRandomUUID(t *testing.T) {
	pattern := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		u := randomUUID()
		if !pattern.MatchString(u) || seen[u] {
			t.Fatalf("randomUUID() = %q: not a fresh v4 UUID", u)
		}
		seen[u] = true
	}
}
