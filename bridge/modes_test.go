package bridge_test

// Group modes (issue 5 item 1) through the whole daemon, against a real ZooKeeper: defaults,
// what each mode admits, changes written by another process, the finalized mirror. Helpers of
// this file start with "mode": package bridge_test is shared.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

const modeRoot = bridge.DefaultRoot

// modeRead reads a group's mode record, failing the test when there is none.
func modeRead(t *testing.T, zk *zkstate.Store, g string) (zkstate.ModeRecord, int32) {
	t.Helper()
	rec, v, ok, err := zkstate.ReadMode(t.Context(), zk, modeRoot, g)
	if err != nil || !ok {
		t.Fatalf("ReadMode(%s) = %v, %v; want a record", g, ok, err)
	}
	return rec, v
}

// modeSet moves a group one step, as an operator's `zkbridge migrate` would, from another
// ZooKeeper session than the bridge's.
func modeSet(t *testing.T, zk *zkstate.Store, g string, to zkstate.Mode) {
	t.Helper()
	rec, v := modeRead(t, zk, g)
	if _, err := zkstate.SetMode(t.Context(), zk, modeRoot, g, rec.Mode, to, "test-operator", v); err != nil {
		t.Fatalf("SetMode(%s, %s → %s): %v", g, rec.Mode, to, err)
	}
}

// modeWireJoin sends a new consumer's JoinGroup v5 over the Kafka wire. In a group that admits
// Kafka members a new member of v4+ is answered MEMBER_ID_REQUIRED (79) at once; in a legacy
// group INCONSISTENT_GROUP_PROTOCOL (23).
func modeWireJoin(t *testing.T, addr, g string) *kmsg.JoinGroupResponse {
	t.Helper()
	return kafkaRoundTrip(t, addr, wireJoin(g, "orders")).(*kmsg.JoinGroupResponse)
}

func modeMetrics(t *testing.T, b *running) string {
	t.Helper()
	_, body := httpGet(t, "http://"+b.AdminAddr().String()+"/metrics")
	return body
}

