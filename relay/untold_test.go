package relay_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/newproto"
)

// Untold counts the client connections that fetched through the proxy listener of a broker
// another bridge serves now (the drain waits for them to be refused once): not a connection
// that only produced there, which no Fetch refusal can reach. Before, any request relayed on a
// proxy listener marked its connection as fetching, and a draining bridge with no producer
// linger waited its whole handoverLinger for its producers.
func TestProxyUntoldCountsFetchersOnly(t *testing.T) {
	peers := &movedPeers{}
	e := startRelay(t, relayOpts{peers: peers})
	e.pinLeaders(t, "orders", 3)
	producer := newRelayClient(t, e.addr)
	produce(t, producer, "orders", 0, "p0", 10)
	consumer := newRelayClient(t, e.addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	for n := 0; n < 10; {
		n += consumer.PollFetches(t.Context()).NumRecords()
	}
	peers.elsewhere.Store(&map[int32]newproto.Broker{0: {NodeID: 0, Host: "other", Port: 9092}})
	if n := e.proxy.Untold(); n != 1 {
		t.Fatalf("Untold() = %d with broker 0 served elsewhere, want 1 (the consumer's connection to it, not the producer's)", n)
	}
}
