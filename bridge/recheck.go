package bridge

// Rechecks: a rescan (handover.go) decides each group once, and passes over a group that has an
// actor then (loading, refused, handing over), trusting that actor with it. An actor that ends
// without having served the group leaves nothing behind to take it: a load refused because our
// registration was deleted before its write of the epoch (errRegistrationGone) ends after
// refuseHold, while the rescans that follow the registration made again have passed it over; a
// takeover whose load failed (ZooKeeper away, a holder that did not release within the load
// timeout) likewise. Such a group was loaded again only when a client asked for it, and a group
// whose members are idle, or legacy, asks nothing.
//
// The release side is alike: a rescan leaves a group it would release to the group's actor,
// which hands a loaded group over itself, but one whose load failed ends without a release, and
// the group's new owner waits for a release that does not come.
//
// So the coordinator follows the actors it relies on: the actor a rescan passed over where it
// would have taken the group over, the actor of each takeover a rescan or a recheck started, and
// the actor a rescan left a group to release to (leaveTo; decided again only if it ends without
// having loaded the group). When a followed actor ends (remove), the group's epoch is read again and decided as a rescan would (placeGroup): taken over if it maps
// to us and names another bridge or our release, released if it maps elsewhere and names us,
// left alone otherwise. A recheck's own takeover is followed in turn, and when its load fails
// too the next recheck waits longer (recheckDelay: 0, then 1 s, doubling up to
// recheckMaxDelay, on top of the failed actor's own refuseHold): a load that keeps failing is
// retried more and more rarely, never in a loop. It stops at the first actor that loaded the
// group (a takeover that served it), or at a decision to do nothing.