// Issue 5 item 1: "A group with no mode yet is legacy when /consumers/<g> already holds ids,
// owners or offsets, else kafka" — and, since the bridge's own mirror writes /consumers/<g> for
// Kafka groups, the default is persisted the first time the bridge serves the group, so that a
// served Kafka group stays kafka (also across a restart, and for groups served before modes
// existed).
func TestIntegration_ModeDefaults(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	if err := zk.Create(ctx, zkstate.OffsetPath("old", "orders", 0), []byte("5"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, 1, nil)

	// A group with 0.8 offsets: legacy, and a Kafka JoinGroup is refused with 23.
	if r := modeWireJoin(t, b.Addr().String(), "old"); r.ErrorCode != 23 {
		t.Fatalf("JoinGroup of a group with 0.8 offsets: error %d, want INCONSISTENT_GROUP_PROTOCOL (23)", r.ErrorCode)
	}
	if rec, _ := modeRead(t, zk, "old"); rec.Mode != zkstate.ModeLegacy || rec.From != "" || !strings.HasPrefix(rec.UpdatedBy, "zkbridge-1@") {
		t.Fatalf("mode of old = %+v, want legacy persisted by zkbridge-1", rec)
	}
	if body := modeMetrics(t, b); !strings.Contains(body, `zkbridge_groups_mode_refusals_total{request="kafka_join"} 1`) {
		t.Errorf("/metrics does not count the refused join")
	}

	// An empty group: kafka, persisted with why.
	insts := [2]group.InstanceID{"i-a", "i-b"}
	stableGroup(t, b, "served", insts)
	rec, _ := modeRead(t, zk, "served")
	if rec.Mode != zkstate.ModeKafka {
		t.Fatalf("mode of a new group = %+v, want kafka", rec)
	}
	trs, err := zkstate.ReadTransitions(ctx, zk, modeRoot, "served")
	if err != nil || len(trs) != 1 || trs[0].To != zkstate.ModeKafka || !strings.Contains(trs[0].Reason, "holds no ids, owners or offsets") {
		t.Fatalf("transitions of served = %+v, %v; want the default, with why", trs, err)
	}

	// The mirror now fills /consumers/served: the rule alone would say legacy.
	if c := commit(t, b, "served", "a", "i-a", 1, group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 9, LeaderEpoch: -1}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit: %v", c.Partitions[0].Err)
	}
	zktest.Eventually(t, 10*time.Second, "mirror written", func() (bool, string) {
		ids, _, err := zk.Children(ctx, zkstate.IDsPath("served"))
		return err == nil && len(ids) == 2, fmt.Sprint(ids, err)
	})
	if m, _, err := zkstate.DefaultMode(ctx, zk, "served"); err != nil || m != zkstate.ModeLegacy {
		t.Fatalf("DefaultMode(served) = %s, %v; the test needs the rule to say legacy now", m, err)
	}

	// ... yet a restarted bridge keeps it kafka: the members carry on.
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	b = startBridge(t, connect, 1, nil)
	if hb := heartbeat(t, b, "served", "a", "i-a", 1); hb.Err != group.ErrNone {
		t.Fatalf("heartbeat after restart = %v, want no error", hb.Err)
	}

	// A group the bridge served before group modes existed (a record, no mode): kafka.
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	if err := zk.DeleteRecursive(ctx, zkstate.TransitionsPath(modeRoot, "served")); err != nil {
		t.Fatal(err)
	}
	if err := zk.Delete(ctx, zkstate.ModePath(modeRoot, "served"), -1); err != nil {
		t.Fatal(err)
	}
	b = startBridge(t, connect, 1, nil)
	if hb := heartbeat(t, b, "served", "b", "i-b", 1); hb.Err != group.ErrNone {
		t.Fatalf("heartbeat after the upgrade = %v, want no error", hb.Err)
	}
	if rec, _ := modeRead(t, zk, "served"); rec.Mode != zkstate.ModeKafka {
		t.Fatalf("mode after the upgrade = %+v, want kafka", rec)
	}
	if trs, _ := zkstate.ReadTransitions(ctx, zk, modeRoot, "served"); len(trs) != 1 || !strings.Contains(trs[0].Reason, "before group modes existed") {
		t.Fatalf("transitions after the upgrade = %+v, want the default with its reason", trs)
	}
}

