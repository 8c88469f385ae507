package newproto_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// fakeGroups is newproto.Groups backed by real group.Machines, one per
// group, in the way bridge's actors use them but synchronously: a Do steps
// its event under one mutex, executes every write at once (offsets into a
// map, then Persisted), and hands each reply to the Do call waiting for
// its token, whenever the Step that releases it happens (a parked
// JoinGroup is answered by another member's request or by a Tick).
//
// Time is a fake clock moved by advance, or real time with a ticker that
// steps Tick into groups whose WakeAt passed (withRealTime): real clients
// wait for rebalance delays and session timeouts.
type fakeGroups struct {
	t   *testing.T
	cfg group.Config

	mu       sync.Mutex
	now      time.Time // fake clock; unused with real time
	realTime bool
	groups   map[string]*fakeGroup
	offsets  map[string]map[topicPartition]newproto.CommittedOffset
	events   map[string][]group.Event // every event built, per group
	token    group.Token
	version  int64
	// fail, when set, is asked before every Do, FetchOffsets (ev nil) and
	// ListGroups (group "", ev nil); a non-nil error is returned instead.
	fail func(group string, ev group.Event) error
}

type fakeGroup struct {
	m       *group.Machine
	waiters map[group.Token]chan group.Reply
	wakeAt  time.Time
}

type topicPartition struct {
	topic string
	part  int32
}

type fakeOpt func(*fakeGroups)

// withConfig sets the engine's configuration (default: Kafka's defaults
// with no initial rebalance delay, so that a lone member's JoinGroup is
// answered at once on the fake clock).
func withConfig(cfg group.Config) fakeOpt { return func(f *fakeGroups) { f.cfg = cfg } }

// withRealTime drives the clock from time.Now and steps Tick into due
// groups every tick until the test ends.
func withRealTime(tick time.Duration) fakeOpt {
	return func(f *fakeGroups) {
		f.realTime = true
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tk := time.NewTicker(tick)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					f.mu.Lock()
					f.tickLocked()
					f.mu.Unlock()
				}
			}
		}()
		f.t.Cleanup(func() { close(stop); <-done })
	}
}

// withFailure makes every call for which fail returns an error fail.
func withFailure(fail func(group string, ev group.Event) error) fakeOpt {
	return func(f *fakeGroups) { f.fail = fail }
}

func newFakeGroups(t *testing.T, opts ...fakeOpt) *fakeGroups {
	t.Helper()
	cfg := group.DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	f := &fakeGroups{
		t:       t,
		cfg:     cfg,
		now:     time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		groups:  map[string]*fakeGroup{},
		offsets: map[string]map[topicPartition]newproto.CommittedOffset{},
		events:  map[string][]group.Event{},
	}
	for _, o := range opts {
		o(f)
	}
	return f
}

func (f *fakeGroups) clock() time.Time {
	if f.realTime {
		return time.Now()
	}
	return f.now
}

// advance moves the fake clock and fires the timers that are due.
func (f *fakeGroups) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.tickLocked()
}

func (f *fakeGroups) tickLocked() {
	now := f.clock()
	for name, g := range f.groups {
		if !g.wakeAt.IsZero() && !g.wakeAt.After(now) {
			f.stepLocked(name, g, group.Tick{})
		}
	}
}

// Do implements newproto.Groups.
func (f *fakeGroups) Do(ctx context.Context, name string, build func(group.Token) group.Event) (group.Reply, error) {
	f.mu.Lock()
	f.token++
	tok := f.token
	ev := build(tok)
	f.events[name] = append(f.events[name], ev)
	if f.fail != nil {
		if err := f.fail(name, ev); err != nil {
			f.mu.Unlock()
			return nil, err
		}
	}
	g, ok := f.groups[name]
	if !ok {
		// The bridge knows no such group: describing or deleting it
		// must not create it.
		switch ev.(type) {
		case group.Describe:
			f.mu.Unlock()
			return group.DescribeReply{Token: tok, Err: group.ErrGroupIDNotFound}, nil
		case group.Delete:
			f.mu.Unlock()
			return group.DeleteReply{Token: tok, Err: group.ErrGroupIDNotFound}, nil
		}
		g = &fakeGroup{m: group.New(f.cfg, name), waiters: map[group.Token]chan group.Reply{}}
		f.groups[name] = g
	}
	ch := make(chan group.Reply, 1)
	g.waiters[tok] = ch
	f.stepLocked(name, g, ev)
	f.mu.Unlock()

	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		f.mu.Lock()
		delete(g.waiters, tok)
		f.mu.Unlock()
		return nil, ctx.Err()
	}
}

