package ownership

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// The scenario files in testdata/*.txt drive Decide, Resolve and Fingerprint, raft-style
// (etcd-io/raft's datadriven tests). A block is a command line, its input lines, "----", and the
// expected output up to a blank line; lines starting with # are comments. After changing the
// planner, run
//
//	go test ./bridge/ownership/ -run TestScenarios -rewrite
//
// and read the diff of testdata/ before keeping it.
//
// Commands:
//
//	decide [strategy=range|roundrobin]     group "g", the bridge's session 0x100
//	  member <consumer id> <topic>[:threads] ...   a member of the bridge being assigned
//	  other <consumer id> <topic>[:threads] ...    another registration of the group
//	  topic <name> <n> | <name> <p>,<p>,...       partitions 0..n-1, or these
//	  owner <topic>/<p> <thread> [ours|unread|session=0x..] [version=N]
//	      ours (the default): an ephemeral of the bridge's session; unread: seen without its
//	      stat (session and version -1)
//	resolve [ours=<id>,...] [topics=<t>,...]   Resolve's others and skipped registrations
//	fingerprint [ours=<id>,...]                Fingerprint of the snapshot
//	  reg <consumer id> <static|white_list|black_list> <topic or filter>:<n> ...   (\s: a space)
//	  problem <path>                           a znode the snapshot could not read
//	  topic ...                                (fingerprint) as for decide

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt")

const session int64 = 0x100

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runFile(t, f) })
	}
}

type block struct {
	pre    []string // comments and blank lines before the command
	cmd    string
	input  []string
	output string
	line   int
}

func parse(t *testing.T, path string) (blocks []block, tail []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if l == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := block{pre: pre, cmd: l, line: i + 1}
		pre = nil
		for i++; i < len(lines) && lines[i] != "----"; i++ {
			b.input = append(b.input, lines[i])
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: no ---- after the command", path, b.line)
		}
		var out []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		i-- // the blank line ending the output belongs to the next block's preamble
		b.output = strings.Join(out, "\n")
		blocks = append(blocks, b)
	}
	return blocks, pre
}

func runFile(t *testing.T, path string) {
	blocks, tail := parse(t, path)
	var buf strings.Builder
	for _, b := range blocks {
		got := strings.TrimRight(run(t, path, b), "\n")
		if !*rewrite && got != b.output {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, b.line, b.cmd, got, b.output)
		}
		for _, l := range b.pre {
			buf.WriteString(l + "\n")
		}
		buf.WriteString(b.cmd + "\n")
		for _, l := range b.input {
			buf.WriteString(l + "\n")
		}
		buf.WriteString("----\n" + got + "\n")
	}
	for _, l := range tail {
		buf.WriteString(l + "\n")
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(buf.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, path string, b block) string {
	fields := strings.Fields(b.cmd)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	fail := func(format string, a ...any) string {
		t.Fatalf("%s:%d: %s", path, b.line, fmt.Sprintf(format, a...))
		return ""
	}
	switch fields[0] {
	case "decide":
		in, err := decideInput(args, b.input)
		if err != nil {
			return fail("%v", err)
		}
		return decide(in)
	case "resolve", "fingerprint":
		snap, problems, err := snapshot(b.input)
		if err != nil {
			return fail("%v", err)
		}
		ours := map[string]bool{}
		for _, id := range list(args["ours"]) {
			ours[id] = true
		}
		if fields[0] == "fingerprint" {
			return Fingerprint(snap, ours) + "\n"
		}
		others, skipped := Resolve("g", snap.Consumers, problems, list(args["topics"]), func(id string) bool { return ours[id] })
		var out strings.Builder
		for _, id := range slices.Sorted(maps.Keys(others)) {
			fmt.Fprintf(&out, "other %s %s\n", id, threads(others[id]))
		}
		for _, pr := range skipped {
			fmt.Fprintf(&out, "skipped %s malformed=%v\n", pr.Path, errors.Is(pr.Err, zkstate.ErrMalformed))
		}
		if out.Len() == 0 {
			return "nothing\n"
		}
		return out.String()
	}
	return fail("unknown command %q", fields[0])
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func decideInput(args map[string]string, lines []string) (Input, error) {
	in := Input{Group: "g", Strategy: legacy.StrategyRange, Session: session,
		Members: map[string]map[string]int{}, Others: map[string]map[string]int{},
		Partitions: map[string][]int32{}, Owners: map[legacy.TopicPartition]Owner{}}
	if s, ok := args["strategy"]; ok {
		in.Strategy = legacy.Strategy(s)
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 {
			return in, fmt.Errorf("input line %q", l)
		}
		switch f[0] {
		case "member", "other":
			sub := map[string]int{}
			for _, tt := range f[2:] {
				topic, n, ok := strings.Cut(tt, ":")
				count := 1
				if ok {
					count, _ = strconv.Atoi(n)
				}
				sub[topic] = count
			}
			if f[0] == "member" {
				in.Members[f[1]] = sub
			} else {
				in.Others[f[1]] = sub
			}
		case "topic":
			ps, err := partitions(f[1:])
			if err != nil {
				return in, err
			}
			in.Partitions[f[1]] = ps
		case "owner":
			tp, o, err := owner(f[1:])
			if err != nil {
				return in, err
			}
			in.Owners[tp] = o
		default:
			return in, fmt.Errorf("unknown input %q", l)
		}
	}
	return in, nil
}

func partitions(f []string) ([]int32, error) {
	if len(f) != 2 {
		return nil, fmt.Errorf("topic wants a name and partitions: %v", f)
	}
	var ps []int32
	if !strings.Contains(f[1], ",") {
		n, err := strconv.Atoi(f[1])
		for p := range n {
			ps = append(ps, int32(p))
		}
		return ps, err
	}
	for _, s := range strings.Split(f[1], ",") {
		p, err := strconv.Atoi(s)
		if err != nil {
			return nil, err
		}
		ps = append(ps, int32(p))
	}
	return ps, nil
}

func owner(f []string) (legacy.TopicPartition, Owner, error) {
	if len(f) < 2 {
		return legacy.TopicPartition{}, Owner{}, fmt.Errorf("owner wants <topic>/<p> <thread>: %v", f)
	}
	topic, p, _ := strings.Cut(f[0], "/")
	n, err := strconv.Atoi(p)
	if err != nil {
		return legacy.TopicPartition{}, Owner{}, err
	}
	o := Owner{Thread: f[1], Session: session}
	for _, a := range f[2:] {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "ours":
		case "unread":
			o.Session, o.Version = -1, -1
		case "session":
			o.Session, err = strconv.ParseInt(v, 0, 64)
		case "version":
			var ver int64
			ver, err = strconv.ParseInt(v, 10, 32)
			o.Version = int32(ver)
		default:
			err = fmt.Errorf("unknown owner attribute %q", a)
		}
		if err != nil {
			return legacy.TopicPartition{}, Owner{}, err
		}
	}
	return legacy.TopicPartition{Topic: topic, Partition: int32(n)}, o, nil
}

func snapshot(lines []string) (*zkstate.GroupSnapshot, []zkstate.Problem, error) {
	snap := &zkstate.GroupSnapshot{Group: "g", Consumers: map[string]zkstate.Consumer{}, Partitions: map[string][]int32{}}
	var problems []zkstate.Problem
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "reg":
			r := zkstate.ConsumerRegistration{Version: 1, Pattern: f[2], Subscription: map[string]int{}}
			for _, tt := range f[3:] {
				i := strings.LastIndexByte(tt, ':')
				if i < 0 {
					return nil, nil, fmt.Errorf("subscription %q wants <topic>:<n>", tt)
				}
				n, err := strconv.Atoi(tt[i+1:])
				if err != nil {
					return nil, nil, err
				}
				r.Subscription[strings.ReplaceAll(tt[:i], `\s`, " ")] = n
			}
			snap.Consumers[f[1]] = zkstate.Consumer{ID: f[1], Registration: r}
		case len(f) == 2 && f[0] == "problem":
			problems = append(problems, zkstate.Problem{Path: f[1], Err: zkstate.ErrMalformed})
		case len(f) == 3 && f[0] == "topic":
			ps, err := partitions(f[1:])
			if err != nil {
				return nil, nil, err
			}
			snap.Partitions[f[1]] = ps
		default:
			return nil, nil, fmt.Errorf("unknown input %q", l)
		}
	}
	snap.Problems = problems
	return snap, problems, nil
}

