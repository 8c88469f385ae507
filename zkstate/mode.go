package zkstate

// Group modes (DESIGN §1): per group, who may join it. The mode lives in the
// bridge's own subtree, beside the group's epoch and record:
//
//	<root>/groups/<g>/mode                        JSON ModeRecord (the current mode)
//	<root>/groups/<g>/transitions/t-<10 digits>   JSON Transition, one per change, never rewritten
//
// Why the history is not a list inside the mode record: every running bridge watches every
// group's mode record (a change must take effect within a second), so each write is read by
// every bridge; a record that grew with each transition would make that read grow forever.
// The record stays a few dozen bytes and names the sequence number of its last transition.
//
// Every change is ONE atomic multi that carries its own compare-and-set: a version-checked
// SetOp of the record (or its CreateOp when there is none) together with the CreateOp of the
// transition znode, so a transition is recorded exactly when the mode changed, never twice, and
// of two concurrent changes from the same version exactly one wins (the other gets
// ErrBadVersion or ErrNodeExists). The transition's name comes from the record's sequence
// number, which the same CAS protects, so no sequential-node support is needed.
//
// Numbers that a human might compare across tools (timestamps) are written as strings of
// milliseconds, as Kafka 0.8 writes its own timestamps.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Mode says which member kinds a group admits (DESIGN §1).
type Mode string

// The modes, in migration order: legacy → mixed → kafka → finalized.
const (
	// ModeLegacy admits legacy members (seed-001 protocol) and zk members (0.8 consumers); a
	// Kafka JoinGroup is refused with INCONSISTENT_GROUP_PROTOCOL.
	ModeLegacy Mode = "legacy"
	// ModeMixed admits all three kinds.
	ModeMixed Mode = "mixed"
	// ModeKafka admits Kafka members only; a legacy Register is refused, zk members found in
	// /consumers/<g>/ids are reported (nothing can stop them).
	ModeKafka Mode = "kafka"
	// ModeFinalized is ModeKafka without the ZooKeeper mirror: ids, owners and offsets under
	// /consumers/<g> are no longer written. Terminal: there is no rollback from it.
	ModeFinalized Mode = "finalized"
)

// Modes lists every mode in migration order.
var Modes = []Mode{ModeLegacy, ModeMixed, ModeKafka, ModeFinalized}

// Valid reports whether m is one of the four modes.
func (m Mode) Valid() bool {
	switch m {
	case ModeLegacy, ModeMixed, ModeKafka, ModeFinalized:
		return true
	}
	return false
}

// ParseMode reads a mode name as operators type it ("legacy", "mixed", "kafka", "finalized").
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ToLower(strings.TrimSpace(s)))
	if !m.Valid() {
		return "", fmt.Errorf("zkstate: unknown group mode %q, want legacy, mixed, kafka or finalized", s)
	}
	return m, nil
}

// NoModeVersion is the expectVersion of SetMode for a group that has no mode record yet (the
// record is then created, and a concurrent creation makes SetMode fail with ErrNodeExists); it
// is also the version ReadMode reports for a missing record.
const NoModeVersion int32 = -1

// ModeRecordVersion is the format version of ModeRecord and Transition written by this code.
const ModeRecordVersion = 1

// Errors of the mode functions (besides the Store's ErrBadVersion, ErrNodeExists, ErrNoNode,
// which report a concurrent change: see IsModeConflict).
var (
	// ErrInvalidTransition: ValidTransition refuses the step.
	ErrInvalidTransition = errors.New("invalid group mode transition")
	// ErrModeMismatch: the record at the expected version is not in the mode the caller said
	// it moves from (a caller's bug, not a concurrent change).
	ErrModeMismatch = errors.New("group mode record is not in the expected mode")
)

// ModeRecord is the JSON of <root>/groups/<g>/mode:
//
//	{"version":1,"mode":"kafka","updated_by":"zkbridge-9000@host","updated_at_ms":"1700000000000","from":"mixed","seq":3}
type ModeRecord struct {
	Version     int    // format version (ModeRecordVersion)
	Mode        Mode   // the current mode
	UpdatedBy   string // who made the last transition
	UpdatedAtMs int64  // when, in Unix milliseconds (written as a string)
	// From is the mode before the last transition; "" when the record was created with the
	// group's first mode (its default, or the first step of a migration).
	From Mode
	// Seq is the sequence number of the last transition: transitions/t-<Seq> records it.
	Seq int32
}

