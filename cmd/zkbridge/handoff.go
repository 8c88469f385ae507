package main

// zkbridge handoff: the last step of a group's migration. A finalized group's
// offsets live in the bridge's records; handoff commits them to the real cluster's own group
// coordinator with kafka-go (the client DESIGN §5 names for talking to a real cluster), reads
// them back to verify, and records the handoff under <root>/groups/<g>/handoff. The group's
// consumers are then started against the cluster instead of a bridge.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	kafka "github.com/segmentio/kafka-go"
	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

func handoffCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "handoff",
		Usage:     "commit a finalized group's offsets to a real Kafka cluster's group coordinator, verify them, and record the handoff",
		ArgsUsage: " ",
		Description: "For a finalized group with no members left: reads its committed offsets where a finalized\n" +
			"group keeps them (the bridge's records), commits them to the group coordinator of the\n" +
			"cluster at --bootstrap (an OffsetCommit with generation -1, as for a group with no\n" +
			"members), reads them back to verify every one, and records who, when, where and how many\n" +
			"under <root>/groups/<g>/handoff. Then start the group's consumers against the cluster.\n\n" +
			"Refused (exit 4) for a group that is not finalized: before that ZooKeeper is its truth and\n" +
			"its consumers may still commit there. Blocked (exit 3) while the group has members on a\n" +
			"bridge or on the cluster (commits of theirs would be lost or overwritten), and when the\n" +
			"cluster already holds an offset ahead of the bridge's (consumers ran against it since?)\n" +
			"unless --force. A re-run after a successful handoff commits nothing and records nothing.\n\n" +
			"A dry run unless --execute: it shows what would be committed and what the cluster holds now.",
		Flags: writeFlags("commit the offsets to the cluster and record the handoff",
			&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "the finalized group to hand off (required)"},
			&cli.StringFlag{Name: "bootstrap", Usage: "the cluster's brokers, host:port[,host:port...] (required)"},
			&cli.DurationFlag{Name: "kafka-timeout", Value: 30 * time.Second, Usage: "give up on the cluster after this long"},
			&cli.BoolFlag{Name: "force", Usage: "commit even where the cluster holds an offset ahead of the bridge's"},
			whoFlag(), modesRootFlag(), outputFlag()),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("handoff takes no arguments (use --group and --bootstrap)")
			}
			group, bootstrap := c.String("group"), c.String("bootstrap")
			if group == "" || bootstrap == "" {
				return usagef("handoff: --group and --bootstrap are required")
			}
			var brokers []string
			for _, b := range strings.Split(bootstrap, ",") {
				if b = strings.TrimSpace(b); b != "" {
					brokers = append(brokers, b)
				}
			}
			if len(brokers) == 0 {
				return usagef("handoff: --bootstrap names no broker")
			}
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if c.Duration("kafka-timeout") <= 0 {
				return usagef("--kafka-timeout must be positive")
			}
			s, dry, err := openWrite(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			transport := &kafka.Transport{ClientID: "zkbridge-handoff"}
			defer transport.CloseIdleConnections()
			h := handoff{
				store: s, root: c.String("root"), group: group, bootstrap: strings.Join(brokers, ","),
				client: &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: c.Duration("kafka-timeout"), Transport: transport},
				dryRun: dry, force: c.Bool("force"), who: who(c),
			}
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("kafka-timeout"))
			defer cancel()
			rep, err := h.run(ctx)
			if rep != nil {
				var perr error
				if format == "json" {
					perr = writeJSON(e.stdout, rep)
				} else {
					perr = printHandoff(e.stdout, rep)
				}
				if err == nil {
					err = perr
				}
			}
			return err
		},
	}
}

type handoff struct {
	store     *zkstate.Store
	root      string
	group     string
	bootstrap string
	client    *kafka.Client
	dryRun    bool
	force     bool
	who       string
}

// handoffReport is what handoff prints (and its JSON).
type handoffReport struct {
	Group     string           `json:"group"`
	Bootstrap string           `json:"bootstrap"`
	DryRun    bool             `json:"dry_run"`
	Offsets   []handoffOffset  `json:"offsets"`
	Committed int              `json:"committed"`
	Verified  bool             `json:"verified"`
	Handoff   *migrate.Handoff `json:"handoff,omitempty"` // the record written (nil: none)
	Note      string           `json:"note,omitempty"`
}

type handoffOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Metadata  string `json:"metadata,omitempty"`
	// ClusterBefore is the cluster's committed offset before the handoff (nil: none).
	ClusterBefore *int64 `json:"cluster_before"`
	Result        string `json:"result"` // committed, already there, would commit, behind the cluster
}

