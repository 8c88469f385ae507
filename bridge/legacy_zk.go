package bridge

// A legacy group's reads and writes of /consumers/<g>: the view of the group a rebalance reads,
// the Multis it writes, their counters, and the shutdown that lets go of its ephemerals.

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// legacyGroupView is what a rebalance reads of its group in ZooKeeper.
type legacyGroupView struct {
	session   int64 // the session the reads ran in
	owners    map[legacy.TopicPartition]legacyOwner
	committed map[legacy.TopicPartition]int64
	nodes     map[legacy.TopicPartition]bool // offset znodes that exist, parsed or not
	// others are the registrations in /ids that are not our members', resolved
	// (legacyResolveOthers); regs holds the legacyRegKey of each, unreadable ones included.
	others map[string]map[string]int
	regs   map[string]string
	queued time.Duration // of the read, waiting for one of the Store's multiRead connections
}

// readGroup reads the group's registrations, owners and, with offsets, its committed offsets
// (only the claim needs those, to start the members; step 3 decides on the owners): one zkstate
// Snapshot (batched
// with ZooKeeper's multiRead, a handful of requests whatever the group's size), then the stat of
// every owner znode that is not one this actor's last Multi left in the current session with the
// same thread id — a previous coordinator's, one an operator edited, one of a member gone — so
// that its ephemeral owner is checked, never assumed (DESIGN §4). Owners of topics nobody
// subscribes to are read too: step 3.3 must see them. Owners holding the thread of another
// registration (a zk member's, a Kafka member's) are not ours whatever their session
// (legacyPlanInput.ours), so their stat is not read.
//
// The owners the last Multi left are not read one by one: they hold the thread written, their
// version is known, and the session that holds them is still ours. Whatever else happened to
// them makes the claim's Multi fail (a create of a taken path, a delete of a changed version),
// after which nothing is trusted until read again.
func (g *legacyGroup) readGroup(ctx context.Context, offsets bool) (legacyGroupView, error) {
	ctx, cancel := context.WithTimeout(ctx, g.c.cfg.ZKTimeout)
	defer cancel()
	store := g.c.store
	v := legacyGroupView{
		session:   store.SessionID(),
		owners:    map[legacy.TopicPartition]legacyOwner{},
		committed: map[legacy.TopicPartition]int64{},
		nodes:     map[legacy.TopicPartition]bool{},
	}
	parts := zkstate.WithOwners
	if offsets {
		parts |= zkstate.WithOffsets
	}
	snap, err := store.SnapshotOf(ctx, g.name, parts)
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
		snap = &zkstate.GroupSnapshot{} // no /consumers/<g> yet
		g.countReads(1, 1)
	case err != nil:
		return v, err
	default:
		g.countReads(snap.Stats.Reads, snap.Stats.Requests)
		v.queued = snap.Stats.Queued
	}
	own := func(id string) bool { return g.members[id] != nil }
	topics := make([]string, 0, len(snap.Partitions))
	for t := range snap.Partitions {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	others, skipped := legacyResolveOthers(g.name, snap.Consumers, snap.Problems, topics, own)
	v.others, v.regs = others, make(map[string]string, len(others)+len(skipped))
	for id, c := range snap.Consumers {
		if !own(id) {
			v.regs[id] = legacyRegKey(c.Registration, nil)
		}
	}
	for _, pr := range skipped {
		if id := path.Base(pr.Path); v.regs[id] == "" {
			v.regs[id] = legacyRegKey(zkstate.ConsumerRegistration{}, pr.Err)
		}
	}
	g.noteSkipped(skipped)

	trusted := v.session != 0 && g.writtenSession == v.session
	var unknown []legacy.TopicPartition
	for ztp, thread := range snap.Owners {
		tp := legacy.TopicPartition(ztp)
		if o, ok := g.written[tp]; trusted && ok && o.Thread == thread {
			v.owners[tp] = o
		} else if _, other := others[legacy.ConsumerOf(thread)]; other {
			v.owners[tp] = legacyOwner{Thread: thread, Version: -1, Session: -1} // not ours: not read
		} else {
			unknown = append(unknown, tp)
		}
	}
	found := make([]legacyOwner, len(unknown))
	exists := make([]bool, len(unknown))
	err = legacyFanOut(ctx, len(unknown), func(ctx context.Context, i int) error {
		data, st, err := store.Get(ctx, zkstate.OwnerPath(g.name, unknown[i].Topic, unknown[i].Partition))
		if errors.Is(err, zkstate.ErrNoNode) {
			return nil // released since the snapshot
		}
		if err != nil {
			return err
		}
		found[i], exists[i] = legacyOwner{Thread: string(data), Version: st.Version, Session: st.EphemeralOwner}, true
		return nil
	})
	g.countReads(len(unknown), len(unknown))
	if err != nil {
		return v, err
	}
	for i, tp := range unknown {
		if exists[i] {
			v.owners[tp] = found[i]
		}
	}
	for ztp, off := range snap.Offsets {
		tp := legacy.TopicPartition(ztp)
		v.committed[tp], v.nodes[tp] = off, true
	}
	prefix := zkstate.OffsetsPath(g.name) + "/"
	for _, pr := range snap.Problems {
		// A malformed offset znode exists: a write must set it, not create it.
		rest, ok := strings.CutPrefix(pr.Path, prefix)
		topic, part, ok2 := strings.Cut(rest, "/")
		if p, err := strconv.ParseInt(part, 10, 32); ok && ok2 && err == nil {
			tp := legacy.TopicPartition{Topic: topic, Partition: int32(p)}
			v.nodes[tp] = true
			g.warnBadOffset(tp, pr.Err)
		}
	}
	if err := legacySameSession(store, v.session, "while reading the group"); err != nil {
		return v, err
	}
	return v, nil
}

