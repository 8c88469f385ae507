package legacy

import (
	"context"
	"net"
	"testing"
	"time"
)

// groupCoord is a fakeCoord that also names each group's coordinator (GroupConsulter): the
// coordinator of group "far" is bridge 2, every other group's is bridge 1.
type groupCoord struct {
	*fakeCoord
	asked chan string
}

func (g *groupCoord) ConsultGroup(_ context.Context, group string) ConsultResponse {
	g.asked <- group
	resp := g.Consult(context.Background())
	if group == "far" {
		resp.CoordinatorID = 2
	}
	return resp
}

// Reference: docs/legacy-protocol.md §5-6: a version 1 ConsultRequest names the group, and a
// coordinator that places groups (GroupConsulter) is asked about that group; version 0 goes to
// Consult, as before.
func TestServerConsultNamesTheGroupsCoordinator(t *testing.T) {
	checkGoroutines(t)
	coord := &groupCoord{fakeCoord: newFakeCoord(), asked: make(chan string, 4)}
	addr := startServer(t, coord.fakeCoord, func(c *Config) { c.Coordinator = coord })
	coord.setConsult(ConsultResponse{CoordinatorID: 1, Brokers: []Broker{brokerAt(t, "b1", 1, addr), brokerAt(t, "b2", 2, addr)}})

	r := dialRaw(t, addr)
	for _, tc := range []struct {
		group string
		want  int32
	}{{"far", 2}, {"near", 1}, {"", 1}} {
		r.send(&ConsultRequest{GroupID: tc.group})
		got, ok := r.recv().(*ConsultResponse)
		if !ok || got.ErrorCode != CodeNone || got.CoordinatorID != tc.want {
			t.Fatalf("consult about %q: got %+v, want coordinator %d", tc.group, got, tc.want)
		}
		if tc.group == "" {
			continue
		}
		if asked := <-coord.asked; asked != tc.group {
			t.Fatalf("ConsultGroup asked about %q, want %q", asked, tc.group)
		}
	}
	select {
	case g := <-coord.asked:
		t.Fatalf("a version 0 consult went to ConsultGroup (%q)", g)
	default:
	}
}

// A bridge that predates version 1 answers it UNSUPPORTED_VERSION (docs §5): the client asks
// again at version 0 on the same connection, then registers there.
func TestClientConsultFallsBackToVersion0(t *testing.T) {
	checkGoroutines(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	cfg := clientConfig(t, "c1", ln.Addr().String())
	startClient(t, cfg)

	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(waitLong))
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	r := &rawConn{t: t, nc: nc}
	if first, ok := r.recv().(*ConsultRequest); !ok || first.GroupID != cfg.GroupID {
		t.Fatalf("first consult %+v, want version 1 naming group %q", first, cfg.GroupID)
	}
	r.send(&ConsultResponse{ErrorCode: CodeUnsupportedVersion, CoordinatorID: -1})
	if second, ok := r.recv().(*ConsultRequest); !ok || second.GroupID != "" {
		t.Fatalf("second consult %+v, want version 0", second)
	}
	r.send(&ConsultResponse{CoordinatorID: 7, Brokers: []Broker{brokerAt(t, "me", 7, ln.Addr().String())}})
	if reg, ok := r.recv().(*RegisterRequest); !ok || reg.ConsumerID != "c1" {
		t.Fatalf("want RegisterRequest on the consult connection, got %+v", reg)
	}
}
