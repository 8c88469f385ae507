package zkstate_test

import (
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// The server clamps the session timeout a client asks for to its [minSessionTimeout,
// maxSessionTimeout] (the test server's: 1 s and 60 s, scripts/zookeeper.sh); SessionTimeout
// reports what it granted, which is what bounds how long a dead bridge's ephemerals live.
func TestIntegration_NegotiatedSessionTimeout(t *testing.T) {
	connect := zktest.Connect(t)
	for _, tc := range []struct{ ask, want time.Duration }{
		{7 * time.Second, 7 * time.Second},
		{5 * time.Minute, time.Minute},
		{500 * time.Millisecond, time.Second},
	} {
		s := zktest.OpenStore(t, connect, func(c *zkstate.Config) { c.SessionTimeout = tc.ask })
		if got := s.SessionTimeout(); got != tc.want {
			t.Errorf("asked for %v: SessionTimeout() = %v, want %v (the server's clamp)", tc.ask, got, tc.want)
		}
	}
}
