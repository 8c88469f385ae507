package zkstate_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// deleteRTT is how late the proxy hands the watching Store every answer and event in the
// deletion tests: a deletion delivered as ZooKeeper tells it costs one of them, one delivered
// after the watch's read costs two or three.
const deleteRTT = 250 * time.Millisecond

// watchBehindProxy opens a Store through a proxy (the watcher) and one straight to the server
// (the writer).
func watchBehindProxy(t *testing.T) (watcher, writer *zkstate.Store, proxy *zktest.Proxy) {
	t.Helper()
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy = zktest.StartProxy(t, connect[:i])
	return zktest.OpenStore(t, proxy.Addr()+connect[i:]), zktest.OpenStore(t, connect), proxy
}

// A watched node's deletion is delivered as ZooKeeper tells it, without a read first: the
// time from the delete to the Deleted event is the one delay of the event itself, not the two
// (children: the event, the read that sets the watch again) or three (data: the event, the read
// that finds the node missing, the exists watch) it took when the event waited for the read.
// The watch is set again after: the node created anew is delivered as Created.
func TestIntegration_WatchDeliversDeletionAtOnce(t *testing.T) {
	for _, kind := range []string{"data", "children"} {
		t.Run(kind, func(t *testing.T) {
			watcher, writer, proxy := watchBehindProxy(t)
			ctx := timeout(t, 30*time.Second)
			if err := writer.Create(ctx, "/n", []byte("v0"), zkstate.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			watch := watcher.WatchData
			if kind == "children" {
				watch = watcher.WatchChildren
			}
			ch, err := watch(ctx, "/n")
			if err != nil {
				t.Fatal(err)
			}
			if ev := nextEvent(t, ch); ev.Type != zkstate.Initial || !ev.Exists {
				t.Fatalf("first event = %+v, want Initial, existing", ev)
			}
			proxy.SetDelay(deleteRTT)
			start := time.Now()
			if err := writer.Delete(ctx, "/n", -1); err != nil {
				t.Fatal(err)
			}
			ev := nextEvent(t, ch)
			took := time.Since(start)
			if ev.Type != zkstate.Deleted || ev.Exists || ev.Path != "/n" {
				t.Fatalf("after delete: event = %+v, want Deleted, not existing", ev)
			}
			if n := float64(took) / float64(deleteRTT); n > 1.9 {
				t.Errorf("delete → Deleted took %v, %.1f round trips of %v; want the event's one (at most 1.9)", took, n, deleteRTT)
			}
			if err := writer.Create(ctx, "/n", []byte("v1"), zkstate.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			ev = nextEvent(t, ch)
			if ev.Type != zkstate.Created || !ev.Exists || (kind == "data" && string(ev.Data) != "v1") {
				t.Errorf("after re-creating: event = %+v (data %q), want Created with v1", ev, ev.Data)
			}
		})
	}
}

// A node deleted and made again before the watch is set again: the deletion is delivered, then
// the node as the read that sets the watch again finds it, as Created; no change is missed, and
// the watch then fires for the next change.
func TestIntegration_WatchDataDeletedThenMadeAgain(t *testing.T) {
	watcher, writer, proxy := watchBehindProxy(t)
	ctx := timeout(t, 30*time.Second)
	if err := writer.Create(ctx, "/n", []byte("v0"), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ch, err := watcher.WatchData(ctx, "/n")
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.Initial || string(ev.Data) != "v0" {
		t.Fatalf("first event = %+v, want Initial with v0", ev)
	}
	// The watcher hears nothing (the deletion's event held back) until the node is made again.
	proxy.Mute()
	if err := writer.Delete(ctx, "/n", -1); err != nil {
		t.Fatal(err)
	}
	if err := writer.Create(ctx, "/n", []byte("v1"), zkstate.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy.Unmute()
	var got []string
	for _, want := range []struct {
		typ    zkstate.WatchEventType
		exists bool
		data   string
	}{{zkstate.Deleted, false, ""}, {zkstate.Created, true, "v1"}} {
		ev := nextEvent(t, ch)
		got = append(got, ev.Type.String())
		if ev.Type != want.typ || ev.Exists != want.exists || string(ev.Data) != want.data {
			t.Fatalf("events %v: the last %+v (data %q), want %v (exists %v, data %q)", got, ev, ev.Data, want.typ, want.exists, want.data)
		}
	}
	if _, err := writer.Set(ctx, "/n", []byte("v2"), -1); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.DataChanged || string(ev.Data) != "v2" {
		t.Errorf("after set: event = %+v (data %q), want DataChanged with v2", ev, ev.Data)
	}
	select {
	case ev := <-ch:
		t.Errorf("an event more: %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

// A children watch tells a child's deletion after reading the children (the event does not
// say which child went), and its node's own deletion at once.
func TestIntegration_WatchChildrenDeletionOfChildIsRead(t *testing.T) {
	watcher, writer, _ := watchBehindProxy(t)
	ctx := timeout(t, 30*time.Second)
	for _, p := range []string{"/w", "/w/a", "/w/b"} {
		if err := writer.Create(ctx, p, nil, zkstate.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := watcher.WatchChildren(wctx, "/w")
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, ch)
	if err := writer.Delete(ctx, "/w/a", -1); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ch); ev.Type != zkstate.ChildrenChanged || !ev.Exists || !slices.Equal(ev.Children, []string{"b"}) {
		t.Errorf("after deleting a child: event = %+v, want ChildrenChanged with [b]", ev)
	}
}
