package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
)

func groupsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "groups",
		Usage: "read consumer groups from ZooKeeper (read-only)",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list the groups under /consumers with their registered member counts",
				ArgsUsage: " ",
				Flags:     append(zkFlags(), outputFlag()),
				Action: func(c *cli.Context) error {
					if c.NArg() != 0 {
						return usagef("groups list takes no arguments")
					}
					p, err := newPrinter(c.String("output"))
					if err != nil {
						return err
					}
					s, err := openStore(c, e)
					if err != nil {
						return err
					}
					defer s.Close()
					rows, err := listGroups(c, s)
					if err != nil {
						return err
					}
					return p.groups(e.stdout, rows)
				},
			},
			{
				Name:      "describe",
				Usage:     "show a group's members (kind, threads, owned partitions), committed offsets and unowned partitions",
				ArgsUsage: "<group>",
				Flags:     append(zkFlags(), outputFlag(), rootFlag()),
				Action: func(c *cli.Context) error {
					group, err := groupArg(c)
					if err != nil {
						return err
					}
					p, err := newPrinter(c.String("output"))
					if err != nil {
						return err
					}
					s, err := openStore(c, e)
					if err != nil {
						return err
					}
					defer s.Close()
					snap, err := s.Snapshot(c.Context, group)
					if err != nil {
						return err
					}
					for _, pr := range snap.Problems {
						e.log.Warn().Str("path", pr.Path).Err(pr.Err).Msg("malformed znode skipped")
					}
					return p.group(e.stdout, buildGroupView(snap, bridgeSessions(c, s)))
				},
			},
		},
	}
}

// bridgeSessions returns the ZooKeeper sessions of the running bridges: each holds its
// registration <root>/bridges/<node-id> as an ephemeral. A failure only loses the kind column's
// precision, so it is logged, not returned.
func bridgeSessions(c *cli.Context, s *zkstate.Store) map[int64]bool {
	root := c.String("root")
	if root == "" {
		root = bridge.DefaultRoot
	}
	dir := path.Join(root, "bridges")
	ids, _, err := s.Children(c.Context, dir)
	out := map[int64]bool{}
	if err != nil {
		return out
	}
	for _, id := range ids {
		if ok, st, err := s.Exists(c.Context, path.Join(dir, id)); err == nil && ok && st.EphemeralOwner != 0 {
			out[st.EphemeralOwner] = true
		}
	}
	return out
}

func rootFlag() cli.Flag {
	return &cli.StringFlag{Name: "root", Value: bridge.DefaultRoot, EnvVars: []string{"ZKBRIDGE_ROOT"},
		Usage: "ZooKeeper path of the bridges' own state (to tell members served by a bridge from 0.8 consumers)"}
}

func groupArg(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", usagef("%s needs exactly one <group> argument", c.Command.FullName())
	}
	g := c.Args().First()
	if g == "" {
		return "", usagef("the group name is empty")
	}
	return g, nil
}

func listGroups(c *cli.Context, s *zkstate.Store) ([]groupRow, error) {
	groups, err := s.Groups(c.Context)
	if err != nil {
		return nil, err
	}
	rows := make([]groupRow, 0, len(groups))
	for _, g := range groups {
		ids, _, err := s.Children(c.Context, zkstate.IDsPath(g))
		if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
			return nil, err
		}
		rows = append(rows, groupRow{Group: g, Members: len(ids)})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Group < rows[j].Group })
	return rows, nil
}

func offsetsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "offsets",
		Usage: "read a group's committed offsets from ZooKeeper",
		Subcommands: []*cli.Command{
			{
				Name:      "export",
				Usage:     "print a group's committed offsets (/consumers/<group>/offsets) as CSV (topic,partition,offset) or JSON",
				ArgsUsage: "<group>",
				Flags: append(zkFlags(),
					&cli.StringFlag{Name: "format", Value: "csv", Usage: "csv or json"}),
				Action: func(c *cli.Context) error {
					group, err := groupArg(c)
					if err != nil {
						return err
					}
					format := c.String("format")
					if format != "csv" && format != "json" {
						return usagef("--format %q: want csv or json", format)
					}
					s, err := openStore(c, e)
					if err != nil {
						return err
					}
					defer s.Close()
					snap, err := s.Snapshot(c.Context, group)
					if err != nil {
						return err
					}
					for _, pr := range snap.Problems {
						e.log.Warn().Str("path", pr.Path).Err(pr.Err).Msg("malformed znode skipped")
					}
					rows := offsetRows(snap)
					if format == "json" {
						return jsonPrinter{}.offsets(e.stdout, rows)
					}
					return writeOffsetsCSV(e, rows)
				},
			},
		},
	}
}

func offsetRows(s *zkstate.GroupSnapshot) []offsetRow {
	rows := make([]offsetRow, 0, len(s.Offsets))
	for tp, off := range s.Offsets {
		rows = append(rows, offsetRow{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Topic != rows[j].Topic {
			return rows[i].Topic < rows[j].Topic
		}
		return rows[i].Partition < rows[j].Partition
	})
	return rows
}

func writeOffsetsCSV(e *env, rows []offsetRow) error {
	w := csv.NewWriter(e.stdout)
	if err := w.Write([]string{"topic", "partition", "offset"}); err != nil {
		return err
	}
	for _, r := range rows {
		if err := w.Write([]string{r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.Offset, 10)}); err != nil {
			return err
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}
