package zkstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-zookeeper/zk"
)

// WatchEventType says why a WatchEvent was delivered.
type WatchEventType int

const (
	// Initial is the first event of every watch: the contents when the watch was set.
	Initial WatchEventType = iota + 1
	// Created: the node appeared.
	Created
	// Deleted: the node went away.
	Deleted
	// DataChanged: the node's data was written.
	DataChanged
	// ChildrenChanged: a child was added or removed.
	ChildrenChanged
	// SessionExpired: the session expired and ZooKeeper dropped the watch; it was set again in
	// the new session, and changes in between are only visible by comparing contents.
	SessionExpired
)

func (t WatchEventType) String() string {
	switch t {
	case Initial:
		return "initial"
	case Created:
		return "created"
	case Deleted:
		return "deleted"
	case DataChanged:
		return "data changed"
	case ChildrenChanged:
		return "children changed"
	case SessionExpired:
		return "session expired"
	}
	return fmt.Sprintf("WatchEventType(%d)", int(t))
}

// WatchEvent is one delivery of a watch. Type says what fired; the contents (Exists, Children
// or Data, Stat) are read when the watch is set again, so they are current as of delivery and
// may already include later changes: ZooKeeper watches are one-shot, and several changes in a
// row can show up as one event. A deletion is the exception: it is delivered as ZooKeeper tells
// it, before the watch is set again (Exists false, no contents, a zero Stat), and if the read
// that sets the watch again finds the node made again, a Created event with its contents
// follows.
type WatchEvent struct {
	Path     string
	Type     WatchEventType
	Exists   bool
	Children []string // WatchChildren: sorted children
	Data     []byte   // WatchData: the node's data
	Stat     Stat
}

type watchKind int

const (
	watchChildren watchKind = iota
	watchData
)

// WatchChildren watches a node's children. The channel first delivers an Initial event with the
// current children, then one event per firing, each with the children read when the watch was
// set again. The watch survives reconnects and session expiry (then a SessionExpired event
// follows the new session) and a missing node (Exists false until Created). The channel is
// closed when ctx ends or the Store closes. Read it promptly: delivery blocks the watch.
func (s *Store) WatchChildren(ctx context.Context, p string) (<-chan WatchEvent, error) {
	return s.watch(ctx, p, watchChildren)
}

// WatchData watches a node's data; see WatchChildren for the delivery rules.
func (s *Store) WatchData(ctx context.Context, p string) (<-chan WatchEvent, error) {
	return s.watch(ctx, p, watchData)
}

func (s *Store) watch(ctx context.Context, p string, kind watchKind) (<-chan WatchEvent, error) {
	op := "watch children"
	if kind == watchData {
		op = "watch data"
	}
	if err := validatePath(p); err != nil {
		return nil, pathErr(op, p, err)
	}
	first, fire, err := s.arm(ctx, p, kind)
	if err != nil {
		return nil, pathErr(op, p, err)
	}
	s.closeMu.Lock()
	if s.closed.Load() {
		s.closeMu.Unlock()
		return nil, pathErr(op, p, ErrClosed)
	}
	// The watch lives until the caller's ctx or the Store ends, whichever comes first.
	wctx, cancel := context.WithCancel(ctx)
	id := s.addWatch(cancel)
	s.wg.Add(1)
	s.closeMu.Unlock()

	out := make(chan WatchEvent, 1)
	first.Type = Initial
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer s.removeWatch(id)
		defer cancel()
		ev, deliver := first, true
		for {
			if deliver {
				select {
				case out <- ev:
				case <-wctx.Done():
					return
				}
			}
			var zev zk.Event
			select {
			case zev = <-fire:
			case <-wctx.Done():
				return
			}
			typ, ok := watchEventType(zev)
			if !ok {
				return // the connection is closing
			}
			if typ == Deleted {
				// The event itself says what the node is: gone. Delivered before the watch
				// is set again, a round trip sooner (two for a data watch: the read, then
				// the exists watch on the missing node); the read that sets it again then
				// tells a node made again meanwhile (Created, below).
				select {
				case out <- WatchEvent{Path: p, Type: Deleted}:
				case <-wctx.Done():
					return
				}
			}
			next, nextFire, err := s.rearm(wctx, p, kind)
			if err != nil {
				return // wctx ended
			}
			deliver = true
			switch {
			case typ == Deleted && !next.Exists:
				deliver = false // still gone, as delivered
			case typ == Deleted:
				typ = Created // made again after the deletion delivered
			case !next.Exists && typ != SessionExpired:
				// The node went away between the fire and the re-read (a children watch
				// fires for the last child's deletion, then the node itself is deleted):
				// what the caller now sees is a deleted node, so say so.
				typ = Deleted
			}
			next.Type = typ
			ev, fire = next, nextFire
		}
	}()
	return out, nil
}

