package bridge

// Legacy consumers across several bridges (docs/several-bridges.md): a legacy group
// lives where placement puts the group's Kafka side, on its owner among the live bridges.
//
//   - Consult: a version 1 ConsultRequest names the group (docs/legacy-protocol.md §5), and is
//     answered with the group's owner; brokers_info lists every live bridge's legacy listener
//     (registration field "legacy"), the same from every bridge. A version 0 Consult is
//     answered with the bridge asked, as before.
//   - Register for a group that maps to another bridge is refused NOT_COORDINATOR (the
//     consumer consults again), so a group's consumers are never hosted by two bridges. A
//     consumer that consulted at version 0 (it cannot name its group, so it was told the bridge
//     it asked) is relayed to the owner instead (ForwardTo, legacy/relay.go).
//   - Handover: when the live set changes, every group that no longer maps here is stopped as
//     at shutdown (its consumers' connections closed, so they stop consuming; their ids and
//     our owner znodes deleted). The consumers consult again and register with the new owner,
//     whose one rebalance (Stop, Start) gives them their partitions.
//   - The new owner registers a consumer as soon as the ephemerals the previous bridge holds
//     for it are gone (awaitPrevious): at once after a handover, when the dead bridge's session
//     expires after a crash. Until then it holds the Register rather than refusing it with
//     CONSUMER_ID_IN_USE, which only made the consumer back off and try again later.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

var (
	_ legacy.GroupConsulter = (*LegacyCoordinator)(nil)
	_ legacy.Forwarder      = (*LegacyCoordinator)(nil)
)

// ForwardTo implements legacy.Forwarder: a consumer that consulted at version 0 and registers
// here for a group another bridge coordinates is relayed to that bridge's legacy listener. Not
// with TLS on the legacy listener: the relay would have to be a TLS client of the other bridge.
func (c *LegacyCoordinator) ForwardTo(ctx context.Context, group string) (int32, string, bool) {
	owner, elsewhere := c.placedElsewhere(group)
	if !elsewhere || c.noRelay {
		return 0, "", false
	}
	// The owner's listener even while it looks dead (brokers_info leaves it out): the group is
	// its own until its session expires, and a relay that cannot reach it refuses the consumer.
	if b, ok := c.peers.legacyBroker(owner); ok {
		return owner, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), true
	}
	return 0, "", false
}

// legacyConsultHold bounds how long a Consult naming a dead-looking owner is held: the legacy
// client's DialTimeout (5 s by default) covers its dial and the answer.
const legacyConsultHold = 3 * time.Second

// ConsultGroup answers a ConsultRequest that names its group (legacy.GroupConsulter): the
// group's coordinator is its owner among the live bridges. An answer that would name an owner
// whose Kafka listener refuses connections (a killed bridge, still registered until its session
// expires) is held as FindCoordinator's is (peers_probe.go), until the live view changes or
// legacyConsultHold passes: a consumer told the dead bridge fails on it and backs off, longer
// each time.
func (c *LegacyCoordinator) ConsultGroup(ctx context.Context, group string) legacy.ConsultResponse {
	if c.peers == nil {
		resp, _ := c.consultGroupNow(ctx, group)
		return resp
	}
	deadline := time.Now().Add(legacyConsultHold)
	for {
		changed := c.peers.Changed()
		resp, dead := c.consultGroupNow(ctx, group)
		left := time.Until(deadline)
		if !dead || left <= 0 {
			return resp
		}
		select {
		case <-changed:
		case <-time.After(min(left, 250*time.Millisecond)):
		case <-ctx.Done():
			return resp
		}
	}
}

