package bridge

// A peer that looks dead is left out of Metadata before its ZooKeeper session expires. A bridge
// killed with SIGKILL stays in every bridge's live view until ZooKeeper expires its session, and
// until then every bridge's Metadata listed it and named the upstream brokers it served at its
// proxy listeners, which refuse connections: a client's retried group lookups went there, and two
// refused dials in a row end a franz-go member's session. So every bridge probes every other live
// bridge's Kafka listener every probeEvery, and a peer whose listener refused every probe for
// refusedFor, after it took one at that address (or refused one probe sent after it closed the
// connection this bridge holds open to it: peers_hangup.go), looks dead: Metadata leaves its node out and
// names the upstream brokers it served at the next bridge in their rank (the placement its
// session's expiry would produce). Each bridge reaches that on its own probes, within a probe
// interval of the others: a killed process's kernel refuses at once, to every prober alike.
//
// Only a refusal counts (ECONNREFUSED: a reset, or a host's "port unreachable"): a paused
// (SIGSTOP) process's kernel still takes connections into its listener's backlog, and a full
// backlog, an unreachable host or a lost route time out; none of them makes a peer look dead.
// A peer that takes a connection again is named again at once: its process is back (restarted
// at the same address, as its own Metadata then says), or the refusal was not its death (a
// rejecting firewall rule), and a live peer left out would strand the members of the groups it
// still owns, since FindCoordinator names it. Looking dead changes only what Metadata names:
// a group's owner is computed over every registered bridge, so ownership still moves only when
// the session expires, fenced by the group's epoch, and FindCoordinator holds an answer naming
// such a peer as before (peers_probe.go).

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

const (
	// probeEvery is how often every other live bridge's Kafka listener is dialed.
	probeEvery = 100 * time.Millisecond
	// refusedFor is how long a peer's listener must refuse every probe before it looks dead:
	// at least three refusals after the first, so that every bridge has seen the refusal
	// (their probes are at most probeEvery apart) before any leaves the peer out.
	refusedFor = 300 * time.Millisecond
	// probesInFlight bounds the probes of one peer in flight at once: a probe goes out every
	// probeEvery whether or not the earlier ones have answered, so that one dial left
	// unanswered until probeTimeout (a SYN lost while a killed process's listener is torn down)
	// does not hold the next ones back.
	probesInFlight = int(probeTimeout / probeEvery)
)

// probeOutcome is what one dial of a peer's listener met.
type probeOutcome uint8

const (
	probeTook    probeOutcome = iota // the listener took the connection (its kernel did)
	probeRefused                     // refused: nothing listens there any more
	probeSilent                      // no answer within probeTimeout, or another error
)

// outcomeOf classifies a dial's error.
func outcomeOf(err error) probeOutcome {
	switch {
	case err == nil:
		return probeTook
	case errors.Is(err, syscall.ECONNREFUSED):
		return probeRefused
	default:
		return probeSilent
	}
}

// peerDown is one peer's standing under the rule, for one registration of it.
type peerDown struct {
	everUp       bool      // its listener took a connection (any dial's: liveness.reached)
	refusedSince time.Time // when the first of the refusals in a row was sent; zero: none
	out          bool      // it looks dead: left out of Metadata
	last         time.Time // when the latest probe taken into account was sent
	// hungUp is when the connection held open to its listener was closed by its end (zero: not
	// since its listener last took a connection): a refusal sent after that is its death.
	hungUp time.Time
	// held is when the connection held open to its listener now was opened (zero: none is open;
	// set by the watch from liveness.heldSince before each probe's result): a refusal sent after
	// that, while it is open, is its death too. A killed process's kernel closes its sockets one
	// at a time, highest-numbered first, and a bridge opens its Kafka listener above the others
	// (listen_last_linux.go): its listener refuses while our connection is still open; and
	// under load our reader of that connection may wake hundreds of milliseconds after its end
	// (the refusals then decided under refusedFor before the hang-up counted, in two of three
	// traced benchmark runs). A live
	// bridge's listener takes every connection while it serves: a draining bridge left the live
	// view before its listener closed, and our connection to it was let go with it.
	held time.Time
}

// hangupGrace is how long after a hang-up a connection taken does not clear it: a killed
// process's kernel closes its sockets one at a time, and the connection held open may be closed
// before its listener is, which then still takes a probe (and resets it). A live bridge's
// listener takes a probe sent later too.
const hangupGrace = 50 * time.Millisecond