// A mode change written by another process takes effect within a second: kafka → mixed keeps
// the members, mixed → legacy makes them rejoin (REBALANCE_IN_PROGRESS) and refuses their
// JoinGroup (23), removing them from the group; legacy → mixed admits Kafka members again.
func TestIntegration_ModeChangeTakesEffectWithinASecond(t *testing.T) {
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	b := startBridge(t, connect, 1, nil)
	addr := b.Addr().String()
	stableGroup(t, b, "g", [2]group.InstanceID{"i-a", "i-b"})

	// Mixed mode: the bridge assigns the partitions from now on (issue 5 item 3), so the members
	// must rejoin.
	modeSet(t, zk, "g", zkstate.ModeMixed)
	zktest.Eventually(t, time.Second, "heartbeat in mixed mode answered REBALANCE_IN_PROGRESS", func() (bool, string) {
		hb := heartbeat(t, b, "g", "a", "i-a", 1)
		return hb.Err == group.ErrRebalanceInProgress, hb.Err.String()
	})
	if r := modeWireJoin(t, addr, "g"); r.ErrorCode != 79 {
		t.Fatalf("new member's JoinGroup in mixed mode: error %d, want MEMBER_ID_REQUIRED (79)", r.ErrorCode)
	}

	// Rollback to legacy under the members' feet.
	modeSet(t, zk, "g", zkstate.ModeLegacy)
	changed := time.Now()
	zktest.Eventually(t, time.Second, "a new member refused with 23", func() (bool, string) {
		r := modeWireJoin(t, addr, "g")
		return r.ErrorCode == 23, fmt.Sprint("error ", r.ErrorCode)
	})
	t.Logf("legacy mode took effect %v after the write", time.Since(changed).Round(time.Millisecond))
	if hb := heartbeat(t, b, "g", "a", "i-a", 1); hb.Err != group.ErrRebalanceInProgress {
		t.Fatalf("heartbeat of a member in legacy mode = %v, want REBALANCE_IN_PROGRESS", hb.Err)
	}
	rejoin := do[group.JoinReply](t, b, "g", func(tok group.Token) group.Event {
		ev := joinEvent("", "i-a", "10.0.0.1", "orders")(tok).(group.JoinGroup)
		ev.MemberID = "a"
		return ev
	})
	if rejoin.Err != group.ErrInconsistentGroupProtocol {
		t.Fatalf("rejoin in legacy mode = %v, want INCONSISTENT_GROUP_PROTOCOL", rejoin.Err)
	}
	zktest.Eventually(t, 5*time.Second, "the refused member is out of the group", func() (bool, string) {
		d := describe(t, b, "g")
		for _, m := range d.Group.Members {
			if m.MemberID == "a" {
				return false, fmt.Sprintf("%d members, a among them", len(d.Group.Members))
			}
		}
		return true, ""
	})
	if r := modeWireJoin(t, addr, "g"); r.ErrorCode != 23 {
		t.Fatalf("new member's JoinGroup in legacy mode: error %d, want 23", r.ErrorCode)
	}

	modeSet(t, zk, "g", zkstate.ModeMixed)
	changed = time.Now()
	zktest.Eventually(t, time.Second, "Kafka members admitted again", func() (bool, string) {
		r := modeWireJoin(t, addr, "g")
		return r.ErrorCode == 79, fmt.Sprint("error ", r.ErrorCode)
	})
	t.Logf("mixed mode took effect %v after the write", time.Since(changed).Round(time.Millisecond))
}

