package bridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A group's life through the shell, against a real ZooKeeper: two members reach Stable, the
// record is in ZooKeeper before the SyncGroup replies (persist before reply), ownership is
// mirrored in the Kafka 0.8 layout, commits land in /consumers/<g>/offsets and are fetched back;
// then the bridge restarts and the static members carry on at the same generation with no
// rebalance (KIP-345 across a coordinator failover, issue 3 §6).
func TestIntegration_LifecycleAndRestart(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	b := startBridge(t, connect, 1, nil)
	zk := zktest.OpenStore(t, connect)
	insts := [2]group.InstanceID{"i-a", "i-b"}
	stableGroup(t, b, "billing", insts)

	// The record of generation 1, with both assignments, is in ZooKeeper.
	data, _, err := zk.Get(ctx, "/zkbridge/groups/billing/record")
	if err != nil {
		t.Fatalf("read record: %v", err)
	}
	var rec group.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatalf("decode record: %v", err)
	}
	if rec.Generation != 1 || rec.Leader != "a" || len(rec.Members) != 2 || rec.Rebalancing {
		t.Fatalf("record = gen %d leader %q %d members rebalancing %v, want gen 1, leader a, 2 members, not rebalancing",
			rec.Generation, rec.Leader, len(rec.Members), rec.Rebalancing)
	}
	for _, m := range rec.Members {
		if len(m.Assignment) == 0 {
			t.Errorf("record member %s has no assignment", m.ID)
		}
	}

	// Ownership in the 0.8 layout, readable by the 0.8 tooling's reader.
	var snap *zkstate.GroupSnapshot
	zktest.Eventually(t, 10*time.Second, "owners mirrored", func() (bool, string) {
		snap, err = zk.Snapshot(ctx, "billing")
		if err != nil {
			return false, err.Error()
		}
		return len(snap.Owners) == 6 && len(snap.Consumers) == 2, fmt.Sprintf("%d owners, %d consumers", len(snap.Owners), len(snap.Consumers))
	})
	checkMirror(t, snap)

	// Commits go to /consumers/<g>/offsets as decimal text, and come back with their metadata.
	r := commit(t, b, "billing", "a", "i-a", 1,
		group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 42, LeaderEpoch: 3, Metadata: "m0"},
		group.OffsetCommitPartition{Topic: "orders", Partition: 1, Offset: 7, LeaderEpoch: -1})
	for _, p := range r.Partitions {
		if p.Err != group.ErrNone {
			t.Fatalf("commit %s/%d: %v", p.Topic, p.Partition, p.Err)
		}
	}
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath("billing", "orders", 0)); err != nil || string(d) != "42" {
		t.Fatalf("%s = %q, %v; want \"42\"", zkstate.OffsetPath("billing", "orders", 0), d, err)
	}
	got, err := b.FetchOffsets(ctx, "billing", nil)
	if err != nil {
		t.Fatalf("FetchOffsets: %v", err)
	}
	want := []bridge.CommittedOffset{
		{Topic: "orders", Partition: 0, Offset: 42, LeaderEpoch: 3, Metadata: "m0"},
		{Topic: "orders", Partition: 1, Offset: 7, LeaderEpoch: -1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("FetchOffsets = %+v, want %+v", got, want)
	}
	if got, err := b.FetchOffsets(ctx, "billing", map[string][]int32{"orders": {1, 5}}); err != nil || !slices.Equal(got, want[1:]) {
		t.Fatalf("FetchOffsets(orders 1,5) = %+v, %v; want %+v", got, err, want[1:])
	}
	// A 0.8 consumer committing behind the bridge's back: the offset is theirs, the metadata no
	// longer belongs to it.
	if _, err := zk.Set(ctx, zkstate.OffsetPath("billing", "orders", 0), []byte("50"), -1); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.FetchOffsets(ctx, "billing", map[string][]int32{"orders": nil}); len(got) != 2 || got[0].Offset != 50 || got[0].Metadata != "" || got[0].LeaderEpoch != -1 {
		t.Fatalf("FetchOffsets after a 0.8 commit = %+v, want orders/0 at 50 without metadata", got)
	}

	groupsList, err := b.ListGroups(ctx)
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if !slices.Contains(groupsList, bridge.GroupListing{Group: "billing", ProtocolType: "consumer", State: "Stable"}) {
		t.Fatalf("ListGroups = %+v, want billing Stable", groupsList)
	}

	// Restart: a new bridge on the same ZooKeeper state, same node id.
	if err := b.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	b2 := startBridge(t, connect, 1, nil)
	for _, m := range []struct {
		id   group.MemberID
		inst group.InstanceID
	}{{"a", "i-a"}, {"b", "i-b"}} {
		if hb := heartbeat(t, b2, "billing", m.id, m.inst, 1); hb.Err != group.ErrNone {
			t.Fatalf("heartbeat of %s at generation 1 after restart = %v, want no error", m.id, hb.Err)
		}
	}
	d := describe(t, b2, "billing")
	if d.Group.State != group.Stable || d.Group.Generation != 1 || len(d.Group.Members) != 2 {
		t.Fatalf("after restart: %v generation %d with %d members, want Stable 1 with 2", d.Group.State, d.Group.Generation, len(d.Group.Members))
	}
	for _, m := range d.Group.Members {
		if len(m.Assignment) == 0 {
			t.Errorf("after restart member %s lost its assignment", m.MemberID)
		}
	}
	// The restored generation is mirrored again (the first bridge's ephemerals went with its
	// session).
	zktest.Eventually(t, 10*time.Second, "owners mirrored after restart", func() (bool, string) {
		snap, err = zk.Snapshot(ctx, "billing")
		if err != nil {
			return false, err.Error()
		}
		return len(snap.Owners) == 6 && len(snap.Consumers) == 2, fmt.Sprintf("%d owners, %d consumers", len(snap.Owners), len(snap.Consumers))
	})
	checkMirror(t, snap)
	if c := commit(t, b2, "billing", "b", "i-b", 1, group.OffsetCommitPartition{Topic: "orders", Partition: 3, Offset: 9, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit after restart: %v", c.Partitions[0].Err)
	}
}

// checkMirror checks the 0.8 mirror of stableGroup's assignment: exact 0.8 formats, every
// owner a thread of a registered consumer, a's partitions owned by a's consumer.
func checkMirror(t *testing.T, snap *zkstate.GroupSnapshot) {
	t.Helper()
	if len(snap.Problems) > 0 {
		t.Errorf("0.8 layout has problems: %v", snap.Problems)
	}
	owner := map[int32]string{}
	for tp, thread := range snap.Owners {
		cid, n, err := zkstate.ParseThreadID(thread)
		if err != nil || n != 0 {
			t.Errorf("owner of %v = %q: not <consumer>-0 (%v)", tp, thread, err)
			continue
		}
		c, ok := snap.Consumers[cid]
		if !ok {
			t.Errorf("owner of %v is %q, not a registered consumer", tp, cid)
			continue
		}
		if c.Registration.Subscription["orders"] != 1 || c.Registration.Pattern != zkstate.PatternStatic || c.EphemeralOwner == 0 {
			t.Errorf("registration of %s = %+v (ephemeral owner %x), want static {orders:1}, ephemeral", cid, c.Registration, c.EphemeralOwner)
		}
		if !strings.HasPrefix(cid, "billing_10.0.0.") {
			t.Errorf("consumer id %q, want billing_<client host>-<ms>-<hash>", cid)
		}
		owner[tp.Partition] = cid
	}
	if owner[0] != owner[1] || owner[1] != owner[2] || owner[3] != owner[4] || owner[4] != owner[5] || owner[0] == owner[3] {
		t.Errorf("owners %v do not follow the assignment a: 0-2, b: 3-5", owner)
	}
	if !strings.HasPrefix(owner[0], "billing_10.0.0.1-") {
		t.Errorf("partition 0 owned by %q, want a's consumer (host 10.0.0.1)", owner[0])
	}
}

// Fencing (DESIGN.md §4): bridge A serves a group; its registration vanishes (as when its
// session expires behind a partition) and bridge B takes the group over, continuing the same
// generation. A's next write carries a stale epoch: it fails as a whole, A fences the group
// and refuses the commit (NOT_COORDINATOR), and the offset A tried to write is not in ZooKeeper.
func TestIntegration_StaleEpochIsFenced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const a, b int32 = 9001, 9002
	// A session long enough that A's client keeps its connection while its answers are held.
	zk, proxy, h, s, name := twoBridgesOneProxied(t, "stale", func(c *bridge.Config) { c.ZKSessionTimeout = 15 * time.Second })
	if c := commit(t, h, name, "a", "i-a", 1, group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 10, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit on A: %v", c.Partitions[0].Err)
	}
	// While A is registered, B refuses the group.
	if d := describe(t, s, name); d.Err != group.ErrNotCoordinator {
		t.Fatalf("Describe on B while A lives = %v, want NOT_COORDINATOR", d.Err)
	}
	// A's registration goes, as its session's expiry takes it, while A hears nothing from
	// ZooKeeper (its answers held back): B takes the group, which A still holds in memory. (A
	// bridge that hears its registration was deleted in its living session fences its groups
	// and registers again: TestIntegration_SeveralBridgesRegistrationDeletedByAnotherClient.)
	regPath := zkstate.BridgePath(bridge.DefaultRoot, a)
	proxy.Mute()
	muted := true
	defer func() {
		if muted {
			proxy.Unmute()
		}
	}()
	if err := zk.Delete(ctx, regPath, -1); err != nil {
		t.Fatalf("delete A's registration: %v", err)
	}
	zktest.Eventually(t, 10*time.Second, "B's refusal of the group expired", func() (bool, string) {
		// What a client retries: B refusing (NOT_COORDINATOR) or loading the group.
		d := describe(t, s, name)
		return d.Err != group.ErrNotCoordinator && d.Err != group.ErrCoordinatorNotAvailable, d.Err.String()
	})
	if d := describe(t, s, name); d.Err != group.ErrNone || d.Group.State != group.Stable || d.Group.Generation != 1 {
		t.Fatalf("Describe on B after the takeover = %+v, want Stable generation 1", d)
	}
	if e := epochOf(ctx, zk, name); e.NodeID != b || e.Released {
		t.Fatalf("the group's epoch after the takeover: %+v, want B's", e)
	}

	// A, stale, commits: its write reaches ZooKeeper and fails on the epoch B took; A is told
	// once it hears again.
	type result struct {
		r   group.Reply
		err error
	}
	stale := make(chan result, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		r, err := h.Do(rctx, name, func(tok group.Token) group.Event {
			return group.OffsetCommit{Token: tok, MemberID: "a", InstanceID: "i-a", Generation: 1,
				Offsets: []group.OffsetCommitPartition{{Topic: "orders", Partition: 0, Offset: 99, LeaderEpoch: -1}}}
		})
		stale <- result{r, err}
	}()
	time.Sleep(300 * time.Millisecond) // the commit's write on its way
	proxy.Unmute()
	muted = false
	res := <-stale
	if c, ok := res.r.(group.OffsetCommitReply); res.err != nil || !ok || c.Partitions[0].Err != group.ErrNotCoordinator {
		t.Fatalf("commit on stale A = %+v, %v; want NOT_COORDINATOR", res.r, res.err)
	}
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath(name, "orders", 0)); err != nil || string(d) != "10" {
		t.Fatalf("offset after the fenced commit = %q, %v; want 10", d, err)
	}
	// A registers again and the group, which maps to A, comes back to it at its generation; one
	// bridge answers it at a time.
	zktest.Eventually(t, 20*time.Second, "A serves the group again", func() (bool, string) {
		hb := heartbeat(t, h, name, "a", "i-a", 1)
		e := epochOf(ctx, zk, name)
		return hb.Err == group.ErrNone && e.NodeID == a && !e.Released, fmt.Sprintf("%v %+v", hb.Err, e)
	})
	if hb := heartbeat(t, s, name, "a", "i-a", 1); hb.Err != group.ErrNotCoordinator {
		t.Fatalf("heartbeat on B once A holds the group again = %v, want NOT_COORDINATOR", hb.Err)
	}
	if c := commit(t, h, name, "a", "i-a", 1, group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 11, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit on A: %v", c.Partitions[0].Err)
	}
}

