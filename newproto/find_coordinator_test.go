package newproto_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

type coordView struct {
	key        string
	node       int32
	host       string
	port       int32
	err        int16
	hasMessage bool
}

// findCoordinator asks for keys of one type at version v and returns the
// answers, flattening v0-v3 (one key) and v4+ (batched, KIP-699).
func findCoordinator(t *testing.T, c *kafkatest.Client, v int16, keyType int8, keys ...string) []coordView {
	t.Helper()
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.SetVersion(v)
	req.CoordinatorType = keyType
	if v >= 4 {
		req.CoordinatorKeys = keys
	} else {
		req.CoordinatorKey = keys[0]
	}
	resp := c.RoundTrip(req).(*kmsg.FindCoordinatorResponse)
	if v < 4 {
		return []coordView{{keys[0], resp.NodeID, resp.Host, resp.Port, resp.ErrorCode, resp.ErrorMessage != nil}}
	}
	var out []coordView
	for _, rc := range resp.Coordinators {
		out = append(out, coordView{rc.Key, rc.NodeID, rc.Host, rc.Port, rc.ErrorCode, rc.ErrorMessage != nil})
	}
	return out
}

func TestFindCoordinatorGroup(t *testing.T) {
	ts := startServer(t, newproto.Config{NodeID: 7, AdvertisedHost: "bridge.test", AdvertisedPort: 19092})
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(0, 4) {
		keys := []string{"orders-consumer"}
		if v >= 4 {
			keys = append(keys, "billing")
		}
		got := findCoordinator(t, c, v, 0, keys...)
		if len(got) != len(keys) {
			t.Fatalf("v%d: %d answers for %d keys", v, len(got), len(keys))
		}
		for i, g := range got {
			want := coordView{keys[i], 7, "bridge.test", 19092, 0, false}
			if g != want {
				t.Errorf("v%d: got %+v, want %+v", v, g, want)
			}
		}
	}
}

// Transactions are not coordinated by the bridge: COORDINATOR_NOT_AVAILABLE
// with a message (v1+; v0 has no key type). Unknown key types are
// INVALID_REQUEST, as in Kafka.
func TestFindCoordinatorNotGroup(t *testing.T) {
	ts := startServer(t, newproto.Config{NodeID: 7})
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(1, 4) {
		for _, tc := range []struct {
			keyType int8
			code    newproto.ErrorCode
		}{{1, newproto.ErrCoordinatorNotAvailable}, {9, newproto.ErrInvalidRequest}} {
			for _, g := range findCoordinator(t, c, v, tc.keyType, "txn-1") {
				if g.err != int16(tc.code) || g.node != -1 || !g.hasMessage {
					t.Errorf("v%d type %d: got %+v, want %s with a message", v, tc.keyType, g, tc.code.Name())
				}
			}
		}
	}
}

// Without an advertised address the coordinator is the address dialed.
func TestFindCoordinatorDialedAddress(t *testing.T) {
	ts := startServer(t, newproto.Config{NodeID: 3})
	c := kafkatest.Dial(t, ts.addr)
	got := findCoordinator(t, c, 2, 0, "g")[0]
	if want := (coordView{"g", 3, "127.0.0.1", ts.port(), 0, false}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// unavailableGroups is Groups that can serve no group (the bridge without
// ZooKeeper).
type unavailableGroups struct{ *fakeGroups }

func (unavailableGroups) Available() error { return errors.New("no zookeeper session") }

// While the Coordinator can serve no group, FindCoordinator answers
// COORDINATOR_NOT_AVAILABLE with the reason (issue 17 §5: clients back off
// on it) instead of a node whose every group answer would be that; a
// transaction key is answered as before.
func TestFindCoordinatorUnavailable(t *testing.T) {
	gc := newproto.NewGroupCoordinator(unavailableGroups{newFakeGroups(t)})
	ts := startServer(t, newproto.Config{NodeID: 7, AdvertisedHost: "bridge.test", AdvertisedPort: 19092, Coordinator: gc})
	c := kafkatest.Dial(t, ts.addr)
	for _, v := range kafkatest.Versions(0, 4) {
		for _, g := range findCoordinator(t, c, v, 0, "orders-consumer") {
			want := coordView{"orders-consumer", -1, "", -1, int16(newproto.ErrCoordinatorNotAvailable), v >= 1}
			if g != want {
				t.Errorf("v%d: got %+v, want %+v", v, g, want)
			}
		}
	}
}
