package zkstate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/rs/zerolog"
)

// Defaults of Config.
const (
	DefaultSessionTimeout = 6 * time.Second
	// DefaultMaxMultiBytes keeps one multi request under ZooKeeper's default jute.maxbuffer
	// (1 MiB - 1 = 1,048,575 bytes) with room to spare: the server also counts its own framing,
	// and an ensemble configured with a smaller buffer than ours should still take our batches.
	DefaultMaxMultiBytes = 1_000_000
	// DefaultPipeline is how many reads a pipelined read (Snapshot, Brokers, Topics) keeps in
	// flight on the one connection.
	DefaultPipeline = 128
)

// maxRequestBytes is the size of go-zookeeper's encode buffer (bufferSize in conn.go): a request
// larger than that fails to encode on the client, whatever the server would accept.
const maxRequestBytes = 1536 * 1024

// Errors returned by Store operations, wrapped in a *PathError (or a *MultiError for Multi).
// Compare with errors.Is.
var (
	ErrNoNode     = errors.New("node does not exist")
	ErrNodeExists = errors.New("node already exists")
	ErrBadVersion = errors.New("version conflict")
	ErrNotEmpty   = errors.New("node has children")
	ErrNoAuth     = errors.New("not authorized")
	// ErrConnLoss: the connection dropped while the request was in flight. A write may or may
	// not have been applied; read back before retrying.
	ErrConnLoss = errors.New("connection lost")
	// ErrSessionExpired: the session ended while the request was in flight or queued; every
	// ephemeral of that session is gone (the Store re-creates the ones from CreateEphemeral).
	ErrSessionExpired = errors.New("session expired")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("store closed")
)

// PathError records a failed operation on one znode, as os.PathError does for files. Path is
// the path as the caller gave it, without the chroot.
type PathError struct {
	Op   string
	Path string
	Err  error
}

func (e *PathError) Error() string { return "zkstate: " + e.Op + " " + e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// mapError turns go-zookeeper's errors into ours, so callers outside this package never import
// go-zookeeper to tell a version conflict from a missing node.
func mapError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode):
		return ErrNoNode
	case errors.Is(err, zk.ErrNodeExists):
		return ErrNodeExists
	case errors.Is(err, zk.ErrBadVersion):
		return ErrBadVersion
	case errors.Is(err, zk.ErrNotEmpty):
		return ErrNotEmpty
	case errors.Is(err, zk.ErrNoAuth):
		return ErrNoAuth
	case errors.Is(err, zk.ErrSessionExpired):
		return ErrSessionExpired
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer):
		return ErrConnLoss
	case errors.Is(err, zk.ErrClosing):
		return ErrClosed
	}
	return err
}

func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &PathError{Op: op, Path: p, Err: err}
	}
	return &PathError{Op: op, Path: p, Err: mapError(err)}
}

// Config configures Open. Only Connect is required.
type Config struct {
	// Connect is a ZooKeeper connect string as Kafka's zookeeper.connect writes it:
	// "host1:port1,host2:port2/optional/chroot". Every path the Store is given is relative to
	// the chroot, which Open creates (with its parents) when it is missing.
	Connect string
	// SessionTimeout is the session timeout we ask for (default 6s, Kafka's default for
	// zookeeper.session.timeout.ms); the server clamps it to its own bounds.
	SessionTimeout time.Duration
	// Digest, when set as "user:password", authenticates the session with the digest scheme.
	// Nodes we create then get the ACL digest user:ALL plus world:READ, so that 0.8-era tools
	// (Burrow, kafka-consumer-groups --zookeeper, CMAK), which never authenticate, can still
	// read them while nobody but the bridge can change them. Two exceptions keep 0.8 clients
	// working, because unauthenticated Kafka 0.8 consumers and brokers must create, set and
	// delete there: nodes under /consumers and /brokers, and the chroot itself with its
	// parents (Kafka's own namespace), are created with world:ALL, exactly as Kafka 0.8 creates
	// them. So the digest protects the bridge's own state (its root, e.g. /zkbridge).
	Digest string
	// TLS, when set, dials the servers over TLS: their secureClientPort, which Connect must
	// name. ServerName empty: each server's host as Connect names it.
	TLS *tls.Config
	// Logger receives the Store's logs; go-zookeeper's own messages are logged at debug level.
	Logger zerolog.Logger
	// OnSession, when set, is called for every session change (see SessionEvent), one call at a
	// time and in order. It must return quickly and must not call Close.
	OnSession func(SessionEvent)
	// MaxMultiBytes bounds the encoded size of one multi request (default DefaultMaxMultiBytes).
	// Multi splits larger batches; MultiAtomic refuses them.
	MaxMultiBytes int
	// Pipeline is how many reads a pipelined read keeps in flight (default DefaultPipeline);
	// 1 makes them serial.
	Pipeline int
	// NoMultiRead turns off batching Snapshot's reads with ZooKeeper 3.6's multiRead
	// (multiread.go), leaving the pipelined single reads; for comparisons and old servers
	// (the Store also falls back by itself when the server lacks multiRead).
	NoMultiRead bool
}

