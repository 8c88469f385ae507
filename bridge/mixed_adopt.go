package bridge

// A clean handover of a mixed group between bridges: the new owner adopts the Kafka members'
// ephemerals instead of the old owner releasing them.
//
// A handover keeps the Kafka members in their generation: they go on consuming their
// partitions while the group moves. Their /ids registrations and owner znodes are ephemerals of
// the old owner's ZooKeeper session; had it deleted them (its release as a lone bridge's
// groups do), every 0.8.2 consumer of the group would see /ids change, rebalance, find those
// partitions free and take them while the Kafka members still consume them, then commit offsets
// it read before theirs. ZooKeeper has no way to pass an ephemeral from one session to
// another, but any session may delete another's. So:
//
//   - the old owner leaves its mixed group's Kafka ephemerals in place (closeMirror hands them
//     over instead of releasing them), releases the epoch as for any group, and watches them
//     (awaitAdoption);
//   - the new owner, once it has loaded the persisted generation, recognises the members'
//     consumer ids in the hosted-member znodes (the consumer id embeds when the member was
//     first seen), and replaces every registration, hosted-member and owner znode of the
//     generation in one atomic Multi guarded by its epoch: for each, a delete at the version it
//     read (the old session's znode, with the data the new owner would write) and a create as
//     an ephemeral of its own session. No reader ever sees a Kafka member's partition free.
//   - the old owner keeps its session open until none of those znodes is its own any more
//     (the drain waits for it), or for adoptWait; then it deletes what is still its own, as it
//     did before, so that a new owner that never adopts (it crashed, the group left mixed mode)
//     does not find the partitions held for as long as the old bridge lives.
//
// A zk member still sees its children watch fire (the registrations are deleted and created
// again by the Multi) and runs one rebalance, which hands out what it had: the Kafka members'
// owner znodes are taken throughout. If the restored assignment is still the 0.8.2 one over
// what is registered now (nothing to release, claim or wait for), the group carries on without
// a rebalance of its Kafka members; otherwise it rebalances, as any new owner of a mixed group
// did, with the adopted owner znodes released as each member rejoins. A crash hands nothing
// over: the old session's ephemerals go when it expires, and the new owner finds none to adopt.

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// adoptWait bounds how long an old owner keeps its ephemerals for the new owner to adopt.
const adoptWait = 5 * time.Second

// adoptRequest asks the claimer to adopt want (held by another session) for the Kafka members.
type adoptRequest struct {
	want    mirrorState
	epoch   string // the group's epoch znode, checked at version
	version int32
	in      mixedInput // the restored generation's members, to check the assignment against
	result  chan adoptResult
}

type adoptResult struct {
	adopted     bool
	fingerprint string // set when the restored assignment is the 0.8.2 one over what is registered
	why         string // why not adopted, or why the assignment is not current
}

// adopt replaces the other session's znodes of want by ours in one Multi (claimer goroutine).
func (cl *claimer) adopt(ctx context.Context, r adoptRequest) adoptResult {
	paths := slices.Sorted(maps.Keys(r.want.ids))
	paths = append(paths, slices.Sorted(maps.Keys(r.want.owners))...)
	reads, err := cl.store.GetMany(ctx, paths)
	if err != nil {
		return adoptResult{why: "reading the znodes: " + err.Error()}
	}
	session := cl.store.SessionID()
	ops := []zkstate.Op{zkstate.CheckOp(r.epoch, r.version)}
	for i, p := range paths {
		rd, want := reads[i], r.want.ids[p]
		if want == nil {
			want = r.want.owners[p]
		}
		switch {
		case rd.Err != nil:
			return adoptResult{why: p + ": " + rd.Err.Error()}
		case rd.Stat.EphemeralOwner == 0 || rd.Stat.EphemeralOwner == session:
			return adoptResult{why: p + " is not another session's ephemeral"}
		case !sameHeld(rd.Data, want):
			return adoptResult{why: p + " holds " + string(rd.Data)}
		}
		ops = append(ops, zkstate.DeleteOp(p, rd.Stat.Version),
			zkstate.CreateOp(p, want, zkstate.CreateOptions{Ephemeral: true}))
	}
	if err := cl.store.MultiAtomic(ctx, ops...); err != nil {
		return adoptResult{why: "the Multi failed: " + err.Error()}
	}
	held := &cl.kafka.held
	held.ids, held.owners = maps.Clone(r.want.ids), maps.Clone(r.want.owners)
	cl.publishOurs(held.ids, nil)
	res := adoptResult{adopted: true}
	snap, err := cl.store.SnapshotOf(ctx, cl.group, zkstate.WithOwners)
	if err != nil {
		res.why = "reading the group: " + err.Error()
		return res
	}
	in := r.in
	in.Snap, in.Ours, in.Held, in.Session = snap, cl.oursNow(), ownersHeld(held), session
	plan, err := planMixed(in)
	switch {
	case err != nil:
		res.why = err.Error()
	case len(plan.Release)+len(plan.Foreign)+len(plan.Claim)+len(plan.Withheld) > 0:
		res.why = "the 0.8.2 assignment over the registrations differs from the restored one"
	default:
		res.fingerprint = plan.Fingerprint
	}
	return res
}

