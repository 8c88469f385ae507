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

	"github.com/rs/zerolog"

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

// legacyReader reads a legacy group for its claimer (the check, the claim, the release at the
// end), counting what it reads in
// the coordinator's counters and in n.
type legacyReader struct {
	c    *LegacyCoordinator
	name string
	log  zerolog.Logger
	n    *legacyZKCount
}

func (rd legacyReader) countReads(znodes, requests int) {
	rd.c.addReads(znodes, requests)
	rd.n.reads += znodes
	rd.n.readRequests += requests
}

// readGroup reads the group's registrations, owners and, with offsets, its committed offsets
// (only the claim needs those, to start the members; step 3 decides on the owners): one zkstate
// Snapshot (batched with ZooKeeper's multiRead, a handful of requests whatever the group's
// size), then, in one more request, the stat of every owner znode that is not one the last
// claim's Multi left in the current session with the same thread id, still held by that session
// — a previous coordinator's, one an operator edited, one of a member gone, one deleted and
// created again by another session with the same thread — so that it is checked, never
// assumed (DESIGN §4). Owners of topics nobody
// subscribes to are read too: step 3.3 must see them. Owners holding the thread of another
// registration (a zk member's, a Kafka member's) are not ours whatever their session
// (legacyPlanInput.ours), so their stat is not read.
//
// The owners the last Multi left are not read one by one: they hold the thread written, the
// snapshot shows them held by our session still, and their version is known. Whatever else
// happened to them makes the claim's Multi fail (a create of a taken path, a delete of a
// changed version), after which nothing is trusted until read again. Their session is what
// tells them from a re-creation: every create starts at version 0, so a version check alone
// would delete another session's znode.
//
// own tells the consumer ids of the group's legacy members, written and writtenSession the
// owner znodes the last claim left. It also returns the registrations it could not read.
func (rd legacyReader) readGroup(ctx context.Context, own func(string) bool, written map[legacy.TopicPartition]legacyOwner, writtenSession int64, offsets bool) (legacyGroupView, []zkstate.Problem, error) {
	ctx, cancel := context.WithTimeout(ctx, rd.c.cfg.ZKTimeout)
	defer cancel()
	store := rd.c.store
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
	snap, err := store.SnapshotOf(ctx, rd.name, parts)
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
		snap = &zkstate.GroupSnapshot{} // no /consumers/<g> yet
		rd.countReads(1, 1)
	case err != nil:
		return v, nil, err
	default:
		rd.countReads(snap.Stats.Reads, snap.Stats.Requests)
		v.queued = snap.Stats.Queued
	}
	topics := make([]string, 0, len(snap.Partitions))
	for t := range snap.Partitions {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	others, skipped := legacyResolveOthers(rd.name, snap.Consumers, snap.Problems, topics, own)
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

	trusted := v.session != 0 && writtenSession == v.session
	var unknown []legacy.TopicPartition
	for ztp, thread := range snap.Owners {
		tp := legacy.TopicPartition(ztp)
		if o, ok := written[tp]; trusted && ok && o.Thread == thread && snap.OwnerSessions[ztp] == v.session {
			v.owners[tp] = o
		} else if _, other := others[legacy.ConsumerOf(thread)]; other {
			v.owners[tp] = legacyOwner{Thread: thread, Version: -1, Session: -1} // not ours: not read
		} else {
			unknown = append(unknown, tp)
		}
	}
	paths := make([]string, len(unknown))
	for i, tp := range unknown {
		paths[i] = zkstate.OwnerPath(rd.name, tp.Topic, tp.Partition)
	}
	reads, err := store.GetBatch(ctx, paths)
	if len(unknown) > 0 {
		rd.countReads(len(unknown), 1)
	}
	if err != nil {
		return v, nil, err
	}
	for i, tp := range unknown {
		switch r := reads[i]; {
		case errors.Is(r.Err, zkstate.ErrNoNode): // released since the snapshot
		case r.Err != nil:
			return v, nil, r.Err
		default:
			v.owners[tp] = legacyOwner{Thread: string(r.Data), Version: r.Stat.Version, Session: r.Stat.EphemeralOwner}
		}
	}
	for ztp, off := range snap.Offsets {
		tp := legacy.TopicPartition(ztp)
		v.committed[tp], v.nodes[tp] = off, true
	}
	prefix := zkstate.OffsetsPath(rd.name) + "/"
	for _, pr := range snap.Problems {
		// A malformed offset znode exists: a write must set it, not create it.
		rest, ok := strings.CutPrefix(pr.Path, prefix)
		topic, part, ok2 := strings.Cut(rest, "/")
		if p, err := strconv.ParseInt(part, 10, 32); ok && ok2 && err == nil {
			tp := legacy.TopicPartition{Topic: topic, Partition: int32(p)}
			v.nodes[tp] = true
			rd.warnBadOffset(tp, pr.Err)
		}
	}
	if err := legacySameSession(store, v.session, "while reading the group"); err != nil {
		return v, nil, err
	}
	return v, skipped, nil
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
func (rd legacyReader) warnBadOffset(tp legacy.TopicPartition, err error) {
	rd.c.badOffsets.do(zkstate.OffsetPath(rd.name, tp.Topic, tp.Partition), func() {
		rd.log.Warn().Str("partition", tp.String()).Err(err).Msg("committed offset does not parse; the partition starts from the reset sentinel")
	})
}

// offsetNodes looks up which offset znodes of tps exist.
func (rd legacyReader) offsetNodes(ctx context.Context, tps map[legacy.TopicPartition]int64) (map[legacy.TopicPartition]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, rd.c.cfg.ZKTimeout)
	defer cancel()
	list := legacySortedTPs(tps)
	ok := make([]bool, len(list))
	err := legacyFanOut(ctx, len(list), func(ctx context.Context, i int) error {
		var err error
		ok[i], _, err = rd.c.store.Exists(ctx, zkstate.OffsetPath(rd.name, list[i].Topic, list[i].Partition))
		return err
	})
	rd.countReads(len(list), len(list))
	if err != nil {
		return nil, err
	}
	nodes := make(map[legacy.TopicPartition]bool, len(list))
	for i, tp := range list {
		nodes[tp] = ok[i]
	}
	return nodes, nil
}

