package main

// zkbridge offsets reset: kafka-consumer-groups --reset-offsets, with its
// options and its rule that a group with live members is not reset (here: unless --force), on
// every group the bridge knows, written where OffsetFetch reads in the group's mode
// (migrate.WriteOffsets: the 0.8 znodes, or a finalized group's own offset records).
//
// What only the brokers know (log start and end offsets, the offset at a time) is asked of the
// upstream brokers with ListOffsets (brokers.go). As Kafka's tool does, --to-offset and
// --shift-by are clamped into [log start, log end] when the brokers are known; a datetime after
// the last record resets to the log end.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

type resetKind string

const (
	resetEarliest resetKind = "to-earliest"
	resetLatest   resetKind = "to-latest"
	resetOffset   resetKind = "to-offset"
	resetShift    resetKind = "shift-by"
	resetDatetime resetKind = "to-datetime"
	resetDuration resetKind = "by-duration"
	resetFile     resetKind = "from-file"
)

var resetKinds = []resetKind{resetEarliest, resetLatest, resetOffset, resetShift, resetDatetime, resetDuration, resetFile}

// resetMethod is the one option that says where the offsets go.
type resetMethod struct {
	kind   resetKind
	offset int64                            // to-offset
	shift  int64                            // shift-by
	at     time.Time                        // to-datetime, by-duration (now - duration)
	file   map[zkstate.TopicPartition]int64 // from-file
}

// needsBrokers: the method cannot be computed without ListOffsets.
func (m resetMethod) needsBrokers() bool {
	switch m.kind {
	case resetEarliest, resetLatest, resetDatetime, resetDuration:
		return true
	}
	return false
}

// partitionFacts is what is known of one partition when its new offset is computed.
type partitionFacts struct {
	committed  *int64 // nil: no committed offset
	start, end *int64 // log start and end; nil: the brokers were not asked or did not answer
	atTime     *int64 // ListOffsets at the method's time: -1 when no record is that late
}

// resetTarget is the partition's new offset under m (pure), or why it is left alone.
func resetTarget(m resetMethod, tp zkstate.TopicPartition, f partitionFacts) (int64, string) {
	var v int64
	switch m.kind {
	case resetEarliest:
		if f.start == nil {
			return 0, "the brokers did not give its log start offset"
		}
		return *f.start, ""
	case resetLatest:
		if f.end == nil {
			return 0, "the brokers did not give its log end offset"
		}
		return *f.end, ""
	case resetDatetime, resetDuration:
		switch {
		case f.atTime == nil:
			return 0, "the brokers did not give its offset at " + m.at.UTC().Format(time.RFC3339)
		case *f.atTime < 0:
			// No record that late: the next one will be (Kafka's tool does the same).
			if f.end == nil {
				return 0, "no record after " + m.at.UTC().Format(time.RFC3339) + " and no log end offset"
			}
			return *f.end, ""
		}
		return *f.atTime, ""
	case resetOffset:
		v = m.offset
	case resetShift:
		if f.committed == nil {
			return 0, "no committed offset to shift"
		}
		v = *f.committed + m.shift
	case resetFile:
		o, ok := m.file[tp]
		if !ok {
			return 0, "not in the file"
		}
		return o, ""
	}
	if f.start != nil && v < *f.start {
		v = *f.start
	}
	if f.end != nil && v > *f.end {
		v = *f.end
	}
	return max(v, 0), ""
}

// isoDuration is ISO 8601's PnDTnHnMnS, the form kafka-consumer-groups's --by-duration takes.
var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// parseResetDuration reads --by-duration: ISO 8601 (P1DT2H, PT30M) or Go's form (26h, 30m).
func parseResetDuration(s string) (time.Duration, error) {
	if m := isoDuration.FindStringSubmatch(strings.ToUpper(s)); m != nil && s != "P" && !strings.HasSuffix(strings.ToUpper(s), "T") {
		var d time.Duration
		for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
			if m[i+1] == "" {
				continue
			}
			f, err := strconv.ParseFloat(m[i+1], 64)
			if err != nil {
				return 0, err
			}
			d += time.Duration(f * float64(unit))
		}
		return d, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration (ISO 8601 such as P1DT2H30M, or 26h30m)", s)
	}
	return d, nil
}

