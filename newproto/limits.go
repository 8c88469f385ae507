package newproto

// Limits on what clients can make the server hold, as a broker has them:
//
//   - Frame bytes: every frame's declared size is taken from a budget shared by all the
//     server's connections before its bytes are allocated, and given back once the frame is
//     read (Kafka's queued.max.request.bytes bounds the same thing). A frame that would take
//     the budget past Config.MaxQueuedBytes closes its connection (frames_rejected_total
//     {reason="memory"}): ten clients that each send 60 MiB of a 100 MiB frame and stall then
//     hold at most the budget, not 600 MiB.
//   - Memory is given back after a spike: once a frame of bigFrame bytes or more is released,
//     the runtime is asked to return freed memory to the OS (debug.FreeOSMemory, at most once
//     per freeEvery): Go's background scavenger would take minutes.
//   - Connections: at most Config.MaxConnections at once and Config.MaxConnectionsPerIP from
//     one address (Kafka's max.connections and max.connections.per.ip); one more is closed at
//     once (connections_refused_total{reason}).

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zkbridge/zkbridge/connlimit"
)

// Defaults of the limits.
const (
	// DefaultMaxQueuedBytes bounds the bytes of the frames being read, all connections
	// together: two frames of the largest size (DefaultMaxFrameBytes) and some.
	DefaultMaxQueuedBytes int64 = 256 << 20
	// DefaultMaxConnections is the default cap on open connections.
	DefaultMaxConnections = 10000
)

const (
	bigFrame  = 8 << 20
	freeEvery = 5 * time.Second
)

// Reasons of refusals (labels).
const (
	rejectMemory        = "memory"               // frames_rejected_total: the budget is spent
	refuseMaxConns      = connlimit.RefusedTotal // connections_refused_total
	refuseMaxConnsPerIP = connlimit.RefusedPerIP // connections_refused_total
)

// frameBudget is the bytes the server's connections may hold in frames being read.
type frameBudget struct {
	max  int64 // <= 0: no limit
	used atomic.Int64

	freeMu   sync.Mutex
	freeNext time.Time // no FreeOSMemory before
	freeing  bool      // one is scheduled
}

// reserve takes n bytes, or reports that they would exceed the budget.
func (b *frameBudget) reserve(n int64) bool {
	if b.max <= 0 {
		return true
	}
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

// release gives back n bytes taken by reserve; a big frame schedules the return of freed
// memory to the OS.
func (b *frameBudget) release(n int64) {
	if b.max > 0 {
		b.used.Add(-n)
	}
	if n >= bigFrame {
		b.scheduleFree()
	}
}

// scheduleFree runs debug.FreeOSMemory soon (so that the released frame is garbage by then),
// at most once per freeEvery.
func (b *frameBudget) scheduleFree() {
	b.freeMu.Lock()
	defer b.freeMu.Unlock()
	if b.freeing {
		return
	}
	b.freeing = true
	delay := max(time.Until(b.freeNext), 100*time.Millisecond)
	time.AfterFunc(delay, func() {
		debug.FreeOSMemory()
		b.freeMu.Lock()
		b.freeing, b.freeNext = false, time.Now().Add(freeEvery)
		b.freeMu.Unlock()
	})
}

// readFrame reads one frame of the connection within the server's frame budget.
func (c *conn) readFrame() ([]byte, error) {
	n, err := readFrameSize(c.in, c.s.cfg.MaxFrameBytes)
	if err != nil {
		return nil, err
	}
	if !c.s.frames.reserve(int64(n)) {
		return nil, badFrame(rejectMemory, "a %d-byte frame would take the bytes held in frames being read past %d (MaxQueuedBytes)", n, c.s.frames.max)
	}
	defer c.s.frames.release(int64(n))
	frame := make([]byte, n)
	if _, err := io.ReadFull(c.in, frame); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("reading %d-byte frame: %w", n, err)
	}
	return frame, nil
}
