package bridge

// A draining bridge lingers: after it has handed its groups over (handover.go: drain) it keeps
// its Kafka listener open until every Kafka member of those groups has been answered
// NOT_COORDINATOR here once, so that each learns from an answer, not from a refused
// connection, that its group moved. Kafka's own brokers behave so on a controlled shutdown:
// the coordinator's partition leadership moves first and the broker answers NOT_COORDINATOR for
// a while before its listener closes. Clients treat the two differently: sarama's heartbeat
// loop looks the coordinator up again on NOT_COORDINATOR and carries on in its generation, but
// spends its retries at once on a refused connection and ends the session; its leader then
// rejoins with its member id, which rebalances the group (Kafka's rule for a leader, KIP-345).
//
// The wait ends when every member has been told, when no client connection is left open, or
// after handoverLinger (a member heartbeats at least every heartbeat.interval.ms, 3 s by
// default in Kafka's clients; a dead member is never heard from).
//
// With the data path it goes on for the clients that produce through our proxy listeners to
// brokers the other bridges serve now, until Config.DrainProducerLinger has passed since the
// drain began or their connections close (relay/drain.go: Producers). A producer is not refused
// as a fetcher is: kgo refreshes a producer's metadata no sooner than metadata.min.age (5 s)
// after its previous refresh, whatever the error, and produces nothing to the partitions
// meanwhile. A producer whose last refresh came before the drain began refreshes at once when
// our listener closes 5 s later; one that refreshed after the other bridges saw us draining was
// given its brokers' new addresses, and kgo closed its connections here on its own.
//
// Once that time has passed, the producers still connected are refused once
// (relay.Proxy.RefuseProducers: their next Produce answered NOT_LEADER_OR_FOLLOWER) and waited
// for up to producerRefusalWait more: their refresh then runs at once and asks a listener of
// ours that still answers. Closing instead sent kgo's Metadata request to our closed
// addresses first (EOF, retried after 250 ms and again after 500 ms): 0.8 s without a record
// on every partition in the traced rolling restart.

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// handoverLinger bounds the wait.
const handoverLinger = 3 * time.Second

// untold is the Kafka members of the handed-over groups that have not been answered
// NOT_COORDINATOR since, by group.
type untold struct {
	mu   sync.Mutex
	want map[string]map[group.MemberID]bool
	all  chan struct{} // closed when want is empty, once read
	// members counts the members noted at first.
	members int
	// While the records are read (read open), the members refused meanwhile are noted in early
	// and left out of want.
	early map[string]map[group.MemberID]bool
	read  chan struct{}
}

// memberOf is the member id a group request names ("" for none).
func memberOf(ev group.Event) group.MemberID {
	switch e := ev.(type) {
	case group.Heartbeat:
		return e.MemberID
	case group.SyncGroup:
		return e.MemberID
	case group.OffsetCommit:
		return e.MemberID
	case group.JoinGroup:
		return e.MemberID
	}
	return ""
}

// notCoordinator reports whether r refuses its request NOT_COORDINATOR.
func notCoordinator(r group.Reply) bool {
	switch r := r.(type) {
	case group.HeartbeatReply:
		return r.Err == group.ErrNotCoordinator
	case group.SyncReply:
		return r.Err == group.ErrNotCoordinator
	case group.JoinReply:
		return r.Err == group.ErrNotCoordinator
	}
	return false
}

// refusedElsewhere notes a request of group answered NOT_COORDINATOR while the bridge drains:
// its member has been told.
func (c *coordinator) refusedElsewhere(name string, ev group.Event) {
	u := c.untold.Load()
	if u == nil {
		return
	}
	id := memberOf(ev)
	if id == "" {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.early != nil {
		if u.early[name] == nil {
			u.early[name] = map[group.MemberID]bool{}
		}
		u.early[name][id] = true
		return
	}
	members, ok := u.want[name]
	if !ok || !members[id] {
		return
	}
	delete(members, id)
	if len(members) == 0 {
		delete(u.want, name)
	}
	if len(u.want) == 0 {
		close(u.all)
	}
}

// tellMembers starts noting which Kafka members of the groups named (all loaded, about to be
// handed over by drain) are answered NOT_COORDINATOR; the members are read from the groups'
// records, on a goroutine of its own, so that the handover does not wait for the read: a member
// refused while it runs is noted as told. The read takes at most timeout.
func (c *coordinator) tellMembers(ctx context.Context, timeout time.Duration, store *zkstate.Store, names []string) *untold {
	u := &untold{want: map[string]map[group.MemberID]bool{}, all: make(chan struct{}), read: make(chan struct{})}
	if store == nil || len(names) == 0 {
		close(u.all)
		close(u.read)
		return u
	}
	u.early = map[string]map[group.MemberID]bool{}
	c.untold.Store(u)
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = zkstate.GroupRecordPath(c.cfg.Root, n)
	}
	go func() {
		defer close(u.read)
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		reads, err := store.GetMany(ctx, paths)
		u.note(names, reads, err)
	}()
	return u
}