// countReads and countWrites count ZooKeeper operations (znodes read and the requests that
// carried them; write ops and multi requests), globally and for the rebalance being measured;
// the actor's goroutine only (watch forwarders call addReads).
func (g *legacyGroup) countReads(znodes, requests int) {
	g.c.addReads(znodes, requests)
	if g.measuring() {
		g.reads += znodes
		g.readRequests += requests
	}
}

// measuring reports whether a rebalance attempt is being measured (a group built without its
// engine, by a test, measures nothing).
func (g *legacyGroup) measuring() bool { return g.m != nil && g.m.LegacyAttempt() && !g.unmeasured }

func (c *LegacyCoordinator) addReads(znodes, requests int) {
	c.zkReads.Add(uint64(znodes))
	c.zkReadRequests.Add(uint64(requests))
	c.metrics.zkOps.WithLabelValues("read").Add(float64(znodes))
	c.metrics.zkOps.WithLabelValues("read_request").Add(float64(requests))
}

func (c *LegacyCoordinator) addWrites(ops, multis int) {
	c.zkWrites.Add(uint64(ops))
	c.zkMultis.Add(uint64(multis))
	c.metrics.zkOps.WithLabelValues("write").Add(float64(ops))
	c.metrics.zkOps.WithLabelValues("multi").Add(float64(multis))
}

// countAttempt adds what the claimer or a legacyReader counted (already in the coordinator's
// counters) to the rebalance being measured.
func (g *legacyGroup) countAttempt(n legacyZKCount) {
	if g.measuring() {
		g.reads += n.reads
		g.readRequests += n.readRequests
		g.writes += n.writes
		g.multis += n.multis
	}
}

// countIf is countAttempt for what the claimer answered to a request sent while measure said
// whether the rebalance was being measured (measuring).
func (g *legacyGroup) countIf(measure bool, n legacyZKCount) {
	if measure {
		g.countAttempt(n)
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
// look for a coordinator), the goroutines are waited for, and the claimer deletes the ids
// znodes and our owner znodes, so that 0.8 tools do not show owners that no longer consume.
// The host goes on at once (ended): the claimer may be waiting for the group's Kafka side to
// take a claim's result, so the wait for its release is on a goroutine of its own, which
// closes exited when done.
func (g *legacyGroup) shutdown() {
	close(g.quit)
	for _, m := range g.members {
		m.sess.Close(ErrLegacyCoordinatorStopped)
	}
	for _, w := range g.topics {
		w.cancel()
	}
	if g.ids != nil {
		g.cl.unsubscribeIDs(g.ids)
	}
	g.host.resetLegacy() // the group's Kafka members, if any, carry on in the engine
	g.stopped = true
	members := len(g.members)
	go func() {
		g.wg.Wait()
		g.cl.leave(true, true)
		g.c.claimers.drop(g.cl)
		g.c.members.Add(-int64(members))
		g.c.metrics.members.Sub(float64(members))
		close(g.exited)
	}()
}
