package main

// zkbridge repair: a garbage mode record stops its group for ever (every
// bridge answers COORDINATOR_NOT_AVAILABLE, retriable), and a garbage group record makes every
// load of the group fail. repair shows which of the group's own records do not parse and
// rewrites them, compare-and-set against the version it read, a dry run unless --execute.
// It touches only those two znodes: offsets (the 0.8 znodes and the bridge's offset records),
// hosted members and the transition history stay as they are.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

func repairCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "repair",
		Usage: "show a group's corrupt mode or group record and rewrite it; a dry run unless --execute",
		Description: "Reads the group's own records, <root>/groups/<g>/mode and <root>/groups/<g>/record, and\n" +
			"lists those that do not parse (a bridge cannot serve the group while either is corrupt).\n" +
			"With --execute it rewrites them, each compare-and-set against the version it read (a\n" +
			"concurrent change: exit 3, look again):\n" +
			"  - a corrupt mode record is rewritten to the mode --mode names (required then: nobody\n" +
			"    can tell which mode the group was in; a transition records the repair);\n" +
			"  - a corrupt group record is replaced by an empty record (no members) whose generation\n" +
			"    is one past the last the corrupt record still shows (1 when none is readable). The\n" +
			"    group's Kafka members rejoin and get a new generation, as after any rebalance. Why not\n" +
			"    delete it: a group without a record starts again at generation 0 and would hand out\n" +
			"    generation numbers its lost members already held, which the engine never does (a\n" +
			"    stale member's generation must not match a new one); an empty record keeps it rising.\n" +
			"  - a corrupt mode record's dry run shows where the last recorded transition went (the\n" +
			"    history lives in separate znodes), as a hint for --mode.\n" +
			"Offsets are never touched: neither /consumers/<g>/offsets nor the bridge's offset records.\n" +
			"A group whose records parse: \"nothing to repair\", exit 0.",
		Flags: writeFlags("rewrite the corrupt records",
			&cli.StringFlag{Name: "group", Usage: "the group to repair (required)"},
			&cli.StringFlag{Name: "mode", Usage: "the mode to write over a corrupt mode record: legacy, mixed, kafka or finalized"},
			whoFlag(), modesRootFlag()),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usagef("repair takes no arguments (the group is --group)")
			}
			g := c.String("group")
			if g == "" {
				return usagef("repair: --group is required")
			}
			var mode zkstate.Mode
			if m := c.String("mode"); m != "" {
				var err error
				if mode, err = zkstate.ParseMode(m); err != nil {
					return usagef("repair: --mode: %v", err)
				}
			}
			s, dry, err := openWrite(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			root := c.String("root")
			st, err := inspectRecords(c.Context, s, root, g)
			if err != nil {
				return err
			}
			return repairGroup(c.Context, e.stdout, s, root, st, mode, who(c), dry)
		},
	}
}

// recordsState is what repair found in one group's own records.
type recordsState struct {
	group string
	// modeErr is the parse error of a corrupt mode record, nil when it parses or is absent;
	// modeVersion its znode version.
	modeErr     error
	modeVersion int32
	mode        zkstate.Mode // the mode a readable record holds, "" otherwise
	// recordErr is the error of a corrupt group record; recordVersion its znode version;
	// lastGen the generation it still shows (-1 when none); recordExists whether there is one.
	recordErr     error
	recordVersion int32
	recordExists  bool
	lastGen       group.Generation
	generation    group.Generation // a readable record's generation
}

func (r recordsState) corrupt() bool { return r.modeErr != nil || r.recordErr != nil }

// inspectRecords reads the group's mode and group records and tells which do not parse. A
// group ZooKeeper knows nothing of is an error (exit 1).
func inspectRecords(ctx context.Context, s *zkstate.Store, root, g string) (recordsState, error) {
	st := recordsState{group: g, lastGen: -1}
	rec, v, exists, err := zkstate.ReadMode(ctx, s, root, g)
	switch {
	case err != nil && exists && errors.Is(err, zkstate.ErrMalformed):
		st.modeErr, st.modeVersion = err, v
	case err != nil:
		return st, err
	case exists:
		st.mode, st.modeVersion = rec.Mode, v
	}
	rp := zkstate.GroupRecordPath(root, g)
	data, zst, err := s.Get(ctx, rp)
	switch {
	case errors.Is(err, zkstate.ErrNoNode):
	case err != nil:
		return st, fmt.Errorf("read %s: %w", rp, err)
	default:
		st.recordExists, st.recordVersion = true, zst.Version
		gen, perr := checkGroupRecord(data, g)
		if perr != nil {
			st.recordErr, st.lastGen = perr, gen
		} else {
			st.generation = gen
		}
	}
	if !exists && !st.recordExists {
		known := false
		for _, p := range []string{zkstate.BridgeGroupPath(root, g), zkstate.GroupPath(g)} {
			ok, _, err := s.Exists(ctx, p)
			if err != nil {
				return st, fmt.Errorf("read %s: %w", p, err)
			}
			known = known || ok
		}
		if !known {
			return st, fmt.Errorf("group %s not found (neither /consumers/%s nor %s)", g, g, zkstate.BridgeGroupPath(root, g))
		}
	}
	return st, nil
}

