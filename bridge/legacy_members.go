package bridge

// A legacy group's members: Register, removal, and the answers to the requests sent to them
// (Ping, Stop, Start), with the offsets their PingResponses report.

import (
	"errors"
	"fmt"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// onRegister admits a registered consumer (legacy.Coordinator.Register).
func (g *legacyGroup) onRegister(now time.Time, ev legacyRegisterEv) {
	reg := ev.sess.Register()
	id := reg.ConsumerID
	if old := g.members[id]; old != nil {
		if old.sess.Err() == nil {
			ev.reply <- fmt.Errorf("bridge: legacy group %q: consumer %q is already registered from %s: %w",
				g.name, id, old.sess.RemoteAddr(), legacy.CodeConsumerIDInUse.Err())
			return
		}
		// The old connection is closed but its event is still queued behind this one: the
		// consumer reconnected. Drop the old member first.
		g.remove(now, old, old.sess.Err())
	}
	for _, s := range reg.Subscription {
		if err := g.watchTopic(s.Topic); err != nil {
			g.syncWatches()
			ev.reply <- fmt.Errorf("bridge: legacy group %q: watching topic %q: %w: %w",
				g.name, s.Topic, err, legacy.CodeCoordinatorNotAvailable.Err())
			return
		}
	}
	// The other members of the group: their registrations count in our assignment.
	if err := g.watchIDs(); err != nil {
		g.syncWatches()
		ev.reply <- fmt.Errorf("bridge: legacy group %q: watching %s: %w: %w",
			g.name, zkstate.IDsPath(g.name), err, legacy.CodeCoordinatorNotAvailable.Err())
		return
	}
	sub := make(map[string]int, len(reg.Subscription))
	for _, s := range reg.Subscription {
		sub[s.Topic] = int(s.Threads)
	}
	// The 0.8 registration (exact format), so 0.8 tools and zk consumers of the group see the
	// member, and first its hosted-member znode, so that nobody reading the group takes the
	// registration for a zk member's (zkstate/hosted.go).
	data := zkstate.ConsumerRegistration{Version: 1, Subscription: sub, Pattern: zkstate.PatternStatic, TimestampMs: now.UnixMilli()}.Encode()
	reply := make(chan legacyRegistered, 1)
	g.cl.legacyReqs <- legacyRegisterReq{id: id, data: data, reply: reply} // claimer_legacy.go
	r := <-reply
	g.countAttempt(r.count)
	err := r.err
	if err != nil {
		g.syncWatches()
		code := legacy.CodeCoordinatorNotAvailable
		if errors.Is(err, zkstate.ErrNodeExists) {
			// Another ZooKeeper session holds /ids/<id> or the hosted znode: a 0.8 consumer
			// with that id, a member of another bridge, or our previous incarnation whose
			// session has not expired yet; or another coordinator of this bridge hosts a
			// member under that consumer id.
			code = legacy.CodeConsumerIDInUse
		}
		ev.reply <- fmt.Errorf("bridge: legacy group %q: registering consumer %q in ZooKeeper: %w: %w", g.name, id, err, code.Err())
		return
	}
	m := &legacyMember{
		id:        id,
		sess:      ev.sess,
		reg:       reg,
		interval:  ev.sess.PingInterval(),
		maxMissed: max(int(reg.MaxPingRetries), 1),
		nextPing:  now,
	}
	g.members[id] = m
	// Seen as another member's registration until now (the children event of our own
	// create, or an earlier owner of the id): it is ours.
	delete(g.others, id)
	g.c.members.Add(1)
	g.c.metrics.members.Inc()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		select {
		case <-m.sess.Done():
			select {
			case g.inbox <- legacyClosedEv{member: id, sess: m.sess}:
			case <-g.quit:
			}
		case <-g.quit:
		}
	}()
	ev.reply <- nil
	g.log.Info().Str("consumer", id).Stringer("remote", ev.sess.RemoteAddr()).Bool("auto_commit", reg.AutoCommit).
		Int("members", len(g.members)).Msg("legacy consumer registered")
	// "On Consumer Failover": a new member always triggers a rebalance.
	g.noteTrigger(now, "consumer "+id+" registered")
}

// remove drops a member: its connection is closed, its /ids znode deleted, and the group
// rebalances (a dead member or a closed socket, seed 001 "On Consumer Failover").
func (g *legacyGroup) remove(now time.Time, m *legacyMember, cause error) {
	m.sess.Close(cause)
	delete(g.members, m.id)
	if g.att != nil {
		delete(g.att.waiting, m.id)
	}
	g.c.members.Add(-1)
	g.c.metrics.members.Dec()
	reply := make(chan legacyZKCount, 1)
	g.cl.legacyReqs <- legacyDeregisterReq{id: m.id, reply: reply} // claimer_legacy.go
	g.countAttempt(<-reply)
	g.syncWatches()
	g.log.Info().Str("consumer", m.id).AnErr("cause", cause).Int("members", len(g.members)).Msg("legacy consumer removed")
	g.noteTrigger(now, "consumer "+m.id+" removed")
}