// stepLocked steps ev and then every write's Persisted, delivering the
// replies as they come out.
func (f *fakeGroups) stepLocked(name string, g *fakeGroup, ev group.Event) {
	deleted := false
	for ev != nil {
		fx := g.m.Step(f.clock(), ev)
		for _, r := range fx.Replies {
			if ch, ok := g.waiters[r.RequestToken()]; ok {
				ch <- r
				delete(g.waiters, r.RequestToken())
			}
		}
		g.wakeAt = fx.WakeAt
		ev = nil
		if fx.NeedsWrite() {
			offs := f.offsets[name]
			if offs == nil {
				offs = map[topicPartition]newproto.CommittedOffset{}
				f.offsets[name] = offs
			}
			for _, o := range fx.Offsets {
				offs[topicPartition{o.Topic, o.Partition}] = newproto.CommittedOffset{
					Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata,
				}
			}
			if fx.Persist != nil && fx.Persist.Deleted {
				deleted = true
			}
			f.version++
			ev = group.Persisted{Version: f.version}
		}
	}
	if deleted {
		// The shell removes a deleted group's record and offsets; the
		// next request for the name starts a new group.
		delete(f.groups, name)
		delete(f.offsets, name)
	}
}

// FetchOffsets implements newproto.Groups.
func (f *fakeGroups) FetchOffsets(_ context.Context, name string, topics map[string][]int32) ([]newproto.CommittedOffset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(name, nil); err != nil {
			return nil, err
		}
	}
	var out []newproto.CommittedOffset
	for tp, o := range f.offsets[name] {
		if topics != nil {
			parts, ok := topics[tp.topic]
			if !ok || (len(parts) > 0 && !containsPart(parts, tp.part)) {
				continue
			}
		}
		out = append(out, o)
	}
	return out, nil
}

func containsPart(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// ListGroups implements newproto.Groups.
func (f *fakeGroups) ListGroups(context.Context) ([]newproto.GroupListing, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail("", nil); err != nil {
			return nil, err
		}
	}
	var out []newproto.GroupListing
	for name, g := range f.groups {
		d := g.m.Describe()
		out = append(out, newproto.GroupListing{Group: name, ProtocolType: d.ProtocolType, State: d.State.String()})
	}
	return out, nil
}

// describe returns the engine's view of a group (Dead when unknown).
func (f *fakeGroups) describe(name string) group.Description {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.groups[name]
	if !ok {
		return group.Description{Group: name, State: group.Dead, Generation: group.NoGeneration}
	}
	return g.m.Describe()
}

// waiting counts the Do calls of a group waiting for their reply.
func (f *fakeGroups) waiting(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g, ok := f.groups[name]; ok {
		return len(g.waiters)
	}
	return 0
}

// eventsOf returns the events built for a group so far.
func (f *fakeGroups) eventsOf(name string) []group.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]group.Event(nil), f.events[name]...)
}

// committed returns a group's offsets, sorted.
func (f *fakeGroups) committed(name string) []newproto.CommittedOffset {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []newproto.CommittedOffset
	for _, o := range f.offsets[name] {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// seqUUIDs is a deterministic WithUUIDs source: uuid-1, uuid-2, ...
func seqUUIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("uuid-%d", n.Add(1)) }
}

// groupServer is a Server whose Coordinator is a GroupCoordinator on
// fakeGroups, with deterministic member ids unless opts say otherwise.
func groupServer(t *testing.T, fg *fakeGroups, cfg newproto.Config, opts ...newproto.GroupCoordinatorOption) *testServer {
	t.Helper()
	cfg.Coordinator = newproto.NewGroupCoordinator(fg, append([]newproto.GroupCoordinatorOption{newproto.WithUUIDs(seqUUIDs())}, opts...)...)
	return startServer(t, cfg)
}

// --- request builders and the setup steps several tests share ----------

const testClientID = "newproto-test" // the raw client's header client id

func protocol(name string, md ...byte) kmsg.JoinGroupRequestProtocol {
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = name, md
	return p
}

func joinRequest(v int16, g, member, instance string) *kmsg.JoinGroupRequest {
	r := kmsg.NewPtrJoinGroupRequest()
	r.SetVersion(v)
	r.Group, r.MemberID = g, member
	r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 10000, 30000
	if instance != "" {
		r.InstanceID = kmsg.StringPtr(instance)
	}
	r.ProtocolType = "consumer"
	r.Protocols = []kmsg.JoinGroupRequestProtocol{protocol("range", 1, 2, 3), protocol("roundrobin", 4)}
	return r
}

