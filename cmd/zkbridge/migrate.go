package main

// zkbridge migrate plan|apply|status: the operator's side of group modes. The logic is
// the migrate package's (census, pure Plan, CAS-guarded Apply); this file turns flags into a
// migrate.Selector and migrate.ApplyOptions and results into tables, JSON and exit codes.

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Exit codes of the commands that change groups (besides exitOK, exitError, exitUsage).
const (
	// exitBlocked: a precondition holds a group back (members that must leave first), or a
	// concurrent change won the race; trying again later may succeed.
	exitBlocked = 3
	// exitRefused: what was asked can never happen from the group's mode (a rollback of a
	// finalized group).
	exitRefused = 4
)

// codedError carries an exit code to run (app.go) with its message.
type codedError struct {
	code int
	msg  string
}

func (e codedError) Error() string { return e.msg }
func (e codedError) ExitCode() int { return e.code }

const modesHelp = `Group modes say which consumers a group admits (every running bridge watches them and
enforces a change within a second):
   legacy     legacy (seed-001) consumers and Kafka 0.8 ZooKeeper consumers; Kafka clients are
              refused (INCONSISTENT_GROUP_PROTOCOL) until the group is migrated
   mixed      all three kinds in one group, one assignment
   kafka      Kafka clients only; legacy consumers are refused, 0.8 consumers are reported
   finalized  kafka, and ZooKeeper's 0.8 view (/consumers/<g>/owners, offsets) is no longer
              written: the offsets live in the bridge's records. No rollback from here.

Each step is one compare-and-set on the group's mode record, recorded with who and when under
<root>/groups/<g>/transitions. Preconditions:
   legacy → mixed       always
   mixed → kafka        no legacy and no zk (0.8) member left (--wait D waits for them)
   kafka → finalized    no legacy and no zk member left
   kafka → mixed        always (rollback)
   mixed → legacy       no Kafka member left, or --force (rollback): the bridges then
                        rebalance the Kafka members out and refuse them; their last commits
                        are kept
Members are counted from /consumers/<g>/ids (a registration without a hosted-member znode
<root>/groups/<g>/hosted/<id> is a 0.8 consumer) and the group record of the bridges.`

func migrateCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "move consumer groups forward, legacy → mixed → kafka → finalized: plan, apply, status",
		Description: "Plan first, then apply; status shows where every group stands.\n\n" + modesHelp + "\n\n" +
			"A group whose mode was never recorded is taken to be in the mode a bridge would give it\n" +
			"(legacy when /consumers/<g> holds registrations, owners or offsets, else kafka).",
		Subcommands: []*cli.Command{
			migratePlanCommand(e),
			migrateApplyCommand(e),
			migrateStatusCommand(e),
		},
	}
}

// selectFlags choose the groups of plan, apply and status.
func selectFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "group", Aliases: []string{"g"}, Usage: "a group to act on (repeat, or separate with commas)"},
		&cli.BoolFlag{Name: "all", Usage: "every group under /consumers and <root>/groups"},
		&cli.StringFlag{Name: "match", Usage: "the groups whose whole name matches this regular expression (RE2), e.g. 'billing-.*'"},
	}
}

func modesRootFlag() cli.Flag {
	return &cli.StringFlag{Name: "root", Value: bridge.DefaultRoot, EnvVars: []string{"ZKBRIDGE_ROOT"},
		Usage: "ZooKeeper path of the bridges' own state (group modes, records, hosted members), as given to serve --root"}
}

func whoFlag() cli.Flag {
	return &cli.StringFlag{Name: "who", EnvVars: []string{"ZKBRIDGE_WHO"},
		Usage: "recorded as the author of every transition (default: $USER@hostname)"}
}

// who is --who, or user@host.
func who(c *cli.Context) string {
	if w := c.String("who"); w != "" {
		return w
	}
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return name + "@" + host
}