import (
	"context"
	"errors"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// recheckMaxDelay bounds the wait between two rechecks of a group whose takeover keeps failing.
const recheckMaxDelay = 30 * time.Second

// rechecks is the coordinator's followed actors and due rechecks, under c.mu.
type rechecks struct {
	// followed is, per group, the actor whose end has the group decided again.
	followed map[string]followed
	// due is the groups to decide again, from when, and their count of rechecks.
	due     map[string]recheckDue
	running bool          // recheckLoop runs
	wake    chan struct{} // buffered 1: a recheck was added
}

type followed struct {
	a *actor
	// tries is the group's rechecks so far; passed, that a rescan or a recheck passed over the
	// actor (decided again however it ends), else it is a takeover's (decided again unless it
	// loaded the group).
	tries  int
	passed bool
	// release: a rescan or a recheck left the group, which it would release, to the actor (decided
	// again only if the actor ends without having loaded it: one that loaded it hands it over).
	release bool
}

type recheckDue struct {
	at    time.Time
	tries int
}

// recheckDelay is the wait before a group's recheck number tries: none for the first (the
// failed actor held its refusal for refuseHold already), then refuseHold, doubling, at most
// recheckMaxDelay.
func recheckDelay(tries int) time.Duration {
	if tries <= 1 {
		return 0
	}
	d := refuseHold
	for i := 2; i < tries && d < recheckMaxDelay; i++ {
		d *= 2
	}
	return min(d, recheckMaxDelay)
}

// passOver reports whether the group has an actor, which a rescan taking groups over passes
// over then: the actor is followed, with the rechecks done so far (tries, or the actor's own if
// more).
func (c *coordinator) passOver(name string, tries int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.actors[name]
	if a == nil {
		return false
	}
	c.followLocked(followed{a: a, tries: tries, passed: true})
	return true
}

// leaveTo reports whether the group has an actor, which a rescan releasing groups leaves the
// group to (it hands the group over): the actor is followed, so that one that ends without
// having loaded the group (a failed load) leaves it decided again, and released.
func (c *coordinator) leaveTo(name string, tries int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.actors[name]
	if a == nil {
		return false
	}
	c.followLocked(followed{a: a, tries: tries, release: true})
	return true
}

// follow has the group of a takeover decided again when its actor a ends without having loaded
// it, tries the rechecks so far.
func (c *coordinator) follow(a *actor, tries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.followLocked(followed{a: a, tries: tries})
}

func (c *coordinator) followLocked(f followed) {
	name := f.a.group
	if c.actors[name] != f.a {
		c.endedLocked(f) // it ended already (remove ran)
		return
	}
	if c.rc.followed == nil {
		c.rc.followed = map[string]followed{}
	}
	if was, ok := c.rc.followed[name]; ok && was.a == f.a {
		// The latest decision says what the actor's end means (release or not); the tries add up.
		f.tries, f.passed = max(f.tries, was.tries), f.passed || was.passed
	}
	c.rc.followed[name] = f
}

// actorEndedLocked is told by remove that a ended: a followed actor has its group decided
// again. c.mu is held.
func (c *coordinator) actorEndedLocked(a *actor) {
	f, ok := c.rc.followed[a.group]
	if !ok || f.a != a {
		return
	}
	delete(c.rc.followed, a.group)
	c.endedLocked(f)
}

func (c *coordinator) endedLocked(f followed) {
	tries := f.tries
	if f.a.loaded.Load() {
		if !f.passed || f.release {
			return // a takeover that loaded the group: its end is the group's own (idle, handed over)
		}
		tries = 0 // it served the group: nothing to back off from
	}
	c.recheckLocked(f.a.group, tries+1)
}

// recheckLocked has the group decided again, its recheck number tries, after recheckDelay.
func (c *coordinator) recheckLocked(name string, tries int) {
	if c.closed || c.store == nil || c.peers == nil {
		return
	}
	if c.rc.due == nil {
		c.rc.due, c.rc.wake = map[string]recheckDue{}, make(chan struct{}, 1)
	}
	c.rc.due[name] = recheckDue{at: time.Now().Add(recheckDelay(tries)), tries: tries}
	if c.rc.running {
		select {
		case c.rc.wake <- struct{}{}:
		default:
		}
		return
	}
	c.rc.running = true
	store := c.store
	c.goLocked(func(ctx context.Context) { c.recheckLoop(ctx, store) })
}

// recheckLoop runs the due rechecks, those due together in one read, until none is left.
func (c *coordinator) recheckLoop(ctx context.Context, store *zkstate.Store) {
	for {
		c.mu.Lock()
		now := time.Now()
		var names []string
		var tries []int
		var next time.Time
		for name, d := range c.rc.due {
			if !d.at.After(now) {
				names, tries = append(names, name), append(tries, d.tries)
				delete(c.rc.due, name)
			} else if next.IsZero() || d.at.Before(next) {
				next = d.at
			}
		}
		if len(names) == 0 && (next.IsZero() || ctx.Err() != nil) {
			c.rc.running = false
			c.mu.Unlock()
			return
		}
		wake := c.rc.wake
		c.mu.Unlock()
		if len(names) > 0 {
			c.recheck(ctx, store, names, tries)
			continue
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-t.C:
		case <-wake:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// recheck reads the groups' epochs and decides each as a rescan would (placeGroup); a group
// whose epoch could not be read is tried again later.
func (c *coordinator) recheck(ctx context.Context, store *zkstate.Store, names []string, tries []int) {
	c.scanMu.Lock() // one decision at a time, as rescans
	defer c.scanMu.Unlock()
	paths := make([]string, len(names))
	for i, name := range names {
		paths[i] = zkstate.EpochPath(c.cfg.Root, name)
	}
	sid := store.SessionID()
	reads, err := store.GetMany(ctx, paths)
	if store.SessionID() != sid {
		sid = 0
	}
	if ctx.Err() != nil {
		return
	}
	again := func(i int) {
		c.mu.Lock()
		c.recheckLocked(names[i], tries[i]+1)
		c.mu.Unlock()
	}
	serving := c.peers.serving.Load()
	for i, name := range names {
		switch {
		case err != nil:
			c.log.Debug().Err(err).Str("group", name).Msg("placement: cannot read the epoch of a group to decide again")
			again(i)
		case reads[i].Err != nil:
			if !errors.Is(reads[i].Err, zkstate.ErrNoNode) {
				again(i)
			}
		default:
			c.log.Debug().Str("group", name).Int("recheck", tries[i]).Msg("placement: deciding again a group a rescan relied on an actor for")
			if !c.placeGroup(ctx, store, name, reads[i], sid, serving, tries[i]) {
				c.rescanAll.Store(true) // the next rescan reads every group, and releases it
			}
		}
	}
}