// onResult takes the outcome of one request: liveness first (docs §8 "Liveness"), then what the
// answer means for the ping or the rebalance it belongs to.
func (g *legacyGroup) onResult(now time.Time, r legacyResultEv) {
	m := g.members[r.member]
	if m == nil || m.sess != r.sess {
		return // a member removed meanwhile
	}
	inAttempt := false
	if r.kind == legacyReqPing {
		m.pinging = false
	} else {
		m.inAttempt = false
		if g.att != nil && g.att.waiting[m.id] {
			delete(g.att.waiting, m.id)
			inAttempt = true
		}
	}
	switch {
	case r.err == nil:
		m.missed = 0
		m.nextPing = r.sent.Add(m.interval)
	case errors.Is(r.err, legacy.ErrTimeout) && g.lifetime.Err() == nil:
		m.missed++
		if m.missed >= m.maxMissed {
			g.remove(now, m, fmt.Errorf("consumer %q: %w (%d in a row, ping interval %v)", m.id, legacy.ErrDead, m.missed, m.interval))
			return
		}
		m.nextPing = now // the next ping goes out at once, with num_retries = missed
		if inAttempt && g.att.failed == nil {
			g.att.failed = fmt.Errorf("consumer %q did not answer its %v: %w", m.id, r.kind, r.err)
		}
		return
	default:
		g.remove(now, m, r.err)
		return
	}

	switch r.kind {
	case legacyReqPing:
		if r.sent.Before(g.assignedAt) {
			return // answered for the assignment before; see assignedAt
		}
		g.commitPing(m, r.ping)
	case legacyReqStop, legacyReqStart:
		if r.code != legacy.CodeNone {
			// docs §8 "Coordinator" 5: an error code counts as a failed member.
			g.remove(now, m, fmt.Errorf("consumer %q answered its %v with %w", m.id, r.kind, r.code.Err()))
			return
		}
		if r.kind == legacyReqStart && inAttempt {
			m.started, m.running, m.pending = true, m.pending, nil
		}
	case legacyReqFinalPing:
		if !inAttempt {
			return
		}
		check := legacyCheckPing(m.id, m.reg.AutoCommit, g.owner, g.committed, r.ping)
		g.countRefused(m, check)
		for tp, off := range check.Accepted {
			g.att.final[tp] = off
		}
	}
}

// commitPing writes the offsets of a regular PingResponse in one Multi (seed 001's
// auto_commit: the offsets ride on the ping; legacyCheckPing validated them).
func (g *legacyGroup) commitPing(m *legacyMember, resp legacy.PingResponse) {
	check := legacyCheckPing(m.id, m.reg.AutoCommit, g.owner, g.committed, resp)
	g.countRefused(m, check)
	if len(check.Accepted) == 0 {
		return
	}
	ops := legacyOffsetOps(g.name, check.Accepted, g.offsetNodes)
	err := g.multiPing(ops)
	if errors.Is(err, zkstate.ErrNoNode) || errors.Is(err, zkstate.ErrNodeExists) {
		// Our idea of which offset znodes exist is stale (an operator deleted or created
		// one): look again and retry once.
		if nerr := g.refreshOffsetNodes(check.Accepted); nerr == nil {
			err = g.multiPing(legacyOffsetOps(g.name, check.Accepted, g.offsetNodes))
		}
	}
	if err != nil {
		g.log.Warn().Err(err).Str("consumer", m.id).Int("offsets", len(check.Accepted)).Msg("committing ping offsets failed")
		return
	}
	for tp, off := range check.Accepted {
		g.committed[tp] = off
		g.offsetNodes[tp] = true
	}
	g.c.addCommitted(len(check.Accepted))
}

func (g *legacyGroup) countRefused(m *legacyMember, check legacyPingCheck) {
	if len(check.Refused) == 0 {
		return
	}
	g.c.refused.Add(uint64(len(check.Refused)))
	g.c.metrics.offsets.WithLabelValues("refused").Add(float64(len(check.Refused)))
	// A confused consumer refuses the same offsets at every ping: log once a second at most.
	now := time.Now()
	if now.Sub(g.lastRefusalLog) < time.Second {
		g.suppressedRefusalCount += len(check.Refused)
		return
	}
	first := check.Refused[0]
	g.log.Warn().Str("consumer", m.id).Int("refused", len(check.Refused)).Int("refused_before", g.suppressedRefusalCount).
		Str("first", legacy.TopicPartition{Topic: first.Topic, Partition: first.Partition}.String()).
		Int64("offset", first.Offset).Str("why", check.Why[0]).Msg("ping offsets refused")
	g.lastRefusalLog, g.suppressedRefusalCount = now, 0
}

func (c *LegacyCoordinator) addCommitted(n int) {
	if n > 0 {
		c.committed.Add(uint64(n))
		c.metrics.offsets.WithLabelValues("committed").Add(float64(n))
	}
}
