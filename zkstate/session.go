package zkstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"
)

// SessionState is what happened to the Store's session.
type SessionState int

const (
	// Connected: a session is established (SessionID is its id). After Expired the id is new.
	Connected SessionState = iota + 1
	// Disconnected: the connection to ZooKeeper dropped; the session lives on until its
	// timeout, and go-zookeeper reconnects by itself.
	Disconnected
	// Expired: the server ended the session (SessionID is the old id); its ephemerals are gone
	// and its watches lost. A new session follows; be fenced until then: nothing this process
	// believed it owned through an ephemeral can be trusted.
	Expired
	// AuthFailed: the server refused our credentials.
	AuthFailed
	// Reclaimed: after a new session, the ephemerals of CreateEphemeral were re-created.
	// SessionEvent.Err lists those that could not be: a *ReclaimConflictError for a path that
	// another session's node now holds (never overwritten), or the error of a failed create.
	Reclaimed
)

func (s SessionState) String() string {
	switch s {
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Expired:
		return "expired"
	case AuthFailed:
		return "auth failed"
	case Reclaimed:
		return "reclaimed"
	}
	return fmt.Sprintf("SessionState(%d)", int(s))
}

// SessionEvent is delivered to Config.OnSession.
type SessionEvent struct {
	State     SessionState
	SessionID int64
	// Err is set on Reclaimed when some ephemerals could not be re-created: errors.Join of
	// *ReclaimConflictError and create failures. Use errors.As or ReclaimConflicts.
	Err error
}

// ReclaimConflicts lists the conflicts of a Reclaimed event.
func (e SessionEvent) ReclaimConflicts() []*ReclaimConflictError {
	var out []*ReclaimConflictError
	var walk func(error)
	walk = func(err error) {
		var rc *ReclaimConflictError
		if errors.As(err, &rc) && err == error(rc) {
			out = append(out, rc)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	if e.Err != nil {
		walk(e.Err)
	}
	return out
}

// ErrReclaimConflict matches every *ReclaimConflictError.
var ErrReclaimConflict = errors.New("ephemeral held by another session")

// ReclaimConflictError: after our session expired, another session created a node at the path
// of one of our remembered ephemerals, so we did not re-create it. The path stays remembered;
// it is tried again after the next new session, until DeleteEphemeral.
type ReclaimConflictError struct {
	Path  string
	Owner int64 // the node's ephemeral owner; 0 when someone made it persistent
}

func (e *ReclaimConflictError) Error() string {
	return fmt.Sprintf("zkstate: reclaim %s: held by session 0x%x, not ours", e.Path, e.Owner)
}

func (e *ReclaimConflictError) Is(target error) bool { return target == ErrReclaimConflict }

// ErrNotOwner: DeleteEphemeral found the node held by another session and left it alone.
var ErrNotOwner = errors.New("node owned by another session")

// eventQueue carries go-zookeeper's session events from its callback, which must never block
// (it runs on go-zookeeper's connection goroutines), to our session goroutine.
type eventQueue struct {
	mu     sync.Mutex
	items  []queuedEvent
	signal chan struct{}
}

type queuedEvent struct {
	state     zk.State
	sessionID int64
}

func (q *eventQueue) init() { q.signal = make(chan struct{}, 1) }

func (q *eventQueue) push(e queuedEvent) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *eventQueue) take() []queuedEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// onZKEvent is go-zookeeper's event callback. It runs right after go-zookeeper stored a new
// session id, so reading the id here pins it to the event.
func (s *Store) onZKEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return // watch events reach their watchers through go-zookeeper's per-watch channels
	}
	var id int64
	if c := s.zconn.Load(); ev.State == zk.StateHasSession && c != nil {
		id = c.SessionID()
	}
	s.events.push(queuedEvent{state: ev.State, sessionID: id})
}

// sessionTracker is the session goroutine's view of the session.
type sessionTracker struct {
	current      int64        // id of the session we last had, 0 before the first
	expiredKnown bool         // an Expired event was already emitted for current
	lastState    SessionState // the last state emitted
}

