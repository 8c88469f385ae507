package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// Issue 18 item 6: `groups describe` shows LOG-END-OFFSET and LAG per partition whenever the
// brokers are known, against a kfake cluster with known high watermarks (resetCluster: orders/0
// ends at 10, orders/1 at 20, orders/2 at 0).
func TestIntegration_GroupsDescribeLag(t *testing.T) {
	bootstrap, _ := resetCluster(t)
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	p := zkstate.CreateOptions{Parents: true}
	if err := s.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath("lagged", "orders", 0), zkstate.FormatOffset(3), p),
		zkstate.CreateOp(zkstate.OffsetPath("lagged", "orders", 1), zkstate.FormatOffset(8), p),
		zkstate.CreateOp("/brokers/topics/orders", []byte(`{"version":1,"partitions":{"0":[0],"1":[0],"2":[0]}}`), p)); err != nil {
		t.Fatal(err)
	}
	want := map[int32][3]string{0: {"3", "10", "7"}, 1: {"8", "20", "12"}, 2: {"-", "0", "-"}}
	check := func(how string, args ...string) {
		t.Helper()
		r := runCLI(t, append([]string{"groups", "describe", "lagged", "--zk", zkc, "-o", "json"}, args...)...)
		var v groupView
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != exitOK {
			t.Fatalf("%s: exit %d %v\n%s%s", how, r.code, err, r.stdout, r.stderr)
		}
		got := map[int32][3]string{}
		for _, pv := range v.Partitions {
			got[pv.Partition] = [3]string{int64Cell(pv.Offset), int64Cell(pv.LogEnd), int64Cell(pv.Lag)}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: offset, log end, lag per partition %v, want %v", how, got, want)
		}
		r = runCLI(t, append([]string{"groups", "describe", "lagged", "--zk", zkc}, args...)...)
		if !strings.Contains(r.stdout, "LOG-END-OFFSET  LAG") || !strings.Contains(r.stdout, "Total lag: 19") {
			t.Errorf("%s: table\n%s", how, r.stdout)
		}
	}
	check("--bootstrap", "--bootstrap", bootstrap)

	// Without --bootstrap: the brokers of /brokers/ids; unreachable ones only cost the columns.
	r := runCLI(t, "groups", "describe", "lagged", "--zk", zkc)
	if r.code != exitOK || strings.Contains(r.stdout, "LAG") {
		t.Errorf("no brokers known: exit %d\n%s", r.code, r.stdout)
	}
	if err := s.Create(ctx, "/brokers/ids/7", []byte(`{"version":1,"host":"127.0.0.1","port":1,"jmx_port":-1,"timestamp":"1"}`), p); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "groups", "describe", "lagged", "--zk", zkc)
	if r.code != exitOK || strings.Contains(r.stdout, "LAG") || !strings.Contains(r.stderr, "no broker registered in /brokers/ids answers") {
		t.Errorf("unreachable registered broker: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	host, port, _ := strings.Cut(strings.Split(bootstrap, ",")[0], ":")
	if _, err := s.Set(ctx, "/brokers/ids/7", []byte(fmt.Sprintf(`{"version":1,"host":%q,"port":%s,"jmx_port":-1,"timestamp":"1"}`, host, port)), -1); err != nil {
		t.Fatal(err)
	}
	check("/brokers/ids")
}

func TestFillLag(t *testing.T) {
	off := func(v int64) *int64 { return &v }
	parts := []partitionView{
		{Topic: "t", Partition: 0, Offset: off(5)},
		{Topic: "t", Partition: 1},
		{Topic: "t", Partition: 2, Offset: off(50)}, // past the log end (topic recreated)
		{Topic: "t", Partition: 3, Offset: off(1)},  // the brokers did not answer for it
	}
	fillLag(parts, map[zkstate.TopicPartition]int64{{Topic: "t", Partition: 0}: 9, {Topic: "t", Partition: 1}: 4, {Topic: "t", Partition: 2}: 10})
	var got []string
	for _, p := range parts {
		got = append(got, int64Cell(p.LogEnd)+"/"+int64Cell(p.Lag))
	}
	if strings.Join(got, " ") != "9/4 4/- 10/0 -/-" || totalLag(parts) != 4 {
		t.Errorf("fillLag: %v, total %d", got, totalLag(parts))
	}
}

// groups list shows each group's total lag when the brokers are known (issue 18 item 6): log
// end minus the committed offset OffsetFetch answers (a finalized group's: the bridge's record,
// not the stale /consumers one), "-" for a group without a commit, and no column at all when
// no broker answers.
func TestIntegration_GroupsListLag(t *testing.T) {
	bootstrap, _ := resetCluster(t) // orders ends at 10, 20 and 0
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	p := zkstate.CreateOptions{Parents: true}
	if err := s.Multi(ctx,
		zkstate.CreateOp(zkstate.OffsetPath("lagged", "orders", 0), zkstate.FormatOffset(3), p),
		zkstate.CreateOp(zkstate.OffsetPath("lagged", "orders", 1), zkstate.FormatOffset(8), p),
		zkstate.CreateOp(zkstate.OffsetPath("caught", "orders", 0), zkstate.FormatOffset(10), p),
		zkstate.CreateOp(zkstate.IDsPath("idle"), nil, p),
		zkstate.CreateOp(zkstate.OffsetPath("fin", "orders", 1), zkstate.FormatOffset(1), p),
		zkstate.CreateOp(zkstate.OwnOffsetPath(testRoot, "fin", "orders", 1), zkstate.OwnOffset{Offset: 17, LeaderEpoch: -1}.Encode(), p)); err != nil {
		t.Fatal(err)
	}
	seedGroup(t, s, "fin", zkstate.ModeFinalized)

	r := runCLI(t, "groups", "list", "--zk", zkc, "--bootstrap", bootstrap, "-o", "json")
	var rows []groupRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || r.code != exitOK {
		t.Fatalf("exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	got := map[string]string{}
	for _, row := range rows {
		got[row.Group] = int64Cell(row.Lag)
	}
	want := map[string]string{"lagged": "19", "caught": "0", "idle": "-", "fin": "3"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lag per group %v, want %v", got, want)
	}
	r = runCLI(t, "groups", "list", "--zk", zkc, "--bootstrap", bootstrap)
	if !strings.Contains(r.stdout, "GROUP   MEMBERS  LAG") || !strings.Contains(r.stdout, "lagged  0        19") {
		t.Errorf("table:\n%s", r.stdout)
	}
	r = runCLI(t, "groups", "list", "--zk", zkc)
	if r.code != exitOK || strings.Contains(r.stdout, "LAG") {
		t.Errorf("no brokers known: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestGroupLag(t *testing.T) {
	ends := map[zkstate.TopicPartition]int64{{Topic: "t", Partition: 0}: 10, {Topic: "t", Partition: 1}: 5}
	for _, tc := range []struct {
		name string
		offs []migrate.Offset
		want string
	}{
		{"sum", []migrate.Offset{{Topic: "t", Partition: 0, Offset: 4}, {Topic: "t", Partition: 1, Offset: 1}}, "10"},
		{"past the log end counts 0", []migrate.Offset{{Topic: "t", Partition: 0, Offset: 40}, {Topic: "t", Partition: 1, Offset: 4}}, "1"},
		{"no log end known", []migrate.Offset{{Topic: "u", Partition: 0, Offset: 1}}, "-"},
		{"no commit", nil, "-"},
	} {
		if got := int64Cell(groupLag(tc.offs, ends)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
