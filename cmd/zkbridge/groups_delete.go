package main

// zkbridge groups delete and offsets delete: kafka-consumer-groups --delete
// and --delete-offsets on the groups the bridge knows, in ZooKeeper. As Kafka refuses to delete
// a group that is not empty, both refuse a group with members of any kind (a 0.8 or legacy
// consumer registered, a Kafka member in a bridge's record): their next commit would bring the
// offsets back, and a 0.8 consumer would lose its registration under its feet.
// (OffsetDelete on the wire, newproto/47_offset_delete.go, follows Kafka's finer rule: only the
// offsets of topics no member subscribes to.)

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

func groupsDeleteCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete groups with their offsets, as kafka-consumer-groups --delete; a dry run unless --execute",
		ArgsUsage: "<group> [<group>...]",
		Description: "Deletes everything ZooKeeper holds of each group: /consumers/<g> (offsets, and the empty\n" +
			"ids and owners) and the bridges' own state under <root>/groups/<g> (mode, record, offset\n" +
			"records, transitions), in one ZooKeeper multi that holds only if nothing changed since it\n" +
			"was read: a consumer registering or an offset committed meanwhile fails it whole (exit 3,\n" +
			"nothing deleted; run it again). Refused (exit 3) for a group with members of any kind, as\n" +
			"Kafka refuses a group that is not empty: stop its consumers first. A group ZooKeeper does\n" +
			"not know is a failure (exit 1). A dry run unless --execute.",
		Flags: writeFlags("delete the groups", modesRootFlag()),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usagef("groups delete: name at least one <group>")
			}
			s, dry, err := openWrite(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			root := c.String("root")
			var worst codedError // a failure outranks a blocked group
			for _, g := range c.Args().Slice() {
				msg, err := deleteGroup(c, s, root, g, dry)
				if err != nil {
					fmt.Fprintf(e.stdout, "%s: %v\n", g, err)
					if worst.code != exitError {
						worst = err.(codedError)
					}
					continue
				}
				fmt.Fprintf(e.stdout, "%s: %s\n", g, msg)
			}
			if dry {
				fmt.Fprintln(e.stdout, dryRunFooter("groups delete"))
			}
			if worst.code != 0 {
				return worst
			}
			return nil
		},
	}
}

// deleteGroup deletes (or with dry, checks that it could delete) one group.
func deleteGroup(c *cli.Context, s *zkstate.Store, root, g string, dry bool) (string, error) { // errors are codedError
	d, err := planGroupDelete(c.Context, s, root, g)
	if err != nil {
		return "", err
	}
	if dry {
		return "would be deleted (" + d.what + ")", nil
	}
	if err := d.apply(c.Context, s); err != nil {
		return "", err
	}
	return "deleted (" + d.what + ")", nil
}

// groupDeletion is the deletion of one group as read: every znode of /consumers/<g> and
// <root>/groups/<g> with the version it had.
//
// It is one ZooKeeper multi (MultiAtomic), children before parents, each delete at the version
// read, so it deletes the group whole or not at all, and only the group the census saw: the
// trees are read before the census, so a member that registered before the trees were read is
// in the census (refused), and anything written after — a consumer registering in /ids, a
// legacy member's hosted znode, a Kafka member persisted in a bridge's record, an offset
// committed — makes a delete of the multi fail (a new child: its parent is not empty; a new
// write: its version moved), and nothing is deleted. A group too big for one request
// (zkstate.Config.MaxMultiBytes, 1 MB by default: some ten thousand offsets) is refused with
// nothing deleted rather than deleted in parts.
type groupDeletion struct {
	group string
	ops   []zkstate.Op
	what  string
}

// planGroupDelete reads one group for groupDeletion and refuses it when it has members.
func planGroupDelete(ctx context.Context, s *zkstate.Store, root, g string) (groupDeletion, error) { // errors are codedError
	var nodes []zkstate.TreeNode
	for _, p := range []string{zkstate.GroupPath(g), path.Join(zkstate.BridgeGroupsPath(root), g)} {
		tree, err := s.Tree(ctx, p)
		if err != nil {
			return groupDeletion{}, codedError{exitError, fmt.Sprintf("read %s: %v", p, err)}
		}
		nodes = append(nodes, tree...)
	}
	cen, err := migrate.ReadCensus(ctx, s, root, g, migrate.CensusOptions{})
	if err != nil {
		return groupDeletion{}, codedError{exitError, err.Error()}
	}
	if !cen.Exists || len(nodes) == 0 {
		return groupDeletion{}, codedError{exitError, fmt.Sprintf("group %s not found (neither /consumers/%s nor %s/groups/%s)", g, g, root, g)}
	}
	if n := len(cen.Members); n > 0 {
		return groupDeletion{}, codedError{exitBlocked, fmt.Sprintf("group %s is not empty: %s (%s); stop them first", g, plural(n, "member"), memberList(cen.Members))}
	}
	cur, err := migrate.ReadOffsets(ctx, s, root, g)
	if err != nil {
		return groupDeletion{}, codedError{exitError, err.Error()}
	}
	return groupDeletion{group: g, ops: zkstate.DeleteTreeOps(nodes),
		what: fmt.Sprintf("%s mode, %s", cen.Mode, plural(len(cur.Offsets), "committed offset"))}, nil
}

