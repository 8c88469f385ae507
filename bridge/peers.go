package bridge

// Several bridges as one service (DESIGN §7, docs/several-bridges.md). Every bridge keeps the registrations
// under <root>/bridges as its live view, and every bridge computes a group's owner from it
// with the same rule (package placement: rendezvous hashing over the live node ids), so that
// each names the same coordinator to every client (newproto.Peers) and a group lives on one
// bridge: a request for a group that maps to another bridge is answered NOT_COORDINATOR, and a
// group that stops mapping to us is handed over (handover.go).
//
// The view counts this bridge as live from Run until it drains at shutdown, whether or not its
// own registration is visible yet, so that a bridge alone always owns every group and answers
// exactly as it did before there were several.
//
// With the data path, upstream brokers are placed the same way: broker k is served by the first
// live bridge in placement.Ranked("broker/<k>") whose registration advertises a proxy listener
// for k, and every bridge's relayed Metadata names k at that listener (relay.Peers), so that
// every bridge gives the same broker list. Every bridge keeps a listener for every broker and
// advertises them all (advertiseProxies); only the one Metadata names is used by clients that
// refreshed since the last change. See docs/several-bridges.md.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/relay"
	"github.com/zkbridge/zkbridge/zkstate"
)

// liveView is one reading of <root>/bridges.
type liveView struct {
	// others holds the other live bridges' registrations, by node id.
	others map[int32]zkstate.BridgeRegistration
	// ids is the sorted node ids placement computes over: the others, and us while we serve.
	ids []int32
	// named is ids without the peers that look dead (peers_down.go): the bridges Metadata
	// lists and the upstream brokers' serving bridges are computed over them. A group's owner
	// is computed over ids: a peer that looks dead keeps its groups until its session ends.
	named []int32
	// elsewhere is, by upstream broker id, the proxy listener of the bridge that serves the
	// broker when that is another bridge (the data path; relay.Peers); servers is the node id
	// serving each advertised broker, us included.
	elsewhere map[int32]newproto.Broker
	servers   map[int32]int32
}

// peerSet keeps the live view and answers placement questions from it.
type peerSet struct {
	self int32
	root string
	log  zerolog.Logger

	serving atomic.Bool // we count ourselves live (from start until drain)
	view    atomic.Pointer[liveView]
	// own is whether our registration exists in the current session (register_own.go): before
	// it, an epoch we wrote would look to the others like a dead bridge's (several-bridges.md:
	// the takeover checks the holder's registration after its write), so a group's load waits
	// for it (awaitOwn).
	own ownRegistration
	// ownGone is called when another client deleted our registration in the session it was
	// made in (ownDeleted), with that session; set once, before follow starts.
	ownGone func(sid int64)

	mu       sync.Mutex
	onChange []func(old, cur *liveView) // called in order, on the watch's goroutine
	others   map[int32]zkstate.BridgeRegistration
	// proxy is this bridge's proxy listeners as its registration in ZooKeeper advertises them
	// (upstream broker id → address): the others compute from what they read, so we compute
	// from what we wrote.
	proxy map[int32]string
	// mine is our registration as last written (nil before it exists), agree what the live
	// registrations disagree on (peers_agree.go).
	mine  *zkstate.BridgeRegistration
	agree agreement
	// children is <root>/bridges' children as last read: every registered bridge, draining ones
	// included (hasRegistration).
	children atomic.Pointer[[]string]
	// probes is the probes of the others' listeners and the view-change signal for
	// FindCoordinator's hold (peers_probe.go).
	probes liveness
	// out is the peers that look dead (peers_down.go), left out of named; onNamed is called,
	// in order, after every change of the named ids.
	out     map[int32]bool
	onNamed []func(old, cur *liveView)
}

var (
	_ newproto.Peers = (*peerSet)(nil)
	_ relay.Peers    = (*peerSet)(nil)
)

func newPeerSet(self int32, root string, log zerolog.Logger) *peerSet {
	p := &peerSet{self: self, root: root, log: log.With().Str("component", "peers").Logger()}
	p.own.init()
	p.serving.Store(true)
	p.view.Store(p.build(nil))
	p.probes.init()
	p.onChange = append(p.onChange, p.probeJoined)
	return p
}

