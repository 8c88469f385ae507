package bridge

// The group's registrations, watched once per group and bridge: the children of
// /consumers/<g>/ids — every 0.8.2 consumer watches them (ZCC:896) and rebalances on each
// change — and the data of every registration that is not the bridge's own, since a
// registration can change in place (its subscription rewritten) and the assignment depends on
// it. The group's Kafka actor (mixed.go watchOthers) and its legacy actor (legacy_watches.go)
// subscribe to the one watch and get every view of it; each tells its own members apart.

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// idsView is one look at /consumers/<g>/ids: every registration there (sorted), and what the
// assignment depends on of each registration the watch reads (legacyRegKey of its data; a
// registration not read yet, or one of the bridge's own, has no key).
type idsView struct {
	children []string
	keys     map[string]string
	// firings counts the firings of the children watch (the Initial one is 0).
	firings int
}

// idsSub is one subscription to the group's registrations watch. Its channel holds the latest
// view only.
type idsSub struct {
	ch   chan idsView
	done chan struct{} // closed when unsubscribed
}

// idsWatch is the running watch, with its subscribers; guarded by claimer.idsMu.
type idsWatch struct {
	subs   map[*idsSub]bool
	last   idsView
	cancel context.CancelFunc
	done   chan struct{}
}

// subscribeIDs subscribes to the group's registrations watch, setting it when it is not set
// yet (one request, and the first view, before it returns); unsubscribe ends the subscription,
// and the watch after the last one.
func (cl *claimer) subscribeIDs(ctx context.Context) (*idsSub, idsView, error) {
	cl.idsMu.Lock()
	defer cl.idsMu.Unlock()
	if cl.ids == nil {
		wctx, cancel := context.WithCancel(context.Background())
		ch, err := cl.store.WatchChildren(wctx, zkstate.IDsPath(cl.group))
		if err != nil {
			cancel()
			return nil, idsView{}, err
		}
		var first zkstate.WatchEvent
		select {
		case first = <-ch: // the Initial event is delivered at once
		case <-ctx.Done():
			cancel()
			return nil, idsView{}, ctx.Err()
		}
		w := &idsWatch{subs: map[*idsSub]bool{}, cancel: cancel, done: make(chan struct{})}
		w.last = idsView{children: first.Children, keys: map[string]string{}}
		cl.ids = w
		go cl.runIDs(wctx, w, ch)
	}
	s := &idsSub{ch: make(chan idsView, 1), done: make(chan struct{})}
	cl.ids.subs[s] = true
	return s, cl.ids.last.clone(), nil
}

func (cl *claimer) unsubscribeIDs(s *idsSub) {
	cl.idsMu.Lock()
	w := cl.ids
	if w == nil || !w.subs[s] {
		cl.idsMu.Unlock()
		return
	}
	delete(w.subs, s)
	close(s.done)
	last := len(w.subs) == 0
	if last {
		cl.ids = nil
		w.cancel()
	}
	cl.idsMu.Unlock()
	if last {
		<-w.done
	}
}

func (v idsView) clone() idsView {
	return idsView{children: slices.Clone(v.children), keys: maps.Clone(v.keys), firings: v.firings}
}

// ownRegistration reports whether consumer id is one of the bridge's members of either kind.
func (cl *claimer) ownRegistration(id string) bool {
	if p := cl.ours.Load(); p != nil && (*p)[id] {
		return true
	}
	p := cl.legacyOurs.Load()
	return p != nil && (*p)[id]
}

// idsData is a firing of the watch on one registration's data.
type idsData struct {
	id string
	ev zkstate.WatchEvent
}

// runIDs follows the children watch and, for every registration that is not the bridge's own,
// a watch on its data, and publishes a view after every change.
func (cl *claimer) runIDs(ctx context.Context, w *idsWatch, children <-chan zkstate.WatchEvent) {
	defer close(w.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	data := make(chan idsData)
	watched := map[string]context.CancelFunc{}
	view := idsView{keys: map[string]string{}}
	syncData := func(kids []string) {
		present := map[string]bool{}
		for _, id := range kids {
			present[id] = true
			if watched[id] != nil || cl.ownRegistration(id) {
				continue
			}
			dctx, cancel := context.WithCancel(ctx)
			watched[id] = cancel
			wg.Add(1)
			go func() {
				defer wg.Done()
				cl.watchRegistration(dctx, id, data)
			}()
		}
		for id, cancel := range watched {
			if !present[id] {
				cancel()
				delete(watched, id)
				delete(view.keys, id)
			}
		}
	}
	syncData(w.last.children)
	view.children = w.last.children
	for {
		select {
		case ev, ok := <-children:
			if !ok {
				return
			}
			view.children = nil
			view.firings++
			if ev.Exists {
				view.children = ev.Children
			}
			syncData(view.children)
		case d := <-data:
			if watched[d.id] == nil {
				continue // unwatched since
			}
			if d.ev.Exists {
				view.keys[d.id] = legacyRegKey(zkstate.ParseConsumerRegistration(d.ev.Data))
			} else {
				delete(view.keys, d.id)
			}
		case <-ctx.Done():
			return
		}
		cl.publishIDs(w, view.clone())
	}
}

// watchRegistration forwards the firings of the watch on registration id's data until ctx
// ends; setting the watch is retried with the claimer's backoff.
func (cl *claimer) watchRegistration(ctx context.Context, id string, out chan<- idsData) {
	var ch <-chan zkstate.WatchEvent
	for backoff := cl.backoff; ; backoff = min(2*backoff, cl.backoffMax) {
		var err error
		if ch, err = cl.store.WatchData(ctx, zkstate.IDPath(cl.group, id)); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		cl.log.Debug().Err(err).Str("consumer", id).Dur("retry_in", backoff).Msg("watching a registration failed")
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	for ev := range ch {
		select {
		case out <- idsData{id: id, ev: ev}:
		case <-ctx.Done():
			return
		}
	}
}

// publishIDs hands v to every subscriber, replacing a view it has not taken yet.
func (cl *claimer) publishIDs(w *idsWatch, v idsView) {
	cl.idsMu.Lock()
	defer cl.idsMu.Unlock()
	w.last = v
	for s := range w.subs {
		select {
		case <-s.ch:
		default:
		}
		s.ch <- v.clone()
	}
}
