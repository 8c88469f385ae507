package bridge

// Hand-off at shutdown of a mixed group's Kafka members.
//
// A bridge's registrations and owner znodes are ephemerals of its ZooKeeper session, so they go
// when the bridge does, and the zk and legacy members of its mixed groups take the partitions
// over at once — while the Kafka members still consume them: they only learn that their
// coordinator is gone at their next heartbeat, and even then they keep their partitions until a
// rebalance. So a bridge that shuts down first asks the Kafka members of its mixed groups to
// give them back: their heartbeats are answered REBALANCE_IN_PROGRESS, and each member's
// JoinGroup — which an eager member sends only after revoking everything and committing — releases
// its owner znodes and is answered NOT_COORDINATOR, which sends it looking for the next
// coordinator. The session closes when every such member has rejoined, or after
// Config.HandoffTimeout. (A bridge that crashes cannot do this: when its session expires the
// other members take the partitions while its Kafka members may still hold them, until their own
// session timeout; what keeps that safe is the fetch gate of the data path, and a ZooKeeper
// session timeout above the members' session.timeout.ms: see the README.)

import (
	"context"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
)

// handOff runs the hand-off of every loaded group and waits for it, at most timeout. An actor
// that ends first gives nothing back (a refused or still loading one never takes the hand-off):
// it is not waited for.
func (c *coordinator) handOff(timeout time.Duration) {
	c.mu.Lock()
	type handing struct{ done, ended <-chan struct{} }
	var waits []handing
	for _, a := range c.actors {
		done := make(chan struct{})
		select {
		case a.mx.handoff <- done:
			waits = append(waits, handing{done, a.done})
		default:
		}
	}
	c.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, w := range waits {
		select {
		case <-w.done:
		case <-w.ended:
		case <-deadline.C:
			c.log.Warn().Dur("timeout", timeout).Msg("shutdown: Kafka members of mixed groups did not all give their partitions back in time")
			return
		}
	}
}

// startHandoff begins the group's hand-off; done is closed when it is over.
func (a *actor) startHandoff(ctx context.Context, done chan struct{}) {
	if !a.m.ServerAssigns() || a.m.Members() == 0 {
		close(done)
		return
	}
	a.mx.handoffDone, a.mx.handingOff = done, map[group.MemberID]bool{}
	for _, mb := range a.m.Describe().Members {
		a.mx.handingOff[mb.MemberID] = true
	}
	a.log.Info().Int("members", len(a.mx.handingOff)).Msg("shutdown: asking the Kafka members of the mixed group to give their partitions back")
	a.step(ctx, group.Rebalance{Reason: "the bridge is shutting down"})
}

// handingOff answers the JoinGroups of a group in hand-off (see above) and reports whether it
// answered req.
func (a *actor) handingOff(req *request) bool {
	if a.mx.handoffDone == nil {
		return false
	}
	j, ok := req.ev.(group.JoinGroup)
	if !ok {
		return false
	}
	if a.mx.handingOff[j.MemberID] {
		// A cooperative member (KIP-429) still consumes what it lists as owned: its owner
		// znodes go with the bridge's session, as in a crash, rather than now.
		if len(ownedPartitions(j.Protocols)) == 0 {
			a.releaseMember(j.MemberID) // mixed.go
		}
		delete(a.mx.handingOff, j.MemberID)
		if len(a.mx.handingOff) == 0 {
			close(a.mx.handoffDone)
			a.mx.handingOff = nil
		}
	}
	req.reply <- req.finish(errorReply(a.group, j, group.ErrNotCoordinator))
	return true
}
