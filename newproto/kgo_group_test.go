package newproto_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// franz-go's kgo consumer group against GroupCoordinator on fakeGroups
// (real group.Machines, real time): kgo negotiates our versions (JoinGroup
// v9 with KIP-394's second join, SyncGroup v5, Heartbeat v4, OffsetFetch
// v8, OffsetCommit v8, LeaveGroup v5) and runs its default
// cooperative-sticky balancer as the group's leader. No broker serves
// Fetch or ListOffsets here, so kgo never consumes a record; the tests
// check the group protocol only.

const kgoTopic = "events"

// kgoGroupServer serves a 6-partition topic led by our own node 7 (so kgo
// dials nothing else) and the group APIs from fakeGroups on real time with
// a short initial rebalance delay.
func kgoGroupServer(t *testing.T) (*testServer, *fakeGroups) {
	t.Helper()
	cfg := group.DefaultConfig()
	cfg.InitialRebalanceDelay = 300 * time.Millisecond
	fg := newFakeGroups(t, withConfig(cfg), withRealTime(20*time.Millisecond))
	var parts []newproto.Partition
	for p := range int32(6) {
		parts = append(parts, newproto.Partition{ID: p, Leader: 7, Replicas: []int32{7}, ISR: []int32{7}})
	}
	cluster := &fakeCluster{topics: map[string][]newproto.Partition{kgoTopic: parts}}
	ts := groupServer(t, fg, newproto.Config{NodeID: 7, Cluster: cluster})
	return ts, fg
}

// ownership tracks which partitions each kgo member holds, from its
// OnPartitions callbacks (cooperative-sticky: assigned adds, revoked and
// lost remove).
type ownership struct {
	mu    sync.Mutex
	owned map[string]map[int32]bool // member name → partitions
	fatal map[string][]error        // member name → group management errors
}

func newOwnership() *ownership {
	return &ownership{owned: map[string]map[int32]bool{}, fatal: map[string][]error{}}
}

func (o *ownership) opts(name string) []kgo.Opt {
	update := func(add bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.owned[name] == nil {
				o.owned[name] = map[int32]bool{}
			}
			for _, p := range ps[kgoTopic] {
				if add {
					o.owned[name][p] = true
				} else {
					delete(o.owned[name], p)
				}
			}
		}
	}
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(update(true)),
		kgo.OnPartitionsRevoked(update(false)),
		kgo.OnPartitionsLost(update(false)),
		kgo.WithHooks(manageErrorHook(func(err error) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.fatal[name] = append(o.fatal[name], err)
		})),
	}
}

type manageErrorHook func(error)

func (h manageErrorHook) OnGroupManageError(err error) { h(err) }

// of returns a member's partitions, sorted.
func (o *ownership) of(name string) []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.owned[name]))
}

func (o *ownership) forget(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.owned, name)
}

// covers reports whether the members named hold every one of n partitions
// exactly once, each member at least one.
func (o *ownership) covers(n int32, names ...string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[int32]int{}
	for _, name := range names {
		if len(o.owned[name]) == 0 {
			return false
		}
		for p := range o.owned[name] {
			seen[p]++
		}
	}
	if len(seen) != int(n) {
		return false
	}
	for p := range n {
		if seen[p] != 1 {
			return false
		}
	}
	return true
}

func (o *ownership) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	names := slices.Sorted(maps.Keys(o.owned))
	s := ""
	for _, n := range names {
		s += fmt.Sprintf("%s:%v ", n, slices.Sorted(maps.Keys(o.owned[n])))
	}
	return s
}

func newGroupMember(t *testing.T, ts *testServer, o *ownership, groupName, name string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newKgoClient(t, ts.addr, append(append([]kgo.Opt{
		kgo.ConsumerGroup(groupName),
		kgo.ConsumeTopics(kgoTopic),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.DisableAutoCommit(),
	}, o.opts(name)...), opts...)...)
}

// describeAssignments decodes the group's consumer-protocol assignments
// from DescribeGroups: member id → partitions of kgoTopic.
func describeAssignments(t *testing.T, c *kafkatest.Client, g string) (string, map[string][]int32, map[string]string) {
	t.Helper()
	r := kmsg.NewPtrDescribeGroupsRequest()
	r.SetVersion(5)
	r.Groups = []string{g}
	dg := c.RoundTrip(r).(*kmsg.DescribeGroupsResponse).Groups[0]
	out := map[string][]int32{}
	hosts := map[string]string{}
	for _, m := range dg.Members {
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(m.MemberAssignment); err != nil {
			t.Fatalf("member %s: assignment %x: %v", m.MemberID, m.MemberAssignment, err)
		}
		for _, at := range a.Topics {
			if at.Topic == kgoTopic {
				out[m.MemberID] = append(out[m.MemberID], at.Partitions...)
			}
		}
		hosts[m.MemberID] = m.ClientID + "@" + m.ClientHost
	}
	return dg.State, out, hosts
}