// Transition is the JSON of <root>/groups/<g>/transitions/t-<seq>: one mode change.
//
//	{"version":1,"seq":3,"from":"mixed","to":"kafka","by":"ops@laptop","at_ms":"1700000000000"}
type Transition struct {
	Version int
	Seq     int32
	From    Mode // "" for the group's first mode
	To      Mode
	By      string
	AtMs    int64
	// Reason is free text, e.g. why a default was chosen ("/consumers/g holds offsets").
	Reason string
}

// At is the transition's time.
func (t Transition) At() time.Time { return time.UnixMilli(t.AtMs) }

type modeRecordJSON struct {
	Version     int    `json:"version"`
	Mode        Mode   `json:"mode"`
	UpdatedBy   string `json:"updated_by"`
	UpdatedAtMs string `json:"updated_at_ms"`
	From        Mode   `json:"from"`
	Seq         int32  `json:"seq"`
}

type transitionJSON struct {
	Version int    `json:"version"`
	Seq     int32  `json:"seq"`
	From    Mode   `json:"from"`
	To      Mode   `json:"to"`
	By      string `json:"by"`
	AtMs    string `json:"at_ms"`
	Reason  string `json:"reason,omitempty"`
}

// Encode writes the record's JSON.
func (r ModeRecord) Encode() []byte {
	b, _ := json.Marshal(modeRecordJSON{
		Version: ModeRecordVersion, Mode: r.Mode, UpdatedBy: r.UpdatedBy,
		UpdatedAtMs: strconv.FormatInt(r.UpdatedAtMs, 10), From: r.From, Seq: r.Seq,
	})
	return b
}

// ParseModeRecord reads <root>/groups/<g>/mode. Errors wrap ErrMalformed.
func ParseModeRecord(data []byte) (ModeRecord, error) {
	var j modeRecordJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return ModeRecord{}, fmt.Errorf("%w: mode record: %v", ErrMalformed, err)
	}
	if j.Version < 1 {
		return ModeRecord{}, fmt.Errorf("%w: mode record version %d", ErrMalformed, j.Version)
	}
	if !j.Mode.Valid() {
		return ModeRecord{}, fmt.Errorf("%w: unknown mode %q", ErrMalformed, j.Mode)
	}
	if j.From != "" && !j.From.Valid() {
		return ModeRecord{}, fmt.Errorf("%w: unknown previous mode %q", ErrMalformed, j.From)
	}
	if j.Seq < 0 {
		return ModeRecord{}, fmt.Errorf("%w: negative transition sequence %d", ErrMalformed, j.Seq)
	}
	r := ModeRecord{Version: j.Version, Mode: j.Mode, UpdatedBy: j.UpdatedBy, From: j.From, Seq: j.Seq}
	if j.UpdatedAtMs != "" {
		ms, err := strconv.ParseInt(j.UpdatedAtMs, 10, 64)
		if err != nil {
			return ModeRecord{}, fmt.Errorf("%w: updated_at_ms %q is not milliseconds", ErrMalformed, j.UpdatedAtMs)
		}
		r.UpdatedAtMs = ms
	}
	return r, nil
}

// Encode writes the transition's JSON.
func (t Transition) Encode() []byte {
	b, _ := json.Marshal(transitionJSON{
		Version: ModeRecordVersion, Seq: t.Seq, From: t.From, To: t.To, By: t.By,
		AtMs: strconv.FormatInt(t.AtMs, 10), Reason: t.Reason,
	})
	return b
}

// ParseTransition reads one transitions/t-<seq> znode. Errors wrap ErrMalformed.
func ParseTransition(data []byte) (Transition, error) {
	var j transitionJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return Transition{}, fmt.Errorf("%w: transition: %v", ErrMalformed, err)
	}
	if !j.To.Valid() || (j.From != "" && !j.From.Valid()) {
		return Transition{}, fmt.Errorf("%w: transition %q → %q names an unknown mode", ErrMalformed, j.From, j.To)
	}
	ms, err := strconv.ParseInt(j.AtMs, 10, 64)
	if err != nil {
		return Transition{}, fmt.Errorf("%w: transition at_ms %q is not milliseconds", ErrMalformed, j.AtMs)
	}
	return Transition{Version: j.Version, Seq: j.Seq, From: j.From, To: j.To, By: j.By, AtMs: ms, Reason: j.Reason}, nil
}