// note sets want to the Kafka members of the records read, less those told while they were read.
func (u *untold) note(names []string, reads []zkstate.Read, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	early := u.early
	u.early = nil
	for i, r := range reads {
		var rec group.Record
		if err != nil || r.Err != nil || json.Unmarshal(r.Data, &rec) != nil {
			continue
		}
		for _, m := range rec.Members {
			if m.Kind != group.KindKafka || early[names[i]][m.ID] {
				continue
			}
			if u.want[names[i]] == nil {
				u.want[names[i]] = map[group.MemberID]bool{}
			}
			u.want[names[i]][m.ID] = true
			u.members++
		}
	}
	if len(u.want) == 0 {
		close(u.all)
	}
}

// drainClients is what the linger waits for with the data path (relay/drain.go).
type drainClients struct {
	fetchers  func() int // the connections fetching here not yet sent elsewhere (relay Untold)
	producers func() int // the open connections that produced here to a broker served elsewhere
	// drained is when the drain began (the registration marked draining); producers are waited
	// for until producerLinger (Config.DrainProducerLinger; not at all when not positive) has
	// passed since.
	drained        time.Time
	producerLinger time.Duration
	// refuse makes the proxy refuse the producers' next Produce once (relay RefuseProducers);
	// nil: they are not refused, the listeners close under them.
	refuse func()
}

// producerRefusalWait bounds the wait for the producers refused at the end of the producer
// linger to leave: a refresh and a new connection elsewhere take a few round trips.
const producerRefusalWait = time.Second

// linger waits until every member tellMembers noted has been told and, with the data path,
// clients.fetchers reports no client fetching through our proxy listeners that has not been sent
// to the bridge serving its broker now (relay/drain.go), or handoverLinger passed; then, with the
// data path, until clients.producers reports no connection producing to a broker served
// elsewhere or clients.producerLinger has passed since the drain began. It ends at once when
// open() reports no client connection. cl is nil without the data path.
func (c *coordinator) linger(ctx context.Context, u *untold, open func() int, cl *drainClients) {
	defer c.untold.Store(nil)
	if u == nil {
		return
	}
	if cl == nil {
		cl = &drainClients{}
	}
	if cl.fetchers == nil {
		cl.fetchers = func() int { return 0 }
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, handoverLinger)
	defer cancel()
	select {
	case <-u.read: // tellMembers' read, within drain's timeout
	case <-ctx.Done():
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	all, bound := u.all, ctx.Done()
	membersDone, waitedProducers := false, false
	var refused time.Time
	for {
		select {
		case <-all:
			all = nil // told; the fetchers are checked now and at every tick
			if u.members > 0 {
				c.log.Info().Int("members", u.members).Dur("waited", time.Since(start)).
					Msg("drained: every member of the groups handed over was told they moved")
			}
		case <-bound:
			bound = nil
			if !membersDone {
				membersDone = true
				c.logNotTold(u, cl.fetchers(), start)
			}
		case <-tick.C:
			if open() == 0 {
				return
			}
		}
		if !membersDone && all == nil && cl.fetchers() == 0 {
			membersDone = true
			if time.Since(start) > 50*time.Millisecond {
				c.log.Info().Dur("waited", time.Since(start)).Msg("drained: every client fetching here was sent to the bridges serving its brokers now")
			}
		}
		if !membersDone {
			continue
		}
		if cl.producers == nil || cl.producerLinger <= 0 {
			return
		}
		n, since := cl.producers(), time.Since(cl.drained)
		if n > 0 && since < cl.producerLinger {
			waitedProducers = true
			continue
		}
		if n > 0 && cl.refuse != nil && refused.IsZero() {
			refused = time.Now()
			cl.refuse()
			c.log.Info().Int("producers", n).Dur("since_drain", since).
				Msg("drained: the clients producing here to brokers the other bridges serve now are refused once, so that they refresh their metadata")
			continue
		}
		if n > 0 && !refused.IsZero() && time.Since(refused) < producerRefusalWait {
			continue
		}
		if waitedProducers {
			c.log.Info().Int("producers_left", n).Dur("since_drain", since).Dur("producer_linger", cl.producerLinger).
				Msg("drained: stopped relaying for the clients producing here to brokers the other bridges serve now")
		}
		return
	}
}

// logNotTold logs the members and fetchers not told when handoverLinger passed.
func (c *coordinator) logNotTold(u *untold, fetchers int, start time.Time) {
	u.mu.Lock()
	left := 0
	for _, m := range u.want {
		left += len(m)
	}
	u.mu.Unlock()
	c.log.Info().Int("members", u.members).Int("not_told", left).Int("fetchers_not_told", fetchers).
		Dur("waited", time.Since(start)).Msg("drained: stopped waiting for members of the groups handed over, and for fetchers, to ask here again")
}
