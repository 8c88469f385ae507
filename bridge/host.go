package bridge

// A group's host: the one goroutine that owns a group's state on this bridge, whatever its
// members' kinds (DESIGN §3). The Kafka members' side (actor.go) and the legacy members' side
// (legacy_group.go) are attached to the group's host by their coordinators and detached when
// they end; the host steps both sides' events in the order they come, so that nothing of the
// group is shared between goroutines, and ends when neither side is attached.
//
// The host owns the group's one engine (group.Machine), whatever its members' kinds: both sides
// step their events into it (step) and each carries out its own kind's part of every Step's
// effects; its next wake is the host's one timer. A side that ends takes its kind's part out of
// the engine (Machine.ResetKafka, Machine.ResetLegacy) while the other kind's members carry on.
//
// The bridge keeps one registry of hosts (hosts), so that its Kafka coordinator and its legacy
// coordinator get the same host for a group name; a nil *hosts gives every side a host of its
// own (coordinators built outside a Bridge).

import (
	"context"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
)

// hosts is a bridge's registry of group hosts.
type hosts struct {
	mu sync.Mutex
	m  map[string]*host
}

func newHosts() *hosts { return &hosts{m: map[string]*host{}} }

// host is described in the file comment. Every field below kick is owned by run's goroutine;
// so are the sides' contexts, which are run's variables.
type host struct {
	name string
	reg  *hosts
	refs int // sides attached or being attached; guarded by reg.mu (or owned by run when reg is nil)

	// attaches are queued for the goroutine, in order; kick (capacity 1) says there are some. A
	// queue, so that a coordinator holding its lock never waits for the host.
	mu       sync.Mutex
	attaches []attach
	kick     chan struct{}

	kafka  *actor
	legacy *legacyGroup
	// The attached sides' contexts (nil for a side not attached).
	kctx, lctx context.Context

	// m is the group's one engine, whatever its members' kinds (made by the first side to
	// start, machine): each side steps its events into it through step, and carries out its
	// own kind's part of every Step's effects. timer is its one wake (arm).
	m      *group.Machine
	wakeAt time.Time
	timer  *time.Timer
	// stepping is set while a Step's effects are carried out: an event a side steps meanwhile
	// waits in queued, so that both sides carry out each Step's effects in the order of the
	// Steps.
	stepping bool
	queued   []queuedEvent
}

// queuedEvent is an event stepped while another Step's effects were carried out.
type queuedEvent struct {
	now time.Time
	ev  group.Event
}

// attach is one side handed to the host, with the context that ends it.
type attach struct {
	ctx    context.Context
	kafka  *actor
	legacy *legacyGroup
}

