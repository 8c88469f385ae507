package bridge_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
)

// What makes bridges of one service answer Metadata differently (docs/several-bridges.md
// "Bridges that disagree").
func TestDisagreements(t *testing.T) {
	relay := func(id int32, host string) zkstate.BridgeRegistration {
		return zkstate.BridgeRegistration{NodeID: id, Kafka: host + ":9092", Advertised: host + ":9092", DataPath: true,
			Proxy: map[int32]string{0: host + ":9093"}}
	}
	groupsOnly := func(id int32, host string) zkstate.BridgeRegistration {
		return zkstate.BridgeRegistration{NodeID: id, Kafka: host + ":9092", Advertised: host + ":9092"}
	}
	old := relay(4, "h4") // before the data_path field: its proxy listeners say it relays
	old.DataPath = false
	dialed := relay(5, "h5")
	dialed.DialedHost = true
	for _, tc := range []struct {
		name string
		live []zkstate.BridgeRegistration
		want []string // node:kind, then a word of the detail
	}{
		{"one bridge never disagrees", []zkstate.BridgeRegistration{groupsOnly(1, "0.0.0.0")}, nil},
		{"all relay", []zkstate.BridgeRegistration{relay(1, "h1"), relay(2, "h2"), old}, nil},
		{"all serve groups only", []zkstate.BridgeRegistration{groupsOnly(1, "h1"), groupsOnly(2, "h2")}, nil},
		{"one without the data path", []zkstate.BridgeRegistration{relay(1, "h1"), groupsOnly(2, "h2"), relay(3, "h3")},
			[]string{"2:data_path:serves groups only (no data path) while bridges [1 3]"}},
		{"a tie names the ones without", []zkstate.BridgeRegistration{relay(1, "h1"), groupsOnly(2, "h2")},
			[]string{"2:data_path:serves groups only"}},
		{"one relaying among group-only ones", []zkstate.BridgeRegistration{groupsOnly(1, "h1"), groupsOnly(2, "h2"), relay(3, "h3")},
			[]string{"3:data_path:relays to the upstream brokers (data path) while bridges [1 2]"}},
		{"a wildcard Kafka address", []zkstate.BridgeRegistration{relay(1, "h1"), relay(2, "0.0.0.0")},
			[]string{"2:advertised_host:kafka 0.0.0.0:9092"}},
		{"an empty host and an IPv6 wildcard", []zkstate.BridgeRegistration{groupsOnly(1, ""), groupsOnly(2, "[::]")},
			[]string{"1:advertised_host:kafka :9092", "2:advertised_host:kafka [::]:9092"}},
		{"a proxy listener at a wildcard", []zkstate.BridgeRegistration{relay(1, "h1"),
			{NodeID: 2, Kafka: "h2:9092", DataPath: true, Proxy: map[int32]string{0: "h2:9093", 1: "0.0.0.0:9094"}}},
			[]string{"2:advertised_host:proxy for broker 1 0.0.0.0:9094"}},
		{"a bridge that names itself by the dialed host", []zkstate.BridgeRegistration{relay(1, "h1"), dialed},
			[]string{"5:advertised_host:the other bridges name it h5:9092"}},
		{"both kinds", []zkstate.BridgeRegistration{relay(1, "h1"), groupsOnly(2, "0.0.0.0"), relay(3, "h3")},
			[]string{"2:advertised_host:kafka 0.0.0.0:9092", "2:data_path:serves groups only"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := bridge.Disagreements(tc.live)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %d: %v", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				parts := strings.SplitN(w, ":", 3)
				if key := fmt.Sprintf("%d:%s", got[i].Node, got[i].Kind); key != parts[0]+":"+parts[1] || !strings.Contains(got[i].Detail, parts[2]) {
					t.Errorf("disagreement %d = %+v, want %s", i, got[i], w)
				}
			}
			// Every bridge computes the same from the same registrations, in whatever order
			// it read them.
			rev := slices.Clone(tc.live)
			slices.Reverse(rev)
			if again := bridge.Disagreements(rev); !slices.Equal(again, got) {
				t.Errorf("in reverse order: %v, want %v", again, got)
			}
		})
	}
}
