package bridge

import (
	"fmt"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
)

// The legacy protocol has no leave: a consumer shutting down reports its last offsets in a
// PingResponse and hangs up. Those offsets are committed: the connection's close, which reaches
// the coordinator's actor on another path than the answer read just before it, must not remove
// the member first and drop the answer with it. Each round a raw consumer registers, is started
// on t-0, answers one ping with offset 100×round and closes the connection at once; before, some
// rounds lost that offset (TestIntegration_MigrateCyclesKeepOffsets: a legacy member's last
// offsets lost when it left, the next owner starting behind them).
func TestIntegration_LegacyLastPingBeforeHangUpIsCommitted(t *testing.T) {
	lastPingRounds(t, 12, 0, func(raw *legacyRaw, _ int, want int64) legacy.Message {
		// The last commits, then the hang-up, with nothing in between.
		raw.write(t, lastOffsets(want))
		raw.conn.Close()
		return nil
	})
}

// The same when that last PingResponse comes after the ping interval, which a loaded machine
// makes common (100 ms in tests): the coordinator counts a missed ping, and the answer, read in
// its place on the connection, still carries the consumer's last offsets. Each round a raw
// consumer is started on t-0, answers a ping in time with offset 100×round-1, the next one late
// with 100×round, and hangs up. Before, the late answer was read and dropped, and t-0 stayed one
// behind (TestIntegration_MixedThreeKinds and MixedRandomized under load: a Kafka member
// starting a partition one offset behind the last commit of the legacy member that left).
func TestIntegration_LegacyLateLastPingIsCommitted(t *testing.T) {
	// The late answer's misses must not make the member dead first.
	lastPingRounds(t, 3, 30, func(raw *legacyRaw, pings int, want int64) legacy.Message {
		if pings == 1 {
			return lastOffsets(want - 1)
		}
		time.Sleep(3 * legacyTestInterval) // past the interval: a missed ping
		raw.write(t, lastOffsets(want))
		raw.conn.Close()
		return nil
	})
}

// lastOffsets is a PingResponse reporting t-0 at offset.
func lastOffsets(offset int64) *legacy.PingResponse {
	return &legacy.PingResponse{HasOffsets: true, Offsets: []legacy.PartitionOffset{{Topic: "t", Partition: 0, Offset: offset}}}
}

// lastPingRounds runs rounds of a raw consumer of group g (max_ping_retries maxRetries, or the
// default for 0) that follows Stop and Start and, once started on t-0, leaves ping to answer each
// PingRequest (pings counts them from 1) for the round's last offset 100×round; after the
// consumer's loop ends in an error (its own hang-up), the member must be removed with t-0 at that
// offset in ZooKeeper.
func lastPingRounds(t *testing.T, rounds int, maxRetries int16, ping func(raw *legacyRaw, pings int, want int64) legacy.Message) {
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 1)
	env := legacyStart(t, store, "", nil)
	tp := legacy.TopicPartition{Topic: "t", Partition: 0}
	for round := 1; round <= rounds; round++ {
		want := int64(100 * round)
		reg := legacyRawRegister("g", fmt.Sprintf("c%d", round), true, "t")
		if maxRetries != 0 {
			reg.MaxPingRetries = maxRetries
		}
		raw := legacyDialRaw(t, env.addr, reg)
		started, pings := false, 0
		err := raw.serve(t, func(m legacy.Message) legacy.Message {
			switch m := m.(type) {
			case *legacy.StopRequest:
				started = false
				return &legacy.StopResponse{}
			case *legacy.StartRequest:
				started = len(m.Assigned) == 1
				return &legacy.StartResponse{}
			case *legacy.PingRequest:
				if !started {
					return &legacy.PingResponse{HasOffsets: true}
				}
				pings++
				return ping(raw, pings, want)
			}
			return nil
		})
		if err == nil {
			t.Fatalf("round %d: the raw consumer's loop ended without an error", round)
		}
		legacyEventually(t, fmt.Sprintf("round %d: the member removed, t-0 at %d", round, want), func() (bool, string) {
			got := legacyOffsetsInZK(t, store, "g")[tp]
			return got == want && env.coord.Stats().Members == 0, fmt.Sprintf("t-0 at %d, %d members", got, env.coord.Stats().Members)
		})
	}
}
