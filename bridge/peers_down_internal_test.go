package bridge

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
)

// The rule that leaves a peer out of Metadata before its session expires (peers_down.go): a
// peer looks dead once its listener, having taken a connection at that address, refused every
// probe for refusedFor; a paused process (its kernel still takes connections, or, its backlog
// full, lets them time out) never does; a peer taking a connection again is named again at once.
func TestPeerLooksDeadAfterRefusalsInARow(t *testing.T) {
	const (
		T = probeTook
		R = probeRefused
		S = probeSilent
	)
	type step struct {
		ms  int
		o   probeOutcome
		out bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"killed: out once the refusals span refusedFor", []step{
			{0, T, false}, {100, R, false}, {200, R, false}, {300, R, false}, {400, R, true}, {500, R, true},
		}},
		{"killed, probes late under load: out at the first probe past refusedFor", []step{
			{0, T, false}, {100, R, false}, {350, R, false}, {420, R, true},
		}},
		{"never reached at this address: never out", []step{
			{0, R, false}, {100, R, false}, {500, R, false}, {5000, R, false},
		}},
		{"paused (SIGSTOP): its kernel takes the connections", []step{
			{0, T, false}, {100, T, false}, {200, T, false}, {5000, T, false},
		}},
		{"paused with its backlog full, or unreachable: silent probes never make it look dead", []step{
			{0, T, false}, {100, S, false}, {600, S, false}, {1100, S, false}, {5000, S, false},
		}},
		{"a silent probe breaks the refusals in a row", []step{
			{0, T, false}, {100, R, false}, {200, R, false}, {300, S, false}, {400, R, false}, {600, R, false}, {700, R, true},
		}},
		{"a refusal between connections is not death", []step{
			{0, T, false}, {100, R, false}, {200, R, false}, {300, T, false}, {400, R, false}, {600, R, false},
		}},
		{"back at once when it takes a connection again (restarted at the same address)", []step{
			{0, T, false}, {100, R, false}, {400, R, true}, {500, T, false}, {600, R, false}, {800, R, false}, {900, R, true},
		}},
		{"a probe's result counts in the order it was sent: one sent before the refusals does not break them", []step{
			{0, T, false}, {100, R, false}, {200, R, false}, {50, S, false}, {300, R, false}, {150, T, false}, {400, R, true},
		}},
		{"out stays out while silent", []step{
			{0, T, false}, {100, R, false}, {400, R, true}, {500, S, true}, {1500, S, true}, {1600, R, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1_700_000_000, 0)
			var d peerDown
			for i, s := range tc.steps {
				d = d.observe(start.Add(time.Duration(s.ms)*time.Millisecond), s.o)
				if d.out != s.out {
					t.Fatalf("step %d (%d ms, outcome %d): out %v, want %v", i, s.ms, s.o, d.out, s.out)
				}
			}
		})
	}
}

