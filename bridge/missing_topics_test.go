package bridge_test

import (
	"io"
	"testing"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 17 §4: a member that subscribed to a topic the cluster does not have was not logged
// (its assignor silently gives it nothing of it). The bridge now warns once per group and topic,
// however often members join.
func TestIntegration_MissingSubscribedTopicLoggedOnce(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	zk := zktest.OpenStore(t, connect)
	loadTopicsLayout(t, zk, map[string]int32{"orders": 1}, false)
	logs := &lineLog{}
	b := startBridge(t, connect, clientsNode, func(c *bridge.Config) {
		c.Logger = zerolog.New(io.MultiWriter(logs, zerolog.ConsoleWriter{Out: testLogOut(t), NoColor: true}))
	})
	addr := b.Addr().String()
	for range 3 {
		req := wireJoinReq("ghostly", "")
		req.Protocols[0].Metadata = subscription(0, "orders", "ghost")
		kafkaRoundTrip(t, addr, req)
	}
	if n := logs.count(`"group":"ghostly"`, `"topic":"ghost"`, "not in /brokers/topics"); n != 1 {
		t.Errorf("missing topic logged %d times, want once", n)
	}
	if n := logs.count(`"topic":"orders"`, "not in /brokers/topics"); n != 0 {
		t.Errorf("an existing topic logged as missing %d times", n)
	}
}
