package newproto

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMain fails the package if any goroutine running newproto code (the
// server's or a test's) outlives the tests: every goroutine needs an owner
// and a way to stop.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := settleGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by newproto:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// settleGoroutines waits for goroutines with newproto frames on their stack
// to exit and returns the stacks of those that do not.
func settleGoroutines(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "zkbridge/newproto") && !strings.Contains(g, "newproto.settleGoroutines") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every key in the table has a route in the router: a registered key that
// fell through to the "no route" error would close client connections.
// (Other errors are fine here: an empty OffsetFetch v0 has nowhere to put
// COORDINATOR_NOT_AVAILABLE.)
func TestEveryRegisteredKeyIsRouted(t *testing.T) {
	r := &router{nodeID: 1, log: zerolog.Nop()}
	for key, vr := range supported {
		for v := vr.min; v <= vr.max; v++ {
			msg := kmsg.RequestForKey(key)
			msg.SetVersion(v)
			if _, err := r.Handle(context.Background(), &Request{Msg: msg}); errors.Is(err, errNoRoute) {
				t.Errorf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
		}
	}
}

// The header parser matches kmsg's request formatter for every key and
// version: client id, flexible tag section, body.
func TestParseRequestRoundTrip(t *testing.T) {
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("cid"))
	for key := int16(0); key < 100; key++ {
		proto := kmsg.RequestForKey(key)
		if proto == nil {
			continue
		}
		for v := int16(0); v <= proto.MaxVersion(); v++ {
			if key == int16(kmsg.ApiVersions) && v > apiVersionsMax() {
				continue // not parsed (KIP-511)
			}
			if key == int16(kmsg.ControlledShutdown) && v == 0 {
				continue // kmsg's formatter does not encode it (special header)
			}
			msg := kmsg.RequestForKey(key)
			msg.SetVersion(v)
			frame := f.AppendRequest(nil, msg, 42)
			req, err := parseRequest(frame[4:])
			if err != nil {
				t.Errorf("%s v%d: %v", kmsg.NameForKey(key), v, err)
				continue
			}
			wantCID := "cid"
			if key == int16(kmsg.ControlledShutdown) && v == 0 {
				wantCID = "" // no client id in that header
			}
			if req.CorrelationID != 42 || req.ClientID != wantCID || req.Msg.GetVersion() != v {
				t.Errorf("%s v%d: corr %d cid %q version %d", kmsg.NameForKey(key), v, req.CorrelationID, req.ClientID, req.Msg.GetVersion())
			}
			if !bytes.Equal(req.Msg.AppendTo(nil), msg.AppendTo(nil)) {
				t.Errorf("%s v%d: body does not round-trip", kmsg.NameForKey(key), v)
			}
		}
	}
}

// Tagged fields in the request header (header v2) are skipped, whatever
// they hold.
func TestParseRequestHeaderTags(t *testing.T) {
	frame := binary.BigEndian.AppendUint16(nil, 12) // Heartbeat
	frame = binary.BigEndian.AppendUint16(frame, 4)
	frame = binary.BigEndian.AppendUint32(frame, 7)
	frame = append(frame, 0, 1, 'x')           // client id "x"
	frame = append(frame, 2, 0, 2, 9, 9, 5, 0) // two tags: 0 (2 bytes), 5 (empty)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.MemberID = "g", "m"
	frame = hb.AppendTo(frame)
	req, err := parseRequest(frame)
	if err != nil {
		t.Fatal(err)
	}
	if got := req.Msg.(*kmsg.HeartbeatRequest); got.Group != "g" || got.MemberID != "m" || req.ClientID != "x" {
		t.Fatalf("parsed %+v client %q", got, req.ClientID)
	}
}

// readFrame refuses a size above the limit without reading further and
// reports a short frame as unexpected EOF.
func TestReadFrame(t *testing.T) {
	big := binary.BigEndian.AppendUint32(nil, 1<<30)
	_, err := readFrame(io.MultiReader(bytes.NewReader(big), neverReader{}), 1024)
	var fe *frameError
	if !errors.As(err, &fe) || fe.reason != rejectSize {
		t.Fatalf("oversize: %v", err)
	}
	short := append(binary.BigEndian.AppendUint32(nil, 10), 1, 2, 3)
	if _, err := readFrame(bytes.NewReader(short), 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short frame: %v", err)
	}
}

// neverReader fails the test's expectations if read: readFrame must not
// read past an oversize size.
type neverReader struct{}

func (neverReader) Read([]byte) (int, error) { panic("read past an oversize frame size") }

// fuzzRouter answers like the real one, with a Cluster and a Coordinator,
// so fuzzed frames reach every API's code.
func fuzzRouter() *router {
	return &router{
		nodeID:    1,
		clusterID: "fuzz",
		cluster: staticCluster{
			brokers: []Broker{{NodeID: 2, Host: "b2", Port: 9092}},
			topics:  map[string][]Partition{"t": {{ID: 0, Leader: 2, Replicas: []int32{2, 3}, ISR: []int32{2}}}},
		},
		coord: errCoordinator{},
		log:   zerolog.Nop(),
	}
}

type staticCluster struct {
	brokers []Broker
	topics  map[string][]Partition
}

func (s staticCluster) Brokers(context.Context) ([]Broker, error) { return s.brokers, nil }
func (s staticCluster) Topics(context.Context) (map[string][]Partition, error) {
	return s.topics, nil
}

// errCoordinator answers every group API with NOT_COORDINATOR, which
// exercises the error-shaping path for each key.
type errCoordinator struct{}

func (errCoordinator) JoinGroup(context.Context, *Request, *kmsg.JoinGroupRequest) (*kmsg.JoinGroupResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) SyncGroup(context.Context, *Request, *kmsg.SyncGroupRequest) (*kmsg.SyncGroupResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) Heartbeat(context.Context, *Request, *kmsg.HeartbeatRequest) (*kmsg.HeartbeatResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) LeaveGroup(context.Context, *Request, *kmsg.LeaveGroupRequest) (*kmsg.LeaveGroupResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) OffsetCommit(context.Context, *Request, *kmsg.OffsetCommitRequest) (*kmsg.OffsetCommitResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) OffsetFetch(context.Context, *Request, *kmsg.OffsetFetchRequest) (*kmsg.OffsetFetchResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) DescribeGroups(context.Context, *Request, *kmsg.DescribeGroupsRequest) (*kmsg.DescribeGroupsResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) ListGroups(context.Context, *Request, *kmsg.ListGroupsRequest) (*kmsg.ListGroupsResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) DeleteGroups(context.Context, *Request, *kmsg.DeleteGroupsRequest) (*kmsg.DeleteGroupsResponse, error) {
	return nil, ErrNotCoordinator
}

func (errCoordinator) OffsetDelete(context.Context, *Request, *kmsg.OffsetDeleteRequest) (*kmsg.OffsetDeleteResponse, error) {
	return nil, ErrNotCoordinator
}

// FuzzHandleFrame feeds arbitrary frames (without the size) through the
// same steps a connection takes: parse, route, encode. Invariants: no
// panic; a rejected frame says why; an answer is a well-formed response
// frame that decodes at the version it claims, for the request's key.
func FuzzHandleFrame(f *testing.F) {
	fmtr := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	for key, vr := range supported {
		for v := vr.min; v <= vr.max; v++ {
			msg := kmsg.RequestForKey(key)
			msg.SetVersion(v)
			f.Add(fmtr.AppendRequest(nil, msg, 1)[4:])
		}
	}
	for _, key := range []int16{0, 1, 2, 17, 22, 23} { // unserved
		msg := kmsg.RequestForKey(key)
		msg.SetVersion(3)
		f.Add(fmtr.AppendRequest(nil, msg, 1)[4:])
	}
	f.Add([]byte{})
	f.Add([]byte{0, 18, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0})
	f.Add([]byte{0x7f, 0xff, 0, 0, 0, 0, 0, 1})

	r := fuzzRouter()
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9092}
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, err := parseRequest(frame)
		if err != nil {
			var fe *frameError
			if !errors.As(err, &fe) || fe.reason == "" {
				t.Fatalf("rejection without a reason: %v", err)
			}
			return
		}
		req.Conn = ConnInfo{ID: 1, Local: local}
		resp, err := r.Handle(context.Background(), req)
		if err != nil || resp == nil {
			return // the connection would close
		}
		if resp.Key() != req.Msg.Key() {
			t.Fatalf("%s answered with key %d", kmsg.NameForKey(req.Msg.Key()), resp.Key())
		}
		if resp.Key() != int16(kmsg.ApiVersions) {
			resp.SetVersion(req.Msg.GetVersion()) // as conn.handle does
		}
		out := appendResponse(nil, req.CorrelationID, resp)
		if got := binary.BigEndian.Uint32(out); int(got) != len(out)-4 {
			t.Fatalf("size %d for %d bytes", got, len(out)-4)
		}
		body := out[8:]
		if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
			body = body[1:]
		}
		back := kmsg.ResponseForKey(resp.Key())
		back.SetVersion(resp.GetVersion())
		if err := back.ReadFrom(body); err != nil {
			t.Fatalf("%s v%d response does not decode: %v", kmsg.NameForKey(resp.Key()), resp.GetVersion(), err)
		}
	})
}