// BridgeGroupsPath is <root>/groups, the parent of every group the bridge keeps state for.
func BridgeGroupsPath(root string) string { return path.Join(root, "groups") }

// ModePath is <root>/groups/<group>/mode.
func ModePath(root, group string) string { return path.Join(BridgeGroupsPath(root), group, "mode") }

// TransitionsPath is <root>/groups/<group>/transitions.
func TransitionsPath(root, group string) string {
	return path.Join(BridgeGroupsPath(root), group, "transitions")
}

// TransitionPath is <root>/groups/<group>/transitions/t-<seq, 10 digits>; zero-padded so that
// the names sort in order.
func TransitionPath(root, group string, seq int32) string {
	return path.Join(TransitionsPath(root, group), fmt.Sprintf("t-%010d", seq))
}

// transitionSeq reads the sequence number from a transition's znode name.
func transitionSeq(name string) (int32, bool) {
	digits, ok := strings.CutPrefix(name, "t-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int32(n), true
}

// ValidTransition reports whether a group may move from one mode to another in one step:
// forward legacy → mixed → kafka → finalized, back kafka → mixed → legacy, and nothing out of
// finalized (from then on a rollback is refused with a message that says why). Preconditions
// on the group's members (no legacy or zk member left before kafka, no kafka member left
// before legacy) are the migrate command's, not this function's.
func ValidTransition(from, to Mode) error {
	if !from.Valid() {
		return fmt.Errorf("%w: unknown mode %q", ErrInvalidTransition, from)
	}
	if !to.Valid() {
		return fmt.Errorf("%w: unknown mode %q", ErrInvalidTransition, to)
	}
	switch {
	case from == to:
		return fmt.Errorf("%w: the group is already in mode %s", ErrInvalidTransition, to)
	case from == ModeFinalized:
		return fmt.Errorf("%w: %s → %s: finalized is terminal: the ZooKeeper mirror is no longer written, "+
			"so ZooKeeper no longer holds the group's ownership and offsets and a rollback would lose them", ErrInvalidTransition, from, to)
	}
	switch [2]Mode{from, to} {
	case [2]Mode{ModeLegacy, ModeMixed}, [2]Mode{ModeMixed, ModeKafka}, [2]Mode{ModeKafka, ModeFinalized}, // migrate
		[2]Mode{ModeKafka, ModeMixed}, [2]Mode{ModeMixed, ModeLegacy}: // rollback
		return nil
	}
	if modeIndex(to) > modeIndex(from) {
		return fmt.Errorf("%w: %s → %s skips a step: migrate one step at a time (legacy → mixed → kafka → finalized)", ErrInvalidTransition, from, to)
	}
	return fmt.Errorf("%w: %s → %s skips a step: roll back one step at a time (kafka → mixed → legacy)", ErrInvalidTransition, from, to)
}

func modeIndex(m Mode) int {
	for i, x := range Modes {
		if x == m {
			return i
		}
	}
	return -1
}

// IsModeConflict reports whether a SetMode error means that someone else changed (or created,
// or deleted) the group's mode record since the caller read it: the caller should read it
// again and report the conflict, not retry blindly.
func IsModeConflict(err error) bool {
	return errors.Is(err, ErrBadVersion) || errors.Is(err, ErrNodeExists) || errors.Is(err, ErrNoNode)
}

// checkGroupName refuses a group name that would not be exactly one znode name below
// <root>/groups (the bridge refuses such groups before they get here; this guards other
// callers such as the CLI).
func checkGroupName(group string) error {
	if group == "" || group == "." || group == ".." || strings.ContainsRune(group, '/') {
		return fmt.Errorf("zkstate: group name %q cannot be a znode name", group)
	}
	return nil
}

// ReadMode reads the group's mode record. A group without one gives exists false and
// NoModeVersion, with no error (see DefaultMode). version is the record's znode version, for
// SetMode's compare-and-set.
func ReadMode(ctx context.Context, s *Store, root, group string) (rec ModeRecord, version int32, exists bool, err error) {
	if err := checkGroupName(group); err != nil {
		return ModeRecord{}, NoModeVersion, false, err
	}
	p := ModePath(root, group)
	data, st, err := s.Get(ctx, p)
	if errors.Is(err, ErrNoNode) {
		return ModeRecord{}, NoModeVersion, false, nil
	}
	if err != nil {
		return ModeRecord{}, NoModeVersion, false, fmt.Errorf("zkstate: read mode of group %q: %w", group, err)
	}
	rec, err = ParseModeRecord(data)
	if err != nil {
		return ModeRecord{}, st.Version, true, fmt.Errorf("zkstate: %s: %w", p, err)
	}
	return rec, st.Version, true, nil
}

// SetMode moves the group from mode from to mode to, as who, in one atomic multi guarded by
// the record's version (see the file comment), and returns the record's new version.
//
// expectVersion is the version ReadMode returned; NoModeVersion when the group has no record
// yet, in which case from is the mode the caller took the group to be in (its DefaultMode), or
// "" to record the group's first mode without a step (any to is then accepted). Otherwise
// ValidTransition(from, to) must hold.
//
// A concurrent change makes SetMode fail with an error wrapping ErrBadVersion (the record moved
// on), ErrNodeExists (someone else created it first) or ErrNoNode (it was deleted): see
// IsModeConflict. Nothing is written then. The record is read once first, for the sequence
// number of the next transition (and to fail early on a conflict without writing); the write
// itself is the one compare-and-set.
func SetMode(ctx context.Context, s *Store, root, group string, from, to Mode, who string, expectVersion int32) (int32, error) {
	v, _, err := setMode(ctx, s, root, group, from, to, who, "", expectVersion)
	return v, err
}

// SetModeReason is SetMode with a reason recorded in the transition (Transition.Reason), e.g.
// that a rollback was forced past the members that held it back.
func SetModeReason(ctx context.Context, s *Store, root, group string, from, to Mode, who, why string, expectVersion int32) (int32, error) {
	v, _, err := setMode(ctx, s, root, group, from, to, who, why, expectVersion)
	return v, err
}

// InitMode persists a group's first mode (typically its DefaultMode, with why as the
// transition's reason) unless the group already has a mode record, and returns the record that
// holds: ours, or the one someone created first (a create is itself a compare-and-set, so two
// bridges serving a new group at once agree on one record).
func InitMode(ctx context.Context, s *Store, root, group string, mode Mode, who, why string) (ModeRecord, int32, error) {
	for range 3 {
		_, ours, err := setMode(ctx, s, root, group, "", mode, who, why, NoModeVersion)
		if err == nil {
			// Created: the record is the one we wrote, at version 0 (a change since comes
			// as any change does, through the reader's watch). No read back: a group's first
			// service waits for InitMode.
			return ours, 0, nil
		}
		if !errors.Is(err, ErrNodeExists) {
			return ModeRecord{}, NoModeVersion, err
		}
		rec, v, ok, err := ReadMode(ctx, s, root, group)
		if err != nil {
			return ModeRecord{}, NoModeVersion, err
		}
		if ok {
			return rec, v, nil
		}
		// Created and deleted again between our attempt and the read: try once more.
	}
	return ModeRecord{}, NoModeVersion, fmt.Errorf("zkstate: init mode of group %q: the record keeps appearing and disappearing: %w", group, ErrNoNode)
}

// setMode is SetModeReason, which also returns the record it wrote.
func setMode(ctx context.Context, s *Store, root, group string, from, to Mode, who, why string, expectVersion int32) (int32, ModeRecord, error) {
	if err := checkGroupName(group); err != nil {
		return NoModeVersion, ModeRecord{}, err
	}
	if who == "" {
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: who is required: every transition records who made it", group)
	}
	if from == "" {
		if expectVersion != NoModeVersion {
			return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w: the mode to move from is required once the group has a mode record", group, ErrInvalidTransition)
		}
		if !to.Valid() {
			return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w: unknown mode %q", group, ErrInvalidTransition, to)
		}
	} else if err := ValidTransition(from, to); err != nil {
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w", group, err)
	}

	mp := ModePath(root, group)
	// A first record (no version expected) is numbered after whatever transitions a previous
	// record left: the listing goes out with the read of the record, one round trip where one
	// after the other took two (a group's first service waits for InitMode).
	var listed func() (int32, error)
	if expectVersion == NoModeVersion {
		listed = lastTransitionSeqAsync(ctx, s, root, group)
	}
	cur, curVersion, exists, err := ReadMode(ctx, s, root, group)
	if err != nil && !exists {
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w", group, err)
	}
	// A malformed record at the expected version may be overwritten (the operator asked for a
	// mode from a known state); its sequence number is then found from the transitions.
	malformed := err != nil
	var seq int32
	switch {
	case expectVersion == NoModeVersion && exists:
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w: it has a mode record (version %d) already", group, &PathError{Op: "create", Path: mp, Err: ErrNodeExists}, curVersion)
	case expectVersion != NoModeVersion && !exists:
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w: its mode record was deleted", group, &PathError{Op: "set", Path: mp, Err: ErrNoNode})
	case expectVersion != NoModeVersion && curVersion != expectVersion:
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w: the record is at version %d, not %d (now %s, by %s)",
			group, &PathError{Op: "set", Path: mp, Err: ErrBadVersion}, curVersion, expectVersion, cur.Mode, cur.UpdatedBy)
	case exists && !malformed && cur.Mode != from:
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w: it is %s, not %s", group, ErrModeMismatch, cur.Mode, from)
	case exists && !malformed:
		seq = cur.Seq + 1
	default:
		// No record (or an unreadable one): continue after whatever transitions a previous
		// record left, so that the new transition's name is free.
		if listed == nil {
			listed = lastTransitionSeqAsync(ctx, s, root, group)
		}
		last, err := listed()
		if err != nil {
			return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q: %w", group, err)
		}
		seq = last + 1
	}

	now := time.Now().UnixMilli()
	rec := ModeRecord{Version: ModeRecordVersion, Mode: to, UpdatedBy: who, UpdatedAtMs: now, From: from, Seq: seq}
	tr := Transition{Version: ModeRecordVersion, Seq: seq, From: from, To: to, By: who, AtMs: now, Reason: why}
	var ops []Op
	if expectVersion == NoModeVersion {
		ops = append(ops, CreateOp(mp, rec.Encode(), CreateOptions{Parents: true}))
	} else {
		ops = append(ops, SetOp(mp, rec.Encode(), expectVersion))
	}
	// The record's op comes first, so that a concurrent change is reported as its conflict
	// (ErrBadVersion or ErrNodeExists) rather than as the transition's.
	ops = append(ops, CreateOp(TransitionPath(root, group, seq), tr.Encode(), CreateOptions{Parents: true}))
	if err := s.MultiAtomic(ctx, ops...); err != nil {
		return NoModeVersion, ModeRecord{}, fmt.Errorf("zkstate: set mode of group %q from %q to %s: %w", group, from, to, err)
	}
	if expectVersion == NoModeVersion {
		return 0, rec, nil
	}
	return expectVersion + 1, rec, nil
}

