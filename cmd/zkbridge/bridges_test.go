package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// zkbridge bridges: the registrations under <root>/bridges and, for each, the groups whose
// epoch names it (a released epoch counts for nobody); groups describe names the group's
// coordinating bridge, the one placement computes over the bridges that are not draining.
func TestIntegration_BridgesCommand(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	regs := []zkstate.BridgeRegistration{
		{NodeID: 9001, Kafka: "127.0.0.1:19092", Advertised: "b1:9092", Legacy: "b1:9190", Admin: "127.0.0.1:9191", Software: "v1.0.0", Placement: 1, StartedMs: 1700000000000, PID: 1},
		{NodeID: 9002, Kafka: "127.0.0.1:29092", Admin: "127.0.0.1:9192", Placement: 1, StartedMs: 1700000001000, PID: 2},
		{NodeID: 9003, Kafka: "127.0.0.1:39092", Admin: "127.0.0.1:9193", Placement: 1, StartedMs: 1700000002000, PID: 3, Draining: true},
	}
	// The data path: every bridge advertises a proxy listener for brokers 0-5, except 9002 for 5.
	for i := range regs {
		regs[i].Proxy = map[int32]string{}
		for k := range int32(6) {
			if regs[i].NodeID != 9002 || k != 5 {
				regs[i].Proxy[k] = fmt.Sprintf("b%d:%d", i, 9100+k)
			}
		}
	}
	serves := map[int32][]int32{}
	for k := range int32(6) {
		n, _ := placement.Server(k, []int32{9001, 9002}, func(n int32) bool { return n == 9001 || k != 5 })
		serves[n] = append(serves[n], k)
	}
	for _, r := range regs {
		if err := s.CreateEphemeral(ctx, zkstate.BridgePath("/zkbridge", r.NodeID), r.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	for g, e := range map[string]zkstate.Epoch{
		"a": {NodeID: 9001}, "b": {NodeID: 9001}, "c": {NodeID: 9002}, "d": {NodeID: 9002, Released: true},
	} {
		if err := s.Create(ctx, zkstate.EpochPath("/zkbridge", g), e.Encode(), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
	}

	if err := s.Create(ctx, "/consumers/a/ids", nil, zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "bridges", "--zk", zkc, "-o", "json")
	if r.code != exitOK {
		t.Fatalf("bridges: exit %d, stderr %s", r.code, r.stderr)
	}
	var rows []bridgeRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("bridges -o json: %v\n%s", err, r.stdout)
	}
	if len(rows) != 3 || rows[0].NodeID != 9001 || rows[0].Kafka != "b1:9092" || rows[0].Version != "v1.0.0" ||
		rows[0].GroupsOwned != 2 || rows[1].GroupsOwned != 1 || rows[2].GroupsOwned != 0 || !rows[2].Draining ||
		rows[0].UpSince != "2023-11-14T22:13:20Z" {
		t.Errorf("bridges -o json = %+v", rows)
	}
	for _, row := range rows {
		if !slices.Equal(row.Serves, serves[row.NodeID]) {
			t.Errorf("bridge %d serves brokers %v, want %v (a draining bridge none)", row.NodeID, row.Serves, serves[row.NodeID])
		}
	}
	r = runCLI(t, "bridges", "--zk", zkc)
	if r.code != exitOK || !strings.Contains(r.stdout, "9002  127.0.0.1:29092") || !strings.Contains(r.stdout, "draining") {
		t.Errorf("bridges (table): exit %d\n%s", r.code, r.stdout)
	}

	owner, _ := placement.Owner("a", []int32{9001, 9002})
	r = runCLI(t, "groups", "describe", "a", "--zk", zkc, "-o", "json")
	var v groupView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("groups describe: %v\n%s%s", err, r.stdout, r.stderr)
	}
	want := map[int32]string{9001: "9001 (b1:9092)", 9002: "9002 (127.0.0.1:29092)"}[owner]
	if v.Coordinator != want {
		t.Errorf("groups describe names coordinator %q, want %q", v.Coordinator, want)
	}
}

// zkbridge bridges warns about live bridges whose Metadata answers differ from the others': one
// without the data path next to bridges with it, one that advertises a wildcard host. A
// draining bridge is not counted.
func TestIntegration_BridgesCommandDisagreements(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	for _, r := range []zkstate.BridgeRegistration{
		{NodeID: 9001, Kafka: "b1:9092", Admin: "127.0.0.1:9191", DataPath: true, Proxy: map[int32]string{0: "b1:9093"}, StartedMs: 1},
		{NodeID: 9002, Kafka: "0.0.0.0:9092", Admin: "127.0.0.1:9192", StartedMs: 1},
		{NodeID: 9003, Kafka: "b3:9092", Admin: "127.0.0.1:9193", DataPath: true, Proxy: map[int32]string{0: "b3:9093"}, StartedMs: 1},
		{NodeID: 9004, Kafka: "0.0.0.0:9092", Admin: "127.0.0.1:9194", StartedMs: 1, Draining: true},
	} {
		if err := s.CreateEphemeral(ctx, zkstate.BridgePath("/zkbridge", r.NodeID), r.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI(t, "bridges", "--zk", zkc, "-o", "json")
	var rows []bridgeRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("bridges -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	for _, row := range rows {
		want := 0
		if row.NodeID == 9002 {
			want = 2 // its host and its data path
		}
		if len(row.Disagreements) != want {
			t.Errorf("bridge %d: disagreements %q, want %d", row.NodeID, row.Disagreements, want)
		}
	}
	r = runCLI(t, "bridges", "--zk", zkc)
	for _, want := range []string{
		"WARNING: bridge 9002 advertises no host clients can dial (kafka 0.0.0.0:9092)",
		"WARNING: bridge 9002 serves groups only (no data path) while bridges [9001 9003] relay",
	} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("bridges (table): exit %d, want %q in\n%s", r.code, want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "WARNING") != 2 {
		t.Errorf("bridges (table): want 2 warnings\n%s", r.stdout)
	}
}

// zkbridge bridges shows a bridge that looks dead: its registration is still there (its
// ZooKeeper session has not expired), but the bridges asked through their admin listeners
// (GET /bridges) find its Kafka listener refusing connections, so its STATE is unreachable,
// with who sees it so; a bridge whose admin listener does not answer (here the dead one) gives
// no view, and a note says so. A draining bridge is not asked.
func TestIntegration_BridgesCommandUnreachable(t *testing.T) {
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	view := func(self int32) string {
		return fmt.Sprintf(`{"node_id":%d,"bridges":[{"node_id":9001,"state":"live"},{"node_id":9002,"state":"live"},{"node_id":9003,"state":"unreachable"}]}`, self)
	}
	admin := map[int32]string{}
	for _, id := range []int32{9001, 9002} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/bridges" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintln(w, view(id))
		}))
		t.Cleanup(srv.Close)
		admin[id] = srv.Listener.Addr().String()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin[9003] = ln.Addr().String() // the dead bridge's: refuses
	_ = ln.Close()
	admin[9004] = "127.0.0.1:10001" // draining: not asked
	for _, r := range []zkstate.BridgeRegistration{
		{NodeID: 9001, Kafka: "b1:9092", Legacy: "b1:9190", Software: "v1.0.0", StartedMs: 1700000000000},
		{NodeID: 9002, Kafka: "b2:9092", Legacy: "b2:9190", Software: "v1.0.0", StartedMs: 1700000001000},
		{NodeID: 9003, Kafka: "b3:9092", Legacy: "b3:9190", Software: "v1.0.0", StartedMs: 1700000002000},
		{NodeID: 9004, Kafka: "b4:9092", Software: "v1.0.0", StartedMs: 1700000003000, Draining: true},
	} {
		r.Admin, r.Placement = admin[r.NodeID], 1
		if err := s.CreateEphemeral(ctx, zkstate.BridgePath("/zkbridge", r.NodeID), r.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(ctx, zkstate.EpochPath("/zkbridge", "orders"), zkstate.Epoch{NodeID: 9003}.Encode(), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	placeholders := func(out string) string {
		for id, a := range admin {
			if id != 9004 {
				out = strings.ReplaceAll(out, a, fmt.Sprintf("admin-%d:port", id)) // as wide as a loopback address
			}
		}
		return out
	}
	r := runCLI(t, "bridges", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("bridges: exit %d, stderr %s", r.code, r.stderr)
	}
	golden(t, "bridges_unreachable.golden", placeholders(r.stdout))
	r = runCLI(t, "bridges", "--zk", zkc, "-o", "json")
	if r.code != exitOK {
		t.Fatalf("bridges -o json: exit %d, stderr %s", r.code, r.stderr)
	}
	golden(t, "bridges_unreachable.json.golden", placeholders(r.stdout))
}
