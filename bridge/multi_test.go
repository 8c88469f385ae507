package bridge_test

// Several bridges as one service (issue 15): every bridge names the same coordinator for a
// group and lists the same brokers; a group lives on one bridge; a drained bridge (shutdown)
// hands its groups over and a bridge joining takes back those that map to it, both without a
// rebalance.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// multiLayout is one topic of 6 partitions led by broker 9001, which a bridge stands for, so
// that no client dials a broker that does not exist.
func multiLayout(t *testing.T, zk *zkstate.Store) {
	t.Helper()
	layout := zkstate.Layout{
		Brokers: []zkstate.BrokerRegistration{{ID: 9001, Version: 1, Host: "127.0.0.1", Port: 1, JMXPort: -1, Timestamp: "1"}},
		Topics:  map[string]zkstate.TopicAssignment{"orders": {Version: 1, Partitions: map[int32][]int32{}}},
		States:  map[zkstate.TopicPartition]zkstate.PartitionState{},
	}
	for p := range int32(6) {
		layout.Topics["orders"].Partitions[p] = []int32{9001}
		layout.States[zkstate.TopicPartition{Topic: "orders", Partition: p}] = zkstate.PartitionState{Version: 1, Leader: 9001, ISR: []int32{9001}}
	}
	if err := zkstate.LoadLayout(t.Context(), zk, layout); err != nil {
		t.Fatalf("LoadLayout: %v", err)
	}
}

// brokersOf asks addr for Metadata v1 and returns its brokers as "id@host:port", sorted.
func brokersOf(t *testing.T, addr string) []string {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(1)
	md := kafkaRoundTrip(t, addr, req).(*kmsg.MetadataResponse)
	var out []string
	for _, b := range md.Brokers {
		out = append(out, fmt.Sprintf("%d@%s", b.NodeID, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))))
	}
	slices.Sort(out)
	return out
}

// coordinatorsOf asks addr for the coordinators of groups, batched (v4) and one by one (v3),
// as "id@host:port"; it fails the test when the two disagree.
func coordinatorsOf(t *testing.T, addr string, groups []string) []string {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.SetVersion(4)
	req.CoordinatorKeys = groups
	c := kafkatest.Dial(t, addr)
	resp := c.RoundTrip(req).(*kmsg.FindCoordinatorResponse)
	var out []string
	for i, rc := range resp.Coordinators {
		got := fmt.Sprintf("%d@%s", rc.NodeID, net.JoinHostPort(rc.Host, strconv.Itoa(int(rc.Port))))
		one := kmsg.NewPtrFindCoordinatorRequest()
		one.SetVersion(3)
		one.CoordinatorKey = groups[i]
		r := c.RoundTrip(one).(*kmsg.FindCoordinatorResponse)
		if v3 := fmt.Sprintf("%d@%s", r.NodeID, net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))); v3 != got || rc.ErrorCode != 0 || r.ErrorCode != 0 {
			t.Errorf("%s: group %s: v4 says %s (error %d), v3 says %s (error %d)", addr, groups[i], got, rc.ErrorCode, v3, r.ErrorCode)
		}
		out = append(out, got)
	}
	return out
}

// ownedGroup returns the first group name prefix-<i> that placement gives owner among ids.
func ownedGroup(prefix string, owner int32, ids ...int32) string {
	for i := 0; ; i++ {
		if o, _ := placement.Owner(fmt.Sprintf("%s-%d", prefix, i), ids); o == owner {
			return fmt.Sprintf("%s-%d", prefix, i)
		}
	}
}

// epochOf reads the group's epoch; the zero Epoch when there is none.
func epochOf(ctx context.Context, zk *zkstate.Store, name string) zkstate.Epoch {
	d, _, err := zk.Get(ctx, zkstate.EpochPath(bridge.DefaultRoot, name))
	if err != nil {
		return zkstate.Epoch{}
	}
	e, _ := zkstate.ParseEpoch(d)
	return e
}