// parseResetTime reads --to-datetime: RFC 3339, or kafka-consumer-groups's
// YYYY-MM-DDTHH:mm:SS.sss without a zone (then local time, as Kafka's tool reads it).
func parseResetTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.000Z0700", "2006-01-02T15:04:05Z0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	for _, layout := range []string{"2006-01-02T15:04:05.000", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a datetime (2026-12-03T10:00:00Z, or YYYY-MM-DDTHH:mm:SS.sss in local time)", s)
}

// topicScope is --topic: topic → partitions (nil: every partition of the topic).
type topicScope map[string][]int32

// parseTopics reads the --topic values: t, or t:p,p,... (urfave splits a value at commas, so a
// bare number continues the partitions of the topic before it).
func parseTopics(vals []string) (topicScope, []string, error) {
	out := topicScope{}
	var order []string
	last := ""
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if p, err := strconv.ParseInt(v, 10, 32); err == nil && last != "" && out[last] != nil {
			if p < 0 {
				return nil, nil, usagef("--topic %s: partition %d", last, p)
			}
			out[last] = append(out[last], int32(p))
			continue
		}
		topic, parts, hasParts := strings.Cut(v, ":")
		if topic == "" || strings.ContainsRune(topic, '/') {
			return nil, nil, usagef("--topic %q: want topic or topic:partition,...", v)
		}
		if _, dup := out[topic]; !dup {
			order = append(order, topic)
		}
		out[topic] = nil
		last = topic
		if hasParts {
			for _, s := range strings.Split(parts, ",") {
				p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
				if err != nil || p < 0 {
					return nil, nil, usagef("--topic %q: %q is not a partition number", v, s)
				}
				out[topic] = append(out[topic], int32(p))
			}
		}
	}
	return out, order, nil
}

// resetRow is one partition of the reset.
type resetRow struct {
	migrate.OffsetChange
	LogStart *int64 `json:"log_start,omitempty"`
	LogEnd   *int64 `json:"log_end,omitempty"`
}

type resetReport struct {
	DryRun  bool              `json:"dry_run"`
	Group   string            `json:"group"`
	Mode    zkstate.Mode      `json:"mode"`
	Method  string            `json:"method"`
	Where   string            `json:"where"`
	Members []migrate.Member  `json:"members"`
	Forced  bool              `json:"forced,omitempty"`
	Rows    []resetRow        `json:"partitions"`
	Skipped map[string]string `json:"skipped,omitempty"` // "topic/partition" → why
	Notes   []string          `json:"notes,omitempty"`
	Written int               `json:"written"`
}

func offsetsResetCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "reset",
		Usage:     "reset a group's committed offsets as kafka-consumer-groups --reset-offsets does; a dry run unless --execute",
		ArgsUsage: "<group>",
		Description: "One of --to-earliest, --to-latest, --to-offset N, --shift-by N, --to-datetime T,\n" +
			"--by-duration D or --from-file F says where the offsets go; --topic t (every partition),\n" +
			"--topic t:0,2 (repeatable) or --all-topics (every topic the group has offsets for) says\n" +
			"which (--from-file: the file's partitions, topic,partition,offset lines as offsets export\n" +
			"writes them). --to-offset and --shift-by are kept within the log (start..end) when the\n" +
			"brokers are known; --to-datetime (RFC 3339, or YYYY-MM-DDTHH:mm:SS.sss in local time) and\n" +
			"--by-duration (ISO 8601 such as P1DT2H, or 26h) go to the first record at or after that\n" +
			"time, or the log end when none is that late. The log start and end and offsets by time\n" +
			"are asked of the upstream brokers (--bootstrap, else /brokers/ids).\n\n" +
			"Refused (exit 3) while the group has members of any kind, as Kafka refuses to reset an\n" +
			"active group: they would overwrite the reset with their next commit. --force resets it\n" +
			"anyway. The offsets are written where OffsetFetch reads them in the group's mode (the 0.8\n" +
			"layout /consumers/<g>/offsets; a finalized group's own records), compare-and-set against\n" +
			"what was read: a commit in between fails the reset whole (exit 3; run it again).",
		Flags: append(writeFlags("write the new offsets", bootstrapFlags()...),
			&cli.StringSliceFlag{Name: "topic", Usage: "a topic, or topic:partition,partition... (repeatable)"},
			&cli.BoolFlag{Name: "all-topics", Usage: "every topic the group has committed offsets for"},
			&cli.BoolFlag{Name: string(resetEarliest), Usage: "the log start offset"},
			&cli.BoolFlag{Name: string(resetLatest), Usage: "the log end offset"},
			&cli.Int64Flag{Name: string(resetOffset), Usage: "this offset (kept within the log)"},
			&cli.Int64Flag{Name: string(resetShift), Usage: "the committed offset plus N (negative: back; kept within the log)"},
			&cli.StringFlag{Name: string(resetDatetime), Usage: "the first offset at or after this time"},
			&cli.StringFlag{Name: string(resetDuration), Usage: "the first offset at or after now minus this duration"},
			&cli.StringFlag{Name: string(resetFile), Usage: "the offsets of a CSV file (topic,partition,offset)"},
			&cli.BoolFlag{Name: "force", Usage: "reset a group that has members"},
			modesRootFlag(), outputFlag()),
		Action: func(c *cli.Context) error { return runOffsetsReset(c, e) },
	}
}

