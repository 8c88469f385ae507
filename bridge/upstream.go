package bridge

// The data path: with an upstream cluster configured, the bridge is the only address
// an unmodified Kafka client needs. Package relay does the work: the
// group APIs are answered by this bridge's coordinator, every other request is relayed byte for
// byte to the real broker, and Metadata names a proxy listener of the bridge for each broker.
// This file wires it into Run:
//
//   - which brokers: Config.Upstream seeds (asked for the cluster's brokers at start and every
//     MetadataMaxAge after), or, with Config.UpstreamFromZK, the brokers registered in
//     /brokers/ids of the bridge's own ZooKeeper, followed through watches;
//   - a start-up check: every broker must speak ApiVersions (Kafka 0.10+), else Run fails, and
//     no broker may use the bridge's NodeID (Metadata would show two nodes with one id);
//   - where the proxy listeners listen (Config.ProxyListen, Config.ProxyMap).
//
// Without Upstream or UpstreamFromZK there is no relay: the Kafka listener serves the group
// APIs and a Metadata built from /brokers, as before.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/relay"
	"github.com/zkbridge/zkbridge/zkstate"
)

// DefaultUpstreamTimeout is what a zero Config.UpstreamTimeout means: the relay's default wait
// for a broker's response, longer than any wait a client asks a broker for.
const DefaultUpstreamTimeout = relay.DefaultRelayTimeout

// upstreamRetry is how long the registry follower waits before reading /brokers/ids again after
// a failed read (ZooKeeper unreachable); a watch event retries sooner.
const upstreamRetry = 2 * time.Second

// relayEnabled reports whether an upstream cluster is configured.
func (c Config) relayEnabled() bool { return len(c.Upstream) > 0 || c.UpstreamFromZK }

// validateUpstream reports every invalid upstream and proxy setting.
func (c Config) validateUpstream() []error {
	var errs []error
	if len(c.Upstream) > 0 && c.UpstreamFromZK {
		errs = append(errs, errors.New("bridge: Upstream and UpstreamFromZK are exclusive: the brokers come from seeds or from /brokers/ids, not both"))
	}
	for _, s := range c.Upstream {
		if err := validHostPort(s); err != nil {
			errs = append(errs, fmt.Errorf("bridge: Upstream broker %q: %w", s, err))
		}
	}
	if c.UpstreamTimeout < 0 {
		errs = append(errs, fmt.Errorf("bridge: UpstreamTimeout %v is negative", c.UpstreamTimeout))
	}
	if !c.relayEnabled() && !c.UpstreamAuto {
		// Without an upstream nothing reads the proxy settings; a stray one is a mistake
		// worth saying rather than ignoring.
		if c.ProxyListen != "" || len(c.ProxyMap) > 0 {
			errs = append(errs, errors.New("bridge: ProxyListen and ProxyMap need Upstream, UpstreamFromZK or UpstreamAuto"))
		}
		return errs
	}
	if c.ProxyListen != "" {
		if err := validHostPort(c.ProxyListen); err != nil {
			errs = append(errs, fmt.Errorf("bridge: ProxyListen %q: want HOST:BASEPORT: %w", c.ProxyListen, err))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.ProxyMap)) {
		switch {
		case id < 0:
			errs = append(errs, fmt.Errorf("bridge: ProxyMap broker id %d is negative", id))
		case id == c.NodeID:
			errs = append(errs, fmt.Errorf("bridge: ProxyMap broker id %d is the bridge's own NodeID", id))
		}
		if err := validHostPort(c.ProxyMap[id]); err != nil {
			errs = append(errs, fmt.Errorf("bridge: ProxyMap address of broker %d %q: %w", id, c.ProxyMap[id], err))
		}
	}
	return errs
}

// validHostPort accepts host:port with a port in 0-65535 (0: the system chooses, for tests); the
// host may be empty (every interface).
func validHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number in 0-65535", port)
	}
	return nil
}

// ParseUpstream reads the --upstream flag: comma-separated host:port bootstrap brokers, each
// with a host and a port in 1-65535. Blanks around items are ignored; an empty item is an error.
func ParseUpstream(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		host, port, err := net.SplitHostPort(item)
		if err != nil {
			return nil, fmt.Errorf("item %d %q: want host:port: %w", i+1, item, err)
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 || host == "" {
			return nil, fmt.Errorf("item %d %q: want host:port with a port in 1-65535", i+1, item)
		}
		out = append(out, item)
	}
	return out, nil
}