// selector reads --group, --all and --match; with none of them, all is the default when
// defaultAll is set (status), else a usage error.
func selector(c *cli.Context, defaultAll bool) (migrate.Selector, error) {
	var sel migrate.Selector
	n := 0
	for _, g := range c.StringSlice("group") {
		if g = strings.TrimSpace(g); g != "" {
			sel.Groups = append(sel.Groups, g)
		}
	}
	if len(sel.Groups) > 0 {
		n++
	}
	if c.Bool("all") {
		sel.All = true
		n++
	}
	if m := c.String("match"); m != "" {
		re, err := regexp.Compile(m)
		if err != nil {
			return sel, usagef("--match %q: %v", m, err)
		}
		sel.Match = re
		n++
	}
	switch {
	case n == 0 && defaultAll:
		sel.All = true
	case n != 1:
		return sel, usagef("%s: choose the groups with exactly one of --group, --all or --match", c.Command.FullName())
	}
	if c.NArg() > 0 {
		return sel, usagef("%s takes no arguments (use --group)", c.Command.FullName())
	}
	return sel, nil
}

// targetMode reads --to.
func targetMode(c *cli.Context) (zkstate.Mode, error) {
	if !c.IsSet("to") {
		return "", usagef("%s: --to is required (legacy, mixed, kafka or finalized)", c.Command.FullName())
	}
	m, err := zkstate.ParseMode(c.String("to"))
	if err != nil {
		return "", usagef("--to %q: want legacy, mixed, kafka or finalized", c.String("to"))
	}
	return m, nil
}

func outputFormat(c *cli.Context) (string, error) {
	switch f := c.String("output"); f {
	case "table", "", "json":
		return f, nil
	default:
		return "", usagef("--output %q: want table or json", f)
	}
}

func migratePlanCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "plan",
		Usage:     "show, per group, the steps to a mode and the preconditions that block them (writes nothing)",
		ArgsUsage: " ",
		Description: "For each group: its mode now, the steps to --to, and for each step what blocks it.\n" +
			"Groups already at the target, or past it, are listed as such.",
		Flags: append(zkFlags(), append(selectFlags(),
			&cli.StringFlag{Name: "to", Usage: "target mode: mixed, kafka or finalized"},
			modesRootFlag(), outputFlag())...),
		Action: func(c *cli.Context) error {
			sel, err := selector(c, false)
			if err != nil {
				return err
			}
			target, err := targetMode(c)
			if err != nil {
				return err
			}
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			s, err := openStore(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			root := c.String("root")
			groups, err := migrate.Select(c.Context, s, root, sel)
			if err != nil {
				return err
			}
			cens, err := migrate.ReadCensuses(c.Context, s, root, groups, migrate.CensusOptions{})
			if err != nil {
				return err
			}
			rows := make([]planRow, 0, len(groups))
			for _, cen := range cens {
				rows = append(rows, newPlanRow(cen, migrate.Plan(cen, migrate.Request{Target: target})))
			}
			if format == "json" {
				if err := writeJSON(e.stdout, rows); err != nil {
					return err
				}
			} else if err := printPlan(e.stdout, rows); err != nil {
				return err
			}
			statuses := make([]migrate.Status, len(rows))
			for i, r := range rows {
				statuses[i] = r.Status
			}
			return outcome(statuses, "planned")
		},
	}
}

// memberCounts is the members of a group per kind.
type memberCounts struct {
	Kafka  int `json:"kafka"`
	Legacy int `json:"legacy"`
	ZK     int `json:"zk"`
}

func countsOf(c migrate.Census) memberCounts {
	return memberCounts{Kafka: c.Count(zkstate.KindKafka), Legacy: c.Count(zkstate.KindLegacy), ZK: c.Count(zkstate.KindZK)}
}