// Offsets never move backwards because of a stale member: after a rebalance to generation 2,
// a member still at generation 1 is refused (ILLEGAL_GENERATION, Kafka's validateOffsetCommit)
// and a member dropped by the rebalance too (UNKNOWN_MEMBER_ID); the znode keeps generation
// 2's offset.
func TestIntegration_StaleMemberCannotRewindOffsets(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	b := startBridge(t, connect, 1, nil)
	zk := zktest.OpenStore(t, connect)
	stableGroup(t, b, "g", [2]group.InstanceID{"", ""})
	if c := commit(t, b, "g", "b", "", 1, group.OffsetCommitPartition{Topic: "orders", Partition: 3, Offset: 100, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit at generation 1: %v", c.Partitions[0].Err)
	}

	// c joins; a rejoins; b does not and is dropped when the rebalance timeout ends.
	joins := joinAll(t, b, "g",
		joinEvent("c", "", "10.0.0.3", "orders"),
		func(tok group.Token) group.Event {
			ev := joinEvent("", "", "10.0.0.1", "orders")(tok).(group.JoinGroup)
			ev.MemberID = "a"
			return ev
		})
	for i, j := range joins {
		if j.Err != group.ErrNone || j.Generation != 2 {
			t.Fatalf("join %d = %+v, want generation 2", i, j)
		}
	}
	syncs := syncAll(t, b, "g", 2, []group.MemberID{"a", "c"}, []group.InstanceID{"", ""}, map[group.MemberID][]byte{
		"a": assignment("orders", 0, 1, 2), "c": assignment("orders", 3, 4, 5),
	})
	for i, s := range syncs {
		if s.Err != group.ErrNone {
			t.Fatalf("sync %d: %v", i, s.Err)
		}
	}
	if c := commit(t, b, "g", "c", "", 2, group.OffsetCommitPartition{Topic: "orders", Partition: 3, Offset: 200, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit at generation 2: %v", c.Partitions[0].Err)
	}
	for _, tc := range []struct {
		member group.MemberID
		gen    group.Generation
		want   group.ErrorCode
	}{
		{"a", 1, group.ErrIllegalGeneration},
		{"b", 1, group.ErrUnknownMemberID},
	} {
		c := commit(t, b, "g", tc.member, "", tc.gen, group.OffsetCommitPartition{Topic: "orders", Partition: 3, Offset: 50, LeaderEpoch: -1})
		if c.Partitions[0].Err != tc.want {
			t.Errorf("commit of %s at generation %d = %v, want %v", tc.member, tc.gen, c.Partitions[0].Err, tc.want)
		}
	}
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath("g", "orders", 3)); err != nil || string(d) != "200" {
		t.Fatalf("offset = %q, %v; want 200", d, err)
	}
	// The 0.8 mirror follows generation 2: b's registration is gone, c owns 3-5.
	zktest.Eventually(t, 10*time.Second, "generation 2 mirrored", func() (bool, string) {
		snap, err := zk.Snapshot(ctx, "g")
		if err != nil {
			return false, err.Error()
		}
		for id := range snap.Consumers {
			if strings.HasPrefix(id, "g_10.0.0.2-") {
				return false, "b still registered"
			}
		}
		return strings.HasPrefix(snap.Owners[zkstate.TopicPartition{Topic: "orders", Partition: 3}], "g_10.0.0.3-") && len(snap.Consumers) == 2,
			fmt.Sprintf("owners %v", snap.Owners)
	})
}

// What the shell answers itself: names ZooKeeper cannot hold, groups that do not exist, and
// the deletion of an Empty group with its offsets (Kafka's DeleteGroups).
func TestIntegration_ShellAnswers(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	b := startBridge(t, connect, 1, nil)
	zk := zktest.OpenStore(t, connect)

	if r := heartbeat(t, b, "a/b", "m", "", 1); r.Err != 24 {
		t.Errorf("heartbeat in group a/b = %v, want INVALID_GROUP_ID", r.Err)
	}
	if d := describe(t, b, "nobody"); d.Err != group.ErrNone || d.Group.State != group.Dead {
		t.Errorf("Describe of an unknown group = %+v, want Dead", d)
	}
	if ok, _, _ := zk.Exists(ctx, "/zkbridge/groups/nobody"); ok {
		t.Errorf("describing an unknown group created it")
	}
	del := do[group.DeleteReply](t, b, "nobody", func(tok group.Token) group.Event { return group.Delete{Token: tok} })
	if del.Err != group.ErrGroupIDNotFound {
		t.Errorf("Delete of an unknown group = %v, want GROUP_ID_NOT_FOUND", del.Err)
	}

	// A simple consumer (no group management) commits into an Empty group; an entry ZooKeeper
	// cannot hold is refused alone.
	c := commit(t, b, "simple", "", "", group.NoGeneration,
		group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 5, LeaderEpoch: -1},
		group.OffsetCommitPartition{Topic: "bad/topic", Partition: 0, Offset: 5, LeaderEpoch: -1},
		group.OffsetCommitPartition{Topic: "orders", Partition: 1, Offset: 6, LeaderEpoch: -1})
	wantErrs := []group.ErrorCode{group.ErrNone, 3, group.ErrNone}
	for i, p := range c.Partitions {
		if p.Err != wantErrs[i] {
			t.Errorf("commit partition %d (%s/%d) = %v, want %v", i, p.Topic, p.Partition, p.Err, wantErrs[i])
		}
	}
	if got, _ := b.FetchOffsets(ctx, "simple", nil); len(got) != 2 {
		t.Fatalf("FetchOffsets(simple) = %+v, want 2 offsets", got)
	}
	if d := describe(t, b, "simple"); d.Group.State != group.Empty {
		t.Errorf("Describe(simple) = %v, want Empty", d.Group.State)
	}
	del = do[group.DeleteReply](t, b, "simple", func(tok group.Token) group.Event { return group.Delete{Token: tok} })
	if del.Err != group.ErrNone {
		t.Fatalf("Delete(simple) = %v", del.Err)
	}
	if got, err := b.FetchOffsets(ctx, "simple", nil); err != nil || len(got) != 0 {
		t.Errorf("FetchOffsets after delete = %+v, %v; want none", got, err)
	}
	if ok, _, _ := zk.Exists(ctx, zkstate.GroupPath("simple")); ok {
		t.Errorf("%s still exists after the group was deleted", zkstate.GroupPath("simple"))
	}
	if d := describe(t, b, "simple"); d.Group.State != group.Dead {
		t.Errorf("Describe after delete = %v, want Dead", d.Group.State)
	}
	if _, err := b.Do(ctx, "g", func(group.Token) group.Event { return group.Tick{} }); err == nil {
		t.Errorf("Do(Tick) succeeded; only requests may go through Do")
	}
	if _, err := b.FetchOffsets(ctx, "a/b", nil); !errors.Is(err, newproto.ErrInvalidGroupID) {
		t.Errorf("FetchOffsets(a/b) = %v, want INVALID_GROUP_ID", err)
	}
}

