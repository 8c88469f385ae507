package bridge

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Several bridges with the data path (issue 15 item 3), as bridges from before the balanced rule
// serve brokers (a registration without broker_placement, during a rolling upgrade): each
// upstream broker is served by one bridge, the first in placement.Ranked("broker/<k>") that
// advertises a listener for it; every bridge computes the same from the registrations, and a
// broker whose bridge goes moves to the next in rank.
func TestPlaceBrokers(t *testing.T) {
	serving := func(t *testing.T, live map[int32]map[int32]string) map[int32]int32 {
		t.Helper()
		return brokersServed(t, live, 0) // bridges from before the balanced rule: one by one
	}
	proxies := proxiesOf
	brokers := []int32{0, 1, 2, 3, 4, 5}
	ids := []int32{9001, 9002, 9003}
	all := map[int32]map[int32]string{}
	for _, n := range ids {
		all[n] = proxies(n, brokers...)
	}
	got := serving(t, all)
	for _, k := range brokers {
		if want, _ := placement.Owner(placement.BrokerKey(k), ids); got[k] != want {
			t.Errorf("broker %d served by %d, want placement's %d", k, got[k], want)
		}
	}

	// A bridge goes: its brokers move to the next in rank, the others stay.
	gone := got[0]
	survivors := maps.Clone(all)
	delete(survivors, gone)
	after := serving(t, survivors)
	for _, k := range brokers {
		want := got[k]
		if want == gone {
			want = placement.Ranked(placement.BrokerKey(k), ids)[1]
		}
		if after[k] != want {
			t.Errorf("after %d left: broker %d served by %d, want %d", gone, k, after[k], want)
		}
	}

	// A bridge that advertises no listener for a broker (it has not opened it yet, or runs
	// without the data path) is passed over for it.
	partial := maps.Clone(all)
	partial[gone] = proxies(gone, 5)
	for k, n := range serving(t, partial) {
		if n == gone && k != 5 {
			t.Errorf("broker %d served by %d, which advertises no listener for it", k, n)
		}
	}

	// A bridge alone serves every broker it has a listener for, and names none elsewhere.
	p := newPeerSet(9001, "/zkbridge", zerolog.Nop())
	p.proxy = all[9001]
	if v := p.publish(nil); len(v.elsewhere) != 0 || len(v.servers) != len(brokers) {
		t.Errorf("alone: elsewhere %v, servers %v", v.elsewhere, v.servers)
	}

	// A draining bridge (no longer live) names every broker at the bridges that remain.
	p = newPeerSet(9001, "/zkbridge", zerolog.Nop())
	p.proxy = all[9001]
	p.publish(map[int32]zkstate.BridgeRegistration{9002: {NodeID: 9002, Kafka: "b9002:9092", Proxy: all[9002]}})
	v := p.leave()
	if keys := slices.Sorted(maps.Keys(v.elsewhere)); !slices.Equal(keys, brokers) {
		t.Errorf("draining: brokers named elsewhere %v, want all of %v", keys, brokers)
	}
}

