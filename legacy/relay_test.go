package legacy

import (
	"context"
	"net"
	"testing"
	"time"
)

// forwardCoord is a fakeCoord that sends every version 0 registration to bridge id at addr
// (Forwarder); addr "" registers here.
type forwardCoord struct {
	*fakeCoord
	id   int32
	addr string
}

func (f *forwardCoord) ForwardTo(context.Context, string) (int32, string, bool) {
	return f.id, f.addr, f.addr != ""
}

// startRelay starts a bridge (1) that relays version 0 consumers to bridge id at addr.
func startRelay(t *testing.T, id int32, addr string) (*forwardCoord, string) {
	t.Helper()
	c := &forwardCoord{fakeCoord: newFakeCoord(), id: id, addr: addr}
	at := startServer(t, c.fakeCoord, func(cfg *Config) { cfg.Coordinator = c })
	c.setConsult(ConsultResponse{CoordinatorID: 1, Brokers: []Broker{brokerAt(t, "b1", 1, at)}})
	return c, at
}

// Reference: docs/legacy-protocol.md §5 (a version 0 consumer is told the bridge it asked) and
// §8 (it then registers on that connection): the bridge relays it to the group's coordinator,
// which sees its RegisterRequest and talks to it through the relay.
func TestServerRelaysVersion0Consumer(t *testing.T) {
	checkGoroutines(t)
	owner := newFakeCoord()
	ownerAddr := startServer(t, owner, nil)
	owner.setConsult(ConsultResponse{CoordinatorID: 2, Brokers: []Broker{brokerAt(t, "b2", 2, ownerAddr)}})
	relayer, relayAddr := startRelay(t, 2, ownerAddr)

	r := dialRaw(t, relayAddr)
	r.send(&ConsultRequest{})
	if got, ok := r.recv().(*ConsultResponse); !ok || got.CoordinatorID != 1 {
		t.Fatalf("version 0 consult: %+v, want this bridge (1)", got)
	}
	r.send(validRegister("c1", time.Second, 3))
	s := owner.session(t)
	if s.Register().ConsumerID != "c1" {
		t.Fatalf("the coordinator registered %q", s.Register().ConsumerID)
	}
	// The coordinator pings the consumer through the relay and gets its answer.
	answered := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		_, err := s.Ping(ctx, 0)
		answered <- err
	}()
	if _, ok := r.recv().(*PingRequest); !ok {
		t.Fatal("the consumer got no PingRequest through the relay")
	}
	r.send(&PingResponse{HasOffsets: true})
	if err := <-answered; err != nil {
		t.Fatalf("ping through the relay: %v", err)
	}
	if n := relayer.registers.Load(); n != 0 {
		t.Errorf("the relaying bridge registered %d consumers itself", n)
	}
	// The coordinator closing the consumer (a handover) closes it at the consumer too.
	s.Close(ErrServerClosed)
	r.expectClosed()
}

// The relay refuses rather than relays when it cannot: the coordinator does not answer
// (COORDINATOR_NOT_AVAILABLE) or names another coordinator for the group, the bridges' views
// of the live set differing for a moment (NOT_COORDINATOR; a relayed connection is never
// relayed again). A consumer that did not consult at version 0 on the connection registers
// here, as before.
func TestServerRelayRefuses(t *testing.T) {
	checkGoroutines(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	_ = closed.Close()
	other := newFakeCoord()
	otherAddr := startServer(t, other, nil)
	other.setConsult(ConsultResponse{CoordinatorID: 3, Brokers: []Broker{brokerAt(t, "b3", 3, otherAddr)}})

	for _, tc := range []struct {
		name    string
		to      string
		consult Message // before the RegisterRequest, on the same connection
		want    ErrorCode
	}{
		{"coordinator unreachable", gone, &ConsultRequest{}, CodeCoordinatorNotAvailable},
		{"coordinator names another", otherAddr, &ConsultRequest{}, CodeNotCoordinator},
		{"no consult: registers here", otherAddr, nil, CodeGroupModeRefused},
		{"version 1 consult: registers here", otherAddr, &ConsultRequest{GroupID: "g"}, CodeGroupModeRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relayer, at := startRelay(t, 2, tc.to)
			relayer.setRefuse(func(*Session) error { return CodeGroupModeRefused.Err() })
			r := dialRaw(t, at)
			if tc.consult != nil {
				r.send(tc.consult)
				r.recv()
			}
			r.send(validRegister("c1", time.Second, 3))
			if got, ok := r.recv().(*RegisterResponse); !ok || got.ErrorCode != tc.want {
				t.Fatalf("register: %+v, want %v", got, tc.want)
			}
			r.expectClosed()
			if n := other.registers.Load(); n != 0 {
				t.Errorf("the other bridge registered %d consumers", n)
			}
		})
	}
}
