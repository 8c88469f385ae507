package zkstate_test

import (
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// DeleteEphemerals deletes in two round trips what DeleteEphemeral and DeleteEphemeralHolding
// delete one by one, with their checks: a node our session holds (with the data asked for, when
// given) goes; a missing node is fine; one another session holds, or one holding other data, is
// left and named.
func TestIntegration_DeleteEphemeralsAtOnce(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	other := zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)
	for _, p := range []string{"/b/ids/a", "/b/owners/t/0", "/b/owners/t/1", "/b/owners/t/2"} {
		if err := s.CreateEphemeral(ctx, p, []byte("a-0")); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.CreateEphemeral(ctx, "/b/owners/t/3", []byte("a-0")); err != nil {
		t.Fatal(err)
	}
	// Made again with other data since (another part of this process).
	if _, err := s.Set(ctx, "/b/owners/t/2", []byte("b-0"), -1); err != nil {
		t.Fatal(err)
	}
	before := s.Requests()
	left, err := s.DeleteEphemerals(ctx, map[string][]byte{
		"/b/ids/a": nil, "/b/owners/t/0": []byte("a-0"), "/b/owners/t/1": []byte("a-0"),
		"/b/owners/t/2": []byte("a-0"), "/b/owners/t/3": []byte("a-0"), "/b/owners/t/9": []byte("a-0"),
	})
	if err != nil {
		t.Fatal(err)
	}
	after := s.Requests()
	slices.Sort(left)
	if want := []string{"/b/owners/t/2", "/b/owners/t/3"}; !slices.Equal(left, want) {
		t.Errorf("left alone %v, want %v", left, want)
	}
	for p, want := range map[string]bool{"/b/ids/a": false, "/b/owners/t/0": false, "/b/owners/t/1": false, "/b/owners/t/2": true, "/b/owners/t/3": true} {
		if ok, _, err := s.Exists(ctx, p); err != nil || ok != want {
			t.Errorf("%s exists %v (%v), want %v", p, ok, err, want)
		}
	}
	n := int64(0)
	for _, k := range zkstate.RequestKinds {
		n += after[k] - before[k]
	}
	if n != 7 || after[zkstate.ReqGet]-before[zkstate.ReqGet] != 6 || after[zkstate.ReqMulti]-before[zkstate.ReqMulti] != 1 {
		t.Errorf("%d requests (%v → %v), want 7: a read of every node, side by side, then one multi", n, before, after)
	}
}