// hangup is the standing after the connection held open to the peer's listener was closed by
// its end at at (peers_hangup.go). Pure, as observe.
func (d peerDown) hangup(at time.Time) peerDown {
	if !d.last.Before(at) && (!d.refusedSince.IsZero() || !d.last.Before(at.Add(hangupGrace))) {
		// A probe sent since the hang-up has counted already: refused, the peer is dead (the
		// refusals in a row are still running only if it was refused); otherwise it took a
		// connection again past hangupGrace, or was silent, and the hang-up says nothing more.
		d.out = d.out || d.everUp && !d.refusedSince.IsZero()
		return d
	}
	if d.hungUp.IsZero() {
		d.hungUp = at
	}
	return d
}

// settled reports whether the standing has no hang-up left to decide: the peer is out, or a
// probe since cleared it.
func (d peerDown) settled() bool { return d.out || d.hungUp.IsZero() }

// observe is the standing after a probe sent at now met o. Probes count in the order they were
// sent: the result of one sent before the latest counted is dropped (a dial that hung until its
// timeout says nothing about the refusals sent after it). Pure: every bridge applying it to its
// own probes reaches the same standing within a probe interval of the others.
func (d peerDown) observe(now time.Time, o probeOutcome) peerDown {
	if now.Before(d.last) {
		return d
	}
	d.last = now
	switch o {
	case probeTook:
		if now.Before(d.hungUp.Add(hangupGrace)) { // sent before the hang-up, or within its grace: it stands
			return peerDown{everUp: true, last: now, hungUp: d.hungUp}
		}
		return peerDown{everUp: true, last: now}
	case probeRefused:
		if !d.everUp {
			return d // an address never reached is not a dead peer
		}
		if d.refusedSince.IsZero() {
			d.refusedSince = now
		}
		hungUp := !d.hungUp.IsZero() && !now.Before(d.hungUp)
		heldOpen := !d.held.IsZero() && d.held.Before(now)
		d.out = d.out || hungUp || heldOpen || now.Sub(d.refusedSince) >= refusedFor
		return d
	default:
		if !d.out {
			d.refusedSince = time.Time{} // the refusals in a row are broken
		}
		return d
	}
}

// peerDownKey is one registration's listener: a peer registered again is a new peer.
type peerDownKey struct {
	addr    string
	started int64
}

// watchPeers probes every other live bridge's Kafka listener every probeEvery until ctx ends,
// and at once when the connection it holds open to that listener is closed by its end
// (peers_hangup.go); applies the rule to each peer's results, and rebuilds the view when the
// peers that look dead change. The probes' results also answer Unreachable (FindCoordinator's
// hold).
func (p *peerSet) watchPeers(ctx context.Context) {
	w := &probeWatch{p: p, ctx: ctx, results: make(chan probeResult), hangups: make(chan hangupReport),
		inFlight: map[int32]int{}, standing: map[int32]peerDown{}, keys: map[int32]peerDownKey{}, holding: map[int32]heldConn{}}
	defer p.probes.settleAll() // after the held connections' goroutines are done
	defer w.wg.Wait()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			others := p.view.Load().others
			w.letGo(others)
			for id, reg := range others {
				if key, ok := keyOf(reg); ok {
					w.probe(id, key)
					w.holdOpen(id, key)
				}
			}
		case r := <-w.results:
			if w.inFlight[r.id]--; w.inFlight[r.id] <= 0 {
				delete(w.inFlight, r.id)
			}
			if d, ok := w.standingOf(r.id, r.key); ok {
				d.held = p.probes.heldSince(r.id)
				w.standing[r.id] = d.observe(r.sent, r.o)
				p.setOut(w.standing, w.keys)
			}
			p.probes.afterProbe(r.id, r.sent, r.o, w.standing[r.id]) // peers_hangup.go: Metadata's wait
		case h := <-w.hangups:
			if w.holding[h.id].key == h.key {
				delete(w.holding, h.id) // opened again at the next tick
			}
			if d, ok := w.standingOf(h.id, h.key); ok && !h.at.IsZero() {
				w.standing[h.id] = d.hangup(h.at)
				p.setOut(w.standing, w.keys)
				w.probe(h.id, h.key)
				if d := w.standing[h.id]; !d.last.IsZero() && d.settled() {
					p.probes.counted(h.id, d.last) // a probe sent since may have counted already
				}
			} else if !ok {
				p.probes.counted(h.id, time.Time{}) // gone, or registered again: nothing to wait for
			}
		}
	}
}

// probeWatch is watchPeers' state: the probes in flight and the connections held open, by peer,
// and each peer's standing under the rule.
type probeWatch struct {
	p        *peerSet
	ctx      context.Context
	wg       sync.WaitGroup
	results  chan probeResult
	hangups  chan hangupReport
	inFlight map[int32]int // probes sent and not answered, by peer: at most probesInFlight
	standing map[int32]peerDown
	keys     map[int32]peerDownKey
	holding  map[int32]heldConn // the connection held open to each peer's listener
}

// probeResult is what one probe of peer id's listener met.
type probeResult struct {
	id   int32
	key  peerDownKey
	sent time.Time
	o    probeOutcome
}

