package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// committedOffsets puts into v what OffsetFetch answers for a finalized group: its commits go
// to the bridge's own records only, so the snapshot's /consumers offsets are stale there
// (zkstate.OffsetPair.Fetch is the rule). Other modes keep the snapshot's 0.8 offsets, which
// are the truth while 0.8 consumers may write them.
func committedOffsets(ctx context.Context, s *zkstate.Store, root, group string, v *groupView) error {
	rec, _, exists, err := zkstate.ReadMode(ctx, s, root, group)
	if errors.Is(err, zkstate.ErrMalformed) {
		// A corrupt mode record is one of describe's problems (recordProblems): the snapshot's
		// offsets are shown, and the mode is repaired with zkbridge repair.
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the group's mode: %w", err)
	}
	if !exists || rec.Mode != zkstate.ModeFinalized {
		return nil
	}
	cur, err := migrate.ReadOffsets(ctx, s, root, group)
	if err != nil {
		return err
	}
	committed := make(map[zkstate.TopicPartition]int64, len(cur.Offsets))
	for _, o := range cur.Offsets {
		committed[o.TP()] = o.Offset
	}
	for i := range v.Partitions {
		p := &v.Partitions[i]
		if off, ok := committed[zkstate.TopicPartition{Topic: p.Topic, Partition: p.Partition}]; ok {
			p.Offset = &off
		} else {
			p.Offset = nil
		}
	}
	return nil
}
