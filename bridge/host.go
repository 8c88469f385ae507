package bridge

// A group's host: the one goroutine that owns a group's state on this bridge, whatever its
// members' kinds (DESIGN §3). The Kafka members' side (actor.go) and the legacy members' side
// (legacy_group.go) are attached to the group's host by their coordinators and detached when
// they end; the host steps both sides' events in the order they come, so that nothing of the
// group is shared between goroutines, and ends when neither side is attached.
//
// The bridge keeps one registry of hosts (hosts), so that its Kafka coordinator and its legacy
// coordinator get the same host for a group name; a nil *hosts gives every side a host of its
// own (coordinators built outside a Bridge).

import (
	"context"
	"sync"
	"time"
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
// attached), until the last side is detached.
func (h *host) run() {
	var kctx, lctx context.Context // the attached sides' (nil for a side not attached)
	for {
		for _, at := range h.takeAttaches() {
			if at.kafka != nil {
				h.kafka = at.kafka
				kctx = at.kafka.start(at.ctx)
			} else {
				h.legacy, lctx = at.legacy, at.ctx
				at.legacy.start()
			}
		}
		if a := h.kafka; a != nil && !a.before(kctx) {
			kctx = nil
			if h.detachKafka() {
				return
			}
			continue
		}
		k := h.kafka.chans(kctx)
		l := h.legacy.chans(lctx)
		select {
		case <-h.kick:
			continue
		case req := <-k.reqs:
			h.kafka.onRequest(kctx, req)
		case res := <-k.loaded:
			h.kafka.onLoaded(kctx, res)
		case <-k.hold:
			h.kafka.endRefusal()
		case res := <-k.results:
			h.kafka.claimed(kctx, res) // mixed.go
		case fp := <-k.others:
			h.kafka.mx.othersFP = fp // mixed.go: checked by before
		case done := <-k.handoff:
			h.kafka.startHandoff(kctx, done) // mixed.go
		case <-k.timer:
			h.kafka.step(kctx, groupTick)
		case res := <-k.writes:
			h.kafka.written(kctx, res)
		case r := <-k.modeRead:
			h.kafka.onModeRead(kctx, r) // actor_gate.go
		case err := <-k.fence:
			h.kafka.onFence(kctx, err)
		case <-k.mode:
			h.kafka.onModeChange(kctx) // modes.go
		case cause := <-k.handover:
			h.kafka.leave(kctx, cause) // handover.go
		case <-k.idle:
			h.kafka.onIdle()
		case <-k.stop:
			h.kafka.onStop()
		case <-k.closing:
			h.kafka.closed()
		case ev := <-l.inbox:
			now := time.Now()
			h.legacy.fenceUnvouched(now)
			h.legacy.handle(lctx, now, ev)
		case <-l.timer:
			h.legacy.onTimer(lctx)
		case <-l.stop:
			h.legacy.shutdown()
		}
		if a := h.kafka; a != nil && a.ended() {
			if kctx = nil; h.detachKafka() {
				return
			}
		}
		if g := h.legacy; g != nil && g.ended() {
			if lctx = nil; h.detachLegacy() {
				return
			}
		}
	}
}

// detachKafka forgets the Kafka side, which has ended; it reports whether the host ends too.
func (h *host) detachKafka() bool {
	h.kafka.exit()
	h.kafka = nil
	return h.drop()
}

func (h *host) detachLegacy() bool {
	h.legacy = nil
	return h.drop()
}