// legacySameSession fails when the Store's session is no longer the one a read ran in: what
// that session owned may be gone.
func legacySameSession(store *zkstate.Store, session int64, when string) error {
	if now := store.SessionID(); now != session {
		return fmt.Errorf("ZooKeeper session changed from 0x%x to 0x%x %s", session, now, when)
	}
	return nil
}

// warnBadOffset reports an offset znode whose data does not parse.
func (g *legacyGroup) warnBadOffset(tp legacy.TopicPartition, err error) {
	g.c.badOffsets.do(zkstate.OffsetPath(g.name, tp.Topic, tp.Partition), func() {
		g.log.Warn().Str("partition", tp.String()).Err(err).Msg("committed offset does not parse; the partition starts from the reset sentinel")
	})
}

// refreshOffsetNodes looks up which offset znodes of tps exist.
func (g *legacyGroup) refreshOffsetNodes(tps map[legacy.TopicPartition]int64) error {
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	list := legacySortedTPs(tps)
	ok := make([]bool, len(list))
	err := legacyFanOut(ctx, len(list), func(ctx context.Context, i int) error {
		var err error
		ok[i], _, err = g.c.store.Exists(ctx, zkstate.OffsetPath(g.name, list[i].Topic, list[i].Partition))
		return err
	})
	g.countReads(len(list), len(list))
	if err != nil {
		return err
	}
	for i, tp := range list {
		g.offsetNodes[tp] = ok[i]
	}
	return nil
}

// multi runs a rebalance's Multi.
func (g *legacyGroup) multi(ops []zkstate.Op) error {
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	g.countWrites(len(ops), 1)
	return g.c.store.Multi(ctx, ops...)
}

// multiPing runs the Multi of a PingResponse's offsets; its operations are not the
// rebalance's.
func (g *legacyGroup) multiPing(ops []zkstate.Op) error {
	ctx, cancel := context.WithTimeout(g.lifetime, g.c.cfg.ZKTimeout)
	defer cancel()
	g.c.zkWrites.Add(uint64(len(ops)))
	g.c.zkMultis.Add(1)
	g.c.metrics.zkOps.WithLabelValues("write").Add(float64(len(ops)))
	g.c.metrics.zkOps.WithLabelValues("multi").Inc()
	return g.c.store.Multi(ctx, ops...)
}

// countReads and countWrites count ZooKeeper operations (znodes read and the requests that
// carried them; write ops and multi requests), globally and for the rebalance being measured;
// the actor's goroutine only (watch forwarders call addReads).
func (g *legacyGroup) countReads(znodes, requests int) {
	g.c.addReads(znodes, requests)
	if g.att != nil {
		g.reads += znodes
		g.readRequests += requests
	}
}