// sessionLoop turns go-zookeeper's state changes into SessionEvents and triggers the reclaim of
// our ephemerals whenever a session is (re-)established.
func (s *Store) sessionLoop(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.events.signal:
		}
		for _, ev := range s.events.take() {
			if ctx.Err() != nil {
				return
			}
			s.handleSessionEvent(ev)
		}
	}
}

func (s *Store) handleSessionEvent(ev queuedEvent) {
	t := &s.sess
	switch ev.state {
	case zk.StateHasSession:
		id := ev.sessionID
		if id == 0 {
			id = s.conn.SessionID()
		}
		if t.current != 0 && id != t.current && !t.expiredKnown {
			// We never saw the expiry itself (e.g. the server answered a reconnect with a new
			// session), but a new id means the old session and its ephemerals are gone.
			s.emit(SessionEvent{State: Expired, SessionID: t.current})
		}
		t.current, t.expiredKnown = id, false
		s.told.Store(id)
		s.emit(SessionEvent{State: Connected, SessionID: id})
		s.hasOnce.Do(func() { close(s.hasSess) })
		for _, ch := range []chan struct{}{s.reclaimCh, s.leaseCh} {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	case zk.StateDisconnected:
		// go-zookeeper reports Disconnected after every failed connection attempt too; only
		// losing a connection we had is news.
		if t.lastState == Connected {
			s.emit(SessionEvent{State: Disconnected, SessionID: t.current})
		}
	case zk.StateExpired:
		if t.current != 0 && !t.expiredKnown {
			t.expiredKnown = true
			s.emit(SessionEvent{State: Expired, SessionID: t.current})
		}
	case zk.StateAuthFailed:
		s.emit(SessionEvent{State: AuthFailed, SessionID: t.current})
	}
}

// emit logs a session event of the session goroutine and delivers it.
func (s *Store) emit(ev SessionEvent) {
	s.sess.lastState = ev.State
	l := s.log.Info()
	if ev.State == Expired || ev.State == AuthFailed {
		l = s.log.Warn()
	}
	l.Str("state", ev.State.String()).Str("session", fmt.Sprintf("0x%x", ev.SessionID)).Msg("zookeeper session")
	s.deliver(ev)
}

// deliver hands an event to Config.OnSession; the session and reclaim goroutines both deliver,
// one call at a time.
func (s *Store) deliver(ev SessionEvent) {
	if s.onSession == nil {
		return
	}
	s.sessionMu.Lock()
	defer s.sessionMu.Unlock()
	s.onSession(ev)
}

// ephemerals remembers what CreateEphemeral created, to re-create it after a session expiry.
// Every operation on one path (create, delete, its reclaim) holds that path's lock, so that a
// reclaim never re-creates a node DeleteEphemeral is removing, nor races CreateEphemeral for
// the same path. Operations on different paths run at once: each costs a round trip or two,
// and a bridge handing over many groups deletes their mirrors' ephemerals together (one lock
// for the whole set made a drain of 30 groups take seconds on a loaded ZooKeeper).
type ephemerals struct {
	mu    sync.Mutex
	nodes map[string]*ephemeral // by caller path; read and written under mu
	paths map[string]*pathLock  // the paths being operated on, under mu
}

type ephemeral struct {
	data []byte
	// owner is the session the node is known to belong to; a reclaim re-creates every node
	// whose owner is not the current session. 0: unknown (the create raced a session change).
	owner int64
	// conflictIn is the session in which a conflict was last reported, so a conflict is
	// reported once per session rather than at every reconnect.
	conflictIn int64
	// version is the node's version after our last create or write of it in session
	// versionIn (0: not known), so that SetEphemeral writes it without reading it first.
	version   int32
	versionIn int64
}

// pathLock is one path's lock: a one-slot semaphore, and how many hold or wait for it.
type pathLock struct {
	sem  chan struct{}
	refs int
}

func (e *ephemerals) init() {
	e.nodes = make(map[string]*ephemeral)
	e.paths = make(map[string]*pathLock)
}

// lock takes p's lock, or returns ctx's error.
func (e *ephemerals) lock(ctx context.Context, p string) error {
	e.mu.Lock()
	l := e.paths[p]
	if l == nil {
		l = &pathLock{sem: make(chan struct{}, 1)}
		e.paths[p] = l
	}
	l.refs++
	e.mu.Unlock()
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		e.release(p, l)
		return ctx.Err()
	}
}