func threads(sub map[string]int) string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(sub)) {
		out = append(out, t+":"+strconv.Itoa(sub[t]))
	}
	return strings.Join(out, " ")
}

// decide prints a Plan: the group's assignment by thread, then what the bridge releases, moves,
// waits for and claims, and the ops of the claim and of the release before a wait.
func decide(in Input) string {
	p, err := Decide(in)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	var out strings.Builder
	byThread := map[string][]string{}
	for tp, th := range p.Group {
		byThread[th] = append(byThread[th], tp.Topic+"/"+strconv.Itoa(int(tp.Partition)))
	}
	for _, th := range slices.Sorted(maps.Keys(byThread)) {
		mark := "other "
		if _, ours := p.Assignment[firstTP(p.Group, th)]; ours {
			mark = "member"
		}
		slices.SortFunc(byThread[th], comparePath)
		fmt.Fprintf(&out, "%s %s: %s\n", mark, th, strings.Join(byThread[th], " "))
	}
	for _, l := range []struct {
		name string
		tps  []legacy.TopicPartition
	}{{"release", p.Release}, {"move", p.Move}, {"foreign", p.Foreign}, {"claim", p.Claim}} {
		if len(l.tps) > 0 {
			fmt.Fprintf(&out, "%s: %s\n", l.name, tpList(l.tps))
		}
	}
	if ops := p.Ops(&in, false); len(ops) > 0 && len(p.Foreign) == 0 {
		out.WriteString("ops:\n")
		for _, op := range ops {
			fmt.Fprintf(&out, "  %s\n", op)
		}
	}
	if ops := p.Ops(&in, true); len(ops) > 0 && len(p.Foreign) > 0 {
		out.WriteString("release before waiting:\n")
		for _, op := range ops {
			fmt.Fprintf(&out, "  %s\n", op)
		}
	}
	if out.Len() == 0 {
		out.WriteString("nothing\n")
	}
	return out.String()
}

func firstTP(a legacy.Assignment, th string) legacy.TopicPartition {
	for tp, t := range a {
		if t == th {
			return tp
		}
	}
	return legacy.TopicPartition{}
}

func comparePath(a, b string) int {
	at, ap, _ := strings.Cut(a, "/")
	bt, bp, _ := strings.Cut(b, "/")
	an, _ := strconv.Atoi(ap)
	bn, _ := strconv.Atoi(bp)
	return CompareTP(legacy.TopicPartition{Topic: at, Partition: int32(an)}, legacy.TopicPartition{Topic: bt, Partition: int32(bn)})
}

func tpList(tps []legacy.TopicPartition) string {
	out := make([]string, len(tps))
	for i, tp := range tps {
		out[i] = tp.Topic + "/" + strconv.Itoa(int(tp.Partition))
	}
	return strings.Join(out, " ")
}