// lastTransitionSeqAsync starts lastTransitionSeq and returns a function that waits for its
// result.
func lastTransitionSeqAsync(ctx context.Context, s *Store, root, group string) func() (int32, error) {
	type result struct {
		last int32
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		last, err := lastTransitionSeq(ctx, s, root, group)
		ch <- result{last, err}
	}()
	return func() (int32, error) {
		r := <-ch
		return r.last, r.err
	}
}

// lastTransitionSeq is the highest sequence number under transitions/ (0 when there is none).
func lastTransitionSeq(ctx context.Context, s *Store, root, group string) (int32, error) {
	names, _, err := s.Children(ctx, TransitionsPath(root, group))
	if errors.Is(err, ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var last int32
	for _, n := range names {
		if seq, ok := transitionSeq(n); ok && seq > last {
			last = seq
		}
	}
	return last, nil
}

// ReadTransitions returns the group's recorded transitions, oldest first. A transition znode
// that does not parse is an error (it was not written by this code).
func ReadTransitions(ctx context.Context, s *Store, root, group string) ([]Transition, error) {
	if err := checkGroupName(group); err != nil {
		return nil, err
	}
	names, _, err := s.Children(ctx, TransitionsPath(root, group))
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("zkstate: transitions of group %q: %w", group, err)
	}
	type entry struct {
		seq  int32
		name string
	}
	var list []entry
	for _, n := range names {
		if seq, ok := transitionSeq(n); ok {
			list = append(list, entry{seq, n})
		}
	}
	out := make([]Transition, len(list))
	errs := make([]error, len(list))
	dir := TransitionsPath(root, group)
	if err := s.fanOut(ctx, len(list), nil, func(i int) {
		p := path.Join(dir, list[i].name)
		data, _, err := s.Get(ctx, p)
		if err != nil {
			errs[i] = err
			return
		}
		if out[i], err = ParseTransition(data); err != nil {
			errs[i] = fmt.Errorf("%s: %w", p, err)
		}
	}); err != nil {
		return nil, fmt.Errorf("zkstate: transitions of group %q: %w", group, err)
	}
	var kept []Transition
	for i := range list {
		if errors.Is(errs[i], ErrNoNode) {
			continue // deleted since the listing (an operator pruning the history)
		}
		if errs[i] != nil {
			return nil, fmt.Errorf("zkstate: transitions of group %q: %w", group, errs[i])
		}
		kept = append(kept, out[i])
	}
	// Children sorts by name, and the names are zero-padded sequence numbers.
	return kept, nil
}