func (h handoff) run(ctx context.Context) (*handoffReport, error) {
	if _, err := migrate.Select(ctx, h.store, h.root, migrate.Selector{Groups: []string{h.group}}); err != nil {
		return nil, err
	}
	cur, err := migrate.ReadOffsets(ctx, h.store, h.root, h.group)
	if err != nil {
		return nil, err
	}
	cen := cur.Census
	if err := h.checkGroupIdle(cen); err != nil {
		return nil, err
	}
	if err := h.checkClusterGroupEmpty(ctx); err != nil {
		return nil, err
	}

	rep := &handoffReport{Group: h.group, Bootstrap: h.bootstrap, DryRun: h.dryRun, Offsets: []handoffOffset{}}
	topics := map[string][]int{}
	for _, o := range cur.Offsets {
		topics[o.Topic] = append(topics[o.Topic], int(o.Partition))
	}
	before, err := h.fetch(ctx, topics)
	if err != nil {
		return nil, err
	}
	pending := map[string][]kafka.OffsetCommit{}
	behind := 0
	for _, o := range cur.Offsets {
		row := handoffOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, Metadata: o.Metadata}
		b, ok := before[o.TP()]
		if ok {
			row.ClusterBefore = &b
		}
		switch {
		case ok && b == o.Offset:
			row.Result = "already there"
		case ok && b > o.Offset && !h.force:
			row.Result = "behind the cluster"
			behind++
		default:
			row.Result = "would commit"
			if !h.dryRun {
				row.Result = "committed"
			}
			pending[o.Topic] = append(pending[o.Topic], kafka.OffsetCommit{Partition: int(o.Partition), Offset: o.Offset, Metadata: o.Metadata})
			rep.Committed++
		}
		rep.Offsets = append(rep.Offsets, row)
	}
	if behind > 0 {
		rep.Committed = 0
		for i := range rep.Offsets {
			if rep.Offsets[i].Result == "committed" {
				rep.Offsets[i].Result = "would commit"
			}
		}
		return rep, codedError{exitBlocked, fmt.Sprintf("handoff: the cluster already holds offsets of group %s ahead of the bridge's for %s (consumers ran against the cluster since?); nothing committed; --force commits the bridge's offsets anyway",
			h.group, plural(behind, "partition"))}
	}
	if h.dryRun {
		rep.Note = "dry run: nothing committed or recorded; run `zkbridge handoff ... --execute` to commit"
		return rep, nil
	}
	if len(pending) > 0 {
		if err := h.commit(ctx, pending); err != nil {
			return rep, err
		}
	}
	if err := h.verify(ctx, topics, cur.Offsets); err != nil {
		return rep, err
	}
	rep.Verified = true

	prev, err := migrate.ReadHandoffs(ctx, h.store, h.root, h.group)
	if err != nil {
		return rep, err
	}
	if len(pending) == 0 && len(prev) > 0 {
		rep.Note = fmt.Sprintf("already handed off (by %s at %s): the cluster holds every offset; nothing committed or recorded",
			prev[len(prev)-1].By, time.UnixMilli(prev[len(prev)-1].AtMs).UTC().Format(time.RFC3339))
		return rep, nil
	}
	rec, err := migrate.RecordHandoff(ctx, h.store, h.root, h.group,
		migrate.Handoff{By: h.who, AtMs: time.Now().UnixMilli(), Bootstrap: h.bootstrap, Offsets: len(cur.Offsets)}, cen.ModeVersion)
	if err != nil {
		return rep, fmt.Errorf("handoff: committed and verified, but recording it failed: %w", err)
	}
	rep.Handoff = &rec
	return rep, nil
}

// checkGroupIdle refuses a handoff of a group that is not finalized (ZooKeeper's 0.8 view is
// still its truth) or still has members (a commit of theirs after the copy would be lost).
func (h handoff) checkGroupIdle(cen migrate.Census) error {
	if !cen.Recorded || cen.Mode != zkstate.ModeFinalized {
		return codedError{exitRefused, fmt.Sprintf("handoff: group %s is in %s mode: only a finalized group is handed off "+
			"(until then ZooKeeper's 0.8 view is its truth and its consumers may still commit there); run `zkbridge migrate apply --group %s --to finalized` first",
			h.group, cen.Mode, h.group)}
	}
	if n := len(cen.Members); n > 0 {
		var ids []string
		for _, m := range cen.Members {
			ids = append(ids, m.Kind+" "+m.ID)
		}
		return codedError{exitBlocked, fmt.Sprintf("handoff: group %s still has %s (%s): stop them first, so that no commit of theirs is lost; then start them against the cluster",
			h.group, plural(n, "member"), shortJoin(ids))}
	}
	return nil
}

