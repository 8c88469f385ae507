package bridge

// What a legacy group follows in ZooKeeper: the partitions of its topics, the registrations in
// /consumers/<g>/ids (the other members of the group), and the session. (The claimer writes
// its members' registrations and hosted-member znodes: claimer_legacy.go.)

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// onTopic takes a firing of the watch on /brokers/topics/<t>: a change of a subscribed topic's
// partitions triggers a rebalance; a session expiry (every owner znode of ours is gone) a check.
func (g *legacyGroup) onTopic(ctx context.Context, now time.Time, ev legacyTopicEv) {
	w := g.topics[ev.topic]
	if w == nil || w != ev.watch {
		return // unwatched since
	}
	var why string
	if ev.ev.Type == zkstate.SessionExpired {
		why = "ZooKeeper session expired"
	}
	parts, err := legacyTopicPartitions(ev.ev)
	switch {
	case err != nil:
		// Keep the partitions we knew: a bad write must not unassign the topic.
		g.log.Warn().Err(err).Str("topic", ev.topic).Msg("topic assignment does not parse; keeping its partitions")
	case !slices.Equal(parts, w.partitions):
		g.log.Info().Str("topic", ev.topic).Int("from", len(w.partitions)).Int("to", len(parts)).Msg("partitions changed")
		w.partitions = parts
		why = fmt.Sprintf("partitions of topic %s changed to %d", ev.topic, len(parts))
	}
	if why != "" {
		g.noteTrigger(ctx, now, why) // once: the check after it sees the partitions as they are now
	}
}

func (g *legacyGroup) onSession(ctx context.Context, now time.Time, ev zkstate.SessionEvent) {
	switch ev.State {
	case zkstate.Expired:
		g.noteTrigger(ctx, now, "ZooKeeper session expired")
	case zkstate.Reclaimed:
		// An /ids znode (or its hosted-member znode) another session took while ours was
		// gone: that consumer id is now someone else's in the group (0.8 would have failed to
		// register it).
		for _, rc := range ev.ReclaimConflicts() {
			for _, m := range g.members {
				if rc.Path == zkstate.IDPath(g.name, m.id) || rc.Path == zkstate.HostedMemberPath(g.c.cfg.Root, g.name, m.id) {
					g.step(ctx, now, group.LegacyLeave{Member: group.MemberID(m.id),
						Cause: fmt.Errorf("%s is held by ZooKeeper session 0x%x: %w", rc.Path, rc.Owner, legacy.CodeConsumerIDInUse.Err())})
				}
			}
		}
	}
}

func legacyTopicPartitions(ev zkstate.WatchEvent) ([]int32, error) {
	if !ev.Exists {
		return nil, nil
	}
	a, err := zkstate.ParseTopicAssignment(ev.Data)
	if err != nil {
		return nil, err
	}
	return a.PartitionIDs(), nil
}

// watchTopic starts watching /brokers/topics/<t> unless it is watched already.
func (g *legacyGroup) watchTopic(ctx context.Context, topic string) error {
	if g.topics[topic] != nil {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := g.c.store.WatchData(wctx, zkstate.TopicPath(topic))
	g.countReads(1, 1)
	if err != nil {
		cancel()
		return err
	}
	var first zkstate.WatchEvent
	select {
	case first = <-ch: // the Initial event is delivered at once
	case <-ctx.Done():
		cancel()
		return ctx.Err()
	}
	parts, err := legacyTopicPartitions(first)
	if err != nil {
		g.log.Warn().Err(err).Str("topic", topic).Msg("topic assignment does not parse; no partitions until it does")
	}
	w := &legacyTopic{cancel: cancel, partitions: parts}
	g.topics[topic] = w
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.forward(ch, cancel, func(ev zkstate.WatchEvent) any { return legacyTopicEv{topic: topic, watch: w, ev: ev} })
	}()
	return nil
}

// forward hands every firing of a watch to the group's goroutine as msg(ev), until the watch's
// channel closes (its context ended) or the group quits (then it cancels the watch).
func (g *legacyGroup) forward(ch <-chan zkstate.WatchEvent, cancel context.CancelFunc, msg func(zkstate.WatchEvent) any) {
	for ev := range ch {
		g.c.addReads(1, 1) // every firing re-arms the watch with a read
		select {
		case g.inbox <- msg(ev):
		case <-g.quit:
			cancel()
		}
	}
}

// syncTopics stops the watches of topics no member subscribes to any more.
func (g *legacyGroup) syncTopics() {
	wanted := map[string]bool{}
	for _, m := range g.members {
		for _, s := range m.reg.Subscription {
			wanted[s.Topic] = true
		}
	}
	for _, p := range g.registering {
		for _, s := range p.reg.Subscription {
			wanted[s.Topic] = true
		}
	}
	for t, w := range g.topics {
		if !wanted[t] {
			w.cancel()
			delete(g.topics, t)
		}
	}
}