// consultGroupNow is ConsultGroup's answer from the current view; dead reports whether it names
// another bridge that refuses connections.
func (c *LegacyCoordinator) consultGroupNow(ctx context.Context, group string) (_ legacy.ConsultResponse, dead bool) {
	resp := c.Consult(ctx)
	owner, elsewhere := c.placedElsewhere(group)
	if resp.ErrorCode != legacy.CodeNone || !elsewhere {
		return resp, false
	}
	if !slices.ContainsFunc(resp.Brokers, func(b legacy.Broker) bool { return b.ID == owner }) {
		// An owner that looks dead is left out of brokers_info, as out of Metadata; it is still
		// the group's coordinator until its session expires, and coordinator_id must be one of
		// brokers_info[].id (docs/legacy-protocol.md §6), so the answer naming it lists it.
		b, ok := c.peers.legacyBroker(owner)
		if !ok {
			// The owner serves no legacy listener we can name: the consumer backs off and asks
			// again (the owner's registration may not be read yet).
			return legacy.ConsultResponse{ErrorCode: legacy.CodeCoordinatorNotAvailable, CoordinatorID: -1}, false
		}
		resp.Brokers = append(resp.Brokers, b)
		slices.SortFunc(resp.Brokers, func(a, b legacy.Broker) int { return cmp.Compare(a.ID, b.ID) })
	}
	resp.CoordinatorID = owner
	b, ok := brokerOf(c.peers.current().others[owner])
	return resp, ok && c.peers.Unreachable(b)
}

// placedElsewhere returns the owner of group when it is another live bridge.
func (c *LegacyCoordinator) placedElsewhere(group string) (int32, bool) {
	if c.peers == nil || c.peers.alone() {
		return c.cfg.NodeID, false
	}
	owner := c.peers.owner(group)
	return owner, owner != c.cfg.NodeID
}

// legacyBrokers is brokers_info: every other live bridge with a legacy listener (Consult adds
// this one), by node id, as Metadata lists the bridges: a peer that looks dead is left out
// (peers_down.go), so that a consumer does not learn an address that refuses connections.
func (p *peerSet) legacyBrokers(context.Context) []legacy.Broker {
	v := p.current()
	out := make([]legacy.Broker, 0, len(v.others))
	for _, id := range v.named {
		if b, ok := legacyBrokerOf(v.others[id]); ok {
			out = append(out, b)
		}
	}
	return out
}

// legacyBroker is live bridge id's legacy listener, whether or not it looks dead.
func (p *peerSet) legacyBroker(id int32) (legacy.Broker, bool) {
	r, ok := p.current().others[id]
	if !ok {
		return legacy.Broker{}, false
	}
	return legacyBrokerOf(r)
}

// legacyBrokerOf is a registration's legacy listener as brokers_info lists it.
func legacyBrokerOf(r zkstate.BridgeRegistration) (legacy.Broker, bool) {
	if r.Legacy == "" {
		return legacy.Broker{}, false
	}
	host, port, err := net.SplitHostPort(r.Legacy)
	if err != nil {
		return legacy.Broker{}, false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return legacy.Broker{}, false
	}
	return legacy.Broker{CreatorID: "zkbridge-" + strconv.Itoa(int(r.NodeID)), ID: r.NodeID, Host: host, Port: int32(n)}, true
}

// placementChanged is the peer set's subscriber: every group that no longer maps here is
// handed over (handOver, on a goroutine of its own: this runs on the live view's watch).
func (c *LegacyCoordinator) placementChanged(_, _ *liveView) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, stop := range c.lifetimes {
		if c.handingOver[name] {
			continue
		}
		if owner, elsewhere := c.placedElsewhere(name); (elsewhere || !c.peers.serving.Load()) && c.state == legacyRunning {
			c.handingOver[name] = true
			c.actorWG.Add(1)
			go func() {
				defer c.actorWG.Done()
				c.handOver(name, owner, stop)
			}()
		}
	}
}

// legacyHandover is <root>/groups/<g>/legacy-handover: the consumers a bridge hosted when it
// handed the group over, so that the new owner starts them in one rebalance.
type legacyHandover struct {
	From      int32    `json:"from"`
	Consumers []string `json:"consumers"`
	AtMs      int64    `json:"at_ms"`
}

func legacyHandoverPath(root, group string) string {
	return path.Join(zkstate.BridgeGroupPath(root, group), "legacy-handover")
}