// groupRecord reads the group's record.
func groupRecord(ctx context.Context, zk *zkstate.Store, name string) (group.Record, error) {
	var rec group.Record
	d, _, err := zk.Get(ctx, zkstate.GroupRecordPath(bridge.DefaultRoot, name))
	if err != nil {
		return rec, err
	}
	err = json.Unmarshal(d, &rec)
	return rec, err
}

// childAndSurvivor is the setup of the tests that kill or pause a bridge: the topics of
// multiLayout, a bridge in a child process (node 9001, a 4 s session) and one in this process
// (9002), each listing both, and a group named prefix-<i> that the child owns.
type childAndSurvivor struct {
	zk      *zkstate.Store
	child   *childBridge
	surv    *running
	name    string
	session time.Duration
}

const childNode, survivorNode int32 = 9001, 9002

func startChildAndSurvivor(t *testing.T, prefix string) childAndSurvivor {
	t.Helper()
	connect := zktest.Connect(t)
	e := childAndSurvivor{zk: zktest.OpenStore(t, connect), session: 4 * time.Second}
	multiLayout(t, e.zk)
	e.name = ownedGroup(prefix, childNode, childNode, survivorNode)
	e.child = startChildBridge(t, childSpec{ZKConnect: connect, NodeID: childNode, ZKSessionTimeout: e.session})
	e.surv = startBridge(t, connect, survivorNode, nil)
	zktest.Eventually(t, 10*time.Second, "both bridges listed", func() (bool, string) {
		got := brokersOf(t, e.surv.Addr().String())
		return len(got) == 2, fmt.Sprint(got)
	})
	return e
}

