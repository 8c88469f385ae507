package relay

// The proxy listeners: one per upstream broker, opened, closed and
// reopened as the broker set and the brokers' health change.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/newproto"
)

// Serve serves a proxy listener on srv for each upstream broker and follows
// the Upstream's broker set: a broker that joins gets a listener, one that
// leaves loses it (its clients are refused, as by a broker that is down),
// one that comes back gets its old port again. A broker that is down (a
// dial failed) has its listener closed until a dial succeeds again, which
// Serve tries every ProbeInterval. A listener that cannot be opened
// is retried every few seconds. Serve returns when ctx is done (closing
// the whole server, as srv.Serve does) or srv is closed. srv must have p
// as its newproto.Config.Relay.
func (p *Proxy) Serve(ctx context.Context, srv *newproto.Server) error {
	open := map[int32]net.Listener{}
	var wg sync.WaitGroup
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer func() {
		stopProbes()
		for id, ln := range open {
			_ = ln.Close()
			p.setPort(id, 0)
		}
		wg.Wait()
	}()
	wg.Go(func() { p.probe(probeCtx) })
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		changed := p.up.watch()
		if p.reconcile(ctx, srv, open, &wg) {
			retry.Reset(5 * time.Second)
		} else {
			retry.Stop()
		}
		select {
		case <-changed:
		case <-retry.C:
		case <-srv.Done():
			return nil
		case <-ctx.Done():
			// The proxy listeners' serve calls close the server
			// too; closing it here as well makes the return wait
			// for the drain, as Serve's does.
			return srv.Close()
		}
	}
}

// reconcile opens a listener for every broker that is up and has none,
// and closes those of brokers that left or are down. It reports whether a
// listener failed to open.
func (p *Proxy) reconcile(ctx context.Context, srv *newproto.Server, open map[int32]net.Listener, wg *sync.WaitGroup) (retry bool) {
	ids := p.up.brokerIDs()
	down := p.up.downBrokers()
	p.metrics.brokersDown.Set(float64(len(down)))
	p.mu.Lock()
	p.plan = p.plan.assign(ids)
	plan := p.plan
	p.mu.Unlock()

	want := make(map[int32]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	for id, ln := range open {
		switch {
		case !want[id]:
			_ = ln.Close()
			delete(open, id)
			p.setPort(id, 0)
			p.log.Info().Int32("broker", id).Stringer("addr", ln.Addr()).Msg("upstream broker left; proxy listener closed")
		case down[id]:
			// Its port stays in the address book: Metadata names
			// the broker there as long as the cluster does, and
			// clients are refused there, as by the broker.
			_ = ln.Close()
			delete(open, id)
			p.log.Info().Int32("broker", id).Stringer("addr", ln.Addr()).Msg("upstream broker down; proxy listener closed until it answers")
		}
	}
	p.mu.Lock()
	for id := range p.ports {
		if !want[id] {
			delete(p.ports, id)
			p.portsChangedLocked()
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		if _, ok := open[id]; ok {
			continue
		}
		p.mu.Lock()
		addr, err := plan.listenAddr(id, p.cfg.Listeners, p.cfg.Listen)
		last := p.last[id]
		_, known := p.ports[id]
		p.mu.Unlock()
		if err == nil && addr == "" {
			p.log.Warn().Int32("broker", id).Msg("upstream broker has no proxy listener configured; Metadata leaves it out")
			continue
		}
		if down[id] {
			if _, port, perr := net.SplitHostPort(addr); err == nil && perr == nil && !known && port != "0" {
				// Down from the start: clients are refused at
				// the port it is to have.
				n, _ := strconv.Atoi(port)
				p.setPort(id, int32(n))
			}
			continue
		}
		var ln net.Listener
		if err == nil {
			var lc net.ListenConfig
			if host, port, _ := net.SplitHostPort(addr); port == "0" && last != 0 {
				// The port it had, if it is still free.
				ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(last))))
			}
			if ln == nil {
				ln, err = lc.Listen(ctx, "tcp", addr)
			}
		}
		if err != nil {
			p.log.Error().Err(err).Int32("broker", id).Msg("cannot open proxy listener; retrying")
			retry = true
			continue
		}
		open[id] = ln
		p.setPort(id, int32(ln.Addr().(*net.TCPAddr).Port))
		wg.Go(func() {
			err := srv.ServeBroker(ctx, ln, id)
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, newproto.ErrServerClosed) {
				p.log.Error().Err(err).Int32("broker", id).Msg("proxy listener failed")
			}
		})
	}
	return retry
}

// probe dials, every ProbeInterval, the brokers that are down, and at once
// those suspected (suspect), one dial per broker at a time, until ctx
// ends. A dial records its outcome (Upstream.setReachable), which
// Serve follows.
func (p *Proxy) probe(ctx context.Context) {
	tick := time.NewTicker(p.cfg.ProbeInterval)
	defer tick.Stop()
	busy := map[int32]bool{}
	done := make(chan int32)
	var wg sync.WaitGroup
	defer wg.Wait()
	dial := func(id int32) {
		if busy[id] {
			return
		}
		busy[id] = true
		wg.Go(func() {
			if nc, _, err := p.up.dial(ctx, id); err == nil {
				_ = nc.Close()
			}
			select {
			case done <- id:
			case <-ctx.Done():
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-done:
			delete(busy, id)
		case id := <-p.suspects:
			dial(id)
		case <-tick.C:
			for id := range p.up.downBrokers() {
				dial(id)
			}
		}
	}
}

func (p *Proxy) setPort(id, port int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.ports[id]; ok == (port != 0) && old == port {
		return
	}
	p.portsChangedLocked()
	if port == 0 {
		delete(p.ports, id)
		return
	}
	p.ports[id] = port
	p.last[id] = port
}