// legacyGatherWait bounds how long the new owner holds the consumers of a handed-over group
// for the others named in its legacyHandover note: they consult and register again within a
// reconnect backoff (100 ms to a second, twice that at worst), and until the group's rebalance
// none of them consumes anyway.
const legacyGatherWait = 3 * time.Second

// handOver stops a group that maps to another bridge: it notes the consumers this bridge hosts
// (legacyHandover), then ends the group's lifetime, which closes their connections (they stop
// consuming) and deletes their registrations and our owner znodes (legacyGroup.shutdown).
func (c *LegacyCoordinator) handOver(name string, to int32, stop context.CancelFunc) {
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ZKTimeout)
	defer cancel()
	ids, err := c.hostedHere(ctx, name)
	if err == nil && len(ids) > 0 {
		data, _ := json.Marshal(legacyHandover{From: c.cfg.NodeID, Consumers: ids, AtMs: time.Now().UnixMilli()})
		p := legacyHandoverPath(c.cfg.Root, name)
		if _, err = c.store.Set(ctx, p, data, -1); errors.Is(err, zkstate.ErrNoNode) {
			err = c.store.Create(ctx, p, data, zkstate.CreateOptions{Parents: true})
		}
	}
	if err != nil {
		c.log.Warn().Err(err).Str("group", name).Msg("legacy handover: noting the consumers failed; the new owner rebalances as they come")
	}
	c.log.Info().Str("group", name).Int32("to", to).Strs("consumers", ids).
		Msg("legacy group handed over: closing its consumers' connections; they register with the new owner")
}

// hostedHere lists the consumers of group whose hosted-member znode names this bridge.
func (c *LegacyCoordinator) hostedHere(ctx context.Context, group string) ([]string, error) {
	kids, _, err := c.store.Children(ctx, zkstate.HostedPath(c.cfg.Root, group))
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(kids))
	for i, k := range kids {
		paths[i] = zkstate.HostedMemberPath(c.cfg.Root, group, k)
	}
	reads, err := c.store.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	var ids []string
	for i, r := range reads {
		if r.Err != nil {
			continue
		}
		if h, err := zkstate.ParseHostedMember(r.Data); err == nil && h.Kind == zkstate.KindLegacy && h.Node == c.cfg.NodeID {
			ids = append(ids, kids[i])
		}
	}
	return ids, nil
}

// legacyGather holds the registrations of a handed-over group until every consumer the
// previous bridge noted has come (or legacyGatherWait passed), so that the group's first
// rebalance here starts them all: one Stop/Start round, not one per consumer.
type legacyGather struct {
	want    map[string]bool
	open    chan struct{}
	opened  bool // under LegacyCoordinator.mu
	timeout *time.Timer
}

// gather waits at group's gather, if the group was just handed over to us.
func (c *LegacyCoordinator) gather(ctx context.Context, s *legacy.Session) {
	reg := s.Register()
	g := c.gatherOf(ctx, reg.GroupID)
	if g == nil {
		return
	}
	c.mu.Lock()
	delete(g.want, reg.ConsumerID)
	if len(g.want) == 0 {
		c.openGather(reg.GroupID, g)
	}
	c.mu.Unlock()
	// Not so long that the consumer takes us for dead: it waits (max_ping_retries + 1) ×
	// ping_interval for our first request.
	silence := time.Duration(int64(reg.MaxPingRetries)+1) * time.Duration(reg.PingIntervalMs) * time.Millisecond
	t := time.NewTimer(silence / 2)
	defer t.Stop()
	select {
	case <-g.open:
	case <-t.C:
	case <-s.Done():
	case <-ctx.Done():
	}
}

