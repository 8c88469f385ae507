package main

import (
	"encoding/json"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
)

// `groups describe` shows what OffsetFetch answers, as `offsets export` does: a finalized group's
// commits go to the bridge's own records only (no /consumers mirror once finalized), so an
// OFFSET column read from /consumers/<g>/offsets showed the offset from before finalization (and
// a LAG computed from it).
func TestIntegration_DescribeOfFinalizedGroupShowsWhatOffsetFetchAnswers(t *testing.T) {
	zkc := loadDemo(t)
	s := openTestStore(t, zkc)
	ctx := t.Context()
	seedGroup(t, s, "billing", zkstate.ModeFinalized)
	// A commit through the bridge after finalization: its own record only.
	own := zkstate.OwnOffset{Offset: 900, LeaderEpoch: 3, CommittedMs: 1700000001000}
	if err := s.Create(ctx, zkstate.OwnOffsetPath(testRoot, "billing", "payments", 3), own.Encode(), zkstate.CreateOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "groups", "describe", "billing", "--zk", zkc, "-o", "json")
	if r.code != exitOK {
		t.Fatalf("describe: exit %d: %s", r.code, r.stderr)
	}
	var v struct {
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition int32  `json:"partition"`
			Offset    *int64 `json:"offset"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("describe -o json: %v\n%s", err, r.stdout)
	}
	got := map[string]int64{}
	for _, p := range v.Partitions {
		if p.Offset != nil {
			got[tpString(zkstate.TopicPartition{Topic: p.Topic, Partition: p.Partition})] = *p.Offset
		}
	}
	// payments/3: the bridge's record (533 in /consumers is stale); orders/0: only the 0.8
	// znode exists, so it is the offset there is.
	if got["payments/3"] != 900 {
		t.Errorf("payments/3 offset = %d, want 900 (the bridge's record); all: %v", got["payments/3"], got)
	}
	if _, ok := got["orders/0"]; !ok {
		t.Errorf("orders/0 has no offset; all: %v", got)
	}
}