// apply deletes the group in one multi (see groupDeletion).
func (d groupDeletion) apply(ctx context.Context, s *zkstate.Store) error { // errors are codedError
	err := s.MultiAtomic(ctx, d.ops...)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zkstate.ErrNotEmpty), errors.Is(err, zkstate.ErrBadVersion), errors.Is(err, zkstate.ErrNoNode):
		return codedError{exitBlocked, fmt.Sprintf("group %s changed while deleting (%v): nothing deleted; run it again", d.group, err)}
	case errors.Is(err, zkstate.ErrMultiTooLarge):
		return codedError{exitError, fmt.Sprintf("group %s has too many znodes to delete in one ZooKeeper request (%v): nothing deleted; delete its offsets first (offsets delete)", d.group, err)}
	default:
		return codedError{exitError, fmt.Sprintf("delete group %s: %v", d.group, err)}
	}
}

func offsetsDeleteCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete a group's committed offsets of some topics, as kafka-consumer-groups --delete-offsets; a dry run unless --execute",
		ArgsUsage: "<group>",
		Description: "--topic t (every partition the group has an offset for) or --topic t:0,2 (repeatable).\n" +
			"Both places OffsetFetch may read are cleared: the 0.8 znodes /consumers/<g>/offsets and\n" +
			"the bridge's records <root>/groups/<g>/offsets, in one compare-and-set against what was\n" +
			"read (a commit in between fails the delete whole: exit 3, run it again). Refused (exit 3)\n" +
			"while the group has members of any kind unless --force: their next commit would write\n" +
			"the offsets again.",
		Flags: writeFlags("delete the offsets",
			&cli.StringSliceFlag{Name: "topic", Usage: "a topic, or topic:partition,partition... (repeatable; required)"},
			&cli.BoolFlag{Name: "force", Usage: "delete even though the group has members"},
			modesRootFlag()),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("offsets delete takes one <group> argument")
			}
			g := c.Args().First()
			scope, order, err := parseTopics(c.StringSlice("topic"))
			if err != nil {
				return err
			}
			if len(order) == 0 {
				return usagef("offsets delete: --topic is required")
			}
			s, dry, err := openWrite(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			root := c.String("root")
			cur, err := migrate.ReadOffsets(c.Context, s, root, g)
			if err != nil {
				return err
			}
			if n := len(cur.Census.Members); n > 0 && !c.Bool("force") {
				return codedError{exitBlocked, fmt.Sprintf("offsets delete: group %s has %s (%s): their next commit would write the offsets again; stop them first, or --force",
					g, plural(n, "member"), memberList(cur.Census.Members))}
			}
			var ops []zkstate.Op
			var gone []migrate.OffsetState
			for _, st := range cur.States {
				ps, ok := scope[st.Topic]
				if !ok || (ps != nil && !slices.Contains(ps, st.Partition)) {
					continue
				}
				if st.ZKExists {
					ops = append(ops, zkstate.DeleteOp(zkstate.OffsetPath(g, st.Topic, st.Partition), st.ZKVersion))
				}
				if st.OwnExists {
					ops = append(ops, zkstate.DeleteOp(zkstate.OwnOffsetPath(root, g, st.Topic, st.Partition), st.OwnVersion))
				}
				gone = append(gone, st)
			}
			committed := map[zkstate.TopicPartition]int64{}
			for _, o := range cur.Offsets {
				committed[o.TP()] = o.Offset
			}
			printOffsetsDelete(e.stdout, g, gone, committed)
			if dry {
				fmt.Fprintln(e.stdout, dryRunFooter("offsets delete"))
				return nil
			}
			if len(ops) > 0 {
				if cur.Census.Recorded {
					ops = append([]zkstate.Op{zkstate.CheckOp(zkstate.ModePath(root, g), cur.Census.ModeVersion)}, ops...)
				}
				if err := s.MultiAtomic(c.Context, ops...); err != nil {
					if errors.Is(err, zkstate.ErrBadVersion) || errors.Is(err, zkstate.ErrNoNode) {
						return codedError{exitBlocked, fmt.Sprintf("offsets delete: group %s changed while deleting (%v); nothing deleted; run it again", g, err)}
					}
					return fmt.Errorf("offsets delete: %w", err)
				}
			}
			fmt.Fprintf(e.stdout, "deleted %s\n", plural(len(gone), "offset"))
			return nil
		},
	}
}

func printOffsetsDelete(w io.Writer, g string, gone []migrate.OffsetState, committed map[zkstate.TopicPartition]int64) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED")
	for _, st := range gone {
		off := "-"
		if v, ok := committed[st.TopicPartition]; ok {
			off = fmt.Sprint(v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", g, st.Topic, st.Partition, off)
	}
	if len(gone) == 0 {
		fmt.Fprintln(tw, "(no offsets of those topics)\t\t\t")
	}
	_ = tw.Flush()
}