// Kafka mode refuses a legacy Register with GROUP_MODE_REFUSED, which the legacy client reports
// as a permanent refusal (Run returns it); once the group is rolled back to mixed, the same
// consumer registers and is started.
func TestIntegration_KafkaModeRefusesLegacyRegister(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	err := zkstate.LoadLayout(ctx, zk, zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{
		"events": {Version: 1, Partitions: map[int32][]int32{0: {1}, 1: {1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := zkstate.InitMode(ctx, zk, modeRoot, "new-app", zkstate.ModeKafka, "test-operator", ""); err != nil {
		t.Fatal(err)
	}
	b := startBridge(t, connect, 1, func(c *bridge.Config) { c.LegacyListen = "127.0.0.1:0" })

	rec := &startRecorder{}
	newClient := func() *legacy.Client {
		cl, err := legacy.NewClient(legacy.ClientConfig{
			Brokers:         []string{b.LegacyAddr().String()},
			GroupID:         "new-app",
			ConsumerID:      "new-app_host-1-00000001",
			Subscription:    map[string]int{"events": 1},
			AutoCommit:      true,
			AutoOffsetReset: legacy.ResetSmallest,
			PingInterval:    200 * time.Millisecond,
			MaxPingRetries:  3,
			Handler:         rec,
			Logger:          newLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	runCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = newClient().Run(runCtx)
	cancel()
	var refused *legacy.RegisterRefusedError
	if !errors.As(err, &refused) || refused.Code != legacy.CodeGroupModeRefused || !errors.Is(err, legacy.CodeGroupModeRefused.Err()) {
		t.Fatalf("Run = %v, want a RegisterRefusedError with GROUP_MODE_REFUSED", err)
	}
	if !strings.Contains(err.Error(), "zkbridge rollback") {
		t.Errorf("the refusal %q does not tell the operator what to do", err)
	}
	if ids, _, _ := zk.Children(ctx, zkstate.IDsPath("new-app")); len(ids) != 0 {
		t.Errorf("a refused consumer is registered in ZooKeeper: %v", ids)
	}
	if body := modeMetrics(t, b); !strings.Contains(body, `zkbridge_groups_mode_refusals_total{request="legacy_register"} 1`) {
		t.Errorf("/metrics does not count the refused Register")
	}

	// mixed admits legacy members.
	modeSet(t, zk, "new-app", zkstate.ModeMixed)
	zktest.Eventually(t, 10*time.Second, "the bridge sees new-app in mixed mode", func() (bool, string) {
		body := modeMetrics(t, b)
		return strings.Contains(body, `zkbridge_groups_by_mode{mode="mixed"} 1`), "no mixed group in /metrics"
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newClient().Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	zktest.Eventually(t, 15*time.Second, "the legacy consumer is started in mixed mode", func() (bool, string) {
		return len(rec.last()) == 2, fmtParts(rec.last())
	})
}

// Finalized: the ZooKeeper mirror is released and no longer written, commits go to the
// bridge's own records only, and OffsetFetch keeps answering from them — with the offsets that
// only ZooKeeper held at finalization (a legacy member's), and without what a 0.8 consumer
// writes there afterwards over the bridge's records.
func TestIntegration_FinalizedStopsTheMirror(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	b := startBridge(t, connect, 1, nil)
	addr := b.Addr().String()
	stableGroup(t, b, "fin", [2]group.InstanceID{"i-a", "i-b"})
	zktest.Eventually(t, 10*time.Second, "mirror written", func() (bool, string) {
		snap, err := zk.Snapshot(ctx, "fin")
		return err == nil && len(snap.Owners) == 6 && len(snap.Consumers) == 2, fmt.Sprint(err)
	})
	if c := commit(t, b, "fin", "a", "i-a", 1, group.OffsetCommitPartition{Topic: "orders", Partition: 0, Offset: 10, LeaderEpoch: 2, Metadata: "m"}); c.Partitions[0].Err != group.ErrNone {
		t.Fatalf("commit: %v", c.Partitions[0].Err)
	}
	// A partition whose last commit only ZooKeeper holds (a legacy member of the mixed days).
	if err := zk.Create(ctx, zkstate.OffsetPath("fin", "orders", 5), []byte("500"), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}

	modeSet(t, zk, "fin", zkstate.ModeFinalized)
	zktest.Eventually(t, 5*time.Second, "mirror released", func() (bool, string) {
		snap, err := zk.Snapshot(ctx, "fin")
		return err == nil && len(snap.Owners) == 0 && len(snap.Consumers) == 0, fmt.Sprintf("%v: %d owners, %d ids", err, len(snap.Owners), len(snap.Consumers))
	})

	for _, o := range []group.OffsetCommitPartition{
		{Topic: "orders", Partition: 0, Offset: 20, LeaderEpoch: 3, Metadata: "m2"},
		{Topic: "orders", Partition: 1, Offset: 7, LeaderEpoch: -1},
	} {
		if c := commit(t, b, "fin", "a", "i-a", 1, o); c.Partitions[0].Err != group.ErrNone {
			t.Fatalf("commit after finalize: %v", c.Partitions[0].Err)
		}
	}
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath("fin", "orders", 0)); err != nil || string(d) != "10" {
		t.Fatalf("0.8 offset of orders/0 = %q, %v; want 10 (not written since finalization)", d, err)
	}
	if ok, _, _ := zk.Exists(ctx, zkstate.OffsetPath("fin", "orders", 1)); ok {
		t.Fatal("0.8 offset of orders/1 written after finalization")
	}
	data, _, err := zk.Get(ctx, modeRoot+"/groups/fin/offsets/orders/0")
	var own struct{ Offset int64 }
	if err != nil || json.Unmarshal(data, &own) != nil || own.Offset != 20 {
		t.Fatalf("own offset record of orders/0 = %s, %v; want offset 20", data, err)
	}
	// A 0.8 consumer still running writes ZooKeeper: a finalized group ignores it.
	if _, err := zk.Set(ctx, zkstate.OffsetPath("fin", "orders", 0), []byte("999"), -1); err != nil {
		t.Fatal(err)
	}

	type po struct {
		p     int32
		off   int64
		epoch int32
		meta  string
	}
	fetch := func(version int16, topics []kmsg.OffsetFetchRequestTopic) []po {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.SetVersion(version)
		req.Group, req.Topics = "fin", topics
		resp := kafkaRoundTrip(t, addr, req).(*kmsg.OffsetFetchResponse)
		var out []po
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.ErrorCode != 0 {
					t.Fatalf("OffsetFetch %s/%d: error %d", rt.Topic, rp.Partition, rp.ErrorCode)
				}
				if rp.Offset >= 0 {
					meta := ""
					if rp.Metadata != nil {
						meta = *rp.Metadata
					}
					out = append(out, po{rp.Partition, rp.Offset, rp.LeaderEpoch, meta})
				}
			}
		}
		slices.SortFunc(out, func(a, b po) int { return int(a.p - b.p) })
		return out
	}
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = "orders", []int32{0, 1, 2, 5}
	want := []po{{0, 20, 3, "m2"}, {1, 7, -1, ""}, {5, 500, -1, ""}}
	if got := fetch(5, []kmsg.OffsetFetchRequestTopic{ft}); !slices.Equal(got, want) {
		t.Fatalf("OffsetFetch v5 of a finalized group = %+v, want %+v", got, want)
	}
	want[0].epoch = -1                                  // leader epochs are v5+
	if got := fetch(2, nil); !slices.Equal(got, want) { // v2+: every topic
		t.Fatalf("OffsetFetch v2 (all topics) of a finalized group = %+v, want %+v", got, want)
	}

	// A rebalance does not bring the mirror back.
	if r := do[group.LeaveReply](t, b, "fin", func(tok group.Token) group.Event {
		return group.LeaveGroup{Token: tok, Members: []group.LeaveMember{{MemberID: "b", InstanceID: "i-b"}}}
	}); r.Err != group.ErrNone {
		t.Fatalf("leave: %v", r.Err)
	}
	time.Sleep(500 * time.Millisecond)
	if snap, err := zk.Snapshot(ctx, "fin"); err != nil || len(snap.Owners) != 0 || len(snap.Consumers) != 0 {
		t.Fatalf("after a rebalance of a finalized group: %v, %+v %+v; want no mirror", err, snap.Owners, snap.Consumers)
	}
}

// In kafka mode, 0.8 consumers registered in /consumers/<g>/ids are reported (metric and log);
// the bridge's own registrations of its Kafka members are not.
func TestIntegration_KafkaModeReportsForeignZKMembers(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	b := startBridge(t, connect, 1, nil)
	stableGroup(t, b, "k", [2]group.InstanceID{"i-a", "i-b"})
	zktest.Eventually(t, 10*time.Second, "mirror written", func() (bool, string) {
		ids, _, err := zk.Children(ctx, zkstate.IDsPath("k"))
		return err == nil && len(ids) == 2, fmt.Sprint(ids, err)
	})
	const gauge = `zkbridge_group_foreign_zk_members{group="k"} `
	zktest.Eventually(t, 5*time.Second, "no foreign member reported", func() (bool, string) {
		return strings.Contains(modeMetrics(t, b), gauge+"0"), "gauge not 0"
	})

	reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"orders": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}
	p := zkstate.IDPath("k", "k_oldhost-1-0000beef")
	if err := zk.Create(ctx, p, reg.Encode(), zkstate.CreateOptions{Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 5*time.Second, "the 0.8 consumer reported", func() (bool, string) {
		return strings.Contains(modeMetrics(t, b), gauge+"1"), "gauge not 1"
	})
	if err := zk.Delete(ctx, p, -1); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 5*time.Second, "the report cleared", func() (bool, string) {
		return strings.Contains(modeMetrics(t, b), gauge+"0"), "gauge not 0"
	})
}