// sameHeld reports whether a znode's data is what the adopter would write: equal bytes, or for
// a hosted-member znode the same member (its node names the bridge that hosts it).
func sameHeld(have, want []byte) bool {
	if bytes.Equal(have, want) {
		return true
	}
	h, err1 := zkstate.ParseHostedMember(have)
	w, err2 := zkstate.ParseHostedMember(want)
	return err1 == nil && err2 == nil && h.Kind == w.Kind && h.Member == w.Member && h.Instance == w.Instance
}

// adoptMixed adopts, after load, the Kafka members' ephemerals a previous owner handed over,
// when the restored group is a Stable mixed one (see the file comment). It reports whether it
// did.
func (a *actor) adoptMixed(ctx context.Context) bool {
	if a.c.modes == nil || a.m.State() != group.Stable || a.m.Members() == 0 {
		return false
	}
	// A bridge that just started may not have read the group's mode yet.
	if e, err := a.c.modes.lookup(ctx, a.group); err != nil || !e.exists || e.mode != zkstate.ModeMixed {
		return false
	}
	d := a.m.Describe()
	if d.ProtocolType != consumerProtocol || !a.seenFromHosted(ctx, d.Members) {
		return false
	}
	want := buildMirror(a.group, d, a.seen, time.Now(), a.log, a.hosted)
	in := mixedInput{Group: a.group, Strategy: a.c.cfg.Strategy}
	for _, mb := range d.Members {
		topics, _ := subscribedTopics(mb.Metadata)
		in.Members = append(in.Members, mixedMember{ID: mb.MemberID, CID: memberConsumerID(a.group, mb, a.seen), Topics: znodeTopics(topics)})
	}
	r := adoptRequest{want: want, epoch: zkstate.EpochPath(a.c.cfg.Root, a.group), version: a.gs.epoch, in: in, result: make(chan adoptResult, 1)}
	start := time.Now()
	res := a.mirror.adoptNow(ctx, r)
	if !res.adopted {
		clear(a.seen)
		a.log.Info().Str("why", res.why).Msg("mixed group: the Kafka members' znodes were not adopted; they rebalance")
		return false
	}
	a.mx.claimedGen = a.m.Generation()
	a.mx.claimFP = res.fingerprint
	e := a.log.Info().Int("znodes", len(want.ids)+len(want.owners)).Dur("took", time.Since(start))
	if res.fingerprint == "" {
		e = e.Str("rebalance", res.why)
	}
	e.Msg("mixed group: adopted the Kafka members' registrations and owner znodes from the previous owner")
	return true
}

// mixedMode reports whether the group's mode is known to be mixed.
func (a *actor) mixedMode() bool {
	if a.c.modes == nil {
		return false
	}
	mode, known := a.c.modes.modeOf(a.group)
	return known && mode == zkstate.ModeMixed
}

// seenFromHosted fills seen, for every member, with the first-seen time its consumer id was
// made with, from the hosted-member znodes; false when one of them has none.
func (a *actor) seenFromHosted(ctx context.Context, members []group.MemberDescription) bool {
	kids, _, err := a.gs.store.Children(ctx, zkstate.HostedPath(a.c.cfg.Root, a.group))
	if err != nil {
		return false
	}
	found := map[group.MemberID]int64{}
	for _, cid := range kids {
		i := strings.LastIndexByte(cid, '-')
		j := strings.LastIndexByte(cid[:max(i, 0)], '-')
		if j < 0 {
			continue
		}
		ms, err := strconv.ParseInt(cid[j+1:i], 10, 64)
		if err != nil {
			continue
		}
		for _, mb := range members {
			k := memberKey(mb.MemberID, mb.InstanceID)
			if consumerID(a.group, mb.ClientHost, ms, k) == cid {
				found[k] = ms
			}
		}
	}
	if len(found) != len(members) {
		return false
	}
	maps.Copy(a.seen, found)
	return true
}

