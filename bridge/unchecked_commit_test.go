package bridge_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// zkEraCommit is a ZooKeeper-era client's commit (kafka-node's HighLevelConsumer sends v0, some
// older clients v1 with generation -1 and no member id) of one offset.
func zkEraCommit(version int16, g string, p int32, off int64) *kmsg.OffsetCommitRequest {
	req := wireCommit(g, "", -1, "orders", p, off)
	req.SetVersion(version)
	return req
}

func commitCode(t *testing.T, r kmsg.Response) newproto.ErrorCode {
	t.Helper()
	resp := r.(*kmsg.OffsetCommitResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("response %+v, want one partition", resp)
	}
	return newproto.ErrorCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// Issue 18 item 2: "OffsetCommit v0 from a ZooKeeper-era client is refused in a group with a
// Kafka member (UNKNOWN_MEMBER_ID; kafka-node ignores the code, so the commit is lost). Kafka
// 0.8.2 to 2.x brokers stored v0 commits in ZooKeeper without any member check." So does the
// bridge, in legacy, mixed and kafka modes, for v0 and for v1 with generation -1 and no member
// (0.8.2 brokers ignored v1's member fields); v2+ keeps Kafka's rule. OffsetFetch then returns
// the commit. A finalized group refuses it with UNSUPPORTED_VERSION, counted and logged.
func TestIntegration_ZooKeeperEraCommitNeedsNoMember(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	b := startBridge(t, connect, 1, nil)
	addr := b.Addr().String()

	fetched := func(g string, p int32) int64 {
		t.Helper()
		offs, err := b.FetchOffsets(ctx, g, map[string][]int32{"orders": {p}})
		if err != nil || len(offs) != 1 {
			t.Fatalf("FetchOffsets(%s, orders/%d) = %+v, %v", g, p, offs, err)
		}
		return offs[0].Offset
	}
	znode := func(g string, p int32) string {
		t.Helper()
		d, _, err := zk.Get(ctx, zkstate.OffsetPath(g, "orders", p))
		if errors.Is(err, zkstate.ErrNoNode) {
			return "<none>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(d)
	}

	const g = "zk-era"
	stableGroup(t, b, g, [2]group.InstanceID{})
	if rec, _ := modeRead(t, zk, g); rec.Mode != zkstate.ModeKafka {
		t.Fatalf("mode %s, want kafka", rec.Mode)
	}
	off := int64(100)
	for _, mode := range []zkstate.Mode{zkstate.ModeKafka, zkstate.ModeMixed, zkstate.ModeLegacy} {
		if mode != zkstate.ModeKafka {
			modeSet(t, zk, g, mode)
		}
		for _, v := range []int16{0, 1} {
			for p := int32(0); p < 2; p++ {
				off++
				if code := commitCode(t, kafkaRoundTrip(t, addr, zkEraCommit(v, g, p, off))); code != 0 {
					t.Fatalf("%s mode, v%d commit of orders/%d with live Kafka members: %s, want stored", mode, v, p, code.Name())
				}
				if got := znode(g, p); got != fmt.Sprint(off) {
					t.Fatalf("%s mode, v%d: /consumers/%s/offsets/orders/%d = %s, want %d", mode, v, g, p, got, off)
				}
				if got := fetched(g, p); got != off {
					t.Fatalf("%s mode, v%d: OffsetFetch orders/%d = %d, want %d", mode, v, p, got, off)
				}
			}
		}
	}

	// v2+ without a member: Kafka's rule (UNKNOWN_MEMBER_ID while the group has members).
	const k = "zk-era-kafka"
	stableGroup(t, b, k, [2]group.InstanceID{})
	if code := commitCode(t, kafkaRoundTrip(t, addr, zkEraCommit(2, k, 0, 5))); code != newproto.ErrUnknownMemberID {
		t.Errorf("v2 commit without a member into a group with members: %s, want UNKNOWN_MEMBER_ID", code.Name())
	}
	// v1 naming a member is a group-managed commit: the engine checks it.
	req := wireCommit(k, "nobody", 1, "orders", 0, 5)
	req.SetVersion(1)
	if code := commitCode(t, kafkaRoundTrip(t, addr, req)); code != newproto.ErrUnknownMemberID {
		t.Errorf("v1 commit of an unknown member: %s, want UNKNOWN_MEMBER_ID", code.Name())
	}
	if got := znode(k, 0); got != "<none>" {
		t.Errorf("/consumers/%s/offsets/orders/0 = %s after refused commits, want none", k, got)
	}

	// Finalized: the 0.8 layout is no longer read, so the commit is refused, not lost silently.
	modeSet(t, zk, k, zkstate.ModeFinalized)
	zktest.Eventually(t, 5*time.Second, "the bridge sees the group finalized (its mirror released)", func() (bool, string) {
		snap, err := zk.Snapshot(ctx, k)
		return err == nil && len(snap.Owners) == 0, fmt.Sprint(err)
	})
	if code := commitCode(t, kafkaRoundTrip(t, addr, zkEraCommit(0, k, 0, 7))); code != newproto.ErrUnsupportedVersion {
		t.Errorf("v0 commit to a finalized group: %s, want UNSUPPORTED_VERSION", code.Name())
	}
	if code := commitCode(t, kafkaRoundTrip(t, addr, zkEraCommit(1, k, 1, 7))); code != newproto.ErrUnsupportedVersion {
		t.Errorf("v1 commit without a member to a finalized group: %s, want UNSUPPORTED_VERSION", code.Name())
	}
	if got := znode(k, 0); got != "<none>" {
		t.Errorf("/consumers/%s/offsets/orders/0 = %s after a refused commit, want none", k, got)
	}
	if m := modeMetrics(t, b); !strings.Contains(m, `zkbridge_groups_mode_refusals_total{request="offset_commit_unchecked"}`) ||
		strings.Contains(m, `zkbridge_groups_mode_refusals_total{request="offset_commit_unchecked"} 0`) {
		t.Errorf("refusals of unchecked commits not counted")
	}
}
