package main

// zkbridge offsets import: the way back in for what `offsets export` (CSV) or
// Kafka's old kafka.tools.ExportZkOffsets wrote. A dry run shows the diff; --execute writes it,
// compare-and-set, where the group's mode keeps its offsets.

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Input formats of offsets import.
const (
	formatCSV = "csv"
	// formatZK is kafka.tools.ExportZkOffsets' output (Kafka 0.8 to 0.11), one line per
	// partition, "<offset znode path>:<offset>":
	//
	//	/consumers/group1/offsets/topic1/0:286894308
	//
	// (ExportZkOffsets.scala writes offsetPath + ":" + offsetVal + "\n" for every child of
	// /consumers/<g>/offsets/<t>; ImportZkOffsets.scala splits each line at ':' and stops at the
	// first empty line.)
	formatZK = "zk"
)

func offsetsImportCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "set a group's committed offsets from CSV (as offsets export writes it) or Kafka's ExportZkOffsets format; a dry run unless --execute",
		ArgsUsage: "[<group>]",
		Description: "Reads --file (default: standard input) in one of two formats:\n" +
			"   csv  topic,partition,offset lines, with or without the header offsets export writes;\n" +
			"        the <group> argument names the group\n" +
			"   zk   Kafka's kafka.tools.ExportZkOffsets output, one partition per line:\n" +
			"          /consumers/<group>/offsets/<topic>/<partition>:<offset>\n" +
			"        every group of the file is imported, or only <group> when it is given\n" +
			"--format auto (the default) picks zk when the first line starts with '/'.\n\n" +
			"Prints, per partition, the committed offset now, the imported one and the change. Nothing\n" +
			"is written without --execute. Offsets are written where the group's mode keeps them: the\n" +
			"0.8 layout /consumers/<g>/offsets, or for a finalized group the bridge's own records\n" +
			"<root>/groups/<g>/offsets. Every write is a compare-and-set against what was read (and\n" +
			"against the group's mode record), all of a group's offsets in one multi: a consumer that\n" +
			"commits in between makes the import fail whole (exit 3; run it again to see the new diff).\n\n" +
			"An active group (any member registered, or Kafka members in its record) is not moved\n" +
			"backwards without --force: its consumers would process those messages again. Unchanged\n" +
			"partitions are not written, and partitions the file does not name are left alone.",
		Flags: writeFlags("write the offsets",
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "file to read (- or empty: standard input)"},
			&cli.StringFlag{Name: "format", Value: "auto", Usage: "auto, csv or zk"},
			&cli.BoolFlag{Name: "force", Usage: "move an active group's offsets backwards"},
			modesRootFlag(), outputFlag()),
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usagef("offsets import takes at most one <group> argument")
			}
			group := c.Args().First()
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			dry, err := dryRun(c, e)
			if err != nil {
				return err
			}
			in, err := readInput(c, e)
			if err != nil {
				return err
			}
			parsed, err := parseOffsetsFile(in, c.String("format"), group)
			if err != nil {
				return err
			}
			s, err := openStore(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			rep := importReport{DryRun: dry, IgnoredLines: parsed.ignored, Groups: []groupImport{}}
			for _, g := range parsed.order {
				rep.Groups = append(rep.Groups, importGroup(c, s, g, parsed.offsets[g]))
			}
			if format == "json" {
				if err := writeJSON(e.stdout, rep); err != nil {
					return err
				}
			} else if err := printImport(e.stdout, rep); err != nil {
				return err
			}
			return rep.outcome()
		},
	}
}

func readInput(c *cli.Context, e *env) ([]byte, error) {
	name := c.String("file")
	if name == "" || name == "-" {
		return io.ReadAll(e.stdin)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read offsets: %w", err)
	}
	return b, nil
}

// parsedOffsets is an import file: offsets per group, in the file's order of groups.
type parsedOffsets struct {
	order   []string
	offsets map[string][]migrate.Offset
	ignored int // lines of other groups than the one asked for
}