// ParseProxyMap reads the --proxy-map flag: comma-separated id=host:port, one per upstream
// broker id, each id at most once.
func ParseProxyMap(s string) (map[int32]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[int32]string{}
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		idText, addr, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("item %d %q: want id=host:port", i+1, item)
		}
		id, err := strconv.ParseInt(strings.TrimSpace(idText), 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("item %d %q: broker id %q is not a number from 0 to 2147483647", i+1, item, idText)
		}
		addr = strings.TrimSpace(addr)
		if err := validHostPort(addr); err != nil {
			return nil, fmt.Errorf("item %d %q: want id=host:port: %w", i+1, item, err)
		}
		if _, dup := out[int32(id)]; dup {
			return nil, fmt.Errorf("item %d %q: broker %d is mapped twice", i+1, item, id)
		}
		out[int32(id)] = addr
	}
	return out, nil
}

// ProxyAddrs returns the address of each open proxy listener by upstream broker id: empty
// without an upstream, and filled shortly after Ready (the listeners open as the broker set is
// known, and follow it).
func (b *Bridge) ProxyAddrs() map[int32]net.Addr {
	srv := b.proxySrv.Load()
	if srv == nil {
		return map[int32]net.Addr{}
	}
	return srv.ProxyAddrs()
}

// openUpstream builds the upstream cluster when one is configured (nil, nil otherwise): it
// learns the brokers (from the seeds or /brokers/ids), checks that none is older than Kafka
// 0.10 and none uses the bridge's NodeID, and returns the relay for newproto.
// A broker that cannot be reached at start (refused, silent, or closing connections unanswered:
// the errors say which) is only logged: it is marked down, so its proxy listener refuses
// connections as the broker does, and the relay keeps dialing it and listens for it once it
// answers.
func (b *Bridge) openUpstream(ctx context.Context, store *zkstate.Store, kafka net.Addr) (*relay.Upstream, *relay.Proxy, error) {
	cfg := b.cfg
	if !cfg.relayEnabled() {
		return nil, nil, nil
	}
	dial, err := upstreamDialer(cfg.UpstreamTLS) // security.go
	if err != nil {
		return nil, nil, err
	}
	up, err := relay.NewUpstream(relay.UpstreamConfig{
		Logger:         cfg.Logger,
		RequestTimeout: cfg.UpstreamTimeout,
		Dial:           dial,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("bridge: upstream: %w", err)
	}
	if cfg.UpstreamFromZK {
		brokers, err := b.registeredBrokers(ctx, store)
		if err != nil {
			return nil, nil, fmt.Errorf("bridge: upstream brokers from %s: %w", zkstate.BrokerIDsPath, err)
		}
		if err := up.SetBrokers(brokers); err != nil {
			return nil, nil, fmt.Errorf("bridge: upstream brokers from %s: %w", zkstate.BrokerIDsPath, err)
		}
		if len(brokers) == 0 {
			// A cluster being (re)started: its brokers register later, and the follower
			// opens their listeners then.
			b.log.Warn().Str("path", zkstate.BrokerIDsPath).Msg("no upstream broker registered yet; relaying once brokers register")
		}
	} else if err := up.Discover(ctx, cfg.Upstream); err != nil {
		if errors.Is(err, relay.ErrUpstreamTooOld) {
			return nil, nil, tooOld(err)
		}
		return nil, nil, fmt.Errorf("bridge: no upstream seed broker (%s) answered: %w", strings.Join(cfg.Upstream, ","), err)
	}
	if err := b.checkNodeID(up.Brokers()); err != nil {
		return nil, nil, err
	}
	if len(up.Brokers()) > 0 {
		if err := up.Probe(ctx); errors.Is(err, relay.ErrUpstreamTooOld) {
			return nil, nil, tooOld(err)
		} else if err != nil {
			b.log.Warn().Err(err).Msg("some upstream brokers are unreachable; their proxy listeners refuse connections until they answer")
		}
	}
	pc := relay.Config{Upstream: up, Listen: cfg.ProxyListen, Listeners: cfg.ProxyMap, FetchGate: b.coord.gate.allow,
		Peers: b.peers, Logger: cfg.Logger, Registerer: b.reg} // peers.go: several bridges, one broker list
	if pc.Listen == "" && len(pc.Listeners) == 0 {
		pc.Listen = defaultProxyListen(kafka)
	}
	proxy, err := relay.New(pc)
	if err != nil {
		return nil, nil, fmt.Errorf("bridge: %w", err)
	}
	b.log.Info().Interface("brokers", up.Brokers()).Str("proxy_listen", pc.Listen).
		Interface("proxy_map", pc.Listeners).Msg("relaying to the upstream cluster")
	return up, proxy, nil
}

// tooOld is the start-up error for an upstream broker that predates ApiVersions.
func tooOld(err error) error {
	return fmt.Errorf("bridge: the upstream cluster is too old for the relay (it needs ApiVersions, Kafka 0.10 or newer; "+
		"run without --upstream/--upstream-from-zk to coordinate groups only): %w", err)
}

// defaultProxyListen is the proxy base address when none is configured: the Kafka listener's
// host, and the port after its own (broker k of the sorted list on port+1+k), or system-chosen
// ports when the Kafka listener's was (port 0).
func defaultProxyListen(kafka net.Addr) string {
	tcp, ok := kafka.(*net.TCPAddr)
	if !ok {
		return "127.0.0.1:0"
	}
	host := ""
	if !tcp.IP.IsUnspecified() {
		host = tcp.IP.String()
	}
	port := 0
	if tcp.Port != 0 && tcp.Port < 65535 {
		port = tcp.Port + 1
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// checkNodeID refuses an upstream broker with the bridge's own id: Metadata would list two
// nodes with one id, and clients would send that broker's partitions to the coordinator.
func (b *Bridge) checkNodeID(brokers []newproto.Broker) error {
	for _, br := range brokers {
		if br.NodeID == b.cfg.NodeID {
			return fmt.Errorf("bridge: NodeID %d is also the id of upstream broker %s:%d; give the bridge an id no broker uses (--node-id)",
				b.cfg.NodeID, br.Host, br.Port)
		}
	}
	return nil
}

// upstreamProtocol is the security protocol of the brokers' listeners the relay dials: SASL
// ones with SASLForward (the clients authenticate there), over TLS with UpstreamTLS.
func (c Config) upstreamProtocol() string {
	switch {
	case c.SASLForward && c.UpstreamTLS != nil:
		return "SASL_SSL"
	case c.SASLForward:
		return "SASL_PLAINTEXT"
	case c.UpstreamTLS != nil:
		return "SSL"
	}
	return "PLAINTEXT"
}

// registeredBrokers reads /brokers/ids: every registration naming an address of the security
// protocol the relay speaks (PLAINTEXT, SSL with UpstreamTLS, SASL_* with SASLForward), except
// one with the bridge's own id, which is logged and left out (at start, checkNodeID refuses it).
func (b *Bridge) registeredBrokers(ctx context.Context, store *zkstate.Store) ([]newproto.Broker, error) {
	regs, problems, err := store.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range problems {
		b.log.Warn().Err(p.Err).Str("path", p.Path).Msg("malformed broker registration; not relayed to")
	}
	out := make([]newproto.Broker, 0, len(regs))
	protocol := b.cfg.upstreamProtocol()
	for _, r := range regs {
		host, port, err := r.AddrFor(protocol)
		if err != nil {
			b.log.Warn().Err(err).Int32("broker", r.ID).Str("protocol", protocol).Msg("broker registration without an address of the protocol the relay dials; not relayed to")
			continue
		}
		br := newproto.Broker{NodeID: r.ID, Host: host, Port: port}
		if r.Rack != "" {
			rack := r.Rack
			br.Rack = &rack
		}
		out = append(out, br)
	}
	return out, nil
}

// withoutNodeID drops a broker that uses the bridge's id, logging it.
func (b *Bridge) withoutNodeID(brokers []newproto.Broker) ([]newproto.Broker, bool) {
	i := slices.IndexFunc(brokers, func(br newproto.Broker) bool { return br.NodeID == b.cfg.NodeID })
	if i < 0 {
		return brokers, false
	}
	b.log.Error().Int32("node_id", b.cfg.NodeID).Str("host", brokers[i].Host).Int32("port", brokers[i].Port).
		Msg("an upstream broker uses the bridge's NodeID; not relayed to until the bridge gets another id")
	return slices.Delete(slices.Clone(brokers), i, i+1), true
}

// followUpstream keeps the upstream broker set current until ctx ends: from /brokers/ids with
// UpstreamFromZK, else by asking the seeds again every MetadataMaxAge.
func (b *Bridge) followUpstream(ctx context.Context, store *zkstate.Store, up *relay.Upstream) {
	if b.cfg.UpstreamFromZK {
		b.followRegistry(ctx, store, up)
		return
	}
	b.followSeeds(ctx, up)
}

// followRegistry follows /brokers/ids: a watch on its children sees brokers join and leave, and
// a data watch per broker sees one re-register at another address (a restarted broker's
// ephemeral comes back with new content). The watches are only triggers: each one re-reads the
// whole registry, so that a burst of changes, or changes missed while the session was gone,
// end in the registry's current state.
func (b *Bridge) followRegistry(ctx context.Context, store *zkstate.Store, up *relay.Upstream) {
	ids, err := store.WatchChildren(ctx, zkstate.BrokerIDsPath)
	if err != nil {
		b.log.Error().Err(err).Msg("cannot watch the upstream broker registry; the relay keeps the brokers it knows")
		return
	}
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	watches := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, cancel := range watches {
			cancel()
		}
		wg.Wait()
	}()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ids:
			if !ok {
				return
			}
			want := map[string]bool{}
			for _, name := range ev.Children {
				want[name] = true
			}
			for name, cancel := range watches {
				if !want[name] {
					cancel()
					delete(watches, name)
				}
			}
			for name := range want {
				if _, ok := watches[name]; ok {
					continue
				}
				wctx, cancel := context.WithCancel(ctx)
				data, err := store.WatchData(wctx, path.Join(zkstate.BrokerIDsPath, name))
				if err != nil {
					// The children event re-reads the registry anyway; only an address
					// change of this broker goes unseen until the next children event.
					cancel()
					b.log.Warn().Err(err).Str("broker", name).Msg("cannot watch a broker registration")
					continue
				}
				watches[name] = cancel
				wg.Go(func() {
					for range data {
						poke()
					}
				})
			}
			poke()
		case <-changed:
			if err := b.refreshRegistry(ctx, store, up); err != nil {
				if ctx.Err() != nil {
					return
				}
				b.log.Warn().Err(err).Dur("retry_in", upstreamRetry).Msg("reading the upstream broker registry failed")
				retry.Reset(upstreamRetry)
			}
		case <-retry.C:
			poke()
		}
	}
}

