package relay_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// movedPeers is a relay.Peers with no other bridge listed whose brokers served elsewhere the
// test sets.
type movedPeers struct {
	elsewhere atomic.Pointer[map[int32]newproto.Broker]
}

func (m *movedPeers) Others() []newproto.Broker { return nil }

func (m *movedPeers) ServedElsewhere() map[int32]newproto.Broker {
	if p := m.elsewhere.Load(); p != nil {
		return *p
	}
	return nil
}

// Producers counts the open client connections that produced through the proxy listener of a
// broker another bridge serves now (relay/drain.go: the draining bridge keeps relaying for them
// until kgo's metadata.min.age has passed since the drain began, or they close): not a
// connection that only fetched there, not one that produced to a broker still served here, and
// not once the producer's client closed.
func TestProxyProducers(t *testing.T) {
	peers := &movedPeers{}
	e := startRelay(t, relayOpts{peers: peers})
	e.pinLeaders(t, "orders", 3)
	producer := newRelayClient(t, e.addr)
	produce(t, producer, "orders", 0, "p0", 10)
	produce(t, producer, "orders", 1, "p1", 10)
	// A consumer of partition 0 through the same proxy listener, on its own fetch connection.
	consumer := newRelayClient(t, e.addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	for n := 0; n < 10; {
		fs := consumer.PollFetches(t.Context())
		n += fs.NumRecords()
	}
	if n := e.proxy.Producers(); n != 0 {
		t.Fatalf("Producers() = %d with every broker served here, want 0", n)
	}

	peers.elsewhere.Store(&map[int32]newproto.Broker{0: {NodeID: 0, Host: "other", Port: 9092}})
	if n := e.proxy.Producers(); n != 1 {
		t.Fatalf("Producers() = %d with broker 0 served elsewhere, want 1 (the producer's connection to it, not the consumer's)", n)
	}
	producer.Close()
	zktest.Eventually(t, 5*time.Second, "the producer's connections closed", func() (bool, string) {
		n := e.proxy.Producers()
		return n == 0, fmt.Sprintf("Producers() = %d", n)
	})
}

// RefuseProducers (the draining bridge, once it has relayed for its producers as long as kgo's
// metadata.min.age): the next Produce of a connection producing to a broker another bridge
// serves is answered NOT_LEADER_OR_FOLLOWER, once per connection, so that the producer refreshes
// its metadata while this bridge's listeners still answer; the record is then delivered on the
// retry and nothing is refused twice. Not
// before Drain, and not for a broker still served here.
func TestProxyRefusesProducersOnce(t *testing.T) {
	peers := &movedPeers{}
	e := startRelay(t, relayOpts{peers: peers})
	e.pinLeaders(t, "orders", 3)
	producer := newRelayClient(t, e.addr, kgo.MetadataMinAge(100*time.Millisecond))
	refusals := func() float64 {
		return kafkatest.CounterValue(t, e.reg, "zkbridge_kafka_relay_failures_total", map[string]string{"reason": "draining"})
	}
	produce(t, producer, "orders", 0, "before", 1)
	// Served "elsewhere" at this proxy's own listener for it, so that the producer's refreshed
	// metadata names the address it has: the retry goes out on the connection refused once.
	ports, _ := e.proxy.Ports()
	peers.elsewhere.Store(&map[int32]newproto.Broker{0: {NodeID: 0, Host: "127.0.0.1", Port: ports[0]}})

	e.proxy.RefuseProducers() // not draining: nothing changes
	produce(t, producer, "orders", 0, "not-draining", 1)
	if n := refusals(); n != 0 {
		t.Fatalf("refused %v Produces before Drain", n)
	}

	e.proxy.Drain()
	e.proxy.RefuseProducers()
	produce(t, producer, "orders", 1, "served-here", 1) // broker 1 is not served elsewhere
	if n := refusals(); n != 0 {
		t.Fatalf("refused %v Produces to a broker served here", n)
	}
	produce(t, producer, "orders", 0, "refused-once", 1) // delivered on the retry
	produce(t, producer, "orders", 0, "after", 1)
	if n := refusals(); n != 1 {
		t.Fatalf("refused %v Produces, want 1: once on the connection to broker 0", n)
	}
}