// syncWatches stops the watches the members no longer need: of unsubscribed topics, and of the
// group's registrations once no member is left.
func (g *legacyGroup) syncWatches() {
	g.syncTopics()
	if len(g.members) > 0 || len(g.registering) > 0 || g.ids == nil {
		return
	}
	g.cl.unsubscribeIDs(g.ids)
	g.ids = nil
	clear(g.others)
}

// watchIDs subscribes to the group's registrations watch (claimer_watch.go: the children of
// /consumers/<g>/ids and the data of every other registration, one watch per group and bridge
// for every member kind) unless it is subscribed already.
func (g *legacyGroup) watchIDs(ctx context.Context, now time.Time) error {
	if g.ids != nil {
		return nil
	}
	sub, first, err := g.cl.subscribeIDs(ctx)
	g.countReads(1, 1)
	if err != nil {
		return err
	}
	g.ids = sub
	// No trigger: the Register that started the watch rebalances anyway.
	g.syncOthers(ctx, now, first.children, false)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			select {
			case v := <-sub.ch:
				select {
				case g.inbox <- legacyIDsEv{sub: sub, view: v}:
				case <-g.quit:
					return
				}
			case <-sub.done:
				return
			case <-g.quit:
				return
			}
		}
	}()
	return nil
}

// onIDs takes a view of the group's registrations. A 0.8.2 consumer rebalances on every change
// of /ids's children (ZCC:561-564); we check the group when the set of other registrations
// changed — our own members' registrations are ours to know, and their Register and removal
// trigger already — or when another registration changed in place: 0.8.2 consumers only watch
// the children, but the assignment depends on its subscription.
func (g *legacyGroup) onIDs(ctx context.Context, now time.Time, ev legacyIDsEv) {
	if g.ids == nil || ev.sub != g.ids {
		return // unwatched since
	}
	g.syncOthers(ctx, now, ev.view.children, true)
	for _, id := range slices.Sorted(maps.Keys(ev.view.keys)) {
		key := ev.view.keys[id]
		if !g.others[id] {
			continue
		}
		if seen, ok := g.regs[id]; ok && seen != key {
			g.regs[id] = key
			g.log.Info().Str("consumer", id).Str("registration", key).Msg("another member's registration changed")
			g.noteTrigger(ctx, now, "registration of "+id+" changed")
		}
	}
}

// syncOthers makes the other registrations those of children that are not ours (g.ours), and
// with trigger, checks the group when they changed.
func (g *legacyGroup) syncOthers(ctx context.Context, now time.Time, children []string, trigger bool) {
	present := make(map[string]bool, len(children))
	var added, removed []string
	for _, id := range children {
		if g.ours(id) {
			continue
		}
		present[id] = true
		if !g.others[id] {
			g.others[id] = true
			added = append(added, id)
		}
	}
	for id := range g.others {
		if !present[id] {
			delete(g.others, id)
			removed = append(removed, id)
		}
	}
	if !trigger || len(added)+len(removed) == 0 {
		return
	}
	slices.Sort(added)
	slices.Sort(removed)
	g.log.Info().Strs("registered", legacyFirst(added, 10)).Strs("left", legacyFirst(removed, 10)).
		Int("others", len(g.others)).Msg("other members' registrations in /ids changed")
	g.noteTrigger(ctx, now, fmt.Sprintf("other registrations in /ids changed (+%d -%d)", len(added), len(removed)))
}

// ours reports whether the registration of consumer id is one of our members': joined, being
// written, or being deleted (the claimer has not answered yet, so a view of /ids may still
// show it).
func (g *legacyGroup) ours(id string) bool {
	return g.members[id] != nil || g.registering[id] != nil || g.leaving[id] > 0
}

// legacyRegKey is what of a registration the assignment depends on: the pattern and the
// subscription (its JSON without the timestamp), or that it cannot be read.
func legacyRegKey(reg zkstate.ConsumerRegistration, err error) string {
	if err != nil {
		return "unreadable"
	}
	return string(zkstate.ConsumerRegistration{Version: 1, Subscription: reg.Subscription, Pattern: reg.Pattern}.Encode())
}

// noteSkipped logs the registrations a read of the group could not count, once per change.
func (g *legacyGroup) noteSkipped(skipped []zkstate.Problem) {
	var b strings.Builder
	for _, pr := range skipped {
		b.WriteString(pr.Path)
		b.WriteByte(' ')
	}
	if b.String() == g.skipped {
		return
	}
	g.skipped = b.String()
	for _, pr := range skipped {
		g.log.Warn().Str("path", pr.Path).Err(pr.Err).
			Msg("registration cannot be read: left out of the assignment (the group's zk members fail their rebalance on it)")
	}
}

func legacyFirst(ids []string, n int) []string {
	if len(ids) > n {
		return append(ids[:n:n], fmt.Sprintf("(%d more)", len(ids)-n))
	}
	return ids
}
