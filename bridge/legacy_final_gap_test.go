package bridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// A group that changes while its members stop: the attempt restarts at the check, but the
// members stopped meanwhile still get their final Ping, and the offsets they report are
// committed (docs/legacy-protocol.md §8 "Coordinator" 2: the offsets reported after a
// StopResponse are final). Here b, stopped, answers its final Ping with its last offset of t-1
// and leaves as the attempt restarts: that offset must reach /consumers/g/offsets, and the
// member given t-1 next must start from it. Before, the restart came straight after the Stops:
// nobody asked b for its offsets (or, once asked, the final offsets collected were dropped at
// the next check), and t-1's next owner started before them (those records delivered twice).
//
// Raw members: a (t-0) holds its StopResponse of the rebalance c's registration starts until d
// has registered, so the group changes while it stops; b (t-1) reports 100 in its pings and, in
// that rebalance, 500 in any ping once stopped; it closes its connection when the restarted
// attempt's StopRequest comes, before that attempt's final Ping.
func TestIntegration_LegacyFinalOffsetsOfAMemberLeavingWhileTheAttemptRestarts(t *testing.T) {
	legacyCheckLeaks(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 2)
	env := legacyStart(t, store, "", nil)
	t1 := legacy.TopicPartition{Topic: "t", Partition: 1}

	var hold, armed atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	var wg sync.WaitGroup
	serve := func(raw *legacyRaw, answer func(legacy.Message) legacy.Message) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = raw.serve(t, answer)
		}()
	}
	t.Cleanup(wg.Wait)
	idle := func(legacy.Message) legacy.Message { return nil }
	plain := func(stop func()) func(legacy.Message) legacy.Message {
		return func(m legacy.Message) legacy.Message {
			switch m.(type) {
			case *legacy.StopRequest:
				if stop != nil {
					stop()
				}
				return &legacy.StopResponse{}
			case *legacy.StartRequest:
				return &legacy.StartResponse{}
			case *legacy.PingRequest:
				return &legacy.PingResponse{HasOffsets: true}
			}
			return idle(m)
		}
	}
	// a and b: a long ping interval, which is also how long the coordinator waits for an
	// answer: a's held StopResponse is not late (10 s), and the first request to b after its
	// Stop is its final Ping (2 s: b's first pings report its offset soon enough).
	slow := func(id string, interval int32) legacy.RegisterRequest {
		reg := legacyRawRegister("g", id, true, "t")
		reg.PingIntervalMs = interval
		return reg
	}
	a := legacyDialRaw(t, env.addr, slow("a", 10000))
	serve(a, plain(func() {
		if hold.CompareAndSwap(true, false) {
			held <- struct{}{}
			<-release
		}
	}))

	b := legacyDialRaw(t, env.addr, slow("b", 2000))
	var bMu sync.Mutex
	bHas, bStopped := false, false
	serve(b, func(m legacy.Message) legacy.Message {
		bMu.Lock()
		defer bMu.Unlock()
		switch m := m.(type) {
		case *legacy.StopRequest:
			if bStopped && armed.Load() {
				b.conn.Close() // the attempt restarts: b leaves, stopped
				return nil
			}
			bStopped = true
			return &legacy.StopResponse{}
		case *legacy.StartRequest:
			bStopped, bHas = false, len(m.Assigned) == 1 && m.Assigned[0].Partition == 1
			return &legacy.StartResponse{}
		case *legacy.PingRequest:
			resp := &legacy.PingResponse{HasOffsets: true}
			if bHas {
				resp.Offsets = []legacy.PartitionOffset{{Topic: "t", Partition: 1, Offset: 100}}
			}
			if bStopped && bHas && armed.Load() {
				resp.Offsets[0].Offset = 500 // its last, consumed before the Stop
			}
			return resp
		}
		return nil
	})
	legacyEventually(t, "a owning t-0, b t-1, b's offset 100 committed", func() (bool, string) {
		owners := legacyOwnersInZK(t, store, "g")
		off := legacyOffsetsInZK(t, store, "g")[t1]
		bMu.Lock()
		has := bHas && !bStopped
		bMu.Unlock()
		return len(owners) == 2 && has && off == 100, fmt.Sprintf("owners %v, b started on t-1 %v, t-1 at %d", owners, has, off)
	})

	// c registers: a rebalance; a holds its StopResponse until d has registered too.
	hold.Store(true)
	armed.Store(true)
	var cMu sync.Mutex
	var cStart []legacy.PartitionOffset
	c := legacyDialRaw(t, env.addr, legacyRawRegister("g", "c", true, "t"))
	serve(c, func(m legacy.Message) legacy.Message {
		if s, ok := m.(*legacy.StartRequest); ok {
			cMu.Lock()
			cStart = s.Assigned
			cMu.Unlock()
		}
		return plain(nil)(m)
	})
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("a was not asked to stop")
	}
	d := legacyDialRaw(t, env.addr, legacyRawRegister("g", "d", true, "t"))
	serve(d, plain(nil))
	legacyEventually(t, "d registered", func() (bool, string) {
		_, _, err := store.Get(ctx, zkstate.IDPath("g", "d"))
		return err == nil, fmt.Sprint(err)
	})
	time.Sleep(3 * legacyTestInterval) // the registration reaches the engine: the attempt is dirty
	close(release)

	legacyEventually(t, "b's final offset of t-1 committed, and c started on t-1 from it", func() (bool, string) {
		off := legacyOffsetsInZK(t, store, "g")[t1]
		cMu.Lock()
		start := cStart
		cMu.Unlock()
		ok := off == 500 && len(start) == 1 && start[0].Partition == 1 && start[0].Offset == 500
		return ok, fmt.Sprintf("t-1 at %d in ZooKeeper; c's last Start %v", off, start)
	})
	for _, raw := range []*legacyRaw{a, c, d} {
		raw.conn.Close()
	}
}
