package bridge

// The Kafka members of a mixed group (DESIGN §3): the IO around
// mixed_plan.go.
//
// In mixed mode the group's engine assigns on the server side (group.AssignMode): when a
// generation completes its join phase, every Kafka member has rejoined, and with an eager
// assignor (the only kind admitted in mixed mode) a member that rejoins has given up all its
// partitions — the Kafka half of the revoke phase. The actor then hands a claim to the group's
// claimer (claimer.go), which owns the group's ephemerals in /consumers/<g>:
//
//  1. register every member of the generation in /ids in the 0.8 format, with its hosted-member
//     znode, and remove the registrations of members that are gone, so that zk members and
//     legacy coordinators count exactly this generation's Kafka members;
//  2. read the group (Snapshot) and compute the 0.8.2 assignment over every registration (the
//     first round reads no owner znodes and counts on step 5 to find one taken);
//  3. delete the owner znodes of Kafka members' partitions that move;
//  4. while a partition of a Kafka member is still owned by someone else (a zk member that has
//     not noticed the change yet, a legacy member not yet stopped), wait with backoff and go
//     back to 2 — 0.8.2 consumers retry a taken owner znode the same way;
//  5. create every owner znode of the Kafka members in one atomic Multi (NodeExists: back to 2);
//  6. hand the assignment back to the actor, which steps group.ServerAssignment: the engine
//     persists it and answers the parked SyncGroups.
//
// So no partition reaches a Kafka member while another member owns it. The other kinds cannot be
// seen by the Kafka members, so a watcher follows /consumers/<g>/ids (the claimer's one watch of
// its children and the other registrations' data) and the partitions of every
// subscribed topic; when what the last assignment was computed from changes (its fingerprint),
// the actor steps group.Rebalance, which makes the Kafka members rejoin.
//
// Offsets need nothing here: Kafka commits go to /consumers/<g>/offsets (records.go), where zk
// and legacy members write theirs, and OffsetFetch reads them there (cluster.go), so a partition
// moving between any two kinds resumes at the last offset its previous owner committed.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/bridge/ownership"
	"github.com/zkbridge/zkbridge/zkstate"
)

// mixedState is the actor's part of a mixed group.
type mixedState struct {
	claimStop chan struct{} // closed when the claim in flight is over
	results   chan claimResult
	claimFP   string // fingerprint of the last claim; "" before the first
	// claimedGen is the generation of the last claim that completed; -1 before the first.
	claimedGen group.Generation
	// withheld are the owner znodes that claim kept for cooperative members still consuming
	// partitions that move away from them (KIP-429): the mirror of its Stable generation,
	// built from the assignment, must not drop them (withheldOwners).
	withheld map[string][]byte
	// claimSession is the longest session timeout among the members of the claim in flight.
	claimSession time.Duration
	othersFP     string // latest fingerprint from the watcher
	crashUnsafe  int    // members counted by checkCrashSafety at the last claim
	others       chan string
	watchCancel  context.CancelFunc

	// Hand-off at shutdown (handOff): the members still to give their partitions back, and
	// the channel to close when none is left.
	handoff     chan chan struct{}
	handoffDone chan struct{}
	handingOff  map[group.MemberID]bool
}

// syncAssignMode steps the engine into server-side assignment exactly while the group is mixed,
// and runs the watcher of the other kinds meanwhile.
func (a *actor) syncAssignMode(ctx context.Context) {
	if a.c.modes == nil {
		return
	}
	mode, known := a.c.modes.modeOf(a.group)
	if !known {
		return
	}
	server := mode == zkstate.ModeMixed
	if server != a.m.ServerAssigns() {
		a.step(ctx, group.AssignMode{Server: server})
	}
	switch {
	case server && a.mx.watchCancel == nil:
		ctx, cancel := context.WithCancel(ctx)
		a.mx.watchCancel = cancel
		root, g, gauge, mi := a.c.cfg.Root, a.group, a.c.metrics.members, a.mirror
		count := func(ctx context.Context, store *zkstate.Store, snap *zkstate.GroupSnapshot, ours map[string]bool) {
			hosted, _, err := store.Children(ctx, zkstate.HostedPath(root, g))
			if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
				return
			}
			legacyN, zkN := 0, 0
			for cid := range snap.Consumers {
				switch {
				case ours[cid]:
				case slices.Contains(hosted, cid):
					legacyN++
				default:
					zkN++
				}
			}
			gauge.WithLabelValues(g, zkstate.KindLegacy).Set(float64(legacyN))
			gauge.WithLabelValues(g, zkstate.KindZK).Set(float64(zkN))
			mi.noZKMembers.Store(zkN == 0)
		}
		go watchOthers(ctx, a.mirror.store, a.group, a.mirror, a.mx.others, a.log, count)
	case !server && a.mx.watchCancel != nil:
		a.mx.watchCancel()
		a.mx.watchCancel = nil
		a.mirror.noZKMembers.Store(false) // unknown until a watcher counts again
		a.mx.claimFP, a.mx.othersFP = "", ""
		a.c.metrics.members.DeleteLabelValues(a.group, zkstate.KindLegacy)
		a.c.metrics.members.DeleteLabelValues(a.group, zkstate.KindZK)
		a.c.metrics.mixedCrashUnsafe.DeleteLabelValues(a.group)
		a.mx.crashUnsafe = 0
		a.setClaimed(0) // a Kafka or legacy group now: its owners are not claimed ahead
		a.c.gate.clear(a.group)
	}
}