// verify reads the cluster's offsets of the group back and checks that they are the bridge's.
func (h handoff) verify(ctx context.Context, topics map[string][]int, offsets []migrate.Offset) error {
	after, err := h.fetch(ctx, topics)
	if err != nil {
		return fmt.Errorf("handoff: committed, but reading back failed: %w", err)
	}
	var wrong []string
	for _, o := range offsets {
		if got, ok := after[o.TP()]; !ok || got != o.Offset {
			wrong = append(wrong, fmt.Sprintf("%s/%d: %d, want %d", o.Topic, o.Partition, got, o.Offset))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("handoff: the cluster does not hold what was committed for %s: %s", plural(len(wrong), "partition"), shortJoin(wrong))
	}
	return nil
}

// checkClusterGroupEmpty refuses a handoff to a cluster on which the group has members: their
// commits and ours would overwrite each other (and Kafka refuses a generation -1 commit to a
// group with members anyway).
func (h handoff) checkClusterGroupEmpty(ctx context.Context) error {
	resp, err := h.client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{h.group}})
	if err != nil {
		return fmt.Errorf("handoff: describe group %s on %s: %w", h.group, h.bootstrap, err)
	}
	for _, g := range resp.Groups {
		if g.Error != nil && !errors.Is(g.Error, kafka.GroupIdNotFound) {
			return fmt.Errorf("handoff: describe group %s on %s: %w", h.group, h.bootstrap, g.Error)
		}
		if len(g.Members) > 0 {
			return codedError{exitBlocked, fmt.Sprintf("handoff: group %s already has %s on the cluster (state %s): stop them; a handoff is for a group whose consumers are all stopped",
				h.group, plural(len(g.Members), "member"), g.GroupState)}
		}
	}
	return nil
}

// fetch reads the cluster's committed offsets of the partitions (none: -1, left out).
func (h handoff) fetch(ctx context.Context, topics map[string][]int) (map[zkstate.TopicPartition]int64, error) {
	out := map[zkstate.TopicPartition]int64{}
	if len(topics) == 0 {
		return out, nil
	}
	resp, err := h.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: h.group, Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("handoff: fetch offsets of group %s from %s: %w", h.group, h.bootstrap, err)
	}
	if errors.Is(resp.Error, kafka.GroupIdNotFound) {
		return out, nil // a group the cluster has never seen (Kafka answers -1 offsets instead)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("handoff: fetch offsets of group %s from %s: %w", h.group, h.bootstrap, resp.Error)
	}
	var errs []string
	for t, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				errs = append(errs, fmt.Sprintf("%s/%d: %v", t, p.Partition, p.Error))
				continue
			}
			if p.CommittedOffset >= 0 {
				out[zkstate.TopicPartition{Topic: t, Partition: int32(p.Partition)}] = p.CommittedOffset
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("handoff: fetch offsets of group %s: %s", h.group, shortJoin(errs))
	}
	return out, nil
}

// commit commits the offsets as a group with no members does (generation -1, no member id).
func (h handoff) commit(ctx context.Context, topics map[string][]kafka.OffsetCommit) error {
	resp, err := h.client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: h.group, GenerationID: -1, Topics: topics})
	if err != nil {
		return fmt.Errorf("handoff: commit offsets of group %s to %s: %w", h.group, h.bootstrap, err)
	}
	var errs []string
	for t, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				errs = append(errs, fmt.Sprintf("%s/%d: %v", t, p.Partition, p.Error))
			}
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("handoff: the cluster refused %s of group %s: %s", plural(len(errs), "offset"), h.group, shortJoin(errs))
	}
	return nil
}

func printHandoff(w io.Writer, r *handoffReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSET\tCLUSTER BEFORE\tRESULT")
	for _, o := range r.Offsets {
		before := "-"
		if o.ClusterBefore != nil {
			before = strconv.FormatInt(*o.ClusterBefore, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", o.Topic, o.Partition, o.Offset, before, o.Result)
	}
	if len(r.Offsets) == 0 {
		fmt.Fprintln(tw, "(no committed offsets)\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	switch {
	case r.Handoff != nil:
		fmt.Fprintf(w, "Handed off group %s to %s: %s committed, all %d verified; recorded as handoff %d by %s.\n",
			r.Group, r.Bootstrap, plural(r.Committed, "offset"), len(r.Offsets), r.Handoff.Seq, r.Handoff.By)
	case r.Note != "":
		fmt.Fprintf(w, "Group %s, %s: %s.\n", r.Group, r.Bootstrap, r.Note)
	}
	return nil
}