// refreshRegistry makes the registry's brokers the upstream broker set.
func (b *Bridge) refreshRegistry(ctx context.Context, store *zkstate.Store, up *relay.Upstream) error {
	rctx, cancel := context.WithTimeout(ctx, b.cfg.LoadTimeout)
	defer cancel()
	brokers, err := b.registeredBrokers(rctx, store)
	if err != nil {
		return fmt.Errorf("bridge: upstream brokers from %s: %w", zkstate.BrokerIDsPath, err)
	}
	brokers, _ = b.withoutNodeID(brokers)
	if err := up.SetBrokers(brokers); err != nil {
		return fmt.Errorf("bridge: upstream brokers: %w", err)
	}
	return nil
}

// followSeeds asks the cluster for its brokers every MetadataMaxAge, as a client refreshes its
// metadata: the configured seeds first, then every broker known so far (the seeds may be gone
// while the cluster lives on).
func (b *Bridge) followSeeds(ctx context.Context, up *relay.Upstream) {
	tick := time.NewTicker(b.cfg.MetadataMaxAge)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		seeds := slices.Clone(b.cfg.Upstream)
		for _, br := range up.Brokers() {
			if a := net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))); !slices.Contains(seeds, a) {
				seeds = append(seeds, a)
			}
		}
		err := up.Discover(ctx, seeds)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !failing {
				b.log.Warn().Err(err).Msg("no upstream broker answered Metadata; keeping the brokers known so far")
			}
			failing = true
			continue
		}
		if failing {
			b.log.Info().Msg("upstream brokers answer Metadata again")
		}
		failing = false
		if brokers, dropped := b.withoutNodeID(up.Brokers()); dropped {
			_ = up.SetBrokers(brokers)
		}
	}
}

// serveProxy serves the proxy listeners until the server closes (Run's shutdown closes it, in
// its order, so ctx's cancellation is not passed on). A failure is reported on errc when nothing
// else was; Run stops at the first error.
func (b *Bridge) serveProxy(ctx context.Context, proxy *relay.Proxy, srv *newproto.Server, errc chan<- error) {
	if err := proxy.Serve(context.WithoutCancel(ctx), srv); err != nil && !errors.Is(err, newproto.ErrServerClosed) {
		select {
		case errc <- fmt.Errorf("bridge: proxy listeners: %w", err):
		default:
		}
	}
}
