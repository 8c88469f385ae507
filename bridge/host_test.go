package bridge_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// One goroutine owns a group, whatever its members' kinds (DESIGN §3): a mixed group with a
// Kafka member and a legacy member on one bridge has one goroutine that steps both kinds'
// events.
func TestIntegration_MixedGroupHasOneOwner(t *testing.T) {
	mc := newMixedCluster(t, "one-owner", map[string]int{"ta": 4})
	mc.legacyMember("l1")
	k1, _ := mc.kafkaMember("k1")
	mc.waitConverged(45*time.Second, 2, map[string]*kgo.Client{"k1": k1})
	if n := bridge.GroupOwners(mc.b.Bridge, "one-owner"); n != 1 {
		t.Errorf("%d goroutines own group one-owner, want 1", n)
	}
}

// The group's goroutine does not wait for ZooKeeper to read the group's mode: a Kafka JoinGroup
// in a legacy group reads the mode before it is refused (the watch may not have delivered a
// migration yet), and while that read waits for ZooKeeper the legacy members' events are still
// taken in.
func TestIntegration_HostServesLegacyWhileModeIsRead(t *testing.T) {
	t.Parallel()
	zk := &hostZK{t: t}
	// A session long enough that the bridge's ZooKeeper client does not give the muted
	// connection up during the test (it would, after two thirds of it, and answer every call).
	mc := newMixedClusterWith(t, "gate", map[string]int{"ta": 4}, zkstate.ModeLegacy, zk.via, func(c *bridge.Config) {
		c.ZKSessionTimeout = 12 * time.Second
	})
	mc.legacyMember("l1")
	stop2 := mc.legacyMember("l2")
	stop3 := mc.legacyMember("l3")
	mc.waitConverged(45*time.Second, 3, nil) // no rebalance in flight when ZooKeeper stalls
	if n := bridge.LegacyMembers(mc.b.Bridge); n != 3 {
		t.Fatalf("%d legacy members, want 3", n)
	}
	addr := mc.b.Addr().String()
	// The group's Kafka side is loaded and its mode known before ZooKeeper stalls.
	if code := hostWireJoin(addr, "gate"); code != 23 {
		t.Fatalf("JoinGroup in legacy mode: error %d, want INCONSISTENT_GROUP_PROTOCOL (23)", code)
	}

	zk.proxy.Mute()
	joined := make(chan int16, 1)
	go func() { joined <- hostWireJoin(addr, "gate") }()
	time.Sleep(300 * time.Millisecond) // the JoinGroup reaches the group (else the test can only pass)
	stop2()
	stop3()
	// Up to 6 s: a departure is taken in within milliseconds when the goroutine is free, and a
	// goroutine waiting for the mode waits until the unmute, while 6.3 s muted stays under the
	// two thirds of the session after which the client would give the connection up. (3 s
	// failed once in a full -race run of the package at load 7.)
	members := legacyMembersWithin(mc, 1, 6*time.Second)
	zk.proxy.Unmute()
	if members != 1 {
		t.Errorf("while the group's mode was being read, %d legacy members were left after two of three hung up (want 1): the group's goroutine waited for ZooKeeper", members)
	}
	if code := <-joined; code != 23 {
		t.Errorf("JoinGroup in legacy mode while ZooKeeper stalled: error %d, want INCONSISTENT_GROUP_PROTOCOL (23)", code)
	}
}

// The group's goroutine does not wait for ZooKeeper when the group's Kafka side ends: its
// claimer's leave (which waits for what the claimer is doing in ZooKeeper) runs on a goroutine
// of its own, and meanwhile the legacy members' events are still taken in. Here the Kafka side
// of a mixed group is unloaded, idle, while the claimer waits for a muted ZooKeeper to answer
// the legacy members' offset commits.
func TestIntegration_HostServesLegacyWhileKafkaSideEnds(t *testing.T) {
	t.Parallel()
	const idle = 8 * time.Second
	zk := &hostZK{t: t}
	// A session long enough that the bridge's ZooKeeper client keeps the muted connection (it
	// gives it up after two thirds of the session) and its lease (nine tenths).
	mc := newMixedClusterWith(t, "kafka-ends", map[string]int{"ta": 4}, zkstate.ModeMixed, zk.via, func(c *bridge.Config) {
		c.ZKSessionTimeout = 20 * time.Second
		c.GroupIdleTimeout = idle
	})
	mc.legacyMember("l1")
	stop2 := mc.legacyMember("l2")
	stop3 := mc.legacyMember("l3")
	k1, stopK1 := mc.kafkaMember("k1")
	mc.waitConverged(45*time.Second, 4, map[string]*kgo.Client{"k1": k1})
	stopK1()
	empty := time.Now() // the Kafka side is empty: it unloads idle from here
	mc.waitConverged(45*time.Second, 3, nil)
	if time.Since(empty) > idle-time.Second {
		t.Skipf("the legacy members took %v to settle: the Kafka side may have unloaded before ZooKeeper stalls", time.Since(empty))
	}

	// The claimer is soon stuck in a legacy member's offset commit (they commit at every ping).
	zk.proxy.Mute()
	time.Sleep(time.Until(empty.Add(idle + 500*time.Millisecond))) // the Kafka side unloads
	// Each waits for a ping to report its last offsets, then hangs up.
	go stop2()
	go stop3()
	members := legacyMembersWithin(mc, 1, 3*time.Second)
	zk.proxy.Unmute()
	if members != 1 {
		t.Errorf("while the Kafka side ended, %d legacy members were left after two of three hung up (want 1): the group's goroutine waited for ZooKeeper", members)
	}
	mc.waitConverged(45*time.Second, 1, nil)
}

// hostZK is the bridge's way to ZooKeeper through a zktest.Proxy (via, for
// newMixedClusterWith), and the proxy once the cluster is up.
type hostZK struct {
	t     *testing.T
	proxy *zktest.Proxy
}

func (z *hostZK) via(connect string) string {
	i := strings.IndexByte(connect, '/')
	if i < 0 {
		i = len(connect)
	}
	z.proxy = zktest.StartProxy(z.t, connect[:i])
	return z.proxy.Addr() + connect[i:]
}

// hostWireJoin sends a new member's JoinGroup v5 to addr and returns its error code (-1 when the
// round trip failed); it may run on any goroutine.
func hostWireJoin(addr, g string) int16 {
	resp, err := kafkaExchange(addr, wireJoin(g, "ta"), 20*time.Second)
	if err != nil {
		return -1
	}
	return resp.(*kmsg.JoinGroupResponse).ErrorCode
}

// legacyMembersWithin waits up to d for the bridge to count want legacy members, and returns
// the count then.
func legacyMembersWithin(mc *mixedCluster, want int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for bridge.LegacyMembers(mc.b.Bridge) != want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return bridge.LegacyMembers(mc.b.Bridge)
}