// parseOffsetsFile reads an import file (see the command's help). Errors are usage errors that
// name the line.
func parseOffsetsFile(data []byte, format, group string) (parsedOffsets, error) {
	out := parsedOffsets{offsets: map[string][]migrate.Offset{}}
	if format == "auto" {
		format = formatCSV
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				if strings.HasPrefix(line, "/") {
					format = formatZK
				}
				break
			}
		}
	}
	seen := map[string]map[zkstate.TopicPartition]int{} // group → partition → line
	add := func(lineNo int, g string, o migrate.Offset) error {
		if seen[g] == nil {
			seen[g] = map[zkstate.TopicPartition]int{}
			out.order = append(out.order, g)
		}
		if prev, dup := seen[g][o.TP()]; dup {
			return usagef("line %d: %s/%d of group %s already on line %d", lineNo, o.Topic, o.Partition, g, prev)
		}
		seen[g][o.TP()] = lineNo
		out.offsets[g] = append(out.offsets[g], o)
		return nil
	}
	switch format {
	case formatCSV:
		if group == "" {
			return out, usagef("offsets import: CSV names no group: give the <group> argument")
		}
		r := csv.NewReader(bytes.NewReader(data))
		r.FieldsPerRecord = -1
		r.TrimLeadingSpace = true
		r.Comment = '#'
		for n := 0; ; n++ {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return out, usagef("offsets import: CSV: %v", err)
			}
			line, _ := r.FieldPos(0)
			if n == 0 && len(rec) > 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "topic") {
				continue // offsets export's header
			}
			if len(rec) != 3 {
				return out, usagef("line %d: want topic,partition,offset, got %d fields", line, len(rec))
			}
			o, err := parseOffsetFields(rec[0], rec[1], rec[2])
			if err != nil {
				return out, usagef("line %d: %v", line, err)
			}
			if err := add(line, group, o); err != nil {
				return out, err
			}
		}
	case formatZK:
		sc := bufio.NewScanner(bytes.NewReader(data))
		for line := 1; sc.Scan(); line++ {
			text := strings.TrimSpace(sc.Text())
			if text == "" || strings.HasPrefix(text, "#") {
				continue // Kafka's import stops at the first empty line; we read the whole file
			}
			g, o, err := parseZKOffsetLine(text)
			if err != nil {
				return out, usagef("line %d: %v", line, err)
			}
			if group != "" && g != group {
				out.ignored++
				continue
			}
			if err := add(line, g, o); err != nil {
				return out, err
			}
		}
		if err := sc.Err(); err != nil {
			return out, fmt.Errorf("read offsets: %w", err)
		}
	default:
		return out, usagef("--format %q: want auto, csv or zk", format)
	}
	if len(out.order) == 0 {
		if out.ignored > 0 {
			return out, usagef("offsets import: no line of group %q (%d lines of other groups)", group, out.ignored)
		}
		return out, usagef("offsets import: no offsets in the input")
	}
	return out, nil
}

// parseZKOffsetLine reads one ExportZkOffsets line: /consumers/<g>/offsets/<t>/<p>:<offset>.
// The split is at the last ':' (Kafka splits at every ':', so a group name holding one broke
// its import; topics cannot hold one).
func parseZKOffsetLine(line string) (string, migrate.Offset, error) {
	i := strings.LastIndexByte(line, ':')
	if i < 0 {
		return "", migrate.Offset{}, fmt.Errorf("%q is not <path>:<offset>", line)
	}
	p, off := line[:i], line[i+1:]
	parts := strings.Split(p, "/")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "consumers" || parts[3] != "offsets" || parts[2] == "" || parts[4] == "" {
		return "", migrate.Offset{}, fmt.Errorf("%q is not /consumers/<group>/offsets/<topic>/<partition>", p)
	}
	o, err := parseOffsetFields(parts[4], parts[5], off)
	if err != nil && strings.Contains(parts[5], "-") {
		err = fmt.Errorf("%w (a Kafka 0.7 <broker>-<partition> name? 0.8 names partitions by number)", err)
	}
	return parts[2], o, err
}

func parseOffsetFields(topic, partition, offset string) (migrate.Offset, error) {
	topic = strings.TrimSpace(topic)
	if topic == "" || strings.ContainsRune(topic, '/') {
		return migrate.Offset{}, fmt.Errorf("topic %q is not a topic name", topic)
	}
	p, err := strconv.ParseInt(strings.TrimSpace(partition), 10, 32)
	if err != nil || p < 0 {
		return migrate.Offset{}, fmt.Errorf("partition %q is not a partition number", partition)
	}
	off, err := zkstate.ParseOffset([]byte(offset))
	if err != nil || off < 0 {
		return migrate.Offset{}, fmt.Errorf("offset %q is not an offset (a number >= 0)", strings.TrimSpace(offset))
	}
	return migrate.Offset{Topic: topic, Partition: int32(p), Offset: off, LeaderEpoch: -1}, nil
}

// importReport is the JSON of offsets import.
type importReport struct {
	DryRun       bool          `json:"dry_run"`
	IgnoredLines int           `json:"ignored_lines,omitempty"`
	Groups       []groupImport `json:"groups"`
}