// planRow is one group of `migrate plan`.
type planRow struct {
	Group      string         `json:"group"`
	Mode       zkstate.Mode   `json:"mode"`
	Recorded   bool           `json:"recorded"`
	DefaultWhy string         `json:"default_why,omitempty"`
	Target     zkstate.Mode   `json:"target"`
	Status     migrate.Status `json:"status"`
	Steps      []migrate.Step `json:"steps"`
	Reason     string         `json:"reason,omitempty"`
	Members    memberCounts   `json:"members"`
}

func newPlanRow(c migrate.Census, p migrate.GroupPlan) planRow {
	steps := p.Steps
	if steps == nil {
		steps = []migrate.Step{}
	}
	return planRow{Group: c.Group, Mode: c.Mode, Recorded: c.Recorded, DefaultWhy: c.DefaultWhy, Target: p.Target,
		Status: p.Status, Steps: steps, Reason: p.Reason, Members: countsOf(c)}
}

func modeCell(mode zkstate.Mode, recorded bool) string {
	if recorded {
		return string(mode)
	}
	return string(mode) + "*"
}

const defaultFootnote = "* no mode recorded yet: the mode a bridge would give the group when it first serves it"

func printPlan(w io.Writer, rows []planRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tMODE\tTARGET\tSTATUS\tSTEPS\tKAFKA\tLEGACY\tZK\tWHY")
	anyDefault := false
	for _, r := range rows {
		anyDefault = anyDefault || !r.Recorded
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", r.Group, modeCell(r.Mode, r.Recorded), r.Target, r.Status,
			orDash(stepsCell(r.Steps)), r.Members.Kafka, r.Members.Legacy, r.Members.ZK, orDash(r.Reason))
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no groups)\t\t\t\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if anyDefault {
		fmt.Fprintln(w, defaultFootnote)
	}
	statuses := make([]migrate.Status, len(rows))
	for i, r := range rows {
		statuses[i] = r.Status
	}
	fmt.Fprintf(w, "\n%s\n", summary(statuses))
	return nil
}

// stepsCell writes steps as "legacy→mixed, mixed→kafka!" (! blocked, + forced past a blocker).
func stepsCell(steps []migrate.Step) string {
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = string(s.From) + "→" + string(s.To)
		switch {
		case s.Blocked():
			parts[i] += "!"
		case len(s.Blockers) > 0:
			parts[i] += "+"
		}
	}
	return strings.Join(parts, ", ")
}

// statusOrder is the order of statuses in summaries.
var statusOrder = []migrate.Status{
	migrate.StatusApplied, migrate.StatusReady, migrate.StatusAtTarget, migrate.StatusPast,
	migrate.StatusBlocked, migrate.StatusConflict, migrate.StatusRefused,
	migrate.StatusFailed, migrate.StatusInterrupted, migrate.StatusNotStarted,
}