func (e *ephemerals) unlock(p string) {
	e.mu.Lock()
	l := e.paths[p]
	e.mu.Unlock()
	<-l.sem
	e.release(p, l)
}

func (e *ephemerals) release(p string, l *pathLock) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(e.paths, p)
	}
}

func (e *ephemerals) get(p string) *ephemeral {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.nodes[p]
}

// forget stops remembering the ephemeral at p before a delete of a node that must hold want
// (nil: any data). One remembered with other data is left: another part of this process made
// it again, and it is that one's to keep.
func (e *ephemerals) forget(p string, want []byte) {
	if n := e.get(p); want == nil || n == nil || bytes.Equal(n.data, want) {
		e.set(p, nil)
	}
}

func (e *ephemerals) set(p string, n *ephemeral) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if n == nil {
		delete(e.nodes, p)
		return
	}
	e.nodes[p] = n
}

// CreateEphemeral creates an ephemeral node (and any missing persistent parents) and remembers
// it: when the session expires, the Store re-creates it with the same data in the new session,
// unless another session holds the path by then (see Reclaimed). ErrNodeExists when the path
// is taken, by anyone but our current session.
func (s *Store) CreateEphemeral(ctx context.Context, p string, data []byte) error {
	if err := validatePath(p); err != nil || p == "/" {
		if err == nil {
			err = errors.New("cannot create the root")
		}
		return pathErr("create ephemeral", p, err)
	}
	if err := s.eph.lock(ctx, p); err != nil {
		return pathErr("create ephemeral", p, err)
	}
	defer s.eph.unlock(p)
	data = slices.Clone(data)
	before := s.SessionID()
	err := s.createRaw(ctx, s.full(p), data, zk.FlagEphemeral, s.aclFor(p), true)
	after := s.SessionID()
	created := err == nil
	if errors.Is(err, zk.ErrNodeExists) {
		// A node created by our own session (an earlier attempt whose reply we lost, or the
		// reclaimer) is ours.
		if owned, ownErr := s.OwnedByUs(ctx, p); ownErr == nil && owned {
			err = nil
		}
	}
	if err != nil {
		return pathErr("create ephemeral", p, err)
	}
	e := &ephemeral{data: data}
	if before == after {
		e.owner = before
	}
	if before == after && created {
		e.versionIn = before // made by this call: version 0
	}
	s.eph.set(p, e)
	if e.owner == 0 {
		s.kickReclaim() // the session changed under us: let the reclaimer check the node
	}
	return nil
}

// ForgetEphemeral forgets a remembered ephemeral and leaves its node as it is: another session
// takes it over (a group's next owner, bridge/mixed_adopt.go), or it goes with this session.
// Remembered, it would be made again in the next session if this one expired, after its new
// holder may have deleted it.
func (s *Store) ForgetEphemeral(ctx context.Context, p string) error {
	if err := s.eph.lock(ctx, p); err != nil {
		return pathErr("forget ephemeral", p, err)
	}
	defer s.eph.unlock(p)
	s.eph.set(p, nil)
	return nil
}

// DeleteEphemeral forgets a remembered ephemeral and deletes its node if our session holds it.
// A missing node is fine; a node held by another session is left alone and ErrNotOwner
// returned.
func (s *Store) DeleteEphemeral(ctx context.Context, p string) error {
	if err := validatePath(p); err != nil {
		return pathErr("delete ephemeral", p, err)
	}
	if err := s.eph.lock(ctx, p); err != nil {
		return pathErr("delete ephemeral", p, err)
	}
	defer s.eph.unlock(p)
	s.eph.set(p, nil)
	ok, st, err := s.Exists(ctx, p)
	if err != nil || !ok {
		return err
	}
	return s.deleteOurs(ctx, p, st, true)
}

// deleteOurs deletes p at the version st read when our session holds it and holds is true (the
// caller's check of its data), else returns ErrNotOwner; a node gone meanwhile is not an error.
func (s *Store) deleteOurs(ctx context.Context, p string, st Stat, holds bool) error {
	if st.EphemeralOwner != s.SessionID() || st.EphemeralOwner == 0 || !holds {
		return pathErr("delete ephemeral", p, ErrNotOwner)
	}
	err := s.Delete(ctx, p, st.Version)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	return err
}