// admitMixed applies mixed mode to a JoinGroup. The bridge computes the assignment itself, so
// any assignor's name is admitted (kafkajs's RoundRobinAssigner, franz-go's and the Java
// client's cooperative-sticky, a custom one): the engine then selects a protocol every Kafka
// member supports and answers INCONSISTENT_GROUP_PROTOCOL where Kafka would (no protocol in
// common). Only a protocol type other than "consumer" is refused here: the zk and legacy
// members of the group are consumers, and a Kafka broker refuses a joiner whose type differs
// from its members'. It reports whether it answered req.
func (a *actor) admitMixed(ctx context.Context, req *request) bool {
	ev, ok := req.ev.(group.JoinGroup)
	if !ok {
		return false
	}
	why := ""
	if ev.ProtocolType != consumerProtocol {
		why = "protocol type " + ev.ProtocolType + " is not a consumer group's, and the group's zk and legacy members are consumers"
	}
	if why == "" && a.c.cfg.MixedSessionCheck == SessionCheckRefuse && !a.c.cfg.relayEnabled() {
		if zs := a.c.zkSessionTimeout(); ev.SessionTimeout >= zs {
			a.c.modes.refused("kafka_join_mixed_session")
			a.log.Warn().Str("client_id", ev.ClientID).Str("client_host", ev.ClientHost).
				Dur("session_timeout", ev.SessionTimeout).Dur("zk_session_timeout", zs).
				Msgf("refusing a Kafka member of mixed group %q with INVALID_SESSION_TIMEOUT (--mixed-session-check=refuse): if this bridge crashed, zk and legacy members would take its partitions after %v while it could go on consuming until its own session timeout; set the client's session.timeout.ms below %v, or give the bridge a longer --zk-session-timeout", a.group, zs, zs)
			a.removeRefused(ctx, ev) // modes.go
			req.reply <- req.finish(errorReply(a.group, ev, group.ErrInvalidSessionTimeout))
			return true
		}
	}
	if why == "" {
		return false
	}
	a.c.modes.refused("kafka_join_mixed")
	a.log.Warn().Str("client_id", ev.ClientID).Str("client_host", ev.ClientHost).Str("reason", why).
		Msgf("refusing a Kafka member of mixed group %q with INCONSISTENT_GROUP_PROTOCOL", a.group)
	req.reply <- req.finish(errorReply(a.group, ev, group.ErrInconsistentGroupProtocol))
	return true
}