// What a peer that looks dead changes in the view: every survivor leaves its node out of
// Metadata and names the upstream brokers it served at the next bridge in their rank, exactly
// as when its registration is gone, and alike on every survivor; the owner of each group is
// unchanged (ownership moves only when the session expires); the subscribers of the named ids
// are told, those of the live ids (handover) are not.
func TestPeerLookingDeadLeavesMetadataNotOwnership(t *testing.T) {
	ids := []int32{9001, 9002, 9003}
	const dead int32 = 9003
	brokers := []int32{0, 1, 2, 3, 4, 5}
	reg := func(n int32) zkstate.BridgeRegistration {
		m := map[int32]string{}
		for _, k := range brokers {
			m[k] = fmt.Sprintf("b%d:%d", n, 9100+k)
		}
		return zkstate.BridgeRegistration{NodeID: n, Kafka: fmt.Sprintf("b%d:9092", n), Proxy: m, StartedMs: 1}
	}
	// The group that the dead bridge owns, and a broker it serves.
	var group string
	for i := 0; group == ""; i++ {
		if o, _ := placement.Owner(fmt.Sprintf("g-%d", i), ids); o == dead {
			group = fmt.Sprintf("g-%d", i)
		}
	}
	served := false
	for _, k := range brokers {
		if placement.Servers(brokers, ids, func(int32, int32) bool { return true })[k] == dead {
			served = true
		}
	}
	if !served {
		t.Fatal("the dead bridge serves no broker: pick other ids")
	}

	// metadata is what a bridge's Metadata names: the other bridges and every broker's address.
	metadata := func(p *peerSet) string {
		var b strings.Builder
		nodes := []string{fmt.Sprintf("bridge %d@b%d:9092 ", p.self, p.self)} // its own node
		for _, o := range p.Others() {
			nodes = append(nodes, fmt.Sprintf("bridge %d@%s:%d ", o.NodeID, o.Host, o.Port))
		}
		slices.Sort(nodes)
		b.WriteString(strings.Join(nodes, ""))
		mine := p.proxy
		for _, k := range brokers {
			if e, ok := p.ServedElsewhere()[k]; ok {
				fmt.Fprintf(&b, "broker %d@%s:%d ", k, e.Host, e.Port)
			} else {
				fmt.Fprintf(&b, "broker %d@%s ", k, mine[k])
			}
		}
		return b.String()
	}
	survivor := func(self int32, with []int32) *peerSet {
		p := newPeerSet(self, "/zkbridge", zerolog.Nop())
		p.proxy = reg(self).Proxy
		others := map[int32]zkstate.BridgeRegistration{}
		for _, n := range with {
			if n != self {
				others[n] = reg(n)
			}
		}
		p.publish(others)
		return p
	}

	var views []string
	for _, self := range ids[:2] {
		p := survivor(self, ids)
		var live, named int
		p.subscribe(func(_, _ *liveView) { live++ })
		p.subscribeNamed(func(_, _ *liveView) { named++ })
		before := metadata(p)

		// Refused for refusedFor after a connection: out.
		standing := map[int32]peerDown{}
		keys := map[int32]peerDownKey{dead: {"b9003:9092", 1}}
		at := time.Unix(1_700_000_000, 0)
		for i, o := range []probeOutcome{probeTook, probeRefused, probeRefused, probeRefused, probeRefused} {
			standing[dead] = standing[dead].observe(at.Add(time.Duration(i)*probeEvery), o)
			p.setOut(standing, keys)
		}
		if !standing[dead].out {
			t.Fatal("the rule did not find the peer dead")
		}
		got := metadata(p)
		if strings.Contains(got, "bridge 9003") {
			t.Errorf("bridge %d: Metadata still lists the dead bridge: %s", self, got)
		}
		if strings.Contains(got, "b9003:") {
			t.Errorf("bridge %d: Metadata names a broker at the dead bridge: %s", self, got)
		}
		if gone := metadata(survivor(self, ids[:2])); got != gone {
			t.Errorf("bridge %d: with the dead bridge out\n  %s\nwith its registration gone\n  %s", self, got, gone)
		}
		views = append(views, got)
		if b, remote := p.Owner(group); !remote || b.NodeID != dead || p.owns(group) {
			t.Errorf("bridge %d: group %s named at %v (remote %v), want still the dead bridge's until its session ends", self, group, b, remote)
		}
		if !slices.Equal(p.current().ids, ids) {
			t.Errorf("bridge %d: live ids %v, want %v", self, p.current().ids, ids)
		}
		if live != 0 || named != 1 {
			t.Errorf("bridge %d: live-id subscribers told %d times (want 0), named-id subscribers %d (want 1)", self, live, named)
		}

		// A connection taken again: named again at once, as before.
		standing[dead] = standing[dead].observe(at.Add(time.Second), probeTook)
		p.setOut(standing, keys)
		if again := metadata(p); again != before {
			t.Errorf("bridge %d: after a connection again\n  %s\nwant\n  %s", self, again, before)
		}
		if named != 2 {
			t.Errorf("bridge %d: named-id subscribers told %d times, want 2", self, named)
		}
	}
	if views[0] != views[1] {
		t.Errorf("the survivors differ:\n  %s\n  %s", views[0], views[1])
	}
}