// build makes a view of the others' registrations (self left out) and our advertised proxy
// listeners; p.mu is held (or p not shared yet).
func (p *peerSet) build(others map[int32]zkstate.BridgeRegistration) *liveView {
	v := &liveView{others: others}
	for id := range others {
		v.ids = append(v.ids, id)
	}
	if p.serving.Load() {
		v.ids = append(v.ids, p.self)
	}
	slices.Sort(v.ids)
	v.named = slices.DeleteFunc(slices.Clone(v.ids), func(id int32) bool { return p.out[id] && id != p.self })
	v.elsewhere, v.servers = placeBrokers(p.self, v, p.proxy)
	return v
}

// placeBrokers computes which bridge serves each upstream broker that a live bridge advertises a
// proxy listener for: placement.Servers over the named ids (balanced: no bridge serves more than
// its share), or, while a live bridge runs the older rule (its registration's broker_placement),
// placement.Server's one broker at a time, the first of the broker's ranking that advertises a
// listener for it. It returns the brokers served by another bridge, at that bridge's listener; a
// broker only we advertise, or that maps to us, is served here. It also returns the serving node
// of every broker. Every bridge computes the same from the same registrations.
func placeBrokers(self int32, v *liveView, mine map[int32]string) (map[int32]newproto.Broker, map[int32]int32) {
	ids := map[int32]bool{}
	for id := range mine {
		ids[id] = true
	}
	rule := placement.BrokerVersion
	for _, r := range v.others {
		for id := range r.Proxy {
			ids[id] = true
		}
		rule = min(rule, r.BrokerPlacement)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	listens := func(n, id int32) bool {
		if n == self {
			_, ok := mine[id]
			return ok
		}
		_, ok := proxyBroker(id, v.others[n].Proxy[id])
		return ok
	}
	placed := placement.ServersBy(rule, slices.Collect(maps.Keys(ids)), v.named, listens)
	out, servers := map[int32]newproto.Broker{}, make(map[int32]int32, len(ids))
	for id := range ids {
		n, ok := placed[id]
		if !ok || n == self {
			servers[id] = self // ours, or none live advertises it: our own listener, if any
			continue
		}
		out[id], _ = proxyBroker(id, v.others[n].Proxy[id])
		servers[id] = n
	}
	return out, servers
}

// proxyBroker is an advertised proxy listener address as Metadata names upstream broker id.
func proxyBroker(id int32, addr string) (newproto.Broker, bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return newproto.Broker{}, false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return newproto.Broker{}, false
	}
	return newproto.Broker{NodeID: id, Host: host, Port: int32(n)}, true
}

// ServedElsewhere implements relay.Peers.
func (p *peerSet) ServedElsewhere() map[int32]newproto.Broker { return p.view.Load().elsewhere }

// advertised installs the proxy listeners our registration now advertises, and recomputes the
// view with them.
func (p *peerSet) advertised(proxy map[int32]string) {
	p.update(func() {
		p.proxy = proxy
		if p.mine != nil {
			mine := *p.mine
			mine.Proxy = proxy
			p.mine = &mine
		}
	})
}

// registered installs our registration as written to ZooKeeper: its proxy listeners, and the
// rest for the agreement check (peers_agree.go).
func (p *peerSet) registered(reg zkstate.BridgeRegistration) {
	p.update(func() { p.proxy, p.mine = reg.Proxy, &reg })
}

// current is the live view now.
func (p *peerSet) current() *liveView { return p.view.Load() }

// owner is the node that coordinates group in the current view; self when there is none.
func (p *peerSet) owner(group string) int32 {
	if n, ok := placement.Owner(group, p.view.Load().ids); ok {
		return n
	}
	return p.self
}

// owns reports whether group maps to this bridge.
func (p *peerSet) owns(group string) bool { return p.owner(group) == p.self }

// alone reports whether no other bridge is live: then every group is ours and nothing about
// serving differs from a bridge that does not know about others.
func (p *peerSet) alone() bool { return len(p.view.Load().others) == 0 }

// Owner implements newproto.Peers.
func (p *peerSet) Owner(group string) (newproto.Broker, bool) {
	v := p.view.Load()
	n, ok := placement.Owner(group, v.ids)
	if !ok || n == p.self {
		return newproto.Broker{}, false
	}
	b, ok := brokerOf(v.others[n])
	return b, ok
}

// Others implements newproto.Peers and relay.Peers: the other live bridges whose address is
// known, as Metadata lists them: a peer that looks dead is left out (peers_down.go).
func (p *peerSet) Others() []newproto.Broker {
	v := p.view.Load()
	out := make([]newproto.Broker, 0, len(v.others))
	for _, id := range v.named {
		if id == p.self {
			continue
		}
		if b, ok := brokerOf(v.others[id]); ok {
			out = append(out, b)
		}
	}
	return out
}

