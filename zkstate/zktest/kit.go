package zktest

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
)

// OpenStore opens a zkstate.Store on connect (a ZooKeeper from Connect,
// or a chroot of one), with no logger unless a mod sets one; t.Cleanup
// closes it. mods adjust the configuration before the Store opens.
func OpenStore(t testing.TB, connect string, mods ...func(*zkstate.Config)) *zkstate.Store {
	t.Helper()
	cfg := zkstate.Config{Connect: connect, Logger: zerolog.Nop()}
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := zkstate.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("zkstate.Open(%q) = %v", connect, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Eventually polls cond until it holds, and fails t once timeout has
// passed without it: what says what was awaited. A cond that returns a
// string too says why it does not hold yet, which the failure reports.
// Polling replaces sleeps that guess how long something takes.
func Eventually[C func() bool | func() (bool, string)](t testing.TB, timeout time.Duration, what string, cond C) {
	t.Helper()
	check := func() (bool, string) {
		switch c := any(cond).(type) {
		case func() bool:
			return c(), ""
		case func() (bool, string):
			return c()
		}
		panic("unreachable")
	}
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if detail != "" {
				t.Fatalf("%s: not true within %v (last: %s)", what, timeout, detail)
			}
			t.Fatalf("%s: not true within %v", what, timeout)
		}
		time.Sleep(pollInterval)
	}
}

// pollInterval is how often Eventually checks: short against the
// waits it replaces, long enough not to load a ZooKeeper under test.
const pollInterval = 20 * time.Millisecond