// checkWhole's premise holds for every request we decode: a body decodes
// from all its bytes and not from one byte less, so an exact frame passes
// and the same frame with any bytes after the body is rejected.
func TestCheckWholeEveryKey(t *testing.T) {
	fmtr := kmsg.NewRequestFormatter(kmsg.FormatterClientID("whole"))
	for key, vr := range supported {
		for v := vr.min; v <= vr.max; v++ {
			msg := kmsg.RequestForKey(key)
			msg.SetVersion(v)
			// Something in every array, so that bodies are not all defaults.
			fillErrorCodes(reflect.ValueOf(msg), new(int16))
			exact := fmtr.AppendRequest(nil, msg, 1)[4:]
			req, err := parseRequest(exact)
			if err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			if err := checkWhole(exact, req); err != nil {
				t.Errorf("%s v%d: exact frame rejected: %v", kmsg.NameForKey(key), v, err)
			}
			for _, extra := range [][]byte{{0}, {1, 2, 3}, exact[req.bodyAt:]} {
				if len(extra) == 0 {
					continue // an empty body: no second copy to append
				}
				frame := append(slices.Clone(exact), extra...)
				req, err := parseRequest(frame)
				if err != nil {
					t.Fatalf("%s v%d with %d bytes more: parse: %v", kmsg.NameForKey(key), v, len(extra), err)
				}
				var fe *frameError
				if err := checkWhole(frame, req); !errors.As(err, &fe) || fe.reason != rejectTrailing {
					t.Errorf("%s v%d with %d bytes more: checkWhole = %v, want a trailing_bytes rejection", kmsg.NameForKey(key), v, len(extra), err)
				}
			}
		}
	}
}

func BenchmarkCheckWhole(b *testing.B) {
	fmtr := kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench"))
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.SetVersion(8)
	commit.Group, commit.Generation, commit.MemberID = "g", 1, "m"
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "t"
	for p := range int32(1000) {
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset = p, 1000
		ct.Partitions = append(ct.Partitions, cp)
	}
	commit.Topics = append(commit.Topics, ct)
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.SetVersion(4)
	hb.Group, hb.MemberID, hb.Generation = "g", "m", 1
	for _, tc := range []struct {
		name string
		req  kmsg.Request
	}{{"heartbeat", hb}, {"commit-1000", commit}} {
		frame := fmtr.AppendRequest(nil, tc.req, 1)[4:]
		b.Run(tc.name+"/parse", func(b *testing.B) {
			for range b.N {
				if _, err := parseRequest(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/check", func(b *testing.B) {
			req, _ := parseRequest(frame)
			for range b.N {
				if err := checkWhole(frame, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