type groupImport struct {
	Group   string                 `json:"group"`
	Mode    zkstate.Mode           `json:"mode"`
	Where   string                 `json:"where"`
	Members int                    `json:"members"`
	Changes []migrate.OffsetChange `json:"changes"`
	Counts  map[string]int         `json:"counts"`
	Written int                    `json:"written"`
	// Refused says why nothing was (or would be) written; Code is its exit code.
	Refused string `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"`
	code    int
}

// importGroup diffs (and with --execute writes) one group's import.
func importGroup(c *cli.Context, s *zkstate.Store, group string, offsets []migrate.Offset) groupImport {
	root := c.String("root")
	gi := groupImport{Group: group, Changes: []migrate.OffsetChange{}, Counts: map[string]int{}}
	cur, err := migrate.ReadOffsets(c.Context, s, root, group)
	if err != nil {
		gi.Error, gi.code = err.Error(), exitError
		return gi
	}
	gi.Mode = cur.Census.Mode
	gi.Members = len(cur.Census.Members)
	gi.Where = zkstate.OffsetsPath(group)
	if cur.Census.Mode == zkstate.ModeFinalized {
		gi.Where = zkstate.OwnOffsetsPath(root, group) + " (finalized: the bridge's records)"
	}
	gi.Changes = migrate.Diff(cur.Offsets, offsets)
	for _, ch := range gi.Changes {
		gi.Counts[ch.Change]++
	}
	if back := gi.Counts[migrate.ChangeBackward]; back > 0 && gi.Members > 0 && !c.Bool("force") {
		gi.Refused = fmt.Sprintf("group %s is active (%s) and the import moves %s backwards: its consumers would process those messages again; stop the group first, or --force",
			group, plural(gi.Members, "member"), plural(back, "offset"))
		gi.code = exitBlocked
		return gi
	}
	if !c.Bool("execute") {
		return gi
	}
	n, err := migrate.WriteOffsets(c.Context, s, root, cur, gi.Changes)
	switch {
	case errors.Is(err, migrate.ErrOffsetsChanged):
		gi.Refused, gi.code = err.Error()+"; run the import again to see the new diff", exitBlocked
	case err != nil:
		gi.Error, gi.code = err.Error(), exitError
	}
	gi.Written = n
	return gi
}

func (r importReport) outcome() error {
	worst, msg := exitOK, ""
	for _, g := range r.Groups {
		switch {
		case g.code == exitError:
			worst, msg = exitError, "group "+g.Group+": "+g.Error
		case g.code == exitBlocked && worst == exitOK:
			worst, msg = exitBlocked, "group "+g.Group+": "+g.Refused
		}
	}
	if worst == exitOK {
		return nil
	}
	return codedError{worst, msg}
}

func changeCell(ch migrate.OffsetChange) string {
	switch ch.Change {
	case migrate.ChangeForward:
		return fmt.Sprintf("+%d", ch.New-*ch.Current)
	case migrate.ChangeBackward:
		return fmt.Sprintf("-%d (backwards)", *ch.Current-ch.New)
	case migrate.ChangeUnchanged:
		return "="
	}
	return "new"
}

func printImport(w io.Writer, r importReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCURRENT\tNEW\tCHANGE")
	for _, g := range r.Groups {
		for _, ch := range g.Changes {
			cur := "-"
			if ch.Current != nil {
				cur = strconv.FormatInt(*ch.Current, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", g.Group, ch.Topic, ch.Partition, cur, ch.New, changeCell(ch))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, g := range r.Groups {
		if g.Error != "" {
			fmt.Fprintf(w, "%s: failed: %s\n", g.Group, g.Error)
			continue
		}
		fmt.Fprintf(w, "%s (%s, %s): %d forward, %d backward, %d new, %d unchanged; offsets in %s\n",
			g.Group, g.Mode, plural(g.Members, "member"), g.Counts[migrate.ChangeForward], g.Counts[migrate.ChangeBackward],
			g.Counts[migrate.ChangeNew], g.Counts[migrate.ChangeUnchanged], g.Where)
		switch {
		case g.Refused != "":
			fmt.Fprintf(w, "  refused: %s\n", g.Refused)
		case !r.DryRun:
			fmt.Fprintf(w, "  wrote %s\n", plural(g.Written, "offset"))
		}
	}
	if r.IgnoredLines > 0 {
		fmt.Fprintf(w, "Ignored %s of other groups.\n", plural(r.IgnoredLines, "line"))
	}
	if r.DryRun {
		fmt.Fprintln(w, dryRunFooter("offsets import"))
	}
	return nil
}