// summary counts statuses: "20 groups: 18 applied, 2 at-target".
func summary(statuses []migrate.Status) string {
	counts := map[migrate.Status]int{}
	for _, s := range statuses {
		counts[s]++
	}
	var parts []string
	for _, s := range statusOrder {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	noun := "groups"
	if len(statuses) == 1 {
		noun = "group"
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%d %s", len(statuses), noun)
	}
	return fmt.Sprintf("%d %s: %s", len(statuses), noun, strings.Join(parts, ", "))
}

// outcome turns statuses into the command's exit: nil when every group is done (or could be),
// else a codedError with the worst code (failure, then refused, then blocked).
func outcome(statuses []migrate.Status, verb string) error {
	counts := map[migrate.Status]int{}
	for _, s := range statuses {
		counts[s]++
	}
	failed, unfinished := counts[migrate.StatusFailed], counts[migrate.StatusInterrupted]+counts[migrate.StatusNotStarted]
	switch {
	case failed+unfinished > 0:
		return codedError{exitError, fmt.Sprintf("%d of %d groups failed, %d not finished (interrupted, or not started after a failed batch); re-run to finish them: groups already done are skipped",
			failed, len(statuses), unfinished)}
	case counts[migrate.StatusRefused] > 0:
		return codedError{exitRefused, fmt.Sprintf("%d of %d groups refused: see the reason in the table", counts[migrate.StatusRefused], len(statuses))}
	case counts[migrate.StatusBlocked]+counts[migrate.StatusConflict] > 0:
		return codedError{exitBlocked, fmt.Sprintf("%d of %d groups %s blocked by a precondition, %d in conflict with a concurrent change: see the table",
			counts[migrate.StatusBlocked], len(statuses), verb, counts[migrate.StatusConflict])}
	}
	return nil
}

func migrateApplyCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "move groups to a mode, step by step, each step checked and compare-and-set",
		ArgsUsage: " ",
		Description: "Takes each group to --to one step at a time. Before every step the group is read again\n" +
			"and the step's preconditions checked on what ZooKeeper says then; the step is one\n" +
			"compare-and-set of the group's mode record, recorded (who, when, from, to). Two commands\n" +
			"racing on a group: one wins; the other sees the target reached (done, recorded once) or\n" +
			"reports a conflict and writes nothing over the winner's change.\n\n" +
			"Groups go in batches of --batch, --parallel at a time, with --pause between batches. A\n" +
			"group that fails (not a blocked one) stops the run before the next batch. Resumable:\n" +
			"interrupted and re-run, it skips the groups already at the target and finishes the rest.\n" +
			"A progress line (done/total, rate, ETA) is drawn on stderr when it is a terminal.\n\n" +
			"A dry run unless --execute: it plans every group on what ZooKeeper says now and writes\n" +
			"nothing (--dry-run, the old way to ask for that, still works).",
		Flags: writeFlags("apply the steps", append(selectFlags(),
			&cli.StringFlag{Name: "to", Usage: "target mode: mixed, kafka or finalized"},
			&cli.IntFlag{Name: "batch", Usage: "groups per batch (0: all in one batch)"},
			&cli.DurationFlag{Name: "pause", Usage: "wait between two batches, e.g. 30s, to watch the first groups before the next"},
			&cli.IntFlag{Name: "parallel", Value: migrate.DefaultParallel, Usage: "groups of a batch worked on at once"},
			&cli.DurationFlag{Name: "wait", Usage: "how long a group blocked by members that must leave is polled (every second) before it is reported blocked"},
			whoFlag(), modesRootFlag(), outputFlag())...),
		Action: func(c *cli.Context) error {
			sel, err := selector(c, false)
			if err != nil {
				return err
			}
			target, err := targetMode(c)
			if err != nil {
				return err
			}
			dry, err := dryRun(c, e)
			if err != nil {
				return err
			}
			opts := migrate.ApplyOptions{
				Request:  migrate.Request{Target: target},
				Batch:    c.Int("batch"),
				Pause:    c.Duration("pause"),
				Parallel: c.Int("parallel"),
				Wait:     c.Duration("wait"),
				DryRun:   dry,
			}
			return runApply(c, e, sel, opts)
		},
	}
}

