package zkstate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrModeReadable: RepairMode was asked to rewrite a mode record that parses. A readable record
// changes only by a migration or a rollback, one step at a time (SetMode).
var ErrModeReadable = errors.New("group mode record is readable: change it with migrate or rollback")

// RepairMode rewrites a group's unreadable mode record (one ReadMode reports as ErrMalformed)
// with mode to, as who, compare-and-set against expectVersion, the version ReadMode reported
// with the error. Its transition records no previous mode (nobody can tell what it was) and why
// as its reason. The record that replaces it continues the sequence of the transitions already
// recorded, so the history stays whole.
//
// A record that parses at expectVersion is refused (ErrModeReadable); a concurrent change fails
// as SetMode's do (IsModeConflict), and nothing is written then.
func RepairMode(ctx context.Context, s *Store, root, group string, to Mode, who, why string, expectVersion int32) (int32, error) {
	if err := checkGroupName(group); err != nil {
		return NoModeVersion, err
	}
	if !to.Valid() {
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: %w: unknown mode %q", group, ErrInvalidTransition, to)
	}
	if who == "" {
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: who is required: every transition records who made it", group)
	}
	mp := ModePath(root, group)
	_, v, exists, err := ReadMode(ctx, s, root, group)
	switch {
	case !exists && err != nil:
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: %w", group, err)
	case !exists:
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: %w", group, &PathError{Op: "set", Path: mp, Err: ErrNoNode})
	case v != expectVersion:
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: %w: the record is at version %d, not %d",
			group, &PathError{Op: "set", Path: mp, Err: ErrBadVersion}, v, expectVersion)
	case err == nil:
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: %w", group, ErrModeReadable)
	case !errors.Is(err, ErrMalformed):
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: %w", group, err)
	}
	last, err := lastTransitionSeq(ctx, s, root, group)
	if err != nil {
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q: %w", group, err)
	}
	seq := last + 1
	now := time.Now().UnixMilli()
	rec := ModeRecord{Version: ModeRecordVersion, Mode: to, UpdatedBy: who, UpdatedAtMs: now, Seq: seq}
	tr := Transition{Version: ModeRecordVersion, Seq: seq, To: to, By: who, AtMs: now, Reason: why}
	// The record's op first, so that a concurrent change is reported as its ErrBadVersion.
	if err := s.MultiAtomic(ctx,
		SetOp(mp, rec.Encode(), expectVersion),
		CreateOp(TransitionPath(root, group, seq), tr.Encode(), CreateOptions{Parents: true})); err != nil {
		return NoModeVersion, fmt.Errorf("zkstate: repair mode of group %q to %s: %w", group, to, err)
	}
	return expectVersion + 1, nil
}