// Validate reports a Config Open cannot use.
func (c Config) Validate() error {
	_, chroot, err := splitConnect(c.Connect)
	if err != nil {
		return err
	}
	if chroot != "" {
		if err := validatePath(chroot); err != nil {
			return fmt.Errorf("zkstate: chroot of %q: %w", c.Connect, err)
		}
	}
	if c.SessionTimeout < 0 {
		return fmt.Errorf("zkstate: negative session timeout %v", c.SessionTimeout)
	}
	if c.Digest != "" {
		if user, _, ok := strings.Cut(c.Digest, ":"); !ok || user == "" {
			return errors.New("zkstate: digest must be user:password")
		}
	}
	if c.MaxMultiBytes < 0 || c.MaxMultiBytes > maxRequestBytes-1024 {
		return fmt.Errorf("zkstate: MaxMultiBytes %d out of range (0 for the default, at most %d)",
			c.MaxMultiBytes, maxRequestBytes-1024)
	}
	if c.Pipeline < 0 {
		return fmt.Errorf("zkstate: negative Pipeline %d", c.Pipeline)
	}
	return nil
}

// splitConnect splits "h1:p1,h2:p2/chroot" into its servers and its chroot ("" for none).
func splitConnect(connect string) (servers []string, chroot string, err error) {
	hosts, chroot := connect, ""
	if i := strings.IndexByte(connect, '/'); i >= 0 {
		hosts, chroot = connect[:i], strings.TrimRight(connect[i:], "/")
	}
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			servers = append(servers, h)
		}
	}
	if len(servers) == 0 {
		return nil, "", fmt.Errorf("zkstate: connect string %q names no server", connect)
	}
	return servers, chroot, nil
}

// validatePath checks a path the caller gave: absolute, no empty or relative segment, no
// trailing slash (except the root itself).
func validatePath(p string) error {
	if p == "" || p[0] != '/' {
		return fmt.Errorf("path %q is not absolute", p)
	}
	if p == "/" {
		return nil
	}
	if strings.HasSuffix(p, "/") {
		return fmt.Errorf("path %q ends in a slash", p)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path %q has an empty or relative segment", p)
		}
	}
	return nil
}

// Stat is the metadata of a znode.
type Stat struct {
	Version        int32 // data version, for Set and Delete's compare-and-set
	CVersion       int32 // children version
	EphemeralOwner int64 // session id of the owner of an ephemeral node; 0 for a persistent one
	Czxid          int64
	Mzxid          int64
	Ctime          time.Time
	Mtime          time.Time
	DataLength     int32
	NumChildren    int32
}

func statFrom(s *zk.Stat) Stat {
	if s == nil {
		return Stat{}
	}
	return Stat{
		Version:        s.Version,
		CVersion:       s.Cversion,
		EphemeralOwner: s.EphemeralOwner,
		Czxid:          s.Czxid,
		Mzxid:          s.Mzxid,
		Ctime:          time.UnixMilli(s.Ctime),
		Mtime:          time.UnixMilli(s.Mtime),
		DataLength:     s.DataLength,
		NumChildren:    s.NumChildren,
	}
}