// Three dynamic kgo members form a Stable group whose assignment covers
// every partition exactly once; a commit through kgo is read back with
// OffsetFetch; a member leaving triggers one rebalance after which the
// two others cover every partition.
func TestKgoConsumerGroup(t *testing.T) {
	ts, fg := kgoGroupServer(t)
	const g = "kgo-dynamic"
	o := newOwnership()
	names := []string{"c0", "c1", "c2"}
	clients := map[string]*kgo.Client{}
	for _, n := range names {
		clients[n] = newGroupMember(t, ts, o, g, n)
	}
	zktest.Eventually(t, 15*time.Second, "3 members cover 6 partitions", func() bool {
		d := fg.describe(g)
		return d.State == group.Stable && len(d.Members) == 3 && o.covers(6, names...)
	})
	t.Logf("assignment: %s", o)

	raw := kafkatest.Dial(t, ts.addr)
	state, assigned, hosts := describeAssignments(t, raw, g)
	all := []int32{}
	for id, ps := range assigned {
		all = append(all, ps...)
		if hosts[id] != "kgo-test@/127.0.0.1" {
			t.Errorf("member %s: client %s, want kgo-test@/127.0.0.1", id, hosts[id])
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if state != "Stable" || len(assigned) != 3 || fmt.Sprint(all) != "[0 1 2 3 4 5]" {
		t.Errorf("DescribeGroups: %s %v, want Stable with 3 members covering 0-5 once", state, assigned)
	}

	// Commit through kgo (OffsetCommit with kgo's member id and
	// generation), read back with OffsetFetch v8.
	p := o.of("c0")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var commitErr error
	clients["c0"].CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{kgoTopic: {p: {Epoch: 4, Offset: 42}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					commitErr = errors.Join(commitErr, kerr.ErrorForCode(rp.ErrorCode))
				}
			}
		})
	if commitErr != nil {
		t.Fatalf("CommitOffsetsSync: %v", commitErr)
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.SetVersion(8)
	fg8 := kmsg.NewOffsetFetchRequestGroup()
	fg8.Group = g
	fetch.Groups = append(fetch.Groups, fg8)
	got := flattenFetchGroup(raw.RoundTrip(fetch).(*kmsg.OffsetFetchResponse).Groups[0])
	// kgo puts its member id into every commit's metadata.
	memberID, _ := clients["c0"].GroupMetadata()
	if want := []fetched{{kgoTopic, p, 42, 4, memberID, 0}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OffsetFetch after kgo's commit: %v, want %v", got, want)
	}

	// c2 leaves (kgo sends LeaveGroup on Close for a dynamic member).
	before := fg.describe(g).Generation
	clients["c2"].Close()
	o.forget("c2")
	zktest.Eventually(t, 15*time.Second, "2 members cover 6 partitions", func() bool {
		d := fg.describe(g)
		return d.State == group.Stable && len(d.Members) == 2 && o.covers(6, "c0", "c1")
	})
	if after := fg.describe(g).Generation; after != before+1 {
		t.Errorf("generation %d after a leave, want %d (one rebalance)", after, before+1)
	}
	t.Logf("after c2 left: %s", o)

	// kgo used our highest versions.
	for api, v := range map[string]string{"JoinGroup": "9", "SyncGroup": "5", "Heartbeat": "4", "OffsetFetch": "8", "OffsetCommit": "8", "LeaveGroup": "5"} {
		if n := kafkatest.CounterValue(t, ts.reg, "zkbridge_kafka_requests_total", map[string]string{"api": api, "api_version": v}); n < 1 {
			t.Errorf("no %s v%s request from kgo", api, v)
		}
	}
}

// Static members (kgo.InstanceID, KIP-345): a member that restarts with
// its instance id gets its old partitions back with no new generation
// (kgo does not leave the group on Close when it has an instance id); a
// second live client with the same instance id takes it over and the
// first is fenced (FENCED_INSTANCE_ID).
func TestKgoStaticMembers(t *testing.T) {
	ts, fg := kgoGroupServer(t)
	const g = "kgo-static"
	o := newOwnership()
	s1 := newGroupMember(t, ts, o, g, "s1", kgo.InstanceID("static-1"))
	newGroupMember(t, ts, o, g, "s2", kgo.InstanceID("static-2"))
	zktest.Eventually(t, 15*time.Second, "2 static members cover 6 partitions", func() bool {
		d := fg.describe(g)
		return d.State == group.Stable && len(d.Members) == 2 && o.covers(6, "s1", "s2")
	})
	gen := fg.describe(g).Generation
	had := o.of("s1")
	t.Logf("generation %d: %s", gen, o)

	s1.Close()
	o.forget("s1")
	newGroupMember(t, ts, o, g, "s1-restarted", kgo.InstanceID("static-1"))
	zktest.Eventually(t, 10*time.Second, "the restarted member holds its partitions", func() bool {
		return fmt.Sprint(o.of("s1-restarted")) == fmt.Sprint(had)
	})
	if d := fg.describe(g); d.Generation != gen || d.State != group.Stable || len(d.Members) != 2 {
		t.Errorf("after the restart: %s generation %d with %d members, want Stable %d with 2", d.State, d.Generation, len(d.Members), gen)
	}

	// A second live client with static-2: the old one is fenced.
	newGroupMember(t, ts, o, g, "s2-twin", kgo.InstanceID("static-2"))
	zktest.Eventually(t, 10*time.Second, "the older static-2 fenced", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, err := range o.fatal["s2"] {
			if errors.Is(err, kerr.FencedInstanceID) {
				return true
			}
		}
		return false
	})
}