func TestIntegration_SeveralBridgesOneService(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)

	ids := []int32{9001, 9002, 9003}
	bridges := map[int32]*running{}
	for _, id := range ids {
		bridges[id] = startBridge(t, connect, id, nil)
	}
	var want []string
	for _, id := range ids {
		want = append(want, fmt.Sprintf("%d@%s", id, bridges[id].Addr()))
	}
	// Metadata: every live bridge, at the address it advertises, from every bridge.
	for _, id := range ids {
		zktest.Eventually(t, 10*time.Second, fmt.Sprintf("bridge %d lists every bridge", id), func() (bool, string) {
			got := brokersOf(t, bridges[id].Addr().String())
			return slices.Equal(got, want), fmt.Sprint(got)
		})
	}

	// FindCoordinator: the same owner from every bridge, the one placement computes.
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("g-%d", i))
	}
	var expect []string
	for _, g := range names {
		o, _ := placement.Owner(g, ids)
		expect = append(expect, fmt.Sprintf("%d@%s", o, bridges[o].Addr()))
	}
	for _, id := range ids {
		if got := coordinatorsOf(t, bridges[id].Addr().String(), names); !slices.Equal(got, expect) {
			t.Errorf("bridge %d names coordinators %v, want %v", id, got, expect)
		}
	}

	// A group request on a bridge that does not own the group: NOT_COORDINATOR, nothing loaded.
	const name = "kg"
	owner, _ := placement.Owner(name, ids)
	for _, id := range ids {
		if id == owner {
			continue
		}
		if r := do[group.JoinReply](t, bridges[id], name, joinEvent("", "", "h", "orders")); r.Err != group.ErrNotCoordinator {
			t.Errorf("JoinGroup on non-owner %d = %v, want NOT_COORDINATOR", id, r.Err)
		}
	}

	// Static and dynamic kgo members that know every bridge form the group on its owner.
	var seeds []string
	for _, id := range ids {
		seeds = append(seeds, bridges[id].Addr().String())
	}
	newClient := func(opts ...kgo.Opt) *kgo.Client {
		base := append(kafkatest.KgoGroupOpts(name, "orders", seeds...),
			kgo.RetryTimeout(10*time.Second), kgo.MetadataMinAge(100*time.Millisecond))
		cl, _ := kafkatest.PollKgo(t, append(base, opts...)...)
		return cl
	}
	static := newClient(kgo.InstanceID("static-1"))
	newClient()

	stable := func(on *running) group.Description {
		t.Helper()
		var d group.Description
		zktest.Eventually(t, 20*time.Second, fmt.Sprintf("Stable with 2 members on bridge %v", on.Addr()), func() (bool, string) {
			r := describe(t, on, name)
			d = r.Group
			return r.Err == group.ErrNone && d.State == group.Stable && len(d.Members) == 2,
				fmt.Sprintf("%v %v gen %d, %d members", r.Err, d.State, d.Generation, len(d.Members))
		})
		return d
	}
	before := stable(bridges[owner])
	commitTo := func(off int64) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := kafkatest.KgoCommit(cctx, static, "orders", map[int32]int64{0: off}); err != nil {
			t.Fatalf("commit %d: %v", off, err)
		}
		if d, _, err := zk.Get(ctx, zkstate.OffsetPath(name, "orders", 0)); err != nil || string(d) != strconv.FormatInt(off, 10) {
			t.Fatalf("0.8 offset after committing %d = %q, %v", off, d, err)
		}
	}
	commitTo(17)

	// The owner shuts down: it deregisters and hands the group over; the member carries on
	// with the same generation on the group's next owner.
	survivors := slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return id == owner })
	next, _ := placement.Owner(name, survivors)
	ownerAddr := bridges[owner].Addr().String()
	if err := bridges[owner].stop(); err != nil {
		t.Fatalf("stopping the owner: %v", err)
	}
	after := stable(bridges[next])
	if after.Generation != before.Generation {
		t.Errorf("after the owner's shutdown generation %d, want %d (no rebalance)", after.Generation, before.Generation)
	}
	commitTo(18)
	for _, id := range survivors {
		if got, want := coordinatorsOf(t, bridges[id].Addr().String(), []string{name}), fmt.Sprintf("%d@%s", next, bridges[next].Addr()); got[0] != want {
			t.Errorf("bridge %d names %s the coordinator of %s, want %s", id, got[0], name, want)
		}
	}

	// The owner comes back (a rolling restart) at the address it had, as a restarted broker
	// does (clients keep a node's address until their next Metadata): the group maps to it
	// again and is handed back, still in the same generation.
	bridges[owner] = startBridge(t, connect, owner, func(c *bridge.Config) { c.KafkaListen = ownerAddr })
	back := stable(bridges[owner])
	if back.Generation != before.Generation {
		t.Errorf("after the owner's return generation %d, want %d (no rebalance)", back.Generation, before.Generation)
	}
	if r := describe(t, bridges[next], name); r.Err != group.ErrNotCoordinator {
		t.Errorf("Describe on the previous owner %d after the return = %v, want NOT_COORDINATOR", next, r.Err)
	}
	commitTo(19)
}