// checkGroupRecord applies the bridge's own test of a group record (bridge/records.go load):
// the engine's JSON, valid, naming its group. A corrupt record still gives the generation it
// shows, when that much of it reads (-1 otherwise).
func checkGroupRecord(data []byte, g string) (group.Generation, error) {
	var rec group.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		var head struct {
			Generation *group.Generation `json:"generation"`
		}
		gen := group.Generation(-1)
		if json.Unmarshal(data, &head) == nil && head.Generation != nil && *head.Generation >= 0 {
			gen = *head.Generation
		}
		return gen, fmt.Errorf("%w: group record: %v", zkstate.ErrMalformed, err)
	}
	gen := rec.Generation
	if gen < 0 {
		gen = -1
	}
	if err := rec.Validate(); err != nil {
		return gen, fmt.Errorf("%w: group record: %v", zkstate.ErrMalformed, err)
	}
	if rec.Group != g {
		return gen, fmt.Errorf("%w: group record names group %q", zkstate.ErrMalformed, rec.Group)
	}
	return rec.Generation, nil
}

// emptyRecord is what replaces a corrupt group record: no members, the next generation.
func emptyRecord(g string, lastGen group.Generation) []byte {
	next := group.Generation(1)
	if lastGen >= 0 {
		next = lastGen + 1
	}
	b, _ := json.Marshal(group.Record{Version: group.RecordVersion, Group: g, Generation: next, Members: []group.RecordMember{}})
	return b
}

// recordProblems lists the group's corrupt own records, for groups describe.
func recordProblems(ctx context.Context, s *zkstate.Store, root, g string) ([]problemView, error) {
	st, err := inspectRecords(ctx, s, root, g)
	if err != nil {
		return nil, err
	}
	var out []problemView
	if st.modeErr != nil {
		out = append(out, problemView{Path: zkstate.ModePath(root, g), Error: st.modeErr.Error() + " (zkbridge repair --group " + g + " --mode M)"})
	}
	if st.recordErr != nil {
		out = append(out, problemView{Path: zkstate.GroupRecordPath(root, g), Error: st.recordErr.Error() + " (zkbridge repair --group " + g + ")"})
	}
	return out, nil
}

// repairGroup shows what st found and, unless dry, rewrites the corrupt records.
func repairGroup(ctx context.Context, w io.Writer, s *zkstate.Store, root string, st recordsState, mode zkstate.Mode, who string, dry bool) error {
	g := st.group
	if !st.corrupt() {
		what := "no mode record"
		if st.mode != "" {
			what = "mode " + string(st.mode)
		}
		if st.recordExists {
			what += fmt.Sprintf(", group record at generation %d", st.generation)
		} else {
			what += ", no group record"
		}
		fmt.Fprintf(w, "group %s: nothing to repair (%s)\n", g, what)
		return nil
	}
	if st.modeErr != nil && mode == "" {
		showCorruptMode(ctx, w, s, root, st)
		return usagef("repair: the mode record of group %s is corrupt: name the mode to write with --mode legacy|mixed|kafka|finalized", g)
	}
	verb := "rewritten"
	if dry {
		verb = "would be rewritten"
	}
	if st.modeErr != nil {
		showCorruptMode(ctx, w, s, root, st)
		if !dry {
			why := fmt.Sprintf("repair: the record was unreadable (%v)", st.modeErr)
			if _, err := zkstate.RepairMode(ctx, s, root, g, mode, who, why, st.modeVersion); err != nil {
				if zkstate.IsModeConflict(err) || errors.Is(err, zkstate.ErrModeReadable) {
					return codedError{exitBlocked, fmt.Sprintf("repair: group %s: its mode record changed since it was read; look again: %v", g, err)}
				}
				return err
			}
		}
		fmt.Fprintf(w, "  %s: mode %s\n", verb, mode)
	}
	if st.recordErr != nil {
		rp := zkstate.GroupRecordPath(root, g)
		data := emptyRecord(g, st.lastGen)
		var rec group.Record
		_ = json.Unmarshal(data, &rec)
		fmt.Fprintf(w, "group %s: group record %s (version %d) is corrupt: %v\n", g, rp, st.recordVersion, st.recordErr)
		if !dry {
			if err := s.Multi(ctx, zkstate.SetOp(rp, data, st.recordVersion)); err != nil {
				if errors.Is(err, zkstate.ErrBadVersion) || errors.Is(err, zkstate.ErrNoNode) {
					return codedError{exitBlocked, fmt.Sprintf("repair: group %s: its group record changed since it was read; look again: %v", g, err)}
				}
				return fmt.Errorf("repair: group %s: write %s: %w", g, rp, err)
			}
		}
		fmt.Fprintf(w, "  %s: an empty record at generation %d (members rejoin; offsets untouched)\n", verb, rec.Generation)
	}
	if dry {
		fmt.Fprintln(w, dryRunFooter("repair"))
	}
	return nil
}

// showCorruptMode prints the corrupt mode record and, as a hint for --mode, where the group's
// last recorded transition went: the history is separate znodes the corruption did not reach.
func showCorruptMode(ctx context.Context, w io.Writer, s *zkstate.Store, root string, st recordsState) {
	g := st.group
	fmt.Fprintf(w, "group %s: mode record %s (version %d) is corrupt: %v\n", g, zkstate.ModePath(root, g), st.modeVersion, st.modeErr)
	trs, err := zkstate.ReadTransitions(ctx, s, root, g)
	switch {
	case err != nil:
		fmt.Fprintf(w, "  its transitions cannot be read either: %v\n", err)
	case len(trs) == 0:
		fmt.Fprintln(w, "  no transition is recorded: nothing tells which mode it was in")
	default:
		last := trs[len(trs)-1]
		fmt.Fprintf(w, "  the last recorded transition (%s, by %s) went to %s\n", path.Base(zkstate.TransitionPath(root, g, last.Seq)), last.By, last.To)
	}
}