// brokerOf is a registration as Metadata and FindCoordinator name it.
func brokerOf(r zkstate.BridgeRegistration) (newproto.Broker, bool) {
	host, port, err := net.SplitHostPort(r.KafkaAddr())
	if err != nil {
		return newproto.Broker{}, false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return newproto.Broker{}, false
	}
	return newproto.Broker{NodeID: r.NodeID, Host: host, Port: int32(p)}, true
}

// subscribe adds a function called after every change of the live ids.
func (p *peerSet) subscribe(f func(old, cur *liveView)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onChange = append(p.onChange, f)
}

// subscribeNamed adds a function called after every change of the named ids (a bridge joins,
// leaves, or starts or stops looking dead).
func (p *peerSet) subscribeNamed(f func(old, cur *liveView)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onNamed = append(p.onNamed, f)
}

// leave stops counting this bridge as live (shutdown drains its groups to the others); it
// returns the view without us.
func (p *peerSet) leave() *liveView {
	p.serving.Store(false)
	return p.update(func() {})
}

// publish installs a view of others and tells the subscribers when the live ids changed.
func (p *peerSet) publish(others map[int32]zkstate.BridgeRegistration) *liveView {
	return p.update(func() { p.others = others })
}

// update applies change to the view's inputs under p.mu, installs the view built from them,
// and tells the subscribers when the live ids changed.
func (p *peerSet) update(change func()) *liveView {
	p.mu.Lock()
	change()
	cur := p.build(p.others)
	old := p.view.Swap(cur)
	p.viewChanged()    // peers_probe.go: held FindCoordinator answers look again
	p.checkAgreement() // peers_agree.go
	subs, named := slices.Clone(p.onChange), slices.Clone(p.onNamed)
	p.mu.Unlock()
	if !maps.Equal(old.servers, cur.servers) {
		p.log.Info().Interface("before", old.servers).Interface("now", cur.servers).Msg("upstream brokers' serving bridges changed")
	}
	if !slices.Equal(old.ids, cur.ids) {
		p.log.Info().Ints32("before", old.ids).Ints32("live", cur.ids).Msg("live bridges changed")
		for _, f := range subs {
			f(old, cur)
		}
	}
	if !slices.Equal(old.named, cur.named) {
		for _, f := range named {
			f(old, cur)
		}
	}
	return cur
}

// start reads the live bridges once, so that the bridge serves with a view of the others from
// its first request; follow then keeps the view current.
func (p *peerSet) start(ctx context.Context, store *zkstate.Store) (*peerWatch, error) {
	events, err := store.WatchChildren(ctx, zkstate.BridgesPath(p.root))
	if err != nil {
		return nil, fmt.Errorf("bridge: watching the live bridges: %w", err)
	}
	select {
	case ev, ok := <-events:
		if !ok {
			return nil, fmt.Errorf("bridge: watching the live bridges: %w", ctx.Err())
		}
		p.apply(ctx, store, ev.Children)
		return &peerWatch{events: events, children: ev.Children}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("bridge: watching the live bridges: %w", ctx.Err())
	}
}

// peerWatch is the watch of <root>/bridges' children and the children it last delivered.
type peerWatch struct {
	events   <-chan zkstate.WatchEvent
	children []string
}

// follow applies every later change until the watch ends: a child added or removed (a
// bridge starts, or its session ends), or a registration's data written (a bridge drains, or
// its proxy listeners change). A change of children that adds one is read in full; one that
// only removes (a crash's expiry) is applied as known, a round trip less on the way of every
// takeover; a registration's new data is the one its watch read as it set itself again, a round
// trip less on the way of every handover (the others are as last read). A registration's
// deletion is applied as its watch tells it, before the children's watch has read the children
// again: the expiry of a crashed bridge's session reaches the view with no round trip at all.
func (p *peerSet) follow(ctx context.Context, store *zkstate.Store, w *peerWatch) {
	regs := p.newRegWatches(ctx, store)
	defer regs.close()
	children := w.children
	regs.track(children)
	known := p.apply(ctx, store, children) // what changed between start and the data watches
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				return
			}
			gone := children
			children = ev.Children
			regs.track(children)
			if left, ok := removed(known, gone, children); ok {
				// Only bridges gone (a session expired, a drained bridge deleted its
				// registration): the others are as known, and their data watches tell any
				// change; nothing to read on the way of a crash's takeover.
				known = left
				p.children.Store(&ev.Children) // not &children: the variable changes at the next event
				p.publish(p.parse(children, known))
				continue
			}
			known = p.apply(ctx, store, children)
		case <-regs.refresh:
			seen := regs.take()
			if known == nil { // the last full read failed (ctx ended)
				known = p.apply(ctx, store, children)
				continue
			}
			merge(known, children, seen)
			left := present(children, known)
			p.children.Store(&left)
			p.publish(p.parse(children, known))
		}
	}
}