// A bridge killed with SIGKILL (a child process): when ZooKeeper expires its session its
// registration vanishes, and the survivor takes its groups over from the watch, without
// waiting for a client, restoring the generation; the static member carries on in it.
func TestIntegration_SeveralBridgesCrashFailover(t *testing.T) {
	ctx := t.Context()
	e := startChildAndSurvivor(t, "crash")
	zk, child, surv, name, session := e.zk, e.child, e.surv, e.name, e.session
	const dead, survivor = childNode, survivorNode

	cl, _ := kafkatest.PollKgo(t, append(kafkatest.KgoGroupOpts(name, "orders", child.addr, surv.Addr().String()),
		kgo.InstanceID("static-1"),
		kgo.SessionTimeout(20*time.Second),
		kgo.RetryTimeout(20*time.Second),
		kgo.MetadataMinAge(100*time.Millisecond))...)

	epoch := func() zkstate.Epoch { return epochOf(ctx, zk, name) }
	var gen int32
	zktest.Eventually(t, 20*time.Second, "group stable on the child", func() (bool, string) {
		rec, err := groupRecord(ctx, zk, name)
		if err != nil {
			return false, err.Error()
		}
		gen = int32(rec.Generation)
		// Not Rebalancing: the leader's assignment is persisted. A record written at the end of
		// the join phase is restored as a rebalance in progress, which a loaded run killed the
		// child in ("PreparingRebalance generation 1, want Stable").
		return epoch().NodeID == dead && len(rec.Members) == 1 && gen > 0 && !rec.Rebalancing,
			fmt.Sprintf("epoch %+v, gen %d, %d members, rebalancing %v", epoch(), gen, len(rec.Members), rec.Rebalancing)
	})

	killed := time.Now()
	child.kill()
	// The survivor holds the group's epoch with no request of ours to it.
	zktest.Eventually(t, session+5*time.Second, "the survivor takes the group over", func() (bool, string) {
		e := epoch()
		return e.NodeID == survivor, fmt.Sprintf("epoch %+v", e)
	})
	took := time.Since(killed)
	t.Logf("kill -9 to takeover: %v (session timeout %v)", took, session)
	if took > session+2*time.Second {
		t.Errorf("takeover %v after the kill, want within the session timeout %v + 1 s", took, session)
	}
	d := describe(t, surv, name).Group
	if d.State != group.Stable || int32(d.Generation) != gen || len(d.Members) != 1 {
		t.Fatalf("on the survivor: %v generation %d with %d members, want Stable generation %d (no rebalance)", d.State, d.Generation, len(d.Members), gen)
	}
	// The member carries on: its commits reach the survivor. kgo may first fail one on its
	// cached connection to the dead bridge ("unable to dial"); an application retries it.
	zktest.Eventually(t, 20*time.Second, "a commit after the failover", func() (bool, string) {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		commitErr := kafkatest.KgoCommit(cctx, cl, "orders", map[int32]int64{0: 5})
		return commitErr == nil, fmt.Sprint(commitErr)
	})
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath(name, "orders", 0)); err != nil || string(d) != "5" {
		t.Errorf("0.8 offset after the failover commit = %q, %v; want 5", d, err)
	}
	// Not asserted: kgo may still rejoin (and, as the leader, rebalance) when a heartbeat it kept
	// retrying against the dead bridge gives up; the takeover itself kept the generation.
	if d := describe(t, surv, name).Group; int32(d.Generation) != gen {
		t.Logf("generation %d after the commit (the client rejoined), was %d", d.Generation, gen)
	}
}