// Store is a ZooKeeper session with the Kafka layout's conventions: a chroot, version-checked
// writes, Multi batching under the request size limit, typed watches, and ephemerals that
// survive session expiry. It is safe for concurrent use; go-zookeeper pipelines concurrent
// requests on its one connection.
type Store struct {
	conn     *zk.Conn
	zconn    atomic.Pointer[zk.Conn] // conn, for go-zookeeper's callback, which may run before Open stores conn
	chroot   string
	log      zerolog.Logger
	openACL  []zk.ACL // world:ALL, as Kafka 0.8 creates every node
	ownACL   []zk.ACL // digest:ALL + world:READ when Config.Digest is set, else openACL
	maxMulti int
	pipeline int

	// servers and sessionTimeout let the multiRead path open its own connection (multiread.go).
	servers        []string
	sessionTimeout time.Duration
	mreads         multiReads
	reqs           requestCounts

	onSession func(SessionEvent)
	sessionMu sync.Mutex // serialises OnSession calls
	events    eventQueue // go-zookeeper's session events, queued by its callback
	hasSess   chan struct{}
	hasOnce   sync.Once
	sess      sessionTracker // owned by the session goroutine

	// lease is what the last lease probe vouched for, leaseCh asks for a probe now (lease.go).
	lease   atomic.Pointer[lease]
	leaseCh chan struct{}
	// told is the session whose Connected event was delivered, every Expired before it first:
	// the lease vouches for no other (lease.go probeLease).
	told atomic.Int64

	// eph remembers the ephemerals of CreateEphemeral; see session.go.
	eph ephemerals
	// abandoned holds back writes behind the abandoned writes to their paths (doWrite).
	abandoned abandonedWrites
	reclaimCh chan struct{}

	zkLog *zkLogger

	// stop ends the Store's own background work (the session, reclaim and lease loops, which
	// belong to no caller's context); Close calls it. watchStops ends the watches the same way:
	// a watch lives until its caller's ctx or the Store ends, whichever comes first.
	stop       context.CancelFunc
	watchMu    sync.Mutex
	watchStops map[uint64]context.CancelFunc
	nextWatch  uint64
	closed     atomic.Bool
	wg         sync.WaitGroup // the Store's goroutines, waited for by Close
	drained    chan struct{}  // closed when go-zookeeper's event channel is closed
	closeMu    sync.Mutex
}

// SessionTimeout returns the session timeout the server granted, which its
// minSessionTimeout and maxSessionTimeout (2 and 20 ticks, 4 s and 40 s by default) clamp the
// asked-for one to; the asked-for one until a session is established.
func (s *Store) SessionTimeout() time.Duration {
	if ms := s.zkLog.negotiated.Load(); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return s.sessionTimeout
}