// runApply is apply and rollback: select the groups, apply, print, exit.
func runApply(c *cli.Context, e *env, sel migrate.Selector, opts migrate.ApplyOptions) error {
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	if opts.Batch < 0 || opts.Parallel < 1 || opts.Pause < 0 || opts.Wait < 0 {
		return usagef("--batch, --pause and --wait must not be negative, --parallel must be at least 1")
	}
	opts.Who = who(c)
	s, err := openStore(c, e)
	if err != nil {
		return err
	}
	defer s.Close()
	root := c.String("root")
	groups, err := migrate.Select(c.Context, s, root, sel)
	if err != nil {
		return err
	}
	var bar *progressBar
	if isTerminal(e.stderr) && len(groups) > 1 {
		// On stderr, so that stdout (a table or JSON) can be piped while the operator watches.
		bar = newProgressBar(e.stderr, len(groups))
	}
	opts.OnResult = func(r migrate.Result) {
		l := e.log.Info()
		if r.Status == migrate.StatusFailed {
			l = e.log.Warn()
		}
		l.Str("group", r.Group).Str("status", string(r.Status)).Str("mode", string(r.Mode)).Str("reason", r.Reason).Msg("group done")
		bar.result(r)
	}
	opts.OnPause = func(done int, d time.Duration) { bar.pause(done, d) }
	results, applyErr := migrate.Apply(c.Context, s, root, groups, opts)
	bar.finish()
	if results == nil && applyErr != nil {
		return applyErr
	}
	if format == "json" {
		if err := writeJSON(e.stdout, newApplyReport(opts, results)); err != nil {
			return err
		}
	} else if err := printApply(e.stdout, commandPath(c), opts, results); err != nil {
		return err
	}
	statuses := make([]migrate.Status, len(results))
	for i, r := range results {
		statuses[i] = r.Status
	}
	if opts.DryRun {
		return outcome(statuses, "would be")
	}
	return outcome(statuses, "are")
}

// applyReport is the JSON of apply and rollback.
type applyReport struct {
	Target  zkstate.Mode           `json:"target"`
	DryRun  bool                   `json:"dry_run"`
	Who     string                 `json:"who,omitempty"`
	Results []applyRow             `json:"results"`
	Summary map[migrate.Status]int `json:"summary"`
}

type applyRow struct {
	migrate.Result
	Waited string `json:"waited,omitempty"`
	Error  string `json:"error,omitempty"`
}

func newApplyReport(opts migrate.ApplyOptions, results []migrate.Result) applyReport {
	rep := applyReport{Target: opts.Target, DryRun: opts.DryRun, Results: []applyRow{}, Summary: map[migrate.Status]int{}}
	if !opts.DryRun {
		rep.Who = opts.Who
	}
	for _, r := range results {
		row := applyRow{Result: r}
		if r.Waited > 0 {
			row.Waited = r.Waited.Round(time.Millisecond).String()
		}
		if r.Err != nil {
			row.Error = r.Err.Error()
		}
		rep.Results = append(rep.Results, row)
		rep.Summary[r.Status]++
	}
	return rep
}

func printApply(w io.Writer, cmd string, opts migrate.ApplyOptions, results []migrate.Result) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if opts.DryRun {
		fmt.Fprintln(tw, "GROUP\tMODE\tTARGET\tSTATUS\tSTEPS\tWHY")
	} else {
		fmt.Fprintln(tw, "GROUP\tFROM\tNOW\tSTATUS\tAPPLIED\tWHY")
	}
	for _, r := range results {
		why := r.Reason
		if r.Waited > 0 {
			why = strings.TrimSpace(fmt.Sprintf("(waited %s) %s", r.Waited.Round(100*time.Millisecond), why))
		}
		if opts.DryRun {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, orDash(string(r.Mode)), r.Target, r.Status, orDash(stepsCell(r.Steps)), orDash(why))
			continue
		}
		applied := stepsCell(r.Applied)
		for _, b := range r.Blockers {
			if b.Forced {
				applied += " (forced)"
				break
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, orDash(string(r.From)), orDash(string(r.Mode)), r.Status, orDash(applied), orDash(why))
	}
	if len(results) == 0 {
		fmt.Fprintln(tw, "(no groups)\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	statuses := make([]migrate.Status, len(results))
	for i, r := range results {
		statuses[i] = r.Status
	}
	fmt.Fprintf(w, "\n%s\n", summary(statuses))
	if opts.DryRun {
		fmt.Fprintln(w, dryRunFooter(cmd))
	}
	return nil
}

func migrateStatusCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show every group's mode, members per kind, and whether ZooKeeper's 0.8 mirror is current",
		ArgsUsage: " ",
		Description: "MODE is the recorded mode (* marks a group whose mode was never recorded: the default a\n" +
			"bridge would give it). KAFKA, LEGACY and ZK count members by kind (\"departed\": Kafka\n" +
			"members still in the record of a bridge that is gone, which nobody serves). MIRROR says whether\n" +
			"/consumers/<g>/offsets, which 0.8 consumers and tools read, holds every commit the bridges\n" +
			"recorded: current, stale (N partitions the mirror missed), or off (finalized: the offsets\n" +
			"live in the bridge's records). Reads every offset of every group: on many groups, choose\n" +
			"some with --group or --match.",
		Flags: append(zkFlags(), append(selectFlags(), modesRootFlag(), outputFlag())...),
		Action: func(c *cli.Context) error {
			sel, err := selector(c, true)
			if err != nil {
				return err
			}
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			s, err := openStore(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			root := c.String("root")
			groups, err := migrate.Select(c.Context, s, root, sel)
			if err != nil {
				return err
			}
			cens, err := migrate.ReadCensuses(c.Context, s, root, groups, migrate.CensusOptions{Mirror: true})
			if err != nil {
				return err
			}
			rows := make([]statusRow, 0, len(groups))
			for _, cen := range cens {
				for _, p := range cen.Problems {
					e.log.Warn().Str("group", cen.Group).Msg("malformed znode skipped: " + p)
				}
				rows = append(rows, newStatusRow(cen))
			}
			if format == "json" {
				return writeJSON(e.stdout, rows)
			}
			return printStatus(e.stdout, rows)
		},
	}
}

