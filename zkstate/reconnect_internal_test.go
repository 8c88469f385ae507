package zkstate

import "testing"

// After a round in which a server answered (our expired session refused), the next round starts
// at once; after a round in which none did, go-zookeeper's one-second pause stays; and the pause
// is never skipped twice in a row, so a server that accepts and drops connections (no quorum)
// is not dialled in a tight loop.
func TestReconnectSkipsPauseOnceAfterAnAnswer(t *testing.T) {
	var r reconnect
	if err := r.Init([]string{"127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		dialed bool // a dial succeeded before this Next
		pause  bool // want retryStart
	}{
		{false, false}, // the first attempt never pauses
		{false, true},  // nobody answered
		{true, false},  // a server answered: at once
		{true, true},   // answered again: no second skip in a row
		{true, false},
		{false, true},
		{false, true},
	}
	for i, s := range steps {
		if s.dialed {
			r.dialed.Store(true)
		}
		if _, pause := r.Next(); pause != s.pause {
			t.Errorf("step %d: retryStart = %v, want %v", i, pause, s.pause)
		}
	}
}