// Open connects to ZooKeeper and waits until a session is established, then authenticates
// (Config.Digest) and creates the chroot if missing. ctx bounds the whole wait: go-zookeeper
// retries unreachable servers forever, so without a deadline on ctx Open waits until one
// answers.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	servers, chroot, _ := splitConnect(cfg.Connect)
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxMultiBytes == 0 {
		cfg.MaxMultiBytes = DefaultMaxMultiBytes
	}
	if cfg.Pipeline == 0 {
		cfg.Pipeline = DefaultPipeline
	}

	s := &Store{
		chroot:   chroot,
		log:      cfg.Logger.With().Str("component", "zkstate").Logger(),
		openACL:  zk.WorldACL(zk.PermAll),
		maxMulti: cfg.MaxMultiBytes,
		pipeline: cfg.Pipeline,

		servers:        servers,
		sessionTimeout: cfg.SessionTimeout,
		onSession:      cfg.OnSession,
		hasSess:        make(chan struct{}),
		reclaimCh:      make(chan struct{}, 1),
		leaseCh:        make(chan struct{}, 1),
		drained:        make(chan struct{}),
	}
	s.mreads.init(cfg.NoMultiRead)
	s.events.init()
	s.eph.init()
	s.ownACL = s.openACL
	if cfg.Digest != "" {
		user, password, _ := strings.Cut(cfg.Digest, ":")
		s.ownACL = append(zk.DigestACL(zk.PermAll, user, password), zk.WorldACL(zk.PermRead)...)
	}
	lifetime, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.watchStops = map[uint64]context.CancelFunc{}
	s.zkLog = &zkLogger{log: s.log}

	start := time.Now()
	hosts := &reconnect{tls: cfg.TLS} // reconnect.go
	conn, events, err := zk.Connect(servers, cfg.SessionTimeout,
		zk.WithLogger(s.zkLog),
		zk.WithEventCallback(s.onZKEvent),
		zk.WithHostProvider(hosts),
		zk.WithDialer(hosts.dial))
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("zkstate: connect %s: %w", cfg.Connect, err)
	}
	s.conn = conn
	s.zconn.Store(conn)
	// The callback is our reliable path for session events. The channel drops events when its
	// small buffer is full and is closed only when the connection's loop ends, so it is drained
	// just to see that end: Close waits for it, and with it for go-zookeeper's goroutines.
	go func() {
		for range events {
		}
		close(s.drained)
	}()
	s.wg.Add(2)
	go s.sessionLoop(lifetime)
	go s.reclaimLoop(lifetime)

	select {
	case <-s.hasSess:
	case <-ctx.Done():
		_ = s.Close()
		waited := time.Since(start).Round(100 * time.Millisecond)
		if last := s.zkLog.last(); last != "" {
			return nil, fmt.Errorf("zkstate: connect %s: no session within %v (last: %s): %w", cfg.Connect, waited, last, ctx.Err())
		}
		return nil, fmt.Errorf("zkstate: connect %s: no session within %v: %w", cfg.Connect, waited, ctx.Err())
	}

	if cfg.Digest != "" {
		// go-zookeeper remembers the credentials and re-sends them after every reconnect.
		if _, err := do(ctx, s, func() (struct{}, error) {
			return struct{}{}, s.conn.AddAuth("digest", []byte(cfg.Digest))
		}); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("zkstate: connect %s: digest auth: %w", cfg.Connect, mapError(err))
		}
	}
	if chroot != "" {
		if err := s.ensureRaw(ctx, chroot); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("zkstate: connect %s: create chroot %s: %w", cfg.Connect, chroot, err)
		}
	}
	s.probeLease() // vouched for from the start: the loop's first probe is a sixth of the timeout away
	s.wg.Add(1)
	go s.leaseLoop(lifetime)
	s.log.Debug().Str("connect", cfg.Connect).Int64("session", s.SessionID()).Msg("zookeeper session established")
	return s, nil
}

// Close ends the session (our ephemerals disappear at once rather than after the session
// timeout), stops the Store's goroutines and closes every watch channel. It is idempotent.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	s.stop()
	s.stopWatches()
	s.closeMultiRead()
	s.conn.Close()
	<-s.drained
	s.wg.Wait()
	return nil
}

// SessionID is the id of the current session, 0 while there is none (before the first session
// and between an expiry and the next session).
func (s *Store) SessionID() int64 { return s.conn.SessionID() }

// full prefixes a caller's path with the chroot.
func (s *Store) full(p string) string {
	if s.chroot == "" {
		return p
	}
	if p == "/" {
		return s.chroot
	}
	return s.chroot + p
}

// aclFor chooses a new node's ACL (see Config.Digest): the Kafka layout stays open to
// unauthenticated 0.8 clients, everything else is ours.
func (s *Store) aclFor(p string) []zk.ACL {
	for _, open := range []string{ConsumersPath, "/brokers"} {
		if p == open || strings.HasPrefix(p, open+"/") {
			return s.openACL
		}
	}
	return s.ownACL
}

type getResult struct {
	data []byte
	stat *zk.Stat
}

type childrenResult struct {
	children []string
	stat     *zk.Stat
}

// Get reads a znode's data.
func (s *Store) Get(ctx context.Context, p string) ([]byte, Stat, error) {
	if err := validatePath(p); err != nil {
		return nil, Stat{}, pathErr("get", p, err)
	}
	r, err := do(ctx, s, func() (getResult, error) {
		s.reqs.add(ReqGet, 1)
		d, st, err := s.conn.Get(s.full(p))
		return getResult{d, st}, err
	})
	if err != nil {
		return nil, Stat{}, pathErr("get", p, err)
	}
	return r.data, statFrom(r.stat), nil
}

