package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

func groupsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "groups",
		Usage: "read consumer groups from ZooKeeper (read-only)",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list the groups under /consumers with their registered member counts, and each group's total lag when the brokers are known",
				ArgsUsage: " ",
				Description: "LAG is the sum, over the group's committed offsets (a finalized group's: the bridge's\n" +
					"records), of log end minus committed offset. It is shown when the brokers are known:\n" +
					"--bootstrap, or a broker of /brokers/ids that answers; \"-\" for a group without a commit.",
				Flags: append(append(zkFlags(), outputFlag(), rootFlag()), bootstrapFlags()...),
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
					addListLag(c, e, s, rows) // lag.go
					return p.groups(e.stdout, rows)
				},
			},
			{
				Name:      "describe",
				Usage:     "show a group's members (kind, threads, owned partitions), committed offsets and unowned partitions",
				ArgsUsage: "<group>",
				Flags:     append(append(zkFlags(), outputFlag(), rootFlag()), bootstrapFlags()...),
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
					v := buildGroupView(snap, bridgeSessions(c, s))
					if err := committedOffsets(c.Context, s, c.String("root"), group, &v); err != nil {
						return err
					}
					// repair.go: the group's own records that a bridge cannot read.
					if probs, err := recordProblems(c.Context, s, c.String("root"), group); err != nil {
						e.log.Warn().Err(err).Msg("cannot read the group's own records")
					} else if len(probs) > 0 {
						v.Problems = append(v.Problems, probs...)
						sort.Slice(v.Problems, func(i, j int) bool { return v.Problems[i].Path < v.Problems[j].Path })
					}
					addLag(c, e, s, &v) // lag.go: LOG-END-OFFSET and LAG when the brokers are known
					// bridges.go: the bridge that coordinates the group, when any runs.
					if v.Coordinator, err = coordinatingBridge(c.Context, s, c.String("root"), group); err != nil {
						e.log.Warn().Err(err).Msg("cannot tell the coordinating bridge")
					}
					return p.group(e.stdout, v)
				},
			},
		},
	}
}

// storeKinds reads what tells the members' kinds from ZooKeeper (memberKinds).
type storeKinds struct {
	c        *cli.Context
	s        *zkstate.Store
	root     string
	sessions map[int64]bool
}

// bridgeSessions returns what tells a group's members' kinds: the ZooKeeper sessions of the
// running bridges — each holds its registration <root>/bridges/<node-id> as an ephemeral — read
// now, and, when a group is described, its hosted-member znodes. A failure to read them only
// loses the kind column's precision, so it is not returned.
func bridgeSessions(c *cli.Context, s *zkstate.Store) memberKinds {
	k := &storeKinds{c: c, s: s, root: c.String("root"), sessions: map[int64]bool{}}
	if k.root == "" {
		k.root = bridge.DefaultRoot
	}
	dir := zkstate.BridgesPath(k.root)
	ids, _, err := s.Children(c.Context, dir)
	if err != nil {
		return k
	}
	for _, id := range ids {
		if ok, st, err := s.Exists(c.Context, path.Join(dir, id)); err == nil && ok && st.EphemeralOwner != 0 {
			k.sessions[st.EphemeralOwner] = true
		}
	}
	return k
}

func (k *storeKinds) bridge(session int64) bool { return k.sessions[session] }

// hosted reads the group's hosted-member znodes, <root>/groups/<g>/hosted/<consumer-id>
// (zkstate/hosted.go): which kind of member, hosted by which bridge, stands behind each of the
// bridges' registrations in /ids.
func (k *storeKinds) hosted(group string) (map[string]hostedRecord, []zkstate.Problem) {
	dir := zkstate.HostedPath(k.root, group)
	out := map[string]hostedRecord{}
	ids, _, err := k.s.Children(k.c.Context, dir)
	if err != nil {
		return out, nil
	}
	recs := make([]hostedRecord, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32) // go-zookeeper pipelines the reads on its one connection
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			data, st, err := k.s.Get(k.c.Context, path.Join(dir, id))
			if err != nil {
				errs[i] = err
				return
			}
			h, err := zkstate.ParseHostedMember(data)
			recs[i], errs[i] = hostedRecord{HostedMember: h, Session: st.EphemeralOwner}, err
		}()
	}
	wg.Wait()
	var problems []zkstate.Problem
	for i, id := range ids {
		switch {
		case errs[i] == nil:
			out[id] = recs[i]
		case errors.Is(errs[i], zkstate.ErrMalformed):
			problems = append(problems, zkstate.Problem{Path: path.Join(dir, id), Err: errs[i]})
		}
		// Another error (the member left between the two reads): nothing to describe.
	}
	return out, problems
}

func rootFlag() cli.Flag {
	return &cli.StringFlag{Name: "root", Value: bridge.DefaultRoot, EnvVars: []string{"ZKBRIDGE_ROOT"},
		Usage: "ZooKeeper path of the bridges' own state (to tell each member's kind: kafka and legacy members hosted by a bridge, zk members)"}
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
				Usage:     "print a group's committed offsets, as OffsetFetch answers them, as CSV (topic,partition,offset) or JSON",
				ArgsUsage: "<group>",
				Flags: append(zkFlags(), rootFlag(),
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
					rows, err := exportRows(c, e, s, group)
					if err != nil {
						return err
					}
					if format == "json" {
						return jsonPrinter{}.offsets(e.stdout, rows)
					}
					return writeOffsetsCSV(e, rows)
				},
			},
		},
	}
}

// exportRows reads the group's committed offsets from where its mode keeps them, by the rule
// OffsetFetch applies (zkstate.OffsetPair.Fetch): a finalized group's are the bridge's own
// records, not the /consumers mirror it stopped writing.
func exportRows(c *cli.Context, e *env, s *zkstate.Store, group string) ([]offsetRow, error) {
	cur, err := migrate.ReadOffsets(c.Context, s, c.String("root"), group)
	if err != nil {
		return nil, err
	}
	if !cur.Census.Exists {
		return nil, fmt.Errorf("group %q not found", group)
	}
	for _, st := range cur.States {
		if st.ZKExists && !st.HasZK {
			e.log.Warn().Str("path", zkstate.OffsetPath(group, st.Topic, st.Partition)).Msg("malformed znode skipped")
		}
		if st.OwnExists && !st.HasOwn {
			e.log.Warn().Str("path", zkstate.OwnOffsetPath(c.String("root"), group, st.Topic, st.Partition)).Msg("malformed znode skipped")
		}
	}
	rows := make([]offsetRow, 0, len(cur.Offsets))
	for _, o := range cur.Offsets {
		rows = append(rows, offsetRow{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset})
	}
	return rows, nil
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
