package zkstate

// How every Store call runs: with a ctx that go-zookeeper does not take, and with the writes a
// cancelled caller abandoned kept ahead of the next write of their paths.

import (
	"context"
	"sync"
)

// do runs one go-zookeeper call, honouring ctx: go-zookeeper's calls take no context and, while
// the connection is down, wait for a reconnect. A call abandoned on cancellation finishes in
// the background (it cannot be withdrawn), so a cancelled write may still take effect: writes
// go through doWrite, which keeps such a write ahead of the next write of its paths.
func do[T any](ctx context.Context, s *Store, call func() (T, error)) (T, error) {
	return doWrite(ctx, s, nil, call)
}

// doWrite is do for a write of paths (full paths; none for a read). A write whose caller gave up
// on ctx still runs, and its goroutine may not even have sent the request when the caller writes
// the same path again: the older write would then be applied after the newer one (an auto-commit
// cancelled at Close, overtaking Close's last commit of a later offset). So a write waits, within
// its own ctx, until the abandoned writes of its paths have been answered: writes of one path
// issued one after the other are applied in that order, abandoned or not.
func doWrite[T any](ctx context.Context, s *Store, paths []string, call func() (T, error)) (T, error) {
	var zero T
	if err := s.abandoned.wait(ctx, paths); err != nil {
		return zero, err
	}
	if s.closed.Load() {
		return zero, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return call()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	var answered chan struct{} // only a write's answer is waited for (no paths: a read)
	if len(paths) > 0 {
		answered = make(chan struct{})
	}
	go func() {
		v, err := call()
		ch <- result{v, err}
		if answered != nil {
			close(answered)
			s.abandoned.forget(paths, answered)
		}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if answered != nil {
			s.abandoned.hold(paths, answered)
		}
		return zero, ctx.Err()
	}
}

// abandonedWrites maps a full path to the answer of the last write of it whose caller gave up
// before ZooKeeper answered.
type abandonedWrites struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// wait returns once no abandoned write of paths is unanswered, or with ctx's error.
func (a *abandonedWrites) wait(ctx context.Context, paths []string) error {
	for _, p := range paths {
		a.mu.Lock()
		answered := a.m[p]
		a.mu.Unlock()
		if answered == nil {
			continue
		}
		select {
		case <-answered:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (a *abandonedWrites) hold(paths []string, answered chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-answered:
		return // answered meanwhile: nothing to hold back
	default:
	}
	if a.m == nil {
		a.m = map[string]chan struct{}{}
	}
	for _, p := range paths {
		a.m[p] = answered
	}
}

func (a *abandonedWrites) forget(paths []string, answered chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range paths {
		if a.m[p] == answered {
			delete(a.m, p)
		}
	}
}