func syncRequest(v int16, g, member string, gen int32, assignments map[string][]byte) *kmsg.SyncGroupRequest {
	r := kmsg.NewPtrSyncGroupRequest()
	r.SetVersion(v)
	r.Group, r.MemberID, r.Generation = g, member, gen
	r.ProtocolType, r.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	ids := make([]string, 0, len(assignments))
	for id := range assignments {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID, a.MemberAssignment = id, assignments[id]
		r.GroupAssignment = append(r.GroupAssignment, a)
	}
	return r
}

// joinAlone joins a new member to an empty group at JoinGroup v (going
// through MEMBER_ID_REQUIRED from v4) and returns the reply that carries
// generation 1. The fake clock has no initial delay, so a lone member's
// join completes at once.
func joinAlone(t *testing.T, c *kafkatest.Client, v int16, g, instance string) *kmsg.JoinGroupResponse {
	t.Helper()
	resp := c.RoundTrip(joinRequest(v, g, "", instance)).(*kmsg.JoinGroupResponse)
	if resp.ErrorCode == int16(newproto.ErrMemberIDRequired) {
		resp = c.RoundTrip(joinRequest(v, g, resp.MemberID, instance)).(*kmsg.JoinGroupResponse)
	}
	if resp.ErrorCode != 0 {
		t.Fatalf("JoinGroup v%d %q: error %s", v, g, newproto.ErrorCode(resp.ErrorCode).Name())
	}
	return resp
}

// stableAlone makes g a Stable group of one member (static when instance
// is set) whose assignment is assignment, and returns its member id and
// generation.
func stableAlone(t *testing.T, c *kafkatest.Client, g, instance string, assignment []byte) (string, int32) {
	t.Helper()
	j := joinAlone(t, c, 5, g, instance)
	s := c.RoundTrip(syncRequest(3, g, j.MemberID, j.Generation, map[string][]byte{j.MemberID: assignment})).(*kmsg.SyncGroupResponse)
	if s.ErrorCode != 0 {
		t.Fatalf("SyncGroup %q: error %s", g, newproto.ErrorCode(s.ErrorCode).Name())
	}
	return j.MemberID, j.Generation
}

// simpleCommit commits offsets with no member (an Empty group's commit).
func simpleCommit(t *testing.T, c *kafkatest.Client, g string, offsets map[string]map[int32]int64) {
	t.Helper()
	r := kmsg.NewPtrOffsetCommitRequest()
	r.SetVersion(8)
	r.Group = g
	topics := make([]string, 0, len(offsets))
	for topic := range offsets {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	for _, topic := range topics {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = topic
		for p, o := range offsets[topic] {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = p, o, 3, kmsg.StringPtr(fmt.Sprintf("md-%d", o))
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
	resp := c.RoundTrip(r).(*kmsg.OffsetCommitResponse)
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				t.Fatalf("OffsetCommit %q %s/%d: error %s", g, rt.Topic, rp.Partition, newproto.ErrorCode(rp.ErrorCode).Name())
			}
		}
	}
}

func codeName(c int16) string { return newproto.ErrorCode(c).Name() }

// --- tests of the translation as a whole --------------------------------

// The engine's error codes are Kafka's numbers, and newproto names each one
// as Kafka does: wireCode (errors.go) can pass them through.
func TestGroupErrorCodes(t *testing.T) {
	for _, c := range []group.ErrorCode{
		group.ErrOffsetMetadataTooLarge, group.ErrCoordinatorNotAvailable, group.ErrNotCoordinator,
		group.ErrIllegalGeneration, group.ErrInconsistentGroupProtocol, group.ErrUnknownMemberID,
		group.ErrInvalidSessionTimeout, group.ErrRebalanceInProgress, group.ErrNonEmptyGroup,
		group.ErrGroupIDNotFound, group.ErrMemberIDRequired, group.ErrGroupMaxSizeReached,
		group.ErrFencedInstanceID,
	} {
		if got := newproto.ErrorCode(c).Name(); got != c.String() {
			t.Errorf("code %d: newproto names it %s, the engine %s", int16(c), got, c)
		}
	}
}