// startClaim hands the generation's claim to the claimer.
func (a *actor) startClaim(ctx context.Context, req *group.AssignRequest) {
	a.cancelClaim()
	d := a.m.Describe()
	markSeen(a.seen, d.Members, time.Now())
	byID := map[group.MemberID]group.MemberDescription{}
	for _, mb := range d.Members {
		byID[mb.MemberID] = mb
	}
	c := &claim{gen: req.Generation, ids: map[string][]byte{}, results: a.mx.results}
	c.in = mixedInput{Group: a.group, Strategy: a.c.cfg.Strategy}
	for _, jm := range req.Members {
		mb := byID[jm.MemberID]
		topics, err := subscribedTopics(jm.Metadata)
		if err != nil {
			a.log.Warn().Err(err).Str("member", string(jm.MemberID)).Msg("cannot read member subscription; it gets no partitions")
		}
		valid := znodeTopics(topics)
		cid := memberConsumerID(a.group, mb, a.seen)
		c.in.Members = append(c.in.Members, mixedMember{ID: jm.MemberID, CID: cid, Topics: valid, Owned: ownedPartitions(req.Offered[jm.MemberID])})
		sub := map[string]int{}
		for _, t := range valid {
			sub[t] = 1
		}
		reg := zkstate.ConsumerRegistration{Version: 1, Subscription: sub, Pattern: zkstate.PatternStatic, TimestampMs: a.seen[memberKey(mb.MemberID, mb.InstanceID)]}
		c.ids[zkstate.IDPath(a.group, cid)] = reg.Encode()
		p, data := a.hosted(cid, mb)
		c.ids[p] = data
	}
	a.checkCrashSafety(req.Members)
	a.mx.claimSession = 0
	for _, m := range req.Members {
		a.mx.claimSession = max(a.mx.claimSession, m.SessionTimeout)
	}
	a.mx.claimStop = make(chan struct{})
	c.done = a.mx.claimStop
	a.log.Info().Int32("generation", int32(req.Generation)).Int("members", len(req.Members)).
		Msg("mixed group: computing the 0.8.2 assignment and claiming the Kafka members' partitions")
	a.mirror.request(mirrorRequest{claim: c})
}

// checkCrashSafety reports the Kafka members that could outlive a crash of this bridge: their
// owner znodes are ephemerals of the bridge's ZooKeeper session, so zk and legacy members take
// their partitions once that session expires, and without the data path nothing stops a
// member consuming before it gives up on its coordinator — for franz-go and librdkafka, by
// default, after its session timeout. A member whose session timeout is not below the
// bridge's session timeout is counted (zkbridge_mixed_crash_unsafe_members) and logged, once
// per change of the count. The bridge cannot shorten a client's timeout; the operator can
// lengthen --zk-session-timeout (ZooKeeper caps it at its maxSessionTimeout, 20 ticks, 40 s
// by default) or lower session.timeout.ms. With the data path no member is at risk: its
// fetches go through this bridge, which relays none once it is dead and withholds them while
// it cannot vouch for its session (fetchgate.go).
func (a *actor) checkCrashSafety(members []group.JoinMember) {
	if a.c.cfg.relayEnabled() {
		members = nil
	}
	limit := a.c.zkSessionTimeout()
	var unsafe []string
	longest := time.Duration(0)
	for _, m := range members {
		if m.SessionTimeout >= limit {
			unsafe = append(unsafe, string(m.MemberID))
			longest = max(longest, m.SessionTimeout)
		}
	}
	a.c.metrics.mixedCrashUnsafe.WithLabelValues(a.group).Set(float64(len(unsafe)))
	if len(unsafe) == a.mx.crashUnsafe {
		return
	}
	a.mx.crashUnsafe = len(unsafe)
	if len(unsafe) == 0 {
		a.log.Info().Msg("mixed group: every Kafka member's session timeout is below the bridge's ZooKeeper session timeout")
		return
	}
	a.log.Warn().Int("members", len(unsafe)).Str("first", unsafe[0]).Dur("longest_session_timeout", longest).
		Dur("zk_session_timeout", limit).
		Msg("mixed group: if this bridge crashed, zk and legacy members could take partitions these Kafka members still consume, until they give up on their coordinator (their session timeout by default); set --zk-session-timeout above their session.timeout.ms, or lower it")
}

func (a *actor) cancelClaim() {
	if a.mx.claimStop != nil {
		close(a.mx.claimStop)
		a.mx.claimStop = nil
	}
}

// rejoined releases the partitions of a Kafka member that rejoined a mixed group for a
// rebalance, when it gave them all up before its JoinGroup: an eager member does (Kafka's
// ConsumerCoordinator.onJoinPrepare), so zk and legacy members may have them before the join
// phase ends. A cooperative member (KIP-429) goes on consuming what it lists as owned in its
// metadata: those owner znodes stay, and the claim of the generation releases what moves away
// only once the member rejoins without it (planMixed). A rejoin that starts no rebalance (a
// static member rejoining a Stable group gets its assignment back, KIP-345) releases nothing.
func (a *actor) rejoined(j group.JoinGroup) {
	if !a.m.ServerAssigns() || a.m.State() != group.PreparingRebalance || len(ownedPartitions(j.Protocols)) > 0 {
		return
	}
	a.releaseMember(j.MemberID)
}