// DefaultMode is the mode of a group that has no mode record yet: legacy when
// /consumers/<group> already holds ids, owners or offsets (ZooKeeper-era consumers use it, so
// Kafka members must wait for a migration), else kafka. why says what decided it, for the
// transition that records the default.
//
// Careful: the bridge's own 0.8 mirror writes ids, owners and offsets under /consumers/<group>
// for Kafka groups, so this rule only tells the truth before the bridge first serves a group.
// The bridge therefore persists the default (InitMode) the first time it serves a group and
// reads the record from then on.
func DefaultMode(ctx context.Context, s *Store, group string) (mode Mode, why string, err error) {
	if err := checkGroupName(group); err != nil {
		return "", "", err
	}
	// The three listings go out together, one round trip where one after the other took three
	// (a group's first service waits for them), and are weighed in this order.
	dirs := [3]string{IDsPath(group), OwnersPath(group), OffsetsPath(group)}
	var kids [3][]string
	var errs [3]error
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Go(func() { kids[i], _, errs[i] = s.Children(ctx, dirs[i]) })
	}
	wg.Wait()
	switch ids, err := kids[0], errs[0]; {
	case errors.Is(err, ErrNoNode):
	case err != nil:
		return "", "", fmt.Errorf("zkstate: default mode of group %q: %w", group, err)
	case len(ids) > 0:
		return ModeLegacy, fmt.Sprintf("%s holds %d consumer registration(s)", IDsPath(group), len(ids)), nil
	}
	for i, dir := range dirs[1:] {
		held, err := hasGrandchildren(ctx, s, dir, kids[i+1], errs[i+1])
		if err != nil {
			return "", "", fmt.Errorf("zkstate: default mode of group %q: %w", group, err)
		}
		if held {
			return ModeLegacy, fmt.Sprintf("%s holds partitions", dir), nil
		}
	}
	return ModeKafka, GroupPath(group) + " holds no ids, owners or offsets", nil
}

// hasGrandchildren reports whether any dir/<topic>/<partition> znode exists, given the listing
// of dir (topics, or its error). Empty topic directories do not count: 0.8 consumers and the
// bridge's mirror leave them behind when they release their owners, and they say nothing about
// who consumes.
func hasGrandchildren(ctx context.Context, s *Store, dir string, topics []string, err error) (bool, error) {
	if errors.Is(err, ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, t := range topics {
		parts, _, err := s.Children(ctx, path.Join(dir, t))
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return false, err
		}
		if len(parts) > 0 {
			return true, nil
		}
	}
	return false, nil
}