// gatherOf returns the group's gather: the one in progress, or a new one when the group has a
// recent legacyHandover note; nil when there is nothing to wait for.
func (c *LegacyCoordinator) gatherOf(ctx context.Context, group string) *legacyGather {
	c.mu.Lock()
	if g, ok := c.gathers[group]; ok {
		c.mu.Unlock()
		return g
	}
	c.mu.Unlock()
	data, _, err := c.store.Get(ctx, legacyHandoverPath(c.cfg.Root, group))
	if err != nil {
		return nil
	}
	var note legacyHandover
	if json.Unmarshal(data, &note) != nil || note.From == c.cfg.NodeID ||
		time.Since(time.UnixMilli(note.AtMs)) > 10*legacyGatherWait {
		c.dropNote(group)
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.gathers[group]; ok {
		return g // another registration read the note too
	}
	g := &legacyGather{want: map[string]bool{}, open: make(chan struct{})}
	for _, id := range note.Consumers {
		g.want[id] = true
	}
	g.timeout = time.AfterFunc(legacyGatherWait, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.openGather(group, g)
	})
	c.gathers[group] = g
	c.log.Info().Str("group", group).Int32("from", note.From).Strs("consumers", note.Consumers).
		Msg("legacy group handed over to us: holding its consumers' registrations until they are all here")
	return g
}

// openGather lets the registrations through (c.mu held) and forgets the note.
func (c *LegacyCoordinator) openGather(group string, g *legacyGather) {
	if g.opened {
		return
	}
	g.opened = true
	g.timeout.Stop()
	close(g.open)
	if c.state != legacyRunning {
		return // the note ages out (gatherOf)
	}
	c.actorWG.Add(1)
	go func() {
		defer c.actorWG.Done()
		c.dropNote(group)
		c.mu.Lock()
		if c.gathers[group] == g {
			delete(c.gathers, group)
		}
		c.mu.Unlock()
	}()
}

// dropNote deletes the group's legacyHandover note.
func (c *LegacyCoordinator) dropNote(group string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ZKTimeout)
	defer cancel()
	if err := c.store.Delete(ctx, legacyHandoverPath(c.cfg.Root, group), -1); err != nil && !errors.Is(err, zkstate.ErrNoNode) {
		c.log.Debug().Err(err).Str("group", group).Msg("deleting the legacy handover note failed")
	}
}

// awaitPrevious waits, before consumer s registers, until the ephemerals another bridge holds
// for it are gone: its hosted-member znode (kind legacy, another node) and its /ids
// registration. A bridge handing the group over deletes them in moments; a crashed bridge's go
// when its ZooKeeper session expires, within the session timeout. The wait ends early when the
// consumer gives up (its connection closes). Anything else holding the id (a 0.8 consumer, a
// member of this bridge) is left to the actor's CONSUMER_ID_IN_USE.
func (c *LegacyCoordinator) awaitPrevious(ctx context.Context, s *legacy.Session) error {
	reg := s.Register()
	hosted := zkstate.HostedMemberPath(c.cfg.Root, reg.GroupID, reg.ConsumerID)
	data, st, err := c.store.Get(ctx, hosted)
	if err != nil || st.EphemeralOwner == c.store.SessionID() {
		return nil // none (or ZooKeeper trouble, which the registration itself reports)
	}
	h, err := zkstate.ParseHostedMember(data)
	if err != nil || h.Kind != zkstate.KindLegacy || h.Node == c.cfg.NodeID {
		return nil
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, c.store.SessionTimeout()+2*time.Second)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	for _, p := range []string{zkstate.IDPath(reg.GroupID, reg.ConsumerID), hosted} {
		if err := c.awaitGone(wctx, p); err != nil {
			return fmt.Errorf("bridge: legacy group %q: consumer %q is still registered by bridge %d (%w): %w",
				reg.GroupID, reg.ConsumerID, h.Node, err, legacy.CodeConsumerIDInUse.Err())
		}
	}
	c.log.Info().Str("group", reg.GroupID).Str("consumer", reg.ConsumerID).Int32("previous", h.Node).
		Dur("waited", time.Since(start)).Msg("legacy consumer's registration by the previous bridge is gone")
	return nil
}

// awaitGone waits until p does not exist or is an ephemeral of our session.
func (c *LegacyCoordinator) awaitGone(ctx context.Context, p string) error {
	events, err := c.store.WatchData(ctx, p)
	if err != nil {
		return err
	}
	for ev := range events {
		if !ev.Exists || ev.Stat.EphemeralOwner == c.store.SessionID() {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("the watch ended")
}