// A probe that hangs at the kill does not hold the others back. A SYN sent while the killed
// process's kernel tears its listener down may go unanswered (the dial times out after
// probeTimeout, a silent outcome), while every later probe is refused at once. The survivors must
// still decide within about refusedFor plus a probe interval of the kill, as a survivor whose
// probes all met refusals does: before, the hung dial kept that peer's probes back until its
// timeout (one dial in flight per peer) and its silent result then broke the refusals in a row,
// so this survivor decided refusedFor after the timeout, 0.4 s after the other (seen in a traced
// crash failover: the survivors 420 ms apart).
func TestPeerLooksDeadDespiteAProbeHungAtTheKill(t *testing.T) {
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	const addr = "bridge-2.test:29092"
	var mu sync.Mutex
	var killed time.Time
	hung := false
	p.probes.dial = func(_, a string, timeout time.Duration) (net.Conn, error) {
		mu.Lock()
		k, hang := killed, !killed.IsZero() && !hung
		hung = hung || hang
		mu.Unlock()
		switch {
		case k.IsZero():
			c1, c2 := net.Pipe()
			_ = c2.Close()
			return c1, nil
		case hang:
			time.Sleep(timeout)
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
		default:
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
	}
	p.publish(map[int32]zkstate.BridgeRegistration{9002: {NodeID: 9002, Kafka: addr, StartedMs: 1}})
	defer watching(t, p)()
	time.Sleep(3 * probeEvery) // the peer took connections
	mu.Lock()
	killed = time.Now()
	mu.Unlock()
	for !p.lookingDead(9002) {
		if time.Since(killed) > 3*time.Second {
			t.Fatal("the peer never looked dead")
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(killed)
	t.Logf("looks dead %v after the kill", took)
	// Refused from the second probe on: out at most refusedFor + 2 probe intervals after the
	// kill, with room for a loaded machine; before, at least probeTimeout + refusedFor.
	if limit := refusedFor + 2*probeEvery + 150*time.Millisecond; took > limit {
		t.Errorf("the peer looked dead %v after the kill, want within %v (the hung probe held the others back)", took, limit)
	}
}

// A peer killed before the watch's first probe reached it still looks dead. A bridge that
// joins the live view is dialed at once (probeJoined), and the watch's probes go out every
// probeEvery: a peer killed in between was, before, never taken for dead by the watch, whose own
// probes had never had a connection ("an address never reached is not a dead peer"), though the
// join's dial took one at that address. Seen as a survivor that never left such a bridge out
// of Metadata until its session expired.
func TestPeerLooksDeadWhenKilledBeforeTheWatchReachedIt(t *testing.T) {
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	const addr = "bridge-2.test:29092"
	var mu sync.Mutex
	dials := 0
	took := make(chan struct{})
	p.probes.dial = func(_, a string, _ time.Duration) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if dials++; dials == 1 { // the join's dial: the peer is up
			close(took)
			c1, c2 := net.Pipe()
			_ = c2.Close()
			return c1, nil
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	p.publish(map[int32]zkstate.BridgeRegistration{9002: {NodeID: 9002, Kafka: addr, StartedMs: 1}})
	<-took // killed now: every later dial is refused
	killed := time.Now()
	defer watching(t, p)()
	for !p.lookingDead(9002) {
		if time.Since(killed) > 2*time.Second {
			t.Fatal("a peer killed before the watch's first probe never looked dead, though the join's dial took a connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("looks dead %v after the kill", time.Since(killed))
}

// The survivors' refused Fetches (relay.Proxy.Refresh) make clients refresh their metadata
// when a bridge drops out of it. When it drops out because it looks dead, each survivor decides
// on its own probes, up to a probe interval after the first: a refresh at a survivor's own
// decision could be answered by one that has not decided yet, naming the dead bridge again for
// metadata.min.age. So the refresh comes one probe interval after the decision (and not at all
// if the peer is named again by then). A bridge that leaves the live view (a drain, an expiry)
// is seen by every bridge within a ZooKeeper notification and read: refreshed at once.
func TestPeerOmissionRefreshesOneProbeIntervalLater(t *testing.T) {
	reg := func(n int32) zkstate.BridgeRegistration {
		return zkstate.BridgeRegistration{NodeID: n, Kafka: fmt.Sprintf("b%d:9092", n), StartedMs: 1}
	}
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	p.publish(map[int32]zkstate.BridgeRegistration{9002: reg(9002), 9003: reg(9003)})
	refreshed := 0
	var delays []time.Duration
	var pending []func()
	p.subscribeNamed(p.refreshOnOmission(func() { refreshed++ }, func(d time.Duration, f func()) {
		delays, pending = append(delays, d), append(pending, f)
	}))
	fire := func() {
		fs := pending
		pending = nil
		for _, f := range fs {
			f()
		}
	}
	keys := map[int32]peerDownKey{9003: {"b9003:9092", 1}}
	setOut := func(out bool) { p.setOut(map[int32]peerDown{9003: {everUp: true, out: out}}, keys) }
	check := func(step string, wantRefreshed int, wantDelays ...time.Duration) {
		t.Helper()
		if refreshed != wantRefreshed || !slices.Equal(delays, wantDelays) {
			t.Fatalf("%s: refreshed %d times, delays %v; want %d, %v", step, refreshed, delays, wantRefreshed, wantDelays)
		}
	}

	setOut(true)
	check("9003 looks dead", 0, probeEvery)
	fire()
	check("a probe interval later", 1, probeEvery)

	setOut(false)
	check("9003 named again", 1, probeEvery)
	setOut(true)
	check("9003 looks dead again", 1, probeEvery, probeEvery)
	setOut(false)
	fire()
	check("9003 named again before the interval ended", 1, probeEvery, probeEvery)

	p.publish(map[int32]zkstate.BridgeRegistration{9003: reg(9003)})
	check("9002 left the live view", 2, probeEvery, probeEvery)
	fire()
	check("9002 left the live view", 2, probeEvery, probeEvery)

	setOut(true)
	p.leave()
	fire()
	check("9003 looks dead while we drain", 2, probeEvery, probeEvery, probeEvery)
}

// watching runs p's probe watch until the returned stop is called, which waits for it to end.
func watching(t *testing.T, p *peerSet) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.watchPeers(ctx)
	}()
	return func() { cancel(); <-done }
}