// merge applies what the registrations' data watches read (seen, by child) to known.
func merge(known map[string]zkstate.Read, children []string, seen map[string]zkstate.WatchEvent) {
	for c, ev := range seen {
		r, ok := known[c]
		switch {
		case ev.Exists:
			// Newer than what we know (zxids grow: a registration made again is newer too).
			if slices.Contains(children, c) && ev.Stat.Mzxid > r.Stat.Mzxid {
				known[c] = zkstate.Read{Data: ev.Data, Stat: ev.Stat}
			}
		case ok && r.Stat.Czxid <= ev.Stat.Czxid:
			// The registration we know is gone (a session expired, a drained bridge deleted
			// it): ZooKeeper tells the deletion before the children's change, which the
			// children's watch delivers only after reading them again; out of the view now, a
			// round trip sooner on the way of a crash's takeover. The children's change then
			// applies as a removal of what is no longer known (removed).
			delete(known, c)
		}
	}
}

// regWatches is follow's data watch of each registration: what each last delivered after its
// first read (pending, by child), and refresh, signalled at each.
type regWatches struct {
	p       *peerSet
	ctx     context.Context
	store   *zkstate.Store
	refresh chan struct{}
	mu      sync.Mutex
	pending map[string]zkstate.WatchEvent
	watches map[string]context.CancelFunc
	wg      sync.WaitGroup
}

func (p *peerSet) newRegWatches(ctx context.Context, store *zkstate.Store) *regWatches {
	return &regWatches{p: p, ctx: ctx, store: store, refresh: make(chan struct{}, 1),
		pending: map[string]zkstate.WatchEvent{}, watches: map[string]context.CancelFunc{}}
}

// track watches the registrations of children, and no others.
func (r *regWatches) track(children []string) {
	for c, cancel := range r.watches {
		if !slices.Contains(children, c) {
			cancel()
			delete(r.watches, c)
		}
	}
	for _, c := range children {
		if r.watches[c] != nil {
			continue
		}
		wctx, cancel := context.WithCancel(r.ctx)
		r.watches[c] = cancel
		data, err := r.store.WatchData(wctx, zkstate.BridgesPath(r.p.root)+"/"+c)
		if err != nil {
			continue
		}
		r.wg.Go(func() { r.follow(c, data) })
	}
}

// follow passes on the events of child c's data watch.
func (r *regWatches) follow(c string, data <-chan zkstate.WatchEvent) {
	first := true
	var last zkstate.Stat // of the registration the watch last read
	for ev := range data {
		if ev.Exists {
			last = ev.Stat
		} else {
			// A deletion comes without contents: say which registration went (its Czxid), so
			// that an older one's deletion, coming late, does not take a newer one read since
			// out of the view. (Our own registration's deletion is told by a watch of its own,
			// register_own.go: watchOwn.)
			ev.Stat = last
		}
		if first {
			first = false
			continue
		}
		r.mu.Lock()
		r.pending[c] = ev
		r.mu.Unlock()
		select {
		case r.refresh <- struct{}{}:
		default:
		}
	}
}

// take returns what the watches delivered since the last take.
func (r *regWatches) take() map[string]zkstate.WatchEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.pending
	r.pending = map[string]zkstate.WatchEvent{}
	return seen
}

// close ends every watch and waits for their goroutines.
func (r *regWatches) close() {
	for _, cancel := range r.watches {
		cancel()
	}
	r.wg.Wait()
}

// present is the children whose registration is known: a deletion the registration's watch
// told is out before the children's watch tells it.
func present(children []string, known map[string]zkstate.Read) []string {
	return slices.DeleteFunc(slices.Clone(children), func(c string) bool {
		_, ok := known[c]
		return !ok
	})
}

// removed is known without the children gone, when children is was less some of them and every
// child left has a registration known: false when a child is new (its registration must be read)
// or known is not complete.
func removed(known map[string]zkstate.Read, was, children []string) (map[string]zkstate.Read, bool) {
	if known == nil || len(children) >= len(was) {
		return nil, false
	}
	left := make(map[string]zkstate.Read, len(children))
	for _, c := range children {
		r, ok := known[c]
		if !ok || !slices.Contains(was, c) {
			return nil, false
		}
		left[c] = r
	}
	return left, true
}