// With every live bridge on the balanced rule (placement.BrokerVersion in its registration), no
// bridge serves more than its share of the upstream brokers, rounded up: with three brokers and
// three bridges, one each. One by one (placement.Server), 9003 served brokers 0 and 2 here, and a
// kill -9 of it took two of the three brokers' addresses, and its own, out of every client's
// Metadata at once (the lost sessions of the crash benchmark: a member's two group lookups in a
// row at dead addresses). A bridge of the older rule among them keeps every bridge on that rule,
// so that all name the same servers.
func TestPlaceBrokersBalanced(t *testing.T) {
	ids := []int32{9001, 9002, 9003}
	for _, brokers := range [][]int32{{0, 1, 2}, {1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3, 4, 5}, {7}, {0, 5, 9, 13, 21}} {
		all := map[int32]map[int32]string{}
		for _, n := range ids {
			all[n] = proxiesOf(n, brokers...)
		}
		share := (len(brokers) + len(ids) - 1) / len(ids)
		count := map[int32]int{}
		for _, n := range brokersServed(t, all, placement.BrokerVersion) {
			count[n]++
		}
		for n, c := range count {
			if c > share {
				t.Errorf("brokers %v over %v: %d serves %d (%v), want at most %d", brokers, ids, n, c, count, share)
			}
		}
		// A bridge goes: the two left share its brokers, each at most its new share.
		for _, gone := range ids {
			left := maps.Clone(all)
			delete(left, gone)
			count := map[int32]int{}
			for _, n := range brokersServed(t, left, placement.BrokerVersion) {
				count[n]++
			}
			for n, c := range count {
				if n == gone || c > (len(brokers)+1)/2 {
					t.Errorf("brokers %v, %d gone: %d serves %d (%v)", brokers, gone, n, c, count)
				}
			}
		}
	}
	// One bridge of the older rule: every bridge computes the older rule's servers.
	brokers := []int32{0, 1, 2}
	all := map[int32]map[int32]string{}
	for _, n := range ids {
		all[n] = proxiesOf(n, brokers...)
	}
	old := brokersServedMixed(t, all, map[int32]int{9001: placement.BrokerVersion, 9002: 0, 9003: placement.BrokerVersion})
	for _, k := range brokers {
		if want, _ := placement.Owner(placement.BrokerKey(k), ids); old[k] != want {
			t.Errorf("with 9002 on the older rule: broker %d served by %d, want the older rule's %d", k, old[k], want)
		}
	}
}

// proxiesOf is the proxy listeners bridge node advertises for brokers.
func proxiesOf(node int32, brokers ...int32) map[int32]string {
	m := map[int32]string{}
	for _, k := range brokers {
		m[k] = fmt.Sprintf("b%d:%d", node, 9100+k)
	}
	return m
}

// brokersServed is brokersServedMixed with every bridge's registration advertising rule.
func brokersServed(t *testing.T, live map[int32]map[int32]string, rule int) map[int32]int32 {
	t.Helper()
	rules := map[int32]int{}
	for n := range live {
		rules[n] = rule
	}
	return brokersServedMixed(t, live, rules)
}

// brokersServedMixed returns, as every bridge of live computes it, the bridge serving each
// broker, their registrations advertising the broker placement rules given; it fails the test
// when two bridges disagree or a bridge names an address that is not the serving bridge's
// listener. A bridge on an older rule runs older code: only those on the current rule compute
// here (all of them, as this code, when none is).
func brokersServedMixed(t *testing.T, live map[int32]map[int32]string, rules map[int32]int) map[int32]int32 {
	t.Helper()
	current := 0
	for n := range live {
		if rules[n] == placement.BrokerVersion {
			current++
		}
	}
	var first map[int32]int32
	for self, mine := range live {
		if current > 0 && rules[self] != placement.BrokerVersion {
			continue
		}
		p := newPeerSet(self, "/zkbridge", zerolog.Nop())
		p.proxy = mine
		others := map[int32]zkstate.BridgeRegistration{}
		for n, m := range live {
			if n != self {
				others[n] = zkstate.BridgeRegistration{NodeID: n, Kafka: fmt.Sprintf("b%d:9092", n), Proxy: m, BrokerPlacement: rules[n]}
			}
		}
		v := p.publish(others)
		for k, n := range v.servers {
			b, remote := v.elsewhere[k]
			switch {
			case n == self && remote:
				t.Errorf("bridge %d serves broker %d yet names it at %v", self, k, b)
			case n != self && (!remote || fmt.Sprintf("%s:%d", b.Host, b.Port) != live[n][k]):
				t.Errorf("bridge %d: broker %d served by %d named at %v, want %s", self, k, n, b, live[n][k])
			}
		}
		if first == nil {
			first = v.servers
		} else if !maps.Equal(first, v.servers) {
			t.Errorf("bridge %d computes %v, another %v", self, v.servers, first)
		}
	}
	return first
}