// An error from Groups that wraps an ErrorCode is answered as that code in
// every API's shape, at every version; any other error is
// COORDINATOR_NOT_AVAILABLE. The APIs that carry several groups answer
// each group with it.
func TestGroupsErrorsAnsweredInShape(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want newproto.ErrorCode
	}{
		{"fenced by another bridge", fmt.Errorf("group owned by bridge-2: %w", newproto.ErrNotCoordinator), newproto.ErrNotCoordinator},
		{"zookeeper down", fmt.Errorf("no zookeeper session: %w", newproto.ErrCoordinatorNotAvailable), newproto.ErrCoordinatorNotAvailable},
		{"no code", errors.New("zookeeper: connection loss"), newproto.ErrCoordinatorNotAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fg := newFakeGroups(t, withFailure(func(string, group.Event) error { return tc.err }))
			ts := groupServer(t, fg, newproto.Config{})
			c := kafkatest.Dial(t, ts.addr)
			for _, api := range groupAPIs {
				for _, v := range kafkatest.Versions(api.min, api.max) {
					req := api.request(v)
					req.SetVersion(v)
					if codes := api.codes(c.RoundTrip(req)); !allEqual(codes, int16(tc.want)) {
						t.Errorf("%s v%d: codes %v, want all %s", kmsg.NameForKey(int16(api.key)), v, codes, tc.want.Name())
					}
				}
			}
		})
	}
}

// Every group API answers an empty group id with INVALID_GROUP_ID (Kafka's
// isValidGroupId) without asking the engine.
func TestEmptyGroupID(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	want := int16(newproto.ErrInvalidGroupID)

	join := joinRequest(9, "", "", "")
	if r := c.RoundTrip(join).(*kmsg.JoinGroupResponse); r.ErrorCode != want || r.Generation != -1 {
		t.Errorf("JoinGroup: %s generation %d, want INVALID_GROUP_ID -1", codeName(r.ErrorCode), r.Generation)
	}
	if r := c.RoundTrip(syncRequest(5, "", "m", 1, nil)).(*kmsg.SyncGroupResponse); r.ErrorCode != want {
		t.Errorf("SyncGroup: %s", codeName(r.ErrorCode))
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	if r := c.RoundTrip(hb).(*kmsg.HeartbeatResponse); r.ErrorCode != want {
		t.Errorf("Heartbeat: %s", codeName(r.ErrorCode))
	}
	lv := kmsg.NewPtrLeaveGroupRequest()
	lv.SetVersion(1)
	lv.MemberID = "m"
	if r := c.RoundTrip(lv).(*kmsg.LeaveGroupResponse); r.ErrorCode != want {
		t.Errorf("LeaveGroup: %s", codeName(r.ErrorCode))
	}
	if evs := fg.eventsOf(""); len(evs) != 0 {
		t.Errorf("the engine saw events %v", evs)
	}
}

// Without WithUUIDs a new member id is Kafka's: the client id, a dash and
// a random (version 4) UUID.
func TestDefaultMemberID(t *testing.T) {
	fg := newFakeGroups(t)
	cfg := newproto.Config{Coordinator: newproto.NewGroupCoordinator(fg)}
	ts := startServer(t, cfg)
	c := kafkatest.Dial(t, ts.addr)
	pattern := regexp.MustCompile(`^` + testClientID + `-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 3 {
		r := c.RoundTrip(joinRequest(4, "uuid-group", "", "")).(*kmsg.JoinGroupResponse)
		if r.ErrorCode != int16(newproto.ErrMemberIDRequired) || !pattern.MatchString(r.MemberID) {
			t.Fatalf("JoinGroup v4: %s member id %q, want MEMBER_ID_REQUIRED and %s", codeName(r.ErrorCode), r.MemberID, pattern)
		}
		if seen[r.MemberID] {
			t.Errorf("member id %q given twice", r.MemberID)
		}
		seen[r.MemberID] = true
	}
}

// A held request whose client goes away is not answered, and the group
// carries on: the Do call returns with the connection's context.
func TestHeldJoinClientGone(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	a := kafkatest.Dial(t, ts.addr)
	ja := joinAlone(t, a, 5, "gone", "")

	// b's join parks: the group waits for a to rejoin.
	b := kafkatest.Dial(t, ts.addr)
	b.Send(joinRequest(3, "gone", "", ""))
	waitFor(t, func() bool { return fg.describe("gone").State == group.PreparingRebalance })
	b.NC.Close()
	waitFor(t, func() bool { return fg.waiting("gone") == 0 })

	// a rejoins: b's JoinGroup is still parked in the engine, so the
	// join phase completes; b's reply has no one to go to.
	r := a.RoundTrip(joinRequest(5, "gone", ja.MemberID, "")).(*kmsg.JoinGroupResponse)
	if r.ErrorCode != 0 || r.Generation != 2 || len(r.Members) != 2 {
		t.Fatalf("rejoin: %s generation %d members %d, want NONE 2 2", codeName(r.ErrorCode), r.Generation, len(r.Members))
	}
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