// statusRow is one group of `migrate status`.
type statusRow struct {
	Group      string           `json:"group"`
	Mode       zkstate.Mode     `json:"mode"`
	Recorded   bool             `json:"recorded"`
	DefaultWhy string           `json:"default_why,omitempty"`
	SetBy      string           `json:"set_by,omitempty"`
	SetAt      *time.Time       `json:"set_at,omitempty"`
	Members    memberCounts     `json:"members"`
	MemberList []migrate.Member `json:"member_list"`
	// Departed are Kafka members of the record of a bridge that is gone (not counted).
	Departed []migrate.Member `json:"departed,omitempty"`
	Mirror   mirrorView       `json:"mirror"`
}

type mirrorView struct {
	State      string   `json:"state"` // current, stale, off
	Partitions int      `json:"partitions"`
	Stale      []string `json:"stale"` // topic/partition
}

func newStatusRow(c migrate.Census) statusRow {
	r := statusRow{Group: c.Group, Mode: c.Mode, Recorded: c.Recorded, DefaultWhy: c.DefaultWhy, Members: countsOf(c),
		MemberList: c.Members, Departed: c.Departed, Mirror: mirrorView{State: "current", Stale: []string{}}}
	if r.MemberList == nil {
		r.MemberList = []migrate.Member{}
	}
	if c.Recorded {
		r.SetBy = c.Record.UpdatedBy
		if c.Record.UpdatedAtMs > 0 {
			at := time.UnixMilli(c.Record.UpdatedAtMs).UTC()
			r.SetAt = &at
		}
	}
	if m := c.Mirror; m != nil {
		r.Mirror.Partitions = m.Partitions
		for _, tp := range m.Stale {
			r.Mirror.Stale = append(r.Mirror.Stale, fmt.Sprintf("%s/%d", tp.Topic, tp.Partition))
		}
		switch {
		case m.Off:
			r.Mirror.State = "off"
		case len(m.Stale) > 0:
			r.Mirror.State = "stale"
		}
	}
	return r
}

func (r statusRow) mirrorCell() string {
	switch r.Mirror.State {
	case "off":
		if n := len(r.Mirror.Stale); n > 0 {
			return fmt.Sprintf("off (finalized; %s committed since)", plural(n, "partition"))
		}
		return "off (finalized)"
	case "stale":
		return fmt.Sprintf("stale (%s behind the bridge: %s)", plural(len(r.Mirror.Stale), "partition"), shortJoin(r.Mirror.Stale))
	}
	return "current"
}

