package newproto_test

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// fakePeers: groups listed in owners belong to that peer; every other group to us.
type fakePeers struct {
	owners map[string]newproto.Broker
	others []newproto.Broker
}

func (p *fakePeers) Owner(group string) (newproto.Broker, bool) {
	b, ok := p.owners[group]
	return b, ok
}

func (p *fakePeers) Others() []newproto.Broker { return p.others }

// Several bridges as one service (issue 15): FindCoordinator names the group's owner, at every
// version and for each key of a batched v4 request, with the address it advertises.
func TestFindCoordinatorNamesOwner(t *testing.T) {
	peer := newproto.Broker{NodeID: 9002, Host: "bridge-2.test", Port: 29092}
	ts := startServer(t, newproto.Config{NodeID: 9001, AdvertisedHost: "bridge-1.test", AdvertisedPort: 19092,
		Peers: &fakePeers{owners: map[string]newproto.Broker{"billing": peer}, others: []newproto.Broker{peer}}})
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(0, 4) {
		keys := []string{"billing"}
		if v >= 4 {
			keys = append(keys, "orders")
		}
		got := findCoordinator(t, c, v, 0, keys...)
		want := []coordView{{"billing", 9002, "bridge-2.test", 29092, 0, false}, {"orders", 9001, "bridge-1.test", 19092, 0, false}}
		if !slices.Equal(got, want[:len(keys)]) {
			t.Errorf("v%d: got %+v, want %+v", v, got, want[:len(keys)])
		}
	}
}

// Metadata lists every live bridge with its advertised address, a bridge's id replacing a
// Cluster broker's as our own does; with no real broker the controller is the lowest bridge, so
// that every bridge answers the same.
func TestMetadataListsPeers(t *testing.T) {
	peers := []newproto.Broker{{NodeID: 2, Host: "bridge-2.test", Port: 29092}, {NodeID: 9003, Host: "bridge-3.test", Port: 39092}}
	for _, tc := range []struct {
		name           string
		cluster        newproto.Cluster
		wantIDs        []int32
		wantController int32
	}{
		{"with brokers", testCluster(), []int32{1, 2, 9001, 9003}, 1},
		{"without brokers", nil, []int32{2, 9001, 9003}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newproto.Config{NodeID: 9001, AdvertisedHost: "bridge-1.test", AdvertisedPort: 19092,
				Cluster: tc.cluster, Peers: &fakePeers{others: peers}})
			c := kafkatest.Dial(t, ts.addr)
			req := kmsg.NewPtrMetadataRequest()
			req.SetVersion(1)
			resp := c.RoundTrip(req).(*kmsg.MetadataResponse)
			var ids []int32
			for _, b := range resp.Brokers {
				ids = append(ids, b.NodeID)
				if b.NodeID == 2 && (b.Host != "bridge-2.test" || b.Port != 29092) {
					t.Errorf("broker 2 at %s:%d, want the bridge's advertised bridge-2.test:29092", b.Host, b.Port)
				}
			}
			if !slices.Equal(ids, tc.wantIDs) {
				t.Errorf("brokers %v, want %v", ids, tc.wantIDs)
			}
			if resp.ControllerID != tc.wantController {
				t.Errorf("controller %d, want %d", resp.ControllerID, tc.wantController)
			}
		})
	}
}