func runOffsetsReset(c *cli.Context, e *env) error {
	if c.NArg() != 1 {
		return usagef("offsets reset takes one <group> argument")
	}
	group := c.Args().First()
	format, err := outputFormat(c)
	if err != nil {
		return err
	}
	m, err := resetMethodOf(c, e, group)
	if err != nil {
		return err
	}
	sc, err := resetScopeOf(c, m)
	if err != nil {
		return err
	}
	s, dry, err := openWrite(c, e)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := c.Context
	root := c.String("root")
	cur, err := migrate.ReadOffsets(ctx, s, root, group)
	if err != nil {
		return err
	}
	rep, err := newResetReport(c, root, group, dry, m, cur.Census)
	if err != nil {
		return err
	}
	addrs, addrErr := brokerAddrs(ctx, c, s)
	if addrErr != nil {
		addrs = nil
		if m.needsBrokers() {
			return fmt.Errorf("offsets reset --%s needs the brokers: %w", m.kind, addrErr)
		}
		rep.Notes = append(rep.Notes, "brokers unknown ("+addrErr.Error()+"): offsets not checked against the log")
	}
	kctx, cancel := contextWithTimeout(ctx, c.Duration("kafka-timeout"))
	defer cancel()
	tps, err := resetPartitions(kctx, s, addrs, m, sc, cur.Offsets)
	if err != nil {
		return err
	}
	facts, err := resetFacts(kctx, addrs, m, tps, cur.Offsets, &rep)
	if err != nil {
		return err
	}

	var incoming []migrate.Offset
	for _, tp := range tps {
		v, why := resetTarget(m, tp, facts[tp])
		if why != "" {
			rep.Skipped[fmt.Sprintf("%s/%d", tp.Topic, tp.Partition)] = why
			continue
		}
		incoming = append(incoming, migrate.Offset{Topic: tp.Topic, Partition: tp.Partition, Offset: v, LeaderEpoch: -1})
	}
	changes := migrate.Diff(cur.Offsets, incoming)
	for _, ch := range changes {
		f := facts[zkstate.TopicPartition{Topic: ch.Topic, Partition: ch.Partition}]
		rep.Rows = append(rep.Rows, resetRow{OffsetChange: ch, LogStart: f.start, LogEnd: f.end})
	}
	var writeErr error
	if !dry {
		rep.Written, writeErr = migrate.WriteOffsets(ctx, s, root, cur, changes)
	}
	if format == "json" {
		if err := writeJSON(e.stdout, rep); err != nil {
			return err
		}
	} else if err := printReset(e.stdout, rep); err != nil {
		return err
	}
	switch {
	case writeErr == nil:
		return nil
	case isOffsetsChanged(writeErr):
		return codedError{exitBlocked, writeErr.Error() + "; run the reset again"}
	}
	return writeErr
}

// resetScope is which partitions a reset covers: every one the group has offsets for (all), the
// topics' partitions listed (order, in the order given; a nil list in topics: every partition),
// or the method's file.
type resetScope struct {
	all    bool
	topics map[string][]int32
	order  []string
}

func resetScopeOf(c *cli.Context, m resetMethod) (resetScope, error) {
	topics, order, err := parseTopics(c.StringSlice("topic"))
	if err != nil {
		return resetScope{}, err
	}
	sc := resetScope{all: c.Bool("all-topics"), topics: topics, order: order}
	switch {
	case m.kind == resetFile && (sc.all || len(order) > 0):
		return sc, usagef("offsets reset --from-file: the file names the partitions; no --topic or --all-topics")
	case m.kind != resetFile && sc.all == (len(order) > 0):
		return sc, usagef("offsets reset: give --topic (repeatable) or --all-topics")
	}
	return sc, nil
}