// Children lists a znode's children, sorted.
func (s *Store) Children(ctx context.Context, p string) ([]string, Stat, error) {
	if err := validatePath(p); err != nil {
		return nil, Stat{}, pathErr("children", p, err)
	}
	r, err := do(ctx, s, func() (childrenResult, error) {
		s.reqs.add(ReqChildren, 1)
		c, st, err := s.conn.Children(s.full(p))
		return childrenResult{c, st}, err
	})
	if err != nil {
		return nil, Stat{}, pathErr("children", p, err)
	}
	slices.Sort(r.children)
	return r.children, statFrom(r.stat), nil
}

// Exists reports whether a znode exists, and its Stat when it does.
func (s *Store) Exists(ctx context.Context, p string) (bool, Stat, error) {
	if err := validatePath(p); err != nil {
		return false, Stat{}, pathErr("exists", p, err)
	}
	type existsResult struct {
		ok   bool
		stat *zk.Stat
	}
	r, err := do(ctx, s, func() (existsResult, error) {
		s.reqs.add(ReqExists, 1)
		ok, st, err := s.conn.Exists(s.full(p))
		return existsResult{ok, st}, err
	})
	if err != nil {
		return false, Stat{}, pathErr("exists", p, err)
	}
	if !r.ok {
		return false, Stat{}, nil
	}
	return true, statFrom(r.stat), nil
}

// CreateOptions modifies Create.
type CreateOptions struct {
	// Ephemeral creates a node that disappears with the session. Create does not remember it;
	// use CreateEphemeral for an ephemeral that must be re-created after a session expiry.
	Ephemeral bool
	// Parents creates missing parents first, as empty persistent nodes; a parent created
	// concurrently by someone else is fine.
	Parents bool
}

func (o CreateOptions) flags() int32 {
	if o.Ephemeral {
		return zk.FlagEphemeral
	}
	return 0
}

// Create creates a znode; ErrNodeExists when it is already there.
func (s *Store) Create(ctx context.Context, p string, data []byte, opts CreateOptions) error {
	if err := validatePath(p); err != nil || p == "/" {
		if err == nil {
			err = errors.New("cannot create the root")
		}
		return pathErr("create", p, err)
	}
	return pathErr("create", p, s.createRaw(ctx, s.full(p), data, opts.flags(), s.aclFor(p), opts.Parents))
}

// createRaw creates a node at a full (chrooted) path. With parents it creates missing parents
// only after the first attempt fails with NoNode, so the common case costs one round trip.
func (s *Store) createRaw(ctx context.Context, full string, data []byte, flags int32, acl []zk.ACL, parents bool) error {
	create := func() error {
		_, err := doWrite(ctx, s, []string{full}, func() (string, error) {
			s.reqs.add(ReqCreate, 1)
			return s.conn.Create(full, data, flags, acl)
		})
		return err
	}
	err := create()
	if !parents || !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	if err := s.ensureRaw(ctx, parentOf(full)); err != nil {
		return err
	}
	return create()
}