// DeleteEphemeralHolding is DeleteEphemeral for a node that must still hold data: one our
// session holds with other data (another part of this process made it again since) is left
// alone, and ErrNotOwner returned. It reads the node with a Get where DeleteEphemeral uses an
// Exists: the same one request.
func (s *Store) DeleteEphemeralHolding(ctx context.Context, p string, data []byte) error {
	if err := validatePath(p); err != nil {
		return pathErr("delete ephemeral", p, err)
	}
	if err := s.eph.lock(ctx, p); err != nil {
		return pathErr("delete ephemeral", p, err)
	}
	defer s.eph.unlock(p)
	s.eph.forget(p, data)
	now, st, err := s.Get(ctx, p)
	if errors.Is(err, ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.deleteOurs(ctx, p, st, bytes.Equal(now, data))
}

// SetEphemeral rewrites an ephemeral CreateEphemeral made: its node, when our session holds it,
// and the data a new session re-creates it with, so that a reclaim after an expiry never brings
// back older data. A node not (yet) there is not an error: the next reclaim creates it with data.
// ErrNotOwner when another session holds the node; an error when CreateEphemeral never made it.
//
// A node this Store created or wrote last in the current session is written with one Set at the
// version that left it (a draining bridge's registration: one round trip, not two). The Set fails
// when anyone wrote or deleted the node since, and the node is then read as before. It succeeds
// on a node another session holds only if ours was deleted by someone else while our session
// lived and that session made the path again and wrote it up to the very version we know; the
// Set's answer names the node's owner, so that is reported (ErrNotOwner) though not undone: a
// read before the Set has the same window, one round trip wide, for the same unlikely delete.
func (s *Store) SetEphemeral(ctx context.Context, p string, data []byte) error {
	if err := validatePath(p); err != nil {
		return pathErr("set ephemeral", p, err)
	}
	if err := s.eph.lock(ctx, p); err != nil {
		return pathErr("set ephemeral", p, err)
	}
	defer s.eph.unlock(p)
	e := s.eph.get(p) // its data is read and written under p's lock only
	if e == nil {
		return pathErr("set ephemeral", p, errors.New("not an ephemeral this Store created"))
	}
	e.data = slices.Clone(data)
	if done, err := s.setKnownVersion(ctx, p, e); done {
		return err
	}
	ok, st, err := s.Exists(ctx, p)
	if err != nil {
		return pathErr("set ephemeral", p, err)
	}
	if !ok {
		s.kickReclaim()
		return nil
	}
	if st.EphemeralOwner != s.SessionID() || st.EphemeralOwner == 0 {
		return pathErr("set ephemeral", p, ErrNotOwner)
	}
	st, err = s.Set(ctx, p, data, st.Version)
	if err != nil {
		return err
	}
	if sid := s.SessionID(); sid != 0 && st.EphemeralOwner == sid {
		e.version, e.versionIn = st.Version, sid
	}
	return nil
}

// setKnownVersion writes e's data to p at the version our last create or write of it left, when
// that was in the current session; done is false when it did not apply (no version known, or
// the node changed since: ErrBadVersion, ErrNoNode), and the caller reads the node instead.
// Called under p's lock.
func (s *Store) setKnownVersion(ctx context.Context, p string, e *ephemeral) (done bool, err error) {
	sid := s.SessionID()
	if sid == 0 || e.versionIn != sid {
		return false, nil
	}
	e.versionIn = 0 // known again only once a write succeeds
	st, err := s.Set(ctx, p, e.data, e.version)
	switch {
	case err == nil && st.EphemeralOwner == sid:
		e.version, e.versionIn = st.Version, sid
		return true, nil
	case err == nil:
		return true, pathErr("set ephemeral", p, ErrNotOwner)
	case errors.Is(err, ErrBadVersion) || errors.Is(err, ErrNoNode):
		return false, nil
	}
	return true, err
}

// OwnedByUs reports whether the node at p is an ephemeral of our current session. Never assume
// an owner or registration znode is ours because we once created it: a session expiry deletes
// it, and another consumer may have created the same path since. A missing node is not ours
// (false, nil).
func (s *Store) OwnedByUs(ctx context.Context, p string) (bool, error) {
	ok, st, err := s.Exists(ctx, p)
	if err != nil || !ok {
		return false, err
	}
	id := s.SessionID()
	return id != 0 && st.EphemeralOwner == id, nil
}

func (s *Store) kickReclaim() {
	select {
	case s.reclaimCh <- struct{}{}:
	default:
	}
}

// reclaimLoop re-creates remembered ephemerals after each new session. It runs apart from the
// session goroutine so that a slow CreateEphemeral holding the set never delays session events.
func (s *Store) reclaimLoop(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.reclaimCh:
		}
		s.reclaim(ctx)
	}
}