// apply reads the registrations of children and publishes the view they make; it returns
// the reads by child (a missing one left out), nil when ctx ended first.
func (p *peerSet) apply(ctx context.Context, store *zkstate.Store, children []string) map[string]zkstate.Read {
	for {
		known, err := p.read(ctx, store, children)
		if err == nil {
			p.children.Store(&children)
			p.publish(p.parse(children, known))
			return known
		}
		if ctx.Err() != nil {
			return nil
		}
		p.log.Warn().Err(err).Msg("reading the live bridges failed; retrying")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// read reads the registrations of the named children, by child; one that is gone is left out.
func (p *peerSet) read(ctx context.Context, store *zkstate.Store, children []string) (map[string]zkstate.Read, error) {
	paths := make([]string, 0, len(children))
	for _, c := range children {
		paths = append(paths, zkstate.BridgesPath(p.root)+"/"+c)
	}
	reads, err := store.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	known := make(map[string]zkstate.Read, len(children))
	for i, r := range reads {
		if r.Err != nil {
			if !errors.Is(r.Err, zkstate.ErrNoNode) {
				return nil, r.Err
			}
			continue
		}
		known[children[i]] = r
	}
	return known, nil
}

// parse makes the other live bridges of the registrations known of children; one that is gone
// or malformed is left out (a bridge clients cannot be told the address of cannot coordinate).
func (p *peerSet) parse(children []string, known map[string]zkstate.Read) map[int32]zkstate.BridgeRegistration {
	others := map[int32]zkstate.BridgeRegistration{}
	for _, c := range children {
		r, ok := known[c]
		if !ok {
			continue
		}
		path := zkstate.BridgesPath(p.root) + "/" + c
		reg, err := zkstate.ParseBridgeRegistration(r.Data)
		if err != nil {
			p.log.Warn().Err(err).Str("path", path).Msg("ignoring a bridge registration")
			continue
		}
		if strconv.Itoa(int(reg.NodeID)) != c {
			p.log.Warn().Str("path", path).Int32("node_id", reg.NodeID).Msg("ignoring a bridge registration under another node's id")
			continue
		}
		if reg.NodeID == p.self || reg.Draining {
			continue // a draining bridge owns nothing (handover.go)
		}
		if reg.Placement != 0 && reg.Placement != placement.Version {
			p.log.Warn().Int32("node_id", reg.NodeID).Int("placement", reg.Placement).Int("ours", placement.Version).
				Msg("a live bridge computes another placement rule; groups may be named differently until the upgrade completes")
		}
		if reg.DataPathOn() && reg.BrokerPlacement < placement.BrokerVersion {
			p.log.Debug().Int32("node_id", reg.NodeID).Int("broker_placement", reg.BrokerPlacement).Int("ours", placement.BrokerVersion).
				Msg("a live bridge serves upstream brokers by an older rule: every bridge uses it until the upgrade completes")
		}
		others[reg.NodeID] = reg
	}
	return others
}

// registration is what this bridge writes under <root>/bridges/<node-id>. An address the
// others must give clients names a host they can reach: the advertised one, else the
// listener's, else (a listener on every interface) this machine's host name.
func (b *Bridge) registration(host string, port int32) zkstate.BridgeRegistration {
	reg := zkstate.BridgeRegistration{
		NodeID:          b.cfg.NodeID,
		Kafka:           b.Addr().String(),
		Admin:           b.AdminAddr().String(),
		Software:        b.cfg.SoftwareVersion,
		Placement:       placement.Version,
		BrokerPlacement: placement.BrokerVersion,
		StartedMs:       time.Now().UnixMilli(),
		PID:             os.Getpid(),
	}
	if host == "" {
		// Listening on every interface without an advertised address: our own answers name
		// us by the host each client dialed (Bridge.advertised), the others' by this name.
		host, reg.DialedHost = hostName(), true
	}
	reg.Advertised = net.JoinHostPort(host, strconv.Itoa(int(port)))
	reg.DataPath = b.cfg.relayEnabled()
	if l := b.LegacyAddr(); l != nil {
		reg.Legacy = reachable(l)
	}
	return reg
}

// reachable is a listener's address as another machine dials it.
func reachable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	host := tcp.IP.String()
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		host = hostName()
	}
	return net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

func hostName() string {
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "localhost"
}

// registrar writes this bridge's registration: created once Run serves (register), rewritten
// when the proxy listeners change (advertiseProxies) and when the bridge drains (deregister).
// Each write is the last one with one field changed, under one lock, so that no write loses
// another's field (a proxy change must not undo draining), and every write also becomes what a
// new session re-creates (zkstate.SetEphemeral).
type registrar struct {
	mu      sync.Mutex
	reg     zkstate.BridgeRegistration
	set     bool // reg holds the bridge's fields (init)
	created bool // the ephemeral exists, made by CreateEphemeral
	deleted bool // unregister deleted it: nothing is written any more
}

// init sets the fixed fields, keeping a proxy map advertiseProxies set first.
func (r *registrar) init(reg zkstate.BridgeRegistration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg.Proxy = r.reg.Proxy
	r.reg, r.set = reg, true
}

// create creates the registration, or finds it made by our session already (the reclaim after
// an expiry, zkstate.Store.CreateEphemeral); the peers then compute with the proxy listeners it
// holds. in is the session it is known to exist in: 0 when the session changed meanwhile.
func (r *registrar) create(ctx context.Context, store *zkstate.Store, path string, peers *peerSet) (in int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := store.SessionID()
	if err := store.CreateEphemeral(ctx, path, r.reg.Encode()); err != nil {
		return 0, err
	}
	r.created = true
	peers.registered(r.reg)
	if store.SessionID() != before {
		return 0, nil
	}
	return before, nil
}

// rewrite changes the registration with edit and writes it once it exists; before that the
// change waits for create. written reports whether the change is in ZooKeeper.
func (r *registrar) rewrite(ctx context.Context, store *zkstate.Store, path string, edit func(*zkstate.BridgeRegistration)) (written bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	edit(&r.reg)
	if !r.created || r.deleted {
		return false, nil
	}
	if err := store.SetEphemeral(ctx, path, r.reg.Encode()); err != nil {
		return false, err
	}
	return true, nil
}

// advertiseProxies keeps the registration's proxy map equal to this bridge's proxy listeners
// (one per upstream broker, whether this bridge serves the broker or not: relay.Proxy.Ports),
// at the advertised host, until ctx ends. Once a map is in ZooKeeper the peers compute with it,
// as the other bridges do once they read it.
func (b *Bridge) advertiseProxies(ctx context.Context, store *zkstate.Store, proxy *relay.Proxy, host string) {
	if host == "" {
		host = hostName()
	}
	path := zkstate.BridgePath(b.cfg.Root, b.cfg.NodeID)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		ports, changed := proxy.Ports()
		m := make(map[int32]string, len(ports))
		for id, port := range ports {
			m[id] = net.JoinHostPort(host, strconv.Itoa(int(port)))
		}
		wctx, cancel := context.WithTimeout(ctx, b.cfg.WriteTimeout)
		written, err := b.registrar.rewrite(wctx, store, path, func(r *zkstate.BridgeRegistration) { r.Proxy = m })
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			b.log.Warn().Err(err).Msg("advertising the proxy listeners in the bridge registration failed; retrying")
			retry.Reset(time.Second)
		case written:
			b.peers.advertised(m)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			retry.Stop()
		case <-retry.C:
		}
	}
}

// deregister marks the bridge's registration draining, so that the other bridges compute it
// out of the live set at once while it hands its groups over (handover.go); a group's next
// owner still sees it alive, and waits for its release rather than taking the group.
func (b *Bridge) deregister(store *zkstate.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.WriteTimeout)
	defer cancel()
	p := zkstate.BridgePath(b.cfg.Root, b.cfg.NodeID)
	written, err := b.registrar.rewrite(ctx, store, p, func(r *zkstate.BridgeRegistration) { r.Draining = true })
	if err != nil || !written {
		b.log.Warn().Err(err).Str("path", p).Msg("deregistering failed; the other bridges see us go when the session closes")
		return
	}
	b.log.Info().Str("path", p).Msg("bridge deregistered: draining")
}

// unregister deletes the registration once the groups are handed over.
func (b *Bridge) unregister(store *zkstate.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.WriteTimeout)
	defer cancel()
	// Under the registrar's lock, so that no rewrite (the proxy listeners close at shutdown)
	// comes after the delete.
	b.registrar.mu.Lock()
	defer b.registrar.mu.Unlock()
	b.registrar.deleted = true
	_ = store.DeleteEphemeral(ctx, zkstate.BridgePath(b.cfg.Root, b.cfg.NodeID))
}
