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

// Several bridges with the data path (issue 15 item 3): each upstream broker is served by one
// bridge, the first in placement.Ranked("broker/<k>") that advertises a listener for it; every
// bridge computes the same from the registrations, and a broker whose bridge goes moves to the
// next in rank.
func TestPlaceBrokers(t *testing.T) {
	proxies := func(node int32, brokers ...int32) map[int32]string {
		m := map[int32]string{}
		for _, k := range brokers {
			m[k] = fmt.Sprintf("b%d:%d", node, 9100+k)
		}
		return m
	}
	// serving returns, as every bridge of live computes it, the bridge serving each broker,
	// failing the test when two bridges disagree or a bridge names an address that is not the
	// serving bridge's listener.
	serving := func(t *testing.T, live map[int32]map[int32]string) map[int32]int32 {
		t.Helper()
		var first map[int32]int32
		for self, mine := range live {
			p := newPeerSet(self, "/zkbridge", zerolog.Nop())
			p.proxy = mine
			others := map[int32]zkstate.BridgeRegistration{}
			for n, m := range live {
				if n != self {
					others[n] = zkstate.BridgeRegistration{NodeID: n, Kafka: fmt.Sprintf("b%d:9092", n), Proxy: m}
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