func (s *Store) reclaim(ctx context.Context) {
	cur := s.SessionID()
	if cur == 0 {
		return // no session now: the next Connected triggers us again
	}
	s.eph.mu.Lock()
	paths := make([]string, 0, len(s.eph.nodes))
	for p, e := range s.eph.nodes {
		if e.owner != cur {
			paths = append(paths, p)
		}
	}
	s.eph.mu.Unlock()
	if len(paths) == 0 {
		return
	}
	slices.Sort(paths)
	var errs []error
	reclaimed := 0
	for _, p := range paths {
		ok, err := s.reclaimPath(ctx, p, cur, &reclaimed)
		if !ok {
			return
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && reclaimed == 0 {
		return // only conflicts already reported in this session
	}
	ev := SessionEvent{State: Reclaimed, SessionID: cur, Err: errors.Join(errs...)}
	l := s.log.Info()
	if ev.Err != nil {
		l = s.log.Warn().Err(ev.Err)
	}
	l.Int("reclaimed", reclaimed).Int("failed", len(errs)).Str("session", fmt.Sprintf("0x%x", cur)).
		Msg("re-created our ephemerals in the new session")
	s.deliver(ev)
}

// reclaimPath re-creates p, under its lock, if it is still remembered and not ours in session
// cur; ok is false when ctx ended.
func (s *Store) reclaimPath(ctx context.Context, p string, cur int64, reclaimed *int) (ok bool, err error) {
	if s.eph.lock(ctx, p) != nil {
		return false, nil
	}
	defer s.eph.unlock(p)
	e := s.eph.get(p)
	if e == nil || e.owner == cur {
		return true, nil // deleted, or created in this session, since the list was taken
	}
	before := s.SessionID()
	created, owner, err := s.reclaimOne(ctx, p, e.data)
	after := s.SessionID()
	if ctx.Err() != nil {
		return false, nil
	}
	s.eph.mu.Lock()
	defer s.eph.mu.Unlock()
	switch {
	case err != nil:
		return true, err
	case created && before == cur && after == cur:
		e.owner, e.version, e.versionIn = cur, 0, cur
		*reclaimed++
	case created:
		// The session changed while we created the node: whichever session made it, the
		// Connected event of the newer one brings us back to check.
	case owner == after && after != 0:
		e.owner = after // already ours: CreateEphemeral won a race with us
	default:
		if e.conflictIn != cur {
			e.conflictIn = cur
			return true, &ReclaimConflictError{Path: p, Owner: owner}
		}
	}
	return true, nil
}

// reclaimOne creates p as our ephemeral unless a node is there. created says it made the node;
// otherwise owner is the ephemeral owner of the node found at p.
func (s *Store) reclaimOne(ctx context.Context, p string, data []byte) (created bool, owner int64, err error) {
	for attempt := 0; attempt < 3; attempt++ {
		err := s.createRaw(ctx, s.full(p), data, zk.FlagEphemeral, s.aclFor(p), true)
		if err == nil {
			return true, 0, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return false, 0, pathErr("reclaim", p, err)
		}
		ok, st, err := s.Exists(ctx, p)
		if err != nil {
			return false, 0, err
		}
		if ok {
			return false, st.EphemeralOwner, nil
		}
		// deleted between our create and our look: try again
	}
	return false, 0, pathErr("reclaim", p, errors.New("node keeps appearing and disappearing"))
}