func printStatus(w io.Writer, rows []statusRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tMODE\tSET BY\tKAFKA\tLEGACY\tZK\tMIRROR")
	anyDefault := false
	byMode := map[zkstate.Mode]int{}
	for _, r := range rows {
		anyDefault = anyDefault || !r.Recorded
		byMode[r.Mode]++
		kafka := strconv.Itoa(r.Members.Kafka)
		if len(r.Departed) > 0 {
			kafka += fmt.Sprintf(" (+%d departed)", len(r.Departed))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.Group, modeCell(r.Mode, r.Recorded), orDash(r.SetBy),
			kafka, r.Members.Legacy, r.Members.ZK, r.mirrorCell())
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no groups)\t\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if anyDefault {
		fmt.Fprintln(w, defaultFootnote)
	}
	var parts []string
	for _, m := range zkstate.Modes {
		if n := byMode[m]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, m))
		}
	}
	noun := "groups"
	if len(rows) == 1 {
		noun = "group"
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "\n%d %s: %s\n", len(rows), noun, strings.Join(parts, ", "))
	}
	return nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func shortJoin(items []string) string {
	sorted := append([]string(nil), items...)
	sort.Strings(sorted)
	if len(sorted) <= 3 {
		return strings.Join(sorted, ", ")
	}
	return strings.Join(sorted[:3], ", ") + fmt.Sprintf(" and %d more", len(sorted)-3)
}

// progressBar draws apply's progress on a terminal (stderr), on one line rewritten in place. Its methods
// do nothing on a nil bar (not a terminal).
type progressBar struct {
	w      io.Writer
	total  int
	done   int
	counts map[migrate.Status]int
	start  time.Time
}

func newProgressBar(w io.Writer, total int) *progressBar {
	b := &progressBar{w: w, total: total, counts: map[migrate.Status]int{}, start: time.Now()}
	b.draw("")
	return b
}

func (b *progressBar) result(r migrate.Result) {
	if b == nil {
		return
	}
	b.done++
	b.counts[r.Status]++
	b.draw("")
}

func (b *progressBar) pause(done int, d time.Duration) {
	if b == nil {
		return
	}
	b.draw(fmt.Sprintf("  pausing %s before the next batch", d))
}

func (b *progressBar) draw(extra string) {
	fmt.Fprint(b.w, "\r\033[K"+progressLine(b.done, b.total, b.counts, time.Since(b.start), extra))
}

// progressLine is the progress of a run of total groups after elapsed: done/total, the
// outcomes so far, the rate and the time left at that rate.
func progressLine(done, total int, counts map[migrate.Status]int, elapsed time.Duration, extra string) string {
	const width = 30
	filled := 0
	if total > 0 {
		filled = min(done*width/total, width)
	}
	rate := ""
	if el := elapsed.Seconds(); el > 0.5 && done > 0 {
		perSec := float64(done) / el
		rate = fmt.Sprintf("  %.1f groups/s", perSec)
		if left := total - done; left > 0 {
			rate += "  ETA " + (time.Duration(float64(left) / perSec * float64(time.Second))).Round(time.Second).String()
		}
	}
	issues := counts[migrate.StatusBlocked] + counts[migrate.StatusConflict] + counts[migrate.StatusRefused]
	return fmt.Sprintf("[%s%s] %d/%d  done %d  blocked %d  failed %d%s%s",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), done, total,
		counts[migrate.StatusApplied]+counts[migrate.StatusAtTarget]+counts[migrate.StatusPast],
		issues, counts[migrate.StatusFailed]+counts[migrate.StatusInterrupted], rate, extra)
}

func (b *progressBar) finish() {
	if b == nil {
		return
	}
	fmt.Fprint(b.w, "\r\033[K")
}