// ensureRaw makes sure a full path exists, creating it and its missing ancestors as empty
// persistent nodes. It looks before it creates, from the deepest ancestor up: a create under a
// parent we may not write fails with NoAuth even when the child exists, and a chroot or parent
// protected by someone else's ACL must not stop us from using it.
func (s *Store) ensureRaw(ctx context.Context, full string) error {
	var missing []string
	for p := full; p != "/" && p != ""; p = parentOf(p) {
		ok, err := do(ctx, s, func() (bool, error) {
			s.reqs.add(ReqExists, 1)
			ok, _, err := s.conn.Exists(p)
			return ok, err
		})
		if err != nil {
			return fmt.Errorf("exists %s: %w", p, mapError(err))
		}
		if ok {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		_, err := do(ctx, s, func() (string, error) {
			s.reqs.add(ReqCreate, 1)
			return s.conn.Create(p, nil, 0, s.aclForFull(p))
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p, mapError(err))
		}
	}
	return nil
}

// aclForFull is aclFor for a full path: the chroot and its ancestors are Kafka's namespace.
func (s *Store) aclForFull(full string) []zk.ACL {
	if s.chroot == "" {
		return s.aclFor(full)
	}
	if full == s.chroot || !strings.HasPrefix(full, s.chroot+"/") {
		return s.openACL
	}
	return s.aclFor(strings.TrimPrefix(full, s.chroot))
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// Set writes a znode's data if its version is still version (-1: any version) and returns the
// new Stat; ErrBadVersion when someone else wrote in between.
func (s *Store) Set(ctx context.Context, p string, data []byte, version int32) (Stat, error) {
	if err := validatePath(p); err != nil {
		return Stat{}, pathErr("set", p, err)
	}
	st, err := doWrite(ctx, s, []string{s.full(p)}, func() (*zk.Stat, error) {
		s.reqs.add(ReqSet, 1)
		return s.conn.Set(s.full(p), data, version)
	})
	if err != nil {
		return Stat{}, pathErr("set", p, err)
	}
	return statFrom(st), nil
}

// Delete removes a znode if its version is still version (-1: any version).
func (s *Store) Delete(ctx context.Context, p string, version int32) error {
	if err := validatePath(p); err != nil {
		return pathErr("delete", p, err)
	}
	_, err := doWrite(ctx, s, []string{s.full(p)}, func() (struct{}, error) {
		s.reqs.add(ReqDelete, 1)
		return struct{}{}, s.conn.Delete(s.full(p), version)
	})
	return pathErr("delete", p, err)
}

// DeleteRecursive removes a znode and everything below it, whatever the versions; a missing
// node is not an error. It lists the tree level by level and deletes it bottom-up, each level
// pipelined. Meant for tests, the demo and fixtures: it is not atomic, and a child created
// concurrently makes it fail with ErrNotEmpty.
func (s *Store) DeleteRecursive(ctx context.Context, p string) error {
	if err := validatePath(p); err != nil || p == "/" {
		if err == nil {
			err = errors.New("refusing to delete the root")
		}
		return pathErr("delete recursive", p, err)
	}
	levels := [][]string{{p}}
	for {
		level := levels[len(levels)-1]
		kids := make([][]string, len(level))
		errs := make([]error, len(level))
		if err := s.fanOut(ctx, len(level), nil, func(i int) {
			s.reqs.add(ReqChildren, 1)
			c, _, err := s.conn.Children(s.full(level[i]))
			kids[i], errs[i] = c, err
		}); err != nil {
			return pathErr("delete recursive", p, err)
		}
		var next []string
		for i, parent := range level {
			if errs[i] != nil && !errors.Is(errs[i], zk.ErrNoNode) {
				return pathErr("children", parent, errs[i])
			}
			for _, c := range kids[i] {
				next = append(next, joinPath(parent, c))
			}
		}
		if len(next) == 0 {
			break
		}
		levels = append(levels, next)
	}
	for i := len(levels) - 1; i >= 0; i-- {
		level := levels[i]
		errs := make([]error, len(level))
		if err := s.fanOut(ctx, len(level), nil, func(j int) {
			s.reqs.add(ReqDelete, 1)
			errs[j] = s.conn.Delete(s.full(level[j]), -1)
		}); err != nil {
			return pathErr("delete recursive", p, err)
		}
		for j, err := range errs {
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				return pathErr("delete", level[j], err)
			}
		}
	}
	return nil
}

func joinPath(parent, child string) string {
	if parent == "/" {
		return "/" + child
	}
	return parent + "/" + child
}

// zkLogger adapts go-zookeeper's Printf logging to zerolog at debug level, and remembers the
// last message so Open can say why no session came up ("dial tcp ...: connection refused").
//
// It also keeps the session timeout the server granted: go-zookeeper keeps it unexported and
// says it only in the message it logs when a session is established (v1.0.4 conn.go:
// "authenticated: id=%d, timeout=%d"). TestIntegration_NegotiatedSessionTimeout catches a
// release that words it otherwise.
type zkLogger struct {
	log        zerolog.Logger
	mu         sync.Mutex
	msg        string
	negotiated atomic.Int64 // milliseconds; 0 until a session is established
}

// zkAuthenticated is the format of go-zookeeper's message for an established session.
const zkAuthenticated = "authenticated: id=%d, timeout=%d"

func (l *zkLogger) Printf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if format == zkAuthenticated && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			l.negotiated.Store(int64(ms))
		}
	}
	l.mu.Lock()
	l.msg = msg
	l.mu.Unlock()
	l.log.Debug().Str("source", "go-zookeeper").Msg(msg)
}

func (l *zkLogger) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msg
}