func (c *LegacyCoordinator) addReads(znodes, requests int) {
	c.zkReads.Add(uint64(znodes))
	c.zkReadRequests.Add(uint64(requests))
	c.metrics.zkOps.WithLabelValues("read").Add(float64(znodes))
	c.metrics.zkOps.WithLabelValues("read_request").Add(float64(requests))
}

func (g *legacyGroup) countWrites(ops, multis int) {
	g.c.zkWrites.Add(uint64(ops))
	g.c.zkMultis.Add(uint64(multis))
	g.c.metrics.zkOps.WithLabelValues("write").Add(float64(ops))
	g.c.metrics.zkOps.WithLabelValues("multi").Add(float64(multis))
	if g.att != nil {
		g.writes += ops
		g.multis += multis
	}
}

// legacyFanOut runs fn(0..n-1) with at most legacyReadParallelism calls in flight and returns
// the first error. Every call has returned when it returns.
func legacyFanOut(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, legacyReadParallelism)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			errs[i] = ctx.Err()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if errs[i] = fn(ctx, i); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// shutdown ends the actor: every member's connection is closed (the consumers stop fetching and
// look for a coordinator), the goroutines are waited for, and the ids znodes and our owner
// znodes are deleted so that 0.8 tools do not show owners that no longer consume.
// watchRelease signals g.gone when the owner znode p, which a claim waits for, goes away: a zk
// member or another bridge releases at its own pace, and the claim should look again then,
// not at its backoff's end. One watch per group at a time (one request each); a signal that
// comes after the claim went on is ignored by run.
func (g *legacyGroup) watchRelease(p string) {
	if g.stopGone != nil {
		g.stopGone()
	}
	ctx, cancel := context.WithCancel(g.lifetime)
	g.stopGone = cancel
	go func() {
		defer cancel()
		ch, err := g.c.store.WatchData(ctx, p)
		if err != nil {
			return // the backoff still retries
		}
		for ev := range ch {
			if !ev.Exists {
				select {
				case g.gone <- struct{}{}:
				default:
				}
				return
			}
		}
	}()
}

func (g *legacyGroup) shutdown() {
	close(g.quit)
	for _, m := range g.members {
		m.sess.Close(ErrLegacyCoordinatorStopped)
	}
	for _, w := range g.topics {
		w.cancel()
	}
	if g.ids != nil {
		g.ids.cancel()
	}
	for _, w := range g.others {
		w.cancel()
	}
	g.wg.Wait()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(g.lifetime), min(g.c.cfg.ZKTimeout, 5*time.Second))
	defer cancel()
	for _, m := range g.members {
		if err := g.c.store.DeleteEphemeral(ctx, zkstate.IDPath(g.name, m.id)); err != nil && !errors.Is(err, zkstate.ErrNotOwner) {
			g.log.Debug().Err(err).Str("consumer", m.id).Msg("deleting the ids znode at shutdown failed")
		}
		g.deleteHosted(ctx, m.id)
		g.c.members.Add(-1)
		g.c.metrics.members.Dec()
	}
	var ops []zkstate.Op
	if len(g.assignment) > 0 {
		view, err := g.readGroup(ctx, false)
		if err != nil {
			g.log.Debug().Err(err).Msg("reading owner znodes at shutdown failed; they go with the session")
		}
		// Ours only: the bridge's other coordinators hold their members' owners in the same
		// session (legacyPlanInput.ours).
		in := legacyPlanInput{Session: view.session, Others: view.others}
		for _, tp := range legacySortedTPs(view.owners) {
			if o := view.owners[tp]; in.ours(o) && view.session != 0 {
				ops = append(ops, zkstate.DeleteOp(zkstate.OwnerPath(g.name, tp.Topic, tp.Partition), o.Version))
			}
		}
	}
	if err := g.c.store.Multi(ctx, ops...); err != nil {
		g.log.Debug().Err(err).Msg("releasing owner znodes at shutdown failed; they go with the session")
	}
	g.log.Debug().Int("released", len(ops)).Msg("legacy group stopped")
}
