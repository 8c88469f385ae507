package zkstate_test

import (
	"errors"
	"maps"
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

// DeleteEphemerals applies the ops it is given in the same Multi (a handover's release of the
// epoch with its 0.8 mirror): together with the deletes, or, when one fails (the epoch moved),
// nothing at all, and the caller deletes one by one.
func TestIntegration_DeleteEphemeralsWithAlso(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)
	if err := s.Create(ctx, "/c/epoch", []byte("held"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/c/owners/t/0", "/c/owners/t/1"} {
		if err := s.CreateEphemeral(ctx, p, []byte("a-0")); err != nil {
			t.Fatal(err)
		}
	}
	nodes := map[string][]byte{"/c/owners/t/0": []byte("a-0"), "/c/owners/t/1": []byte("a-0")}
	// The epoch moved (version 1, not 0): nothing applies.
	if _, err := s.Set(ctx, "/c/epoch", []byte("taken"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteEphemerals(ctx, nodes, zkstate.SetOp("/c/epoch", []byte("released"), 0)); err == nil {
		t.Fatal("DeleteEphemerals with an op at a stale version succeeded")
	}
	for p := range nodes {
		if ok, _, err := s.Exists(ctx, p); err != nil || !ok {
			t.Errorf("%s after the failed batch: exists %v (%v), want kept", p, ok, err)
		}
	}
	before := s.Requests()
	if _, err := s.DeleteEphemerals(ctx, nodes, zkstate.SetOp("/c/epoch", []byte("released"), 1)); err != nil {
		t.Fatal(err)
	}
	after := s.Requests()
	if data, _, err := s.Get(ctx, "/c/epoch"); err != nil || string(data) != "released" {
		t.Errorf("epoch after the batch: %q (%v), want released", data, err)
	}
	for p := range nodes {
		if ok, _, err := s.Exists(ctx, p); err != nil || ok {
			t.Errorf("%s after the batch: exists %v (%v), want deleted", p, ok, err)
		}
	}
	if m, set := after[zkstate.ReqMulti]-before[zkstate.ReqMulti], after[zkstate.ReqSet]-before[zkstate.ReqSet]; m != 1 || set != 0 {
		t.Errorf("%d multis and %d sets, want the release in the one multi", m, set)
	}
}

// CreateEphemerals makes many ephemerals in one Multi when their parents are there, and in a
// second Multi with the missing parents (looked up in one wave) when one is not; it remembers
// each as CreateEphemeral does (SetEphemeral then writes one at the version it knows, without
// reading it). When one of them is taken, by another session, none is made.
func TestIntegration_CreateEphemeralsAtOnce(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	other := zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)
	count := func(before, after map[string]int64) (multis, creates, exists int64) {
		return after[zkstate.ReqMulti] - before[zkstate.ReqMulti], after[zkstate.ReqCreate] - before[zkstate.ReqCreate], after[zkstate.ReqExists] - before[zkstate.ReqExists]
	}
	first := map[string][]byte{"/c/ids/a": []byte("a"), "/c/owners/t/0": []byte("a-0")}
	before := s.Requests()
	if err := s.CreateEphemerals(ctx, first); err != nil {
		t.Fatal(err)
	}
	if m, c, _ := count(before, s.Requests()); m != 2 || c != 0 {
		t.Errorf("parents missing: %d multis and %d creates, want two multis (the second with the parents)", m, c)
	}
	nodes := map[string][]byte{"/c/ids/b": []byte("b"), "/c/owners/t/1": []byte("b-0"), "/c/owners/t/2": []byte("b-0")}
	before = s.Requests()
	if err := s.CreateEphemerals(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	if m, c, e := count(before, s.Requests()); m != 1 || c != 0 || e != 0 {
		t.Errorf("parents there: %d multis, %d creates, %d exists, want one multi and nothing else", m, c, e)
	}
	maps.Copy(nodes, first)
	for p, want := range nodes {
		data, st, err := s.Get(ctx, p)
		if err != nil || string(data) != string(want) || st.EphemeralOwner != s.SessionID() {
			t.Errorf("%s: %q owner %x (%v), want %q, ours", p, data, st.EphemeralOwner, err, want)
		}
	}
	before = s.Requests()
	if err := s.SetEphemeral(ctx, "/c/owners/t/1", []byte("c-0")); err != nil {
		t.Fatal(err)
	}
	if got := s.Requests(); got[zkstate.ReqGet] != before[zkstate.ReqGet] || got[zkstate.ReqExists] != before[zkstate.ReqExists] {
		t.Errorf("SetEphemeral of a node made in the batch read it first (%v → %v): not remembered", before, got)
	}

	if err := other.CreateEphemeral(ctx, "/c/owners/t/3", []byte("x-0")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateEphemerals(ctx, map[string][]byte{"/c/owners/t/4": []byte("a-0"), "/c/owners/t/3": []byte("a-0")}); err == nil {
		t.Fatal("CreateEphemerals with a node another session holds succeeded")
	}
	if ok, _, err := s.Exists(ctx, "/c/owners/t/4"); err != nil || ok {
		t.Errorf("/c/owners/t/4 exists %v (%v) after the batch failed, want none made", ok, err)
	}
	if err := s.CreateEphemerals(ctx, map[string][]byte{"/c/owners/t/5": []byte("a-0")}); !errors.Is(err, zkstate.ErrBatchTooSmall) {
		t.Errorf("CreateEphemerals of one node: %v, want ErrBatchTooSmall", err)
	}
}