// releaseMember releases every owner znode the bridge holds for a Kafka member.
func (a *actor) releaseMember(id group.MemberID) {
	for _, mb := range a.m.Describe().Members {
		if mb.MemberID != id {
			continue
		}
		if _, seen := a.seen[memberKey(mb.MemberID, mb.InstanceID)]; seen {
			cid := memberConsumerID(a.group, mb, a.seen)
			a.mirror.request(mirrorRequest{release: zkstate.ThreadIDs(cid, 1)})
		}
		return
	}
}

// claimed steps the assignment a claim produced.
func (a *actor) claimed(ctx context.Context, res claimResult) {
	a.mx.claimStop = nil // done: nothing to cancel
	a.mx.claimFP = res.fingerprint
	a.c.metrics.mixedClaimSeconds.Observe(res.took.Seconds())
	e := a.log.Info().Int32("generation", int32(res.gen)).Dur("took", res.took).Int("rounds", res.rounds).
		Dur("registrations", res.regs).Dur("reading", res.read).Dur("queued", res.queued).Dur("releasing", res.release).Dur("claiming", res.write)
	for id, part := range res.parts {
		n := 0
		for _, ps := range part {
			n += len(ps)
		}
		e = e.Int(string(id), n)
	}
	e.Msg("mixed group: partitions claimed for the Kafka members")
	a.setClaimed(a.mx.claimSession)
	a.mx.claimedGen = res.gen
	a.mx.withheld = res.withheld
	a.c.gate.clear(a.group) // claimed in the current session: the fetches are the members' again
	a.step(ctx, group.ServerAssignment{Generation: res.gen, Assignments: res.assignments})
}

// withheldOwners adds to the mirror of a mixed group's Stable generation the owner znodes its
// claim kept for cooperative members (mixedPlan.Withheld): those members still consume the
// partitions, which are in nobody's assignment of the generation, until they revoke them and
// rejoin; the next claim releases them then. Without them the mirror would delete the owner
// znodes under the members' feet, and a zk member could take the partitions meanwhile.
func (a *actor) withheldOwners(st mirrorState, gen group.Generation) mirrorState {
	if len(a.mx.withheld) == 0 || gen != a.mx.claimedGen || !a.m.ServerAssigns() {
		return st
	}
	if st.owners == nil {
		st.owners = make(map[string][]byte, len(a.mx.withheld))
	}
	for p, th := range a.mx.withheld {
		if _, taken := st.owners[p]; !taken {
			st.owners[p] = th
		}
	}
	return st
}

// unclaimedMixed reports whether gen is a Stable generation of a mixed group that no claim of
// this actor produced: one restored from ZooKeeper after a restart or a lost session. Its owner
// znodes are not mirrored: in a mixed group only a claim may create them, after the previous
// owners let go (DESIGN §3), and the group rebalances at once anyway (checkOthers). Mirroring
// the restored assignment instead created owner znodes outside the claim, which the next claim
// then took for its own and another claimer could delete as its stale one.
func (a *actor) unclaimedMixed(gen group.Generation) bool {
	if a.c.modes == nil || gen == a.mx.claimedGen {
		return false
	}
	mode, known := a.c.modes.modeOf(a.group)
	return known && mode == zkstate.ModeMixed
}

// checkOthers rebalances a Stable mixed group whose other kinds or topics changed since its
// assignment was computed, or whose assignment the bridge did not compute (it was the leader's
// before the group became mixed, or the bridge took the group over).
func (a *actor) checkOthers(ctx context.Context) {
	if !a.m.ServerAssigns() || a.m.State() != group.Stable {
		return
	}
	var ev group.Rebalance
	switch {
	case a.mx.claimFP == "":
		ev = group.Rebalance{Reason: reasonServerAssigns, Cause: group.CauseAssignorChanged}
	case a.mx.othersFP != "" && a.mx.othersFP != a.mx.claimFP:
		ev = group.Rebalance{Reason: reasonOtherKinds, Cause: group.CauseOtherKinds}
	default:
		return
	}
	a.c.metrics.mixedRebalances.WithLabelValues(mixedCause(a.mx.claimFP)).Inc()
	a.mx.claimFP = a.mx.othersFP // asked once; the claim of the next generation sets it for good
	a.step(ctx, ev)
}

// Reasons of the rebalances the bridge asks for in mixed groups.
const (
	reasonServerAssigns = "mixed mode: the bridge assigns the partitions"
	reasonOtherKinds    = "the group's zk or legacy members, or its topics' partitions, changed"
)

func mixedCause(claimFP string) string {
	if claimFP == "" {
		return "assignor_changed"
	}
	return "other_members_or_topics"
}

