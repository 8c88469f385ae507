package bridge

import (
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group's load looks for its record and its own offsets in one round trip (the group's first
// request waits for the load): both exists are sent before ZooKeeper answers either
// (zktest.Proxy.Mute holds the answers back).
func TestIntegration_GroupLoadLooksInOneRoundTrip(t *testing.T) {
	t.Parallel()
	store, proxy, _ := legacyProxiedStore(t, 10*time.Second)
	gs := newGroupStore(store, DefaultRoot, "fresh", 1, legacyTestLogger(t))
	before := store.Requests()[zkstate.ReqExists]
	proxy.Mute()
	done := make(chan loadResult, 1)
	go func() { done <- loadGroup(t.Context(), gs, "fresh") }()
	zktest.Eventually(t, 2*time.Second, "both exists sent before any answer", func() (bool, string) {
		n := store.Requests()[zkstate.ReqExists] - before
		return n == 2, fmt.Sprintf("%d exists sent", n)
	})
	proxy.Unmute()
	if res := <-done; res.err != nil || res.rec != nil || res.offsets {
		t.Fatalf("loadGroup = %+v; want a new group (no record, no offsets)", res)
	}
}
