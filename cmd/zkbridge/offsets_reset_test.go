package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// resetCluster is a kfake cluster whose topic orders has known offsets: partition 0 holds
// offsets 0-9, partition 1 offsets 5-19 (0-4 deleted), partition 2 nothing. Record i of a
// partition is stamped t0 + i minutes + 30 s, t0 an hour ago.
func resetCluster(t *testing.T) (bootstrap string, t0 time.Time) {
	t.Helper()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	t0 = time.Now().Add(-time.Hour).Truncate(time.Second)
	for p, n := range map[int32]int{0: 10, 1: 20} {
		for i := range n {
			r := &kgo.Record{Topic: "orders", Partition: p, Value: []byte("v"), Timestamp: t0.Add(time.Duration(i)*time.Minute + 30*time.Second)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = "orders"
	dp := kmsg.NewDeleteRecordsRequestTopicPartition()
	dp.Partition, dp.Offset = 1, 5
	dt.Partitions = append(dt.Partitions, dp)
	del.Topics = append(del.Topics, dt)
	resp, err := del.RequestWith(ctx, cl)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("delete records: %v %+v", err, resp)
	}
	return strings.Join(kf.ListenAddrs(), ","), t0
}

// committedOf is what OffsetFetch would answer for the group (migrate.ReadOffsets, zkstate's
// rule), as "p=offset" per partition of orders.
func committedOf(t *testing.T, s *zkstate.Store, g string) string {
	t.Helper()
	cur, err := migrate.ReadOffsets(t.Context(), s, testRoot, g)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range cur.Offsets {
		out = append(out, fmt.Sprintf("%d=%d", o.Partition, o.Offset))
	}
	return strings.Join(out, " ")
}

// Issue 18 item 7: every reset option of kafka-consumer-groups against known offsets (a kfake
// cluster with known log start, log end and record times), written where OffsetFetch reads.
func TestIntegration_OffsetsReset(t *testing.T) {
	bootstrap, t0 := resetCluster(t)
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	const g = "rst"
	// set leaves the group at exactly offs (partition 2 has none).
	set := func(offs map[int32]int64) {
		t.Helper()
		if ok, _, _ := s.Exists(ctx, zkstate.OffsetPath(g, "orders", 2)); ok {
			if err := s.Delete(ctx, zkstate.OffsetPath(g, "orders", 2), -1); err != nil {
				t.Fatal(err)
			}
		}
		for p, o := range offs {
			path := zkstate.OffsetPath(g, "orders", p)
			if _, err := s.Set(ctx, path, zkstate.FormatOffset(o), -1); err != nil {
				if err := s.Create(ctx, path, zkstate.FormatOffset(o), zkstate.CreateOptions{Parents: true}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	file := filepath.Join(t.TempDir(), "offsets.csv")
	if err := os.WriteFile(file, []byte("topic,partition,offset\norders,0,2\norders,1,9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"earliest, all topics", []string{"--to-earliest", "--all-topics"}, "0=0 1=5"},
		{"latest, every partition of a topic", []string{"--to-latest", "--topic", "orders"}, "0=10 1=20 2=0"},
		{"latest, some partitions", []string{"--to-latest", "--topic", "orders:1"}, "0=3 1=20"},
		{"to offset", []string{"--to-offset", "7", "--topic", "orders:0,1"}, "0=7 1=7"},
		{"to offset past the end: the end", []string{"--to-offset", "100", "--topic", "orders:0"}, "0=10 1=8"},
		{"to offset before the start: the start", []string{"--to-offset", "2", "--topic", "orders:1"}, "0=3 1=5"},
		{"shift back", []string{"--shift-by", "-2", "--all-topics"}, "0=1 1=6"},
		{"shift back past the start", []string{"--shift-by", "-10", "--all-topics"}, "0=0 1=5"},
		{"shift forward past the end", []string{"--shift-by", "50", "--all-topics"}, "0=10 1=20"},
		{"to datetime", []string{"--to-datetime", t0.Add(4 * time.Minute).UTC().Format(time.RFC3339), "--topic", "orders"}, "0=4 1=5 2=0"},
		{"to datetime after the last record: the end", []string{"--to-datetime", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "--all-topics"}, "0=10 1=20"},
		{"by duration (ISO 8601)", []string{"--by-duration", "PT55M", "--all-topics"}, "0=5 1=5"},
		{"by duration (Go)", []string{"--by-duration", "52m", "--all-topics"}, "0=8 1=8"},
		{"from file", []string{"--from-file", file}, "0=2 1=9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set(map[int32]int64{0: 3, 1: 8})
			args := append([]string{"offsets", "reset", g, "--zk", zkc, "--bootstrap", bootstrap}, tc.args...)
			r := runCLI(t, args...)
			if r.code != exitOK || committedOf(t, s, g) != "0=3 1=8" {
				t.Fatalf("dry run: exit %d, offsets %s\n%s%s", r.code, committedOf(t, s, g), r.stdout, r.stderr)
			}
			r = runCLI(t, append(args, "--execute")...)
			if r.code != exitOK {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if got := committedOf(t, s, g); got != tc.want {
				t.Errorf("offsets %s, want %s\n%s", got, tc.want, r.stdout)
			}
		})
	}

	// Brokers from /brokers/ids when --bootstrap is not given.
	host, port, _ := strings.Cut(strings.Split(bootstrap, ",")[0], ":")
	reg := fmt.Sprintf(`{"version":1,"host":%q,"port":%s,"jmx_port":-1,"timestamp":"1700000000000"}`, host, port)
	if err := s.Create(ctx, "/brokers/ids/1", []byte(reg), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	set(map[int32]int64{0: 3, 1: 8})
	if r := runCLI(t, "offsets", "reset", g, "--zk", zkc, "--to-latest", "--all-topics", "--execute"); r.code != exitOK || committedOf(t, s, g) != "0=10 1=20" {
		t.Errorf("brokers from /brokers/ids: exit %d, offsets %s\n%s%s", r.code, committedOf(t, s, g), r.stdout, r.stderr)
	}

	// A group with a live member is not reset, unless --force (Kafka refuses an active group).
	set(map[int32]int64{0: 3, 1: 8})
	seedGroup(t, s, g, "", seedMember{zkstate.KindZK, "rst_host-1700000000000-abcdef12"})
	r := runCLI(t, "offsets", "reset", g, "--zk", zkc, "--to-earliest", "--all-topics", "--execute")
	if r.code != exitBlocked || !strings.Contains(r.stderr, "has 1 member (zk rst_host-1700000000000-abcdef12)") || committedOf(t, s, g) != "0=3 1=8" {
		t.Errorf("live group: exit %d, offsets %s\n%s", r.code, committedOf(t, s, g), r.stderr)
	}
	r = runCLI(t, "offsets", "reset", g, "--zk", zkc, "--to-earliest", "--all-topics", "--execute", "--force")
	if r.code != exitOK || committedOf(t, s, g) != "0=0 1=5" {
		t.Errorf("forced: exit %d, offsets %s\n%s%s", r.code, committedOf(t, s, g), r.stdout, r.stderr)
	}

	// A finalized group: its own records, which OffsetFetch reads; the 0.8 znodes stay.
	const f = "rst-fin"
	seedGroup(t, s, f, zkstate.ModeFinalized)
	r = runCLI(t, "offsets", "reset", f, "--zk", zkc, "--to-latest", "--topic", "orders:0", "--execute")
	if r.code != exitOK || committedOf(t, s, f) != "0=10" {
		t.Errorf("finalized: exit %d, offsets %s\n%s%s", r.code, committedOf(t, s, f), r.stdout, r.stderr)
	}
	if ok, _, _ := s.Exists(ctx, zkstate.OffsetPath(f, "orders", 0)); ok {
		t.Errorf("finalized group: the 0.8 znode was written")
	}
}

func TestOffsetsResetUsage(t *testing.T) {
	for _, args := range [][]string{
		{"offsets", "reset", "g", "--all-topics"},                                  // no method
		{"offsets", "reset", "g", "--to-earliest", "--to-latest", "--all-topics"},  // two methods
		{"offsets", "reset", "g", "--to-earliest"},                                 // no scope
		{"offsets", "reset", "g", "--to-earliest", "--all-topics", "--topic", "t"}, // two scopes
		{"offsets", "reset", "g", "--to-offset", "-1", "--all-topics"},             // negative offset
		{"offsets", "reset", "g", "--to-datetime", "yesterday", "--all-topics"},    // bad time
		{"offsets", "reset", "g", "--by-duration", "P1X", "--all-topics"},          // bad duration
		{"offsets", "reset", "g", "--to-latest", "--topic", "t:x"},                 // bad partition
		{"offsets", "reset", "--to-latest", "--all-topics"},                        // no group
		{"offsets", "reset", "g", "--to-latest", "--all-topics", "--execute", "--dry-run"},
	} {
		r := runCLI(t, append(args, "--zk", "127.0.0.1:1", "--zk-timeout", "200ms")...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, r.code, exitUsage, r.stderr)
		}
	}
}

func TestResetDurationAndTopics(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"P1DT2H30M": 26*time.Hour + 30*time.Minute, "PT55M": 55 * time.Minute, "PT1.5S": 1500 * time.Millisecond,
		"P2D": 48 * time.Hour, "26h": 26 * time.Hour, "pt10m": 10 * time.Minute,
	} {
		if got, err := parseResetDuration(in); err != nil || got != want {
			t.Errorf("parseResetDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"P", "PT", "P1X", "-5m", "soon"} {
		if _, err := parseResetDuration(bad); err == nil {
			t.Errorf("parseResetDuration(%q) accepted", bad)
		}
	}
	scope, order, err := parseTopics([]string{"orders:0", "2", "clicks", "pay:1"})
	if err != nil || strings.Join(order, ",") != "orders,clicks,pay" || fmt.Sprint(scope["orders"]) != "[0 2]" || scope["clicks"] != nil || fmt.Sprint(scope["pay"]) != "[1]" {
		t.Errorf("parseTopics = %v %v %v", scope, order, err)
	}
}
