package bridge

// Requests for a group that moves here from a bridge that looks dead (docs/several-bridges.md).
// A killed bridge's groups stay its own until its ZooKeeper session expires; until then a
// survivor may not serve them. FindCoordinator names the survivor a group moves to at once
// (Successor, newproto.PeerSuccession) rather than holding the answer until the expiry, and that
// survivor keeps the group's requests waiting (parks them) until the live view changes: at the
// expiry, after the prepared takeovers have started (preload.go), the request goes on to the
// group's actor, which serves it as soon as the group is loaded. A member's commit is then the
// first thing the group writes after the takeover, where before the member learned of the
// change from its held lookup, dialed the survivor and sent its commit, all after the takeover;
// on a loaded machine those client steps took most of the time between the epoch's write and the
// commit's answer.
//
// Nothing is served before the group is ours: a parked request goes through actorFor again,
// which answers NOT_COORDINATOR for a group that does not map here. A request parks at most
// parkFor (FindCoordinator's hold, which it takes the place of) in all, and only while the
// group's owner looks dead to this bridge and the group maps here without it; a peer named
// again, a shutdown or the request's connection closing ends the wait, and the request is
// answered as before: NOT_COORDINATOR.

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/placement"
)

var _ newproto.PeerSuccession = (*peerSet)(nil)

// parkFor bounds how long a request waits for its group to move here.
const parkFor = newproto.DefaultCoordinatorHold

// parking wakes the parked requests at each change of the live or named ids.
type parking struct {
	mu   sync.Mutex
	wake chan struct{}
}

// woken returns a channel closed at the next wake.
func (p *parking) woken() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	return p.wake
}

func (p *parking) wakeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

// unpark is the subscriber of the live ids (after takePrepared, so that a woken request finds
// the prepared takeover's actor) and of the named ids.
func (c *coordinator) unpark(_, _ *liveView) { c.parked.wakeAll() }

// parkedFor counts a request's wait that began at since (none when zero) in the parked metric.
func (c *coordinator) parkedFor(since time.Time, outcome string) {
	if !since.IsZero() && c.metrics != nil {
		c.metrics.parkedSeconds.WithLabelValues(outcome).Observe(time.Since(since).Seconds())
	}
}

// Successor implements newproto.PeerSuccession: the owner of group among the named bridges, the
// live ones that do not look dead.
func (p *peerSet) Successor(group string) (newproto.Broker, bool, bool) {
	v := p.view.Load()
	n, ok := placement.Owner(group, v.named)
	switch {
	case !ok:
		return newproto.Broker{}, false, false
	case n == p.self:
		return newproto.Broker{}, false, true
	}
	b, ok := brokerOf(v.others[n])
	return b, true, ok
}

// movingHere reports whether group's owner is a bridge that looks dead and group maps here
// without it.
func (c *coordinator) movingHere(name string) bool {
	if c.peers == nil {
		return false
	}
	v := c.peers.current()
	now, ok := placement.Owner(name, v.ids)
	if !ok || now == c.cfg.NodeID || slices.Contains(v.named, now) {
		return false
	}
	next, ok := placement.Owner(name, v.named)
	return ok && next == c.cfg.NodeID
}

// park waits, for a request refused NOT_COORDINATOR whose group is moving here, until the live
// or named ids change, parkFor has passed since the request first parked (*since, set then), the
// coordinator closes or ctx ends; it reports whether to look for the group's actor again.
func (c *coordinator) park(ctx context.Context, name string, since *time.Time) bool {
	woken := c.parked.woken() // before the check, so that no change is missed
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	start := *since
	if start.IsZero() {
		start = time.Now()
	}
	left := time.Until(start.Add(parkFor))
	if closed || left <= 0 || !c.movingHere(name) {
		return false
	}
	*since = start
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-woken:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