// join returns the group's host, starting it if needed; every join is matched by one attach.
func (hs *hosts) join(name string) *host {
	if hs == nil {
		h := newHost(name, nil)
		h.refs = 1
		go h.run()
		return h
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.m[name]
	if h == nil {
		h = newHost(name, hs)
		hs.m[name] = h
		go h.run()
	}
	h.refs++
	return h
}

func newHost(name string, reg *hosts) *host {
	return &host{name: name, reg: reg, kick: make(chan struct{}, 1)}
}

// drop ends one join; it reports whether it was the last (the goroutine ends then).
func (h *host) drop() bool {
	if h.reg == nil {
		h.refs--
		return h.refs == 0
	}
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	h.refs--
	if h.refs > 0 {
		return false
	}
	if h.reg.m[h.name] == h {
		delete(h.reg.m, h.name)
	}
	return true
}

func (h *host) queue(at attach) {
	h.mu.Lock()
	h.attaches = append(h.attaches, at)
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// attachKafka hands the group's Kafka actor to the host; ctx ends it (finish(false)).
func (h *host) attachKafka(ctx context.Context, a *actor) {
	a.host = h
	h.queue(attach{ctx: ctx, kafka: a})
}

// attachLegacy hands the group's legacy actor to the host; ctx ends it (shutdown).
func (h *host) attachLegacy(ctx context.Context, g *legacyGroup) {
	g.host = h
	h.queue(attach{ctx: ctx, legacy: g})
}

// takeAttaches returns the attaches queued so far.
func (h *host) takeAttaches() []attach {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.attaches
	h.attaches = nil
	return at
}

// run is the host's goroutine: one select over the channels of both sides (nil for a side not
// attached) and the engine's wake, until the last side is detached.
func (h *host) run() {
	h.timer = time.NewTimer(time.Hour)
	defer h.timer.Stop()
	for {
		for _, at := range h.takeAttaches() {
			if at.kafka != nil {
				h.kafka = at.kafka
				h.kctx = at.kafka.start(at.ctx)
			} else {
				h.legacy, h.lctx = at.legacy, at.ctx
				at.legacy.start()
			}
		}
		if a := h.kafka; a != nil && !a.before(h.kctx) {
			if h.detachKafka() {
				return
			}
			continue
		}
		h.arm()
		if h.serve() {
			return
		}
	}
}

// serve waits for one event of either side or the engine's wake and steps it; it reports whether
// the host has ended (no side attached any more).
func (h *host) serve() bool {
	k := h.kafka.chans(h.kctx)
	l := h.legacy.chans(h.lctx)
	select {
	case <-h.kick:
		return false
	case <-h.timer.C:
		now := time.Now()
		if h.legacy != nil {
			h.legacy.fenceUnvouched(now)
		}
		h.step(now, group.Tick{})
	case req := <-k.reqs:
		h.kafka.onRequest(h.kctx, req)
	case res := <-k.loaded:
		h.kafka.onLoaded(h.kctx, res)
	case <-k.hold:
		h.kafka.endRefusal()
	case res := <-k.results:
		h.kafka.claimed(h.kctx, res) // mixed.go
	case fp := <-k.others:
		h.kafka.mx.othersFP = fp // mixed.go: checked by before
	case done := <-k.handoff:
		h.kafka.startHandoff(h.kctx, done) // mixed.go
	case res := <-k.writes:
		h.kafka.written(h.kctx, res)
	case r := <-k.modeRead:
		h.kafka.onModeRead(h.kctx, r) // actor_gate.go
	case err := <-k.fence:
		h.kafka.onFence(h.kctx, err)
	case <-k.mode:
		h.kafka.onModeChange(h.kctx) // modes.go
	case cause := <-k.handover:
		h.kafka.leave(h.kctx, cause) // handover.go
	case <-k.idle:
		h.kafka.onIdle()
	case <-k.stop:
		h.kafka.onStop()
	case <-k.closing:
		h.kafka.closed()
	case ev := <-l.inbox:
		now := time.Now()
		h.legacy.fenceUnvouched(now)
		h.legacy.handle(h.lctx, now, ev)
	case <-l.stop:
		h.legacy.shutdown()
	}
	if a := h.kafka; a != nil && a.ended() && h.detachKafka() {
		return true
	}
	if g := h.legacy; g != nil && g.ended() && h.detachLegacy() {
		return true
	}
	return false
}

// machine returns the group's engine, made on the first call, with the starting side's part of
// its configuration set (kafka: every setting but Legacy; legacy: Legacy).
func (h *host) machine(kafka *group.Config, legacy *group.LegacyConfig) *group.Machine {
	cfg := group.DefaultConfig()
	if h.m != nil {
		cfg = h.m.Config()
	}
	if kafka != nil {
		l := cfg.Legacy
		cfg = *kafka
		cfg.Legacy = l
	}
	if legacy != nil {
		cfg.Legacy = *legacy
	}
	if h.m == nil {
		h.m = group.New(cfg, h.name)
	} else {
		h.m.Configure(cfg)
	}
	return h.m
}

// step steps ev into the group's engine at now and has both sides carry out the effects, the
// Kafka side first; a check the legacy side decides without reading is stepped back at once
// (legacyGroup.carry), at the time it was decided.
func (h *host) step(now time.Time, ev group.Event) {
	if h.stepping {
		h.queued = append(h.queued, queuedEvent{now: now, ev: ev})
		return
	}
	h.stepping = true
	defer func() { h.stepping = false }()
	for {
		for ev != nil {
			fx := h.m.Step(now, ev)
			h.wakeAt = fx.WakeAt
			if a := h.kafka; a != nil && a.serving() {
				a.carry(h.kctx, fx)
			}
			ev = nil
			if g := h.legacy; g != nil && !g.stopped {
				if ev = g.carry(h.lctx, now, fx); ev != nil {
					now = time.Now() // after the check's planning: the attempt's checking time
				}
			}
		}
		if len(h.queued) == 0 {
			return
		}
		now, ev = h.queued[0].now, h.queued[0].ev
		h.queued = h.queued[1:]
	}
}

// resetKafka forgets the group's Kafka part in the engine (the Kafka side ends) and takes the
// wake it leaves.
func (h *host) resetKafka() {
	if h.m != nil {
		h.wakeAt = h.m.ResetKafka()
	}
}

// resetLegacy forgets the group's legacy part in the engine (the legacy side ends).
func (h *host) resetLegacy() {
	if h.m != nil {
		h.wakeAt = h.m.ResetLegacy()
	}
}

// arm sets the one timer to the engine's next wake, or the end of the legacy members' lease on
// the ZooKeeper session when earlier (legacyGroup.fenceUnvouched).
func (h *host) arm() {
	wake := h.wakeAt
	if g := h.legacy; g != nil && !g.stopped {
		if t := g.leaseWake(); !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	if wake.IsZero() {
		h.timer.Stop() // no stale tick is received after Stop (Go 1.23 timers)
	} else {
		h.timer.Reset(max(time.Until(wake), 0))
	}
}

// detachKafka forgets the Kafka side, which has ended; it reports whether the host ends too.
func (h *host) detachKafka() bool {
	h.kafka.exit()
	h.kafka, h.kctx = nil, nil
	return h.drop()
}

func (h *host) detachLegacy() bool {
	h.legacy, h.lctx = nil, nil
	return h.drop()
}