// A lease for every group (issue 15): a bridge cut from ZooKeeper stops answering its group
// before another bridge can take it over, so that no instant has two bridges both answering
// one group successfully. Here both the lease and the fence of a connection lost for the
// session timeout (coordinator.onSession) stop it in time; the paused bridge below needs the
// lease.
func TestIntegration_SeveralBridgesLeaseBeforeTakeover(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i]) // A's way to ZooKeeper (cut)

	const a, b int32 = 9001, 9002
	name := ownedGroup("lease", a, a, b)
	bridgeA := startBridge(t, proxy.Addr()+connect[i:], a, nil)
	bridgeB := startBridge(t, connect, b, nil)
	zktest.Eventually(t, 10*time.Second, "A sees B", func() (bool, string) {
		got := brokersOf(t, bridgeA.Addr().String())
		return len(got) == 2, fmt.Sprint(got)
	})
	stableGroup(t, bridgeA, name, [2]group.InstanceID{"i-a", "i-b"})

	holder := func() int32 {
		if e := epochOf(ctx, zk, name); e != (zkstate.Epoch{}) {
			return e.NodeID
		}
		return -1
	}
	if h := holder(); h != a {
		t.Fatalf("the group's epoch names %d, want A (%d)", h, a)
	}

	cut := time.Now()
	proxy.Freeze()
	var lastOK, takeover time.Time
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && takeover.IsZero() {
		hctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		r, err := bridgeA.Do(hctx, name, func(tok group.Token) group.Event {
			return group.Heartbeat{Token: tok, MemberID: "a", InstanceID: "i-a", Generation: 1}
		})
		cancel()
		if err == nil && r.(group.HeartbeatReply).Err == group.ErrNone {
			lastOK = time.Now()
		}
		if holder() == b {
			takeover = time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if takeover.IsZero() {
		t.Fatal("B did not take the group over within 20 s of the cut")
	}
	t.Logf("A answered its last heartbeat %v after the cut; B took the group over %v after it",
		lastOK.Sub(cut), takeover.Sub(cut))
	if !lastOK.Before(takeover) {
		t.Errorf("A answered a heartbeat at +%v, after B took the group over at +%v", lastOK.Sub(cut), takeover.Sub(cut))
	}
	if r := describe(t, bridgeB, name); r.Err != group.ErrNone || r.Group.Generation != 1 {
		t.Errorf("on B: %v generation %d, want generation 1", r.Err, r.Group.Generation)
	}
}

// The lease against a paused bridge (SIGSTOP): while it is stopped ZooKeeper expires its session
// and the other bridge takes its group over; when it runs again, a heartbeat that waited in its
// socket meanwhile is read before it hears of the expiry. It must not be answered as if the
// group were still its own: the lease lapsed while it was stopped. Its way to ZooKeeper is cut
// before it runs again: on a busy machine it could otherwise hear of the expiry, open a new
// session and take the group back (it maps to it) before reading the heartbeat, and then
// answer it rightly.
func TestIntegration_SeveralBridgesPausedOwnerAnswersNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connect := zktest.Connect(t)
	i := strings.IndexByte(connect, '/')
	proxy := zktest.StartProxy(t, connect[:i]) // the child's way to ZooKeeper
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)
	const session = 4 * time.Second
	name := ownedGroup("pause", childNode, childNode, survivorNode)
	child := startChildBridge(t, childSpec{ZKConnect: proxy.Addr() + connect[i:], NodeID: childNode, ZKSessionTimeout: session})
	surv := startBridge(t, connect, survivorNode, nil)
	zktest.Eventually(t, 10*time.Second, "both bridges listed", func() (bool, string) {
		got := brokersOf(t, surv.Addr().String())
		return len(got) == 2, fmt.Sprint(got)
	})
	const other = survivorNode

	// One static member forms the group on the child, then stops heartbeating (closed).
	_, stopMember := kafkatest.PollKgo(t, kgo.SeedBrokers(child.addr), kgo.ConsumerGroup(name), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.InstanceID("static-1"), kgo.SessionTimeout(30*time.Second),
		kgo.HeartbeatInterval(200*time.Millisecond))
	var rec group.Record
	zktest.Eventually(t, 20*time.Second, "group stable on the child", func() (bool, string) {
		var err error
		if rec, err = groupRecord(ctx, zk, name); err != nil {
			return false, err.Error()
		}
		return len(rec.Members) == 1 && rec.Generation > 0 && !rec.Rebalancing,
			fmt.Sprintf("gen %d, %d members, rebalancing %v", rec.Generation, len(rec.Members), rec.Rebalancing)
	})
	// Closing a static member sends no LeaveGroup: the group keeps it.
	stopMember()

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(3)
	hb.Group, hb.Generation, hb.MemberID = name, int32(rec.Generation), string(rec.Members[0].ID)
	hb.InstanceID = kmsg.StringPtr("static-1")
	wire := kafkatest.Dial(t, child.addr)
	if r := wire.RoundTrip(hb).(*kmsg.HeartbeatResponse); r.ErrorCode != 0 {
		t.Fatalf("heartbeat before the pause: error %d", r.ErrorCode)
	}

	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, session+10*time.Second, "the other bridge takes the group over", func() (bool, string) {
		e := epochOf(ctx, zk, name)
		return e.NodeID == other, fmt.Sprintf("epoch %+v", e)
	})
	wire.Send(hb) // waits in the stopped bridge's socket
	proxy.Freeze()
	defer proxy.Thaw()
	if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	_, resp := wire.Recv(int16(kmsg.Heartbeat), 3)
	if code := resp.(*kmsg.HeartbeatResponse).ErrorCode; code == 0 {
		t.Errorf("the resumed bridge answered a heartbeat of a group the other bridge took over")
	}
	if r := describe(t, surv, name); r.Err != group.ErrNone || r.Group.Generation != rec.Generation {
		t.Errorf("on the other bridge: %v generation %d, want generation %d", r.Err, r.Group.Generation, rec.Generation)
	}
}