// hosted is the hosted-member znode of a Kafka member (zkstate/hosted.go).
func (a *actor) hosted(cid string, mb group.MemberDescription) (string, []byte) {
	h := zkstate.HostedMember{Kind: zkstate.KindKafka, Node: a.c.cfg.NodeID, Member: string(mb.MemberID), Instance: string(mb.InstanceID)}
	return zkstate.HostedMemberPath(a.c.cfg.Root, a.group, cid), h.Encode()
}

// watchOthers follows what a mixed group's assignment depends on besides its Kafka members: the
// registrations in /consumers/<g>/ids and their data (the claimer's one watch of them,
// claimer_watch.go), and the partitions of every subscribed topic. After each change it reads
// the group and sends the fingerprint (latest only) to out.
func watchOthers(ctx context.Context, store *zkstate.Store, g string, mi *claimer, out chan string, log zerolog.Logger,
	count func(context.Context, *zkstate.Store, *zkstate.GroupSnapshot, map[string]bool)) {
	sub, first, err := mi.subscribeIDs(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("mixed group: cannot watch the registrations; other kinds' changes will not rebalance the Kafka members")
		return
	}
	defer mi.unsubscribeIDs(sub)
	poke := make(chan struct{}, 1)
	poke <- struct{}{} // the first view: read the group
	topics := map[string]bool{}
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	send := func(fp string) {
		select {
		case <-out:
		default:
		}
		out <- fp
	}
	// The registrations not ours at the last view, the children watch's firings seen, and
	// what of each registration the last read of the group saw (legacyRegKey).
	others, firings := othersOf(first, mi.oursNow()), first.firings
	read := map[string]string{}
	for {
		select {
		case v := <-sub.ch:
			// A registration of another kind came or went: rebalance at once, while the
			// group is read (the Snapshot may wait behind the legacy coordinator's reads on
			// the multiRead connections). The read's fingerprint follows and replaces this
			// one; the next claim reads the group again anyway. Every firing of the children
			// watch reads the group (our own registrations' topics count in the fingerprint),
			// and so does a registration that says something else than the last read saw
			// (rewritten in place).
			now := othersOf(v, mi.oursNow())
			if !slices.Equal(now, others) {
				send("registrations changed: " + strings.Join(now, ","))
				others = now
			}
			changed := v.firings != firings
			firings = v.firings
			for id, k := range v.keys {
				if old, ok := read[id]; ok && old != k {
					changed = true
				}
			}
			if !changed {
				continue
			}
		case <-poke:
		case <-retry.C:
		case <-ctx.Done():
			return
		}
		// The fingerprint and the count need the registrations and the partitions only.
		snap, err := store.SnapshotOf(ctx, g, 0)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Debug().Err(err).Msg("mixed group: reading the group failed; retrying")
			retry.Reset(time.Second)
			continue
		}
		for _, c := range snap.Consumers {
			for t := range c.Registration.Subscription {
				if !topics[t] && validName("topic", t) == nil && c.Registration.Pattern == zkstate.PatternStatic {
					topics[t] = true
					go pokeOnChange(ctx, store, zkstate.TopicPath(t), poke)
				}
			}
		}
		ours := mi.oursNow()
		clear(read)
		for cid, c := range snap.Consumers {
			if !ours[cid] {
				read[cid] = legacyRegKey(c.Registration, nil)
			}
		}
		fp := ownership.Fingerprint(snap, ours)
		count(ctx, store, snap, ours)
		send(fp)
	}
}

// othersOf is the registrations of v that are not in ours.
func othersOf(v idsView, ours map[string]bool) []string {
	return slices.DeleteFunc(slices.Clone(v.children), func(cid string) bool { return ours[cid] })
}

// pokeOnChange pokes after every change of p's data, until ctx ends.
func pokeOnChange(ctx context.Context, store *zkstate.Store, p string, poke chan struct{}) {
	ch, err := store.WatchData(ctx, p)
	if err != nil {
		return
	}
	first := true
	for range ch {
		if first {
			first = false // the Initial event: nothing changed yet
			continue
		}
		select {
		case poke <- struct{}{}:
		default:
		}
	}
}

// znodeTopics is the topics of a subscription that can be znode names, sorted: what a Kafka
// member's 0.8 registration lists and the 0.8.2 assignment counts.
func znodeTopics(topics []string) []string {
	var valid []string
	for _, t := range topics {
		if validName("topic", t) == nil {
			valid = append(valid, t)
		}
	}
	slices.Sort(valid)
	return valid
}
