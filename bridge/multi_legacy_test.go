package bridge_test

// Legacy consumers (seed 001) across several bridges (issue 15, build item 7): Consult names
// the group's owner, brokers_info lists the live bridges, a clean handover moves the group's
// consumers to the new owner with one Stop/Start round.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// legacyRound is a legacy.Handler that counts its Starts and keeps the last one.
type legacyRound struct {
	mu     sync.Mutex
	starts int
	parts  []legacy.PartitionOffset
}

func (r *legacyRound) OnStop() {}
func (r *legacyRound) OnStart(parts []legacy.PartitionOffset) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	r.parts = slices.Clone(parts)
	return nil
}

func (r *legacyRound) state() (int, []legacy.PartitionOffset) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts, r.parts
}

// legacyExchange sends req on a new connection to addr and returns the answer (nil when the
// bridge answers nothing before closing).
func legacyExchange(t *testing.T, addr string, req legacy.Message) legacy.Message {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(legacy.AppendFrame(nil, req)); err != nil {
		t.Fatal(err)
	}
	frame, err := legacy.ReadFrame(nc, 0)
	if err != nil {
		t.Fatalf("%s: no answer to %v: %v", addr, req.Type(), err)
	}
	m, err := legacy.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func brokersInfo(bs []legacy.Broker) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = fmt.Sprintf("%d@%s", b.ID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	}
	return out
}

// hostedBy returns the node that hosts each of ids in group (hosted-member znodes), -1 for none.
func hostedBy(t *testing.T, zk *zkstate.Store, group string, ids ...string) []int32 {
	t.Helper()
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = -1
		data, _, err := zk.Get(t.Context(), zkstate.HostedMemberPath(bridge.DefaultRoot, group, id))
		if err != nil {
			continue
		}
		if h, err := zkstate.ParseHostedMember(data); err == nil {
			out[i] = h.Node
		}
	}
	return out
}

func TestIntegration_SeveralBridgesLegacyConsumers(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	if err := zkstate.LoadLayout(t.Context(), zk, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}, 2: {1}, 3: {1}}},
	}}); err != nil {
		t.Fatal(err)
	}
	withLegacy := func(c *bridge.Config) { c.LegacyListen = "127.0.0.1:0" }
	a := startBridge(t, connect, 9001, withLegacy)
	b := startBridge(t, connect, 9002, withLegacy)
	ids := []int32{9001, 9002}
	name := ""
	for i := 0; name == ""; i++ {
		if owner, _ := placement.Owner(fmt.Sprintf("old-app-%d", i), ids); owner == 9001 {
			name = fmt.Sprintf("old-app-%d", i)
		}
	}
	aAddr, bAddr := a.LegacyAddr().String(), b.LegacyAddr().String()
	wantBrokers := []string{"9001@" + aAddr, "9002@" + bAddr}

	// Every bridge names the owner, A, for the group and lists both bridges.
	zktest.Eventually(t, 10*time.Second, "every bridge names A and lists both bridges", func() (bool, string) {
		for _, addr := range []string{aAddr, bAddr} {
			r := legacyExchange(t, addr, &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse)
			if r.ErrorCode != legacy.CodeNone || r.CoordinatorID != 9001 || !slices.Equal(brokersInfo(r.Brokers), wantBrokers) {
				return false, fmt.Sprintf("%s answers %v coordinator %d brokers %v", addr, r.ErrorCode, r.CoordinatorID, brokersInfo(r.Brokers))
			}
		}
		return true, ""
	})
	// A Register on B, which does not coordinate the group, is refused NOT_COORDINATOR.
	reg := &legacy.RegisterRequest{GroupID: name, ConsumerID: "stray", AutoOffsetReset: legacy.ResetSmallest,
		PingIntervalMs: 500, MaxPingRetries: 3, Subscription: []legacy.TopicThreads{{Topic: "events", Threads: 1}}}
	if r, ok := legacyExchange(t, bAddr, reg).(*legacy.RegisterResponse); !ok || r.ErrorCode != legacy.CodeNotCoordinator {
		t.Fatalf("Register on B: %+v, want NOT_COORDINATOR", r)
	}

	// Two consumers that know only B: they consult B, which sends them to A. c2 comes back
	// later than c1 after losing its coordinator (a longer backoff), as consumers do.
	consumers := []string{"c1", "c2"}
	backoff := []time.Duration{0, 600 * time.Millisecond}
	rounds := make([]*legacyRound, len(consumers))
	for i, id := range consumers {
		rounds[i] = &legacyRound{}
		cl, err := legacy.NewClient(legacy.ClientConfig{
			Brokers: []string{bAddr}, GroupID: name, ConsumerID: id,
			Subscription: map[string]int{"events": 1}, AutoOffsetReset: legacy.ResetSmallest,
			PingInterval: 500 * time.Millisecond, MaxPingRetries: 3, Handler: rounds[i], Logger: newLogger(t),
			BackoffMin: backoff[i],
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cl.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
	}
	// settled waits until both consumers are started on disjoint halves of events, hosted by
	// node, and returns their Start counts.
	settled := func(node int32) []int {
		t.Helper()
		var starts []int
		zktest.Eventually(t, 20*time.Second, fmt.Sprintf("both consumers started, hosted by %d", node), func() (bool, string) {
			starts = starts[:0]
			seen := map[int32]bool{}
			for _, r := range rounds {
				n, parts := r.state()
				starts = append(starts, n)
				for _, p := range parts {
					seen[p.Partition] = true
				}
				if len(parts) != 2 {
					return false, fmt.Sprintf("a consumer has %d partitions", len(parts))
				}
			}
			if len(seen) != 4 {
				return false, fmt.Sprintf("partitions started: %v", seen)
			}
			if h := hostedBy(t, zk, name, consumers...); h[0] != node || h[1] != node {
				return false, fmt.Sprintf("hosted by %v", h)
			}
			snap, err := zk.Snapshot(t.Context(), name)
			if err != nil || len(snap.Owners) != 4 {
				return false, fmt.Sprintf("owner znodes %v (%v)", snap.Owners, err)
			}
			return true, ""
		})
		return slices.Clone(starts)
	}
	before := settled(9001)

	// A drains (SIGTERM): the group moves to B, and each consumer is started once there.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	after := settled(9002)
	for i := range consumers {
		if got := after[i] - before[i]; got != 1 {
			t.Errorf("consumer %s was started %d times by the handover, want 1 (one Stop/Start round)", consumers[i], got)
		}
	}
	if r := legacyExchange(t, bAddr, &legacy.ConsultRequest{GroupID: name}).(*legacy.ConsultResponse); r.CoordinatorID != 9002 ||
		!slices.Equal(brokersInfo(r.Brokers), wantBrokers[1:]) {
		t.Errorf("after A left, B answers coordinator %d brokers %v", r.CoordinatorID, brokersInfo(r.Brokers))
	}
}