// Run is the daemon's whole life: it serves the admin endpoints and Metadata from /brokers
// while running, and returns after ctx ends with every goroutine it started gone.
func TestIntegration_RunServesAndStopsCleanly(t *testing.T) {
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	if err := zkstate.LoadLayout(ctx, zk, zkstate.ExampleLayout()); err != nil {
		t.Fatalf("LoadLayout: %v", err)
	}
	zk.Close()
	b := startBridge(t, connect, 9000, nil)
	admin := "http://" + b.AdminAddr().String()

	if code, body := httpGet(t, admin+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d %q", code, body)
	}
	// Ready once the bridge's registration exists (a round trip after start).
	zktest.Eventually(t, 10*time.Second, "/readyz", func() (bool, string) {
		code, body := httpGet(t, admin+"/readyz")
		return code == 200, fmt.Sprint(code, body)
	})
	if c := commit(t, b, "billing", "", "", group.NoGeneration, group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 1300, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit: %v", c.Partitions[0].Err)
	}
	code, body := httpGet(t, admin+"/metrics")
	for _, want := range []string{
		`zkbridge_groups_requests_total{event="offset_commit"} 1`,
		`zkbridge_groups_writes_total{result="ok"} 1`,
		"zkbridge_groups_offsets_committed_total 1",
		"zkbridge_zookeeper_connected 1",
		"zkbridge_kafka_connections_open",
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	// The commit was one multi; every kind of ZooKeeper request is exported, counted.
	for _, kind := range zkstate.RequestKinds {
		m := regexp.MustCompile(`(?m)^zkbridge_zk_requests_total\{kind="` + kind + `"\} (\d+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Errorf("/metrics lacks zkbridge_zk_requests_total{kind=%q}", kind)
		} else if n, _ := strconv.Atoi(m[1]); kind == zkstate.ReqMulti && n < 1 {
			t.Errorf("zkbridge_zk_requests_total{kind=\"multi\"} = %d after a commit, want ≥ 1", n)
		}
	}

	// Metadata: the example's three brokers plus our node, topics with leaders from their
	// partition state.
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(1)
	md := kafkaRoundTrip(t, b.Addr().String(), req).(*kmsg.MetadataResponse)
	var nodes []int32
	for _, br := range md.Brokers {
		nodes = append(nodes, br.NodeID)
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []int32{1, 2, 3, 9000}) {
		t.Errorf("Metadata brokers = %v, want 1 2 3 9000", nodes)
	}
	leaders := map[string]int{}
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			if p.ErrorCode == 0 && p.Leader > 0 {
				leaders[*tp.Topic]++
			}
		}
	}
	if leaders["orders"] != 6 || leaders["payments"] != 4 {
		t.Errorf("Metadata partitions with a leader = %v, want orders 6, payments 4", leaders)
	}
	// ListGroups sees the example's 0.8 group (the persistent registrations of the demo count
	// as registered consumers).
	list, err := b.ListGroups(ctx)
	if err != nil || !slices.Contains(list, bridge.GroupListing{Group: "billing", State: "Stable"}) {
		t.Errorf("ListGroups = %+v, %v; want the 0.8 group billing", list, err)
	}

	start := time.Now()
	if err := b.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("shutdown took %v", took)
	}
	if r, err := b.Do(ctx, "billing", func(tok group.Token) group.Event { return group.Describe{Token: tok} }); err != nil || r.(group.DescribeReply).Err != group.ErrNotCoordinator {
		t.Errorf("Do after Run = %+v, %v; want NOT_COORDINATOR", r, err)
	}
	checkNoLeaks(t)
}

// A ZooKeeper that goes away: readiness fails, requests are answered with the errors clients
// retry (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE), nothing panics, and Run still stops.
func TestIntegration_ZooKeeperGoesAway(t *testing.T) {
	t.Parallel()
	srv := zktest.StartServer(t)
	connect := srv.Addr + "/gone"
	b := startBridge(t, connect, 1, func(c *bridge.Config) {
		c.ZKSessionTimeout = 2 * time.Second
		c.WriteTimeout = time.Second
	})
	ctx := t.Context()
	stableGroup(t, b, "g", [2]group.InstanceID{"i-a", "i-b"})
	admin := "http://" + b.AdminAddr().String()

	if err := srv.Stop(); err != nil {
		t.Fatalf("stop ZooKeeper: %v", err)
	}
	zktest.Eventually(t, 10*time.Second, "/readyz fails", func() (bool, string) {
		code, body := httpGet(t, admin+"/readyz")
		return code == 503 && strings.Contains(body, "zookeeper"), fmt.Sprint(code, body)
	})
	if code, _ := httpGet(t, admin+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d while ZooKeeper is away, want 200 (the process is fine)", code)
	}
	retriable := []group.ErrorCode{group.ErrNotCoordinator, group.ErrCoordinatorNotAvailable}
	c := commit(t, b, "g", "a", "i-a", 1, group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 1, LeaderEpoch: -1})
	if !slices.Contains(retriable, c.Partitions[0].Err) {
		t.Errorf("commit without ZooKeeper = %v, want NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE", c.Partitions[0].Err)
	}
	j := do[group.JoinReply](t, b, "other", joinEvent("x", "", "10.0.0.9", "orders"))
	if !slices.Contains(retriable, j.Err) {
		t.Errorf("join of a new group without ZooKeeper = %v, want a retriable coordinator error", j.Err)
	}
	// Once the session is as good as expired, every group is fenced.
	zktest.Eventually(t, 10*time.Second, "group fenced", func() (bool, string) {
		hb := heartbeat(t, b, "g", "a", "i-a", 1)
		return slices.Contains(retriable, hb.Err), hb.Err.String()
	})
	if _, err := b.FetchOffsets(ctx, "g", nil); !errors.Is(err, newproto.ErrCoordinatorNotAvailable) {
		t.Errorf("FetchOffsets without ZooKeeper = %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
	if err := b.stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
}

// The Groups contract with a context that ends: Do returns the context's error.
func TestIntegration_DoHonoursContext(t *testing.T) {
	t.Parallel()
	b := startBridge(t, zktest.Connect(t), 1, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	// A lone JoinGroup is parked for the initial rebalance delay (300ms).
	_, err := b.Do(ctx, "g", joinEvent("a", "", "h", "orders"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with a short deadline = %v, want DeadlineExceeded", err)
	}
}