// adoptNow hands r to the claimer and waits for its result.
func (cl *claimer) adoptNow(ctx context.Context, r adoptRequest) adoptResult {
	select {
	case cl.adopts <- r:
	case <-ctx.Done():
		return adoptResult{why: ctx.Err().Error()}
	case <-cl.done:
		return adoptResult{why: "the claimer ended"}
	}
	select {
	case res := <-r.result:
		return res
	case <-ctx.Done():
		return adoptResult{why: ctx.Err().Error()}
	}
}

// trackAdoption starts awaitAdoption for a handed-over group's ephemerals.
func (c *coordinator) trackAdoption(store *zkstate.Store, name string, handed mirrorState) {
	if len(handed.ids)+len(handed.owners) == 0 || store == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.adopting.Add(1)
	c.goLocked(func(ctx context.Context) { c.awaitAdoption(ctx, store, name, handed) })
}

// awaitAdoption keeps the old owner's handed-over ephemerals until the new owner has adopted
// them (none is ours any more), at most adoptWait; then it deletes those still ours with the
// data we wrote. The drain waits for it before the session closes.
//
// The hosted-member znodes go first. Only a group's owner creates them, so while the new
// owner's Multi deletes one at the version it read, that Multi fails once we deleted it: an
// adoption racing this release can never delete, at a version it read from us, an owner znode
// a zk member made again in the meantime. (A session that ends takes all of its ephemerals in
// one transaction, with the same effect.) Then the owner znodes, then the registrations: an
// owner znode whose consumer is not registered would look like nobody's.
func (c *coordinator) awaitAdoption(ctx context.Context, store *zkstate.Store, name string, handed mirrorState) {
	defer c.adopting.Add(-1)
	session := store.SessionID()
	ids := hostedFirst(slices.Sorted(maps.Keys(handed.ids)))
	hosted := 0
	for hosted < len(ids) && !strings.HasPrefix(ids[hosted], zkstate.ConsumersPath+"/") {
		hosted++
	}
	paths := slices.Concat(ids[:hosted], slices.Sorted(maps.Keys(handed.owners)), ids[hosted:])
	data := func(p string) []byte {
		if d, ok := handed.owners[p]; ok {
			return d
		}
		return handed.ids[p]
	}
	deadline := time.Now().Add(adoptWait)
	for {
		reads, err := store.GetMany(ctx, paths)
		if ctx.Err() != nil {
			return // closing: the session takes them
		}
		var ours []string
		var versions []int32
		for i, p := range paths {
			if err != nil || reads[i].Err != nil || reads[i].Stat.EphemeralOwner != session || !bytes.Equal(reads[i].Data, data(p)) {
				continue
			}
			ours = append(ours, p)
			versions = append(versions, reads[i].Stat.Version)
		}
		if err == nil && len(ours) == 0 {
			c.log.Info().Str("group", name).Int("znodes", len(paths)).Msg("mixed group: the new owner adopted the Kafka members' znodes")
			return
		}
		if time.Now().After(deadline) {
			c.log.Warn().Str("group", name).Int("znodes", len(ours)).Dur("waited", adoptWait).
				Msg("mixed group: the new owner did not adopt the Kafka members' znodes; releasing them")
			for i, p := range ours {
				if err := store.Delete(ctx, p, versions[i]); err != nil && !errors.Is(err, zkstate.ErrNoNode) && !errors.Is(err, zkstate.ErrBadVersion) {
					c.log.Warn().Err(err).Str("path", p).Msg("mixed group: releasing a handed-over znode failed")
				}
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitAdoptions waits until every handed-over mixed group was adopted or released, at most
// timeout.
func (c *coordinator) waitAdoptions(timeout time.Duration) {
	for deadline := time.Now().Add(timeout); c.adopting.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}