// newResetReport starts the report of a reset of group, or refuses a group with members unless
// --force (Kafka's rule: they would overwrite the reset with their next commit).
func newResetReport(c *cli.Context, root, group string, dry bool, m resetMethod, census migrate.Census) (resetReport, error) {
	rep := resetReport{DryRun: dry, Group: group, Mode: census.Mode, Method: methodText(m), Members: census.Members,
		Where: zkstate.OffsetsPath(group), Rows: []resetRow{}, Skipped: map[string]string{}}
	if rep.Members == nil {
		rep.Members = []migrate.Member{}
	}
	if census.Mode == zkstate.ModeFinalized {
		rep.Where = zkstate.OwnOffsetsPath(root, group) + " (finalized: the bridge's records)"
	}
	if n := len(census.Members); n > 0 {
		if !c.Bool("force") {
			return rep, codedError{exitBlocked, fmt.Sprintf("offsets reset: group %s has %s (%s): its consumers would overwrite the reset with their next commit; stop them first, or --force",
				group, plural(n, "member"), memberList(census.Members))}
		}
		rep.Forced = true
	}
	return rep, nil
}

// resetPartitions lists the partitions of the reset, sorted: a topic given without partitions
// has those the brokers know (addrs; nil: the ones ZooKeeper's topic records list).
func resetPartitions(ctx context.Context, s *zkstate.Store, addrs []string, m resetMethod, sc resetScope, committed []migrate.Offset) ([]zkstate.TopicPartition, error) {
	var tps []zkstate.TopicPartition
	switch {
	case m.kind == resetFile:
		for tp := range m.file {
			tps = append(tps, tp)
		}
	case sc.all:
		for _, o := range committed {
			tps = append(tps, o.TP())
		}
	}
	if len(sc.order) > 0 {
		var parts map[string][]int32
		if slices.ContainsFunc(sc.order, func(t string) bool { return sc.topics[t] == nil }) {
			var err error
			if parts, err = knownPartitions(ctx, s, addrs, sc.order); err != nil {
				return nil, err
			}
		}
		for _, t := range sc.order {
			ps := sc.topics[t]
			if ps == nil {
				ps = parts[t]
				if len(ps) == 0 {
					return nil, fmt.Errorf("offsets reset: topic %s has no partitions the brokers know", t)
				}
			}
			for _, p := range ps {
				tps = append(tps, zkstate.TopicPartition{Topic: t, Partition: p})
			}
		}
	}
	slices.SortFunc(tps, func(a, b zkstate.TopicPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return slices.Compact(tps), nil
}

// knownPartitions are the topics' partitions as the brokers (addrs) know them, or, with no
// brokers, as ZooKeeper's topic records list them.
func knownPartitions(ctx context.Context, s *zkstate.Store, addrs []string, topics []string) (map[string][]int32, error) {
	if addrs != nil {
		cl, err := brokerClient(addrs)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		parts, err := topicPartitions(ctx, cl, topics)
		if err != nil {
			return nil, fmt.Errorf("offsets reset: %w", err)
		}
		return parts, nil
	}
	ta, _, err := s.Topics(ctx)
	if err != nil {
		return nil, err
	}
	parts := map[string][]int32{}
	for t, a := range ta {
		for p := range a.Partitions {
			parts[t] = append(parts[t], p)
		}
	}
	return parts, nil
}

// resetFacts is what is known of each partition of the reset: its committed offset and, from
// the brokers (addrs; nil: not known), its log start and end and the offset at the method's time.
// A method that needs the brokers fails when they do not answer; any other goes on, with a note.
func resetFacts(ctx context.Context, addrs []string, m resetMethod, tps []zkstate.TopicPartition, committed []migrate.Offset, rep *resetReport) (map[zkstate.TopicPartition]partitionFacts, error) {
	facts := map[zkstate.TopicPartition]partitionFacts{}
	for _, tp := range tps {
		facts[tp] = partitionFacts{}
	}
	for _, o := range committed {
		if f, ok := facts[o.TP()]; ok {
			v := o.Offset
			f.committed = &v
			facts[o.TP()] = f
		}
	}
	if addrs == nil || len(tps) == 0 {
		return facts, nil
	}
	cl, err := brokerClient(addrs)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	asks := []int64{earliestTimestamp, latestTimestamp}
	if m.kind == resetDatetime || m.kind == resetDuration {
		asks = append(asks, m.at.UnixMilli())
	}
	for _, ts := range asks {
		got, errs, err := listOffsets(ctx, cl, tps, ts)
		if err != nil {
			if m.needsBrokers() {
				return nil, fmt.Errorf("offsets reset: %w", err)
			}
			rep.Notes = append(rep.Notes, "brokers did not answer ("+err.Error()+"): offsets not checked against the log")
			break
		}
		for _, err := range errs {
			rep.Notes = append(rep.Notes, err.Error())
		}
		for tp, v := range got {
			f, ok := facts[tp]
			if !ok {
				continue
			}
			switch ts {
			case earliestTimestamp:
				f.start = &v
			case latestTimestamp:
				f.end = &v
			default:
				f.atTime = &v
			}
			facts[tp] = f
		}
	}
	return facts, nil
}

func resetMethodOf(c *cli.Context, e *env, group string) (resetMethod, error) {
	var set []resetKind
	for _, k := range resetKinds {
		if c.IsSet(string(k)) {
			set = append(set, k)
		}
	}
	if len(set) != 1 {
		return resetMethod{}, usagef("offsets reset: give exactly one of --%s", strings.Join(func() []string {
			out := make([]string, len(resetKinds))
			for i, k := range resetKinds {
				out[i] = string(k)
			}
			return out
		}(), ", --"))
	}
	m := resetMethod{kind: set[0]}
	switch m.kind {
	case resetOffset:
		m.offset = c.Int64(string(resetOffset))
		if m.offset < 0 {
			return m, usagef("--to-offset %d: an offset is >= 0", m.offset)
		}
	case resetShift:
		m.shift = c.Int64(string(resetShift))
	case resetDatetime:
		t, err := parseResetTime(c.String(string(resetDatetime)))
		if err != nil {
			return m, usagef("--to-datetime: %v", err)
		}
		m.at = t
	case resetDuration:
		d, err := parseResetDuration(c.String(string(resetDuration)))
		if err != nil {
			return m, usagef("--by-duration: %v", err)
		}
		m.at = time.Now().Add(-d)
	case resetFile:
		data, err := readFileArg(e, c.String(string(resetFile)))
		if err != nil {
			return m, err
		}
		parsed, err := parseOffsetsFile(data, formatCSV, group)
		if err != nil {
			return m, err
		}
		m.file = map[zkstate.TopicPartition]int64{}
		for _, o := range parsed.offsets[group] {
			m.file[o.TP()] = o.Offset
		}
	}
	return m, nil
}

func methodText(m resetMethod) string {
	switch m.kind {
	case resetOffset:
		return fmt.Sprintf("--to-offset %d", m.offset)
	case resetShift:
		return fmt.Sprintf("--shift-by %d", m.shift)
	case resetDatetime, resetDuration:
		return fmt.Sprintf("--%s (%s)", m.kind, m.at.UTC().Format(time.RFC3339Nano))
	}
	return "--" + string(m.kind)
}

func memberList(ms []migrate.Member) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Kind + " " + m.ID
	}
	return shortJoin(out)
}

func printReset(w io.Writer, r resetReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW\tCHANGE\tLOG-START\tLOG-END")
	cell := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatInt(*v, 10)
	}
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", row.Topic, row.Partition, cell(row.Current), row.New, changeCell(row.OffsetChange), cell(row.LogStart), cell(row.LogEnd))
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(tw, "(no partitions)\t\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s (%s, %s) %s; offsets in %s\n", r.Group, r.Mode, plural(len(r.Members), "member"), r.Method, r.Where)
	if r.Forced {
		fmt.Fprintf(w, "  forced past %s\n", memberList(r.Members))
	}
	keys := make([]string, 0, len(r.Skipped))
	for k := range r.Skipped {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s left alone: %s\n", k, r.Skipped[k])
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if r.DryRun {
		fmt.Fprintln(w, dryRunFooter("offsets reset"))
	} else {
		fmt.Fprintf(w, "  wrote %s\n", plural(r.Written, "offset"))
	}
	return nil
}

func isOffsetsChanged(err error) bool { return errors.Is(err, migrate.ErrOffsetsChanged) }

// readFileArg reads a named file, or standard input for "-".
func readFileArg(e *env, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(e.stdin)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}