// keyOf is the listener reg names, as the rule keys it.
func keyOf(reg zkstate.BridgeRegistration) (peerDownKey, bool) {
	b, ok := brokerOf(reg)
	if !ok {
		return peerDownKey{}, false
	}
	return peerDownKey{net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), reg.StartedMs}, true
}

// probe sends one probe of peer id's listener, unless probesInFlight of them are unanswered.
func (w *probeWatch) probe(id int32, key peerDownKey) {
	if w.inFlight[id] >= probesInFlight {
		return
	}
	w.inFlight[id]++
	w.wg.Go(func() {
		sent := time.Now()
		o := w.p.probes.probeNow(id, key.addr, sent)
		select {
		case w.results <- probeResult{id, key, sent, o}:
		case <-w.ctx.Done():
		}
	})
}

// standingOf is peer id's standing for a result about its listener key, after forgetting the
// peers gone from the view; false if id is gone or registered again since.
func (w *probeWatch) standingOf(id int32, key peerDownKey) (peerDown, bool) {
	others := w.p.view.Load().others
	for id := range w.standing {
		if _, ok := others[id]; !ok {
			delete(w.standing, id)
			delete(w.keys, id)
		}
	}
	if reg, ok := others[id]; !ok || reg.StartedMs != key.started {
		return peerDown{}, false
	}
	if w.keys[id] != key {
		w.keys[id], w.standing[id] = key, peerDown{}
	}
	d := w.standing[id]
	// A connection taken at this address by another dial (the join's, FindCoordinator's hold,
	// the connection held open) counts as the watch's own: a peer killed before the watch's
	// first probe reached it is dead all the same.
	d.everUp = d.everUp || w.p.probes.reached(id, key.addr)
	return d, true
}

// setOut installs the peers that look dead when they changed, and logs each change.
func (p *peerSet) setOut(standing map[int32]peerDown, keys map[int32]peerDownKey) {
	out := map[int32]bool{}
	for id, d := range standing {
		if d.out {
			out[id] = true
		}
	}
	p.mu.Lock()
	old := p.out
	p.mu.Unlock()
	if maps.Equal(old, out) {
		return
	}
	p.update(func() { p.out = out })
	for _, id := range slices.Sorted(maps.Keys(out)) {
		if !old[id] {
			p.log.Warn().Int32("peer", id).Str("kafka", keys[id].addr).Dur("refused_for", refusedFor).
				Bool("hung_up", !standing[id].hungUp.IsZero()).
				Msg("a bridge looks dead (its Kafka listener refuses connections, for refused_for or since it closed our connection: hung_up): left out of Metadata, the upstream brokers it served named at the next bridge; its groups stay its own until its ZooKeeper session ends")
		}
	}
	for id := range old {
		if !out[id] {
			p.log.Info().Int32("peer", id).Msg("a bridge that looked dead takes connections again (or is gone): named in Metadata again while registered")
		}
	}
}

// lookingDead reports whether peer id looks dead to this bridge now.
func (p *peerSet) lookingDead(id int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out[id]
}

// refreshOnOmission is the subscriber of the named ids that makes the clients fetching through
// this bridge's proxy listeners refresh their metadata (refresh: relay.Proxy.Refresh) when a
// bridge drops out of Metadata, so that they leave its addresses now rather than
// metadata.min.age after their last refresh. A bridge that left the live view (it drains, or
// its session ended) is refreshed for at once: every bridge sees the registration change
// within a ZooKeeper notification and read of each other, so a client refreshing at any of
// them is told the same. A bridge that only looks dead is refreshed for one probe interval
// later (after is time.AfterFunc's call): each survivor decides on its own probes, up to about
// a probe interval after the first, and a client made to refresh at the first one's decision
// could ask one that has not decided yet and be told the dead bridge's addresses again, for
// another metadata.min.age. No refresh then if it is named again by that time, or if we drain.
func (p *peerSet) refreshOnOmission(refresh func(), after func(time.Duration, func())) func(old, cur *liveView) {
	return func(old, cur *liveView) {
		if !p.serving.Load() {
			return
		}
		var left, dead []int32
		for _, id := range old.named {
			switch {
			case id == p.self || slices.Contains(cur.named, id):
			case slices.Contains(cur.ids, id):
				dead = append(dead, id)
			default:
				left = append(left, id)
			}
		}
		if len(left) > 0 {
			refresh()
		}
		if len(dead) > 0 {
			after(probeEvery, func() {
				named := p.view.Load().named
				if p.serving.Load() && slices.ContainsFunc(dead, func(id int32) bool { return !slices.Contains(named, id) }) {
					refresh()
				}
			})
		}
	}
}

// afterFunc calls f after d on its own goroutine (time.AfterFunc).
func afterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }
