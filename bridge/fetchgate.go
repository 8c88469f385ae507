package bridge

// The fetch gate: with the data path on, the Kafka members of a mixed group fetch through this
// bridge, and the bridge withholds a fetched response while it cannot vouch that the members
// still own what they fetch (relay.Config.FetchGate closes the connection instead).
//
// A mixed group's Kafka members own their partitions through owner znodes that are ephemerals
// of the bridge's ZooKeeper session. When that session expires, zk and legacy members take the
// partitions, while the Kafka members keep their assignment until they hear of a rebalance (a
// heartbeat answered REBALANCE_IN_PROGRESS) or give up on the bridge (their session timeout,
// 45 s by default). A bridge that dies takes its proxy listeners with it, so its members fetch
// nothing more (TestIntegration_MixedBridgeKilled). A bridge that was paused or cut off and
// comes back does not: its relay would serve the members' fetches again before it has even
// read that its session expired, and after that until the members have rejoined. So:
//
//   - while zkstate's session lease has lapsed (no probe answered in the session for nine
//     tenths of its timeout: the server may have expired it, zkstate/lease.go), no Fetch
//     response is relayed;
//   - a mixed group whose members held a claim when the session was lost stays fenced for
//     fetches until it has claimed again in the new session (its members rejoined and the
//     previous owners let go), or has no member left, or the longest session timeout of its
//     members has passed (they gave up by then);
//   - what the gate allows, it allows until the lease it read lapses: the relay withholds a
//     response it has not written by then, and cuts one still being written (newproto's
//     writer). A process paused between the gate's answer and the write would otherwise hand
//     the members records after the session expired and the partitions were taken, as soon as
//     it runs again (TestIntegration_MixedBridgeKilled/paused caught it once in CI; a 30 ms
//     sleep put between the two made it fail every time). What is left is a pause between the
//     writer's last look at the clock and the write itself.
//
// The relay cannot tell which group a Fetch is for (Fetch names partitions, not groups), so a
// fenced group closes the gate for every fetch through the bridge: a lost session is rare and
// costs every group its rebalance anyway. A bridge with no mixed group holding a claim has no
// ownership to protect, and relays whatever its lease says: a ZooKeeper outage then does not
// stop consumers of Kafka-mode groups or without a group.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// errFetchGated is wrapped by the gate's errors.
var errFetchGated = errors.New("fetch withheld")

// voucher is what the gate needs of the Store: its session lease (zkstate/lease.go).
type voucher interface {
	VouchedUntil(now time.Time) (time.Time, bool)
}

var _ voucher = (*zkstate.Store)(nil)

// fetchGate holds the mixed groups fenced by a lost session.
type fetchGate struct {
	lease  atomic.Value // a voucher; none until the bridge serves groups
	claims atomic.Int32 // mixed groups whose Kafka members hold a claim (actor.setClaimed)

	mu     sync.Mutex
	fenced map[string]time.Time // group → when its members gave up at the latest
	n      atomic.Int32         // len(fenced): the common case takes no lock
}

// allow is relay.Config.FetchGate. What it allows it allows until the session lease it read
// lapses: a response the relay has not written by then (the process was paused or starved
// after asking) is withheld too, since the server may have expired the session meanwhile.
func (g *fetchGate) allow(now time.Time) (time.Time, error) {
	if g.claims.Load() == 0 && g.n.Load() == 0 {
		return time.Time{}, nil // no Kafka member owns a partition the other kinds could take
	}
	var lease time.Time
	if v, _ := g.lease.Load().(voucher); v != nil {
		lease, _ = v.VouchedUntil(now)
	}
	if lease.IsZero() {
		return time.Time{}, fmt.Errorf("%w: no ZooKeeper reply in this session for nine tenths of its timeout; it may have expired, and the Kafka members' partitions with it", errFetchGated)
	}
	if g.n.Load() == 0 {
		return lease, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, until := range g.fenced {
		if now.Before(until) {
			return time.Time{}, fmt.Errorf("%w: mixed group %q lost its owner znodes with a ZooKeeper session and has not claimed them again", errFetchGated, name)
		}
		g.clearLocked(name)
	}
	return lease, nil
}

// fence closes the gate for group name until it claims again, at most until until.
func (g *fetchGate) fence(name string, until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fenced == nil {
		g.fenced = map[string]time.Time{}
	}
	if _, ok := g.fenced[name]; !ok {
		g.n.Add(1)
	}
	g.fenced[name] = until
}

// clear reopens the gate for group name: it claimed in the current session, or has no member.
func (g *fetchGate) clear(name string) {
	if g.n.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.clearLocked(name)
}

func (g *fetchGate) clearLocked(name string) {
	if _, ok := g.fenced[name]; ok {
		delete(g.fenced, name)
		g.n.Add(-1)
	}
}

// setClaimed records that the group's Kafka members hold a claim, d being their longest
// session timeout, or no longer do (0), and keeps the gate's count of such groups.
func (a *actor) setClaimed(d time.Duration) {
	switch old := a.claimedFor.Swap(int64(max(d, 0))); {
	case old == 0 && d > 0:
		a.c.gate.claims.Add(1)
	case old > 0 && d <= 0:
		a.c.gate.claims.Add(-1)
	}
}
