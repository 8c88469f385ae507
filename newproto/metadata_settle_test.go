package newproto_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// settlingPeers is fakePeers with PeerSettling: settle drops the dead peer and closes the channel.
type settlingPeers struct {
	mu      sync.Mutex
	others  []newproto.Broker
	settled chan struct{}
}

func (p *settlingPeers) Owner(string) (newproto.Broker, bool) { return newproto.Broker{}, false }

func (p *settlingPeers) Others() []newproto.Broker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.others
}

func (p *settlingPeers) Settled() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled
}

func (p *settlingPeers) settle(others []newproto.Broker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.others = others
	close(p.settled)
}

// Metadata waits while a peer that hung up on this bridge is being probed (PeerSettling), and
// then lists the bridges as they stand: a killed bridge's clients ask at the kill, and must not
// be told its address. The wait is bounded by MetadataSettleWait.
func TestMetadataWaitsForThePeersToSettle(t *testing.T) {
	live := newproto.Broker{NodeID: 9002, Host: "bridge-2.test", Port: 29092}
	dead := newproto.Broker{NodeID: 9003, Host: "bridge-3.test", Port: 39092}
	ask := func(c *kafkatest.Client) []int32 {
		req := kmsg.NewPtrMetadataRequest()
		req.SetVersion(7)
		var ids []int32
		for _, b := range c.RoundTrip(req).(*kmsg.MetadataResponse).Brokers {
			ids = append(ids, b.NodeID)
		}
		return ids
	}

	peers := &settlingPeers{others: []newproto.Broker{live, dead}, settled: make(chan struct{})}
	ts := startServer(t, newproto.Config{NodeID: 9001, AdvertisedHost: "bridge-1.test", AdvertisedPort: 19092, Peers: peers})
	c := kafkatest.Dial(t, ts.addr)
	answered := make(chan []int32, 1)
	go func() { answered <- ask(c) }()
	select {
	case got := <-answered:
		t.Fatalf("answered %v while a peer is being probed, want held", got)
	case <-time.After(newproto.MetadataSettleWait / 2):
	}
	peers.settle([]newproto.Broker{live})
	select {
	case got := <-answered:
		if len(got) != 2 || got[0] != 9001 || got[1] != 9002 {
			t.Errorf("answered %v once settled, want [9001 9002] (the dead peer left out)", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not answered 5 s after the peers settled")
	}

	// Never settled: answered after MetadataSettleWait, as the bridges stand.
	stuck := &settlingPeers{others: []newproto.Broker{live}, settled: make(chan struct{})}
	ts = startServer(t, newproto.Config{NodeID: 9001, AdvertisedHost: "bridge-1.test", AdvertisedPort: 19092, Peers: stuck})
	c = kafkatest.Dial(t, ts.addr)
	start := time.Now()
	if got := ask(c); len(got) != 2 {
		t.Errorf("answered %v, want [9001 9002]", got)
	}
	if took := time.Since(start); took < newproto.MetadataSettleWait {
		t.Errorf("answered %v after the request with the peers never settled, want at least MetadataSettleWait %v", took, newproto.MetadataSettleWait)
	}
}