// watchEventType maps a fired go-zookeeper watch; false when the watch ended because the
// connection is closing.
func watchEventType(ev zk.Event) (WatchEventType, bool) {
	switch ev.Type {
	case zk.EventNodeCreated:
		return Created, true
	case zk.EventNodeDeleted:
		return Deleted, true
	case zk.EventNodeDataChanged:
		return DataChanged, true
	case zk.EventNodeChildrenChanged:
		return ChildrenChanged, true
	case zk.EventNotWatching:
		// go-zookeeper drops every watch when the session expires (ErrSessionExpired) or the
		// connection closes (ErrClosing); a plain disconnect keeps them and sets them again.
		if errors.Is(ev.Err, zk.ErrClosing) {
			return 0, false
		}
		return SessionExpired, true
	}
	// A zero event: the channel was closed without one, which go-zookeeper does not do; read
	// the contents again to be safe.
	return SessionExpired, true
}

// rearm sets the watch again, retrying (with backoff) while there is no session, until ctx
// ends.
func (s *Store) rearm(ctx context.Context, p string, kind watchKind) (WatchEvent, <-chan zk.Event, error) {
	backoff := 50 * time.Millisecond
	for {
		ev, fire, err := s.arm(ctx, p, kind)
		if err == nil {
			return ev, fire, nil
		}
		if ctx.Err() != nil {
			return WatchEvent{}, nil, ctx.Err()
		}
		if s.closed.Load() {
			return WatchEvent{}, nil, ErrClosed
		}
		l := s.log.Debug()
		if !errors.Is(err, ErrConnLoss) && !errors.Is(err, ErrSessionExpired) {
			l = s.log.Warn()
		}
		l.Err(err).Str("path", p).Dur("retry_in", backoff).Msg("setting a watch again failed")
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return WatchEvent{}, nil, ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// arm reads the node and sets a one-shot watch in the same request: a children or data watch
// on an existing node, an exists watch (which fires on Created) on a missing one.
func (s *Store) arm(ctx context.Context, p string, kind watchKind) (WatchEvent, <-chan zk.Event, error) {
	full := s.full(p)
	type armed struct {
		ev   WatchEvent
		fire <-chan zk.Event
	}
	for {
		r, err := do(ctx, s, func() (armed, error) {
			if kind == watchChildren {
				s.reqs.add(ReqChildren, 1)
				c, st, ch, err := s.conn.ChildrenW(full)
				slices.Sort(c)
				return armed{WatchEvent{Path: p, Exists: true, Children: c, Stat: statFrom(st)}, ch}, err
			}
			s.reqs.add(ReqGet, 1)
			d, st, ch, err := s.conn.GetW(full)
			return armed{WatchEvent{Path: p, Exists: true, Data: d, Stat: statFrom(st)}, ch}, err
		})
		if err == nil {
			return r.ev, r.fire, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return WatchEvent{}, nil, mapError(err)
		}
		type existsArmed struct {
			ok   bool
			fire <-chan zk.Event
		}
		e, err := do(ctx, s, func() (existsArmed, error) {
			s.reqs.add(ReqExists, 1)
			ok, _, ch, err := s.conn.ExistsW(full)
			return existsArmed{ok, ch}, err
		})
		if err != nil {
			return WatchEvent{}, nil, mapError(err)
		}
		if !e.ok {
			return WatchEvent{Path: p}, e.fire, nil
		}
		// Created between the two reads. The exists call left a data watch behind; it fires
		// once into a buffered channel nobody reads, which costs nothing.
	}
}

// addWatch registers the cancel func of a watch for Close; s.closeMu must be held, and the Store
// not closed.
func (s *Store) addWatch(cancel context.CancelFunc) uint64 {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	s.nextWatch++
	s.watchStops[s.nextWatch] = cancel
	return s.nextWatch
}

func (s *Store) removeWatch(id uint64) {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	delete(s.watchStops, id)
}

// stopWatches ends every watch (Close, before it waits for their goroutines).
func (s *Store) stopWatches() {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	for _, cancel := range s.watchStops {
		cancel()
	}
}
