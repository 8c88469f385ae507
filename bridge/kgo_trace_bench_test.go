package bridge_test

// ZKBRIDGE_BENCH_KGO_TRACE=1 (BenchmarkRollingRestartDataPath): every member's kgo client logs,
// at debug level and into memory, what bears on a commit stall (retries, coordinator lookups,
// metadata, connections, commits); after the roll the benchmark prints, over every member, the
// requests kgo retried by request and error, and the log of the three members with the longest
// stalls during their stall. This is how the roll's stalls were traced (docs/benchmarks.md); the
// logging itself slows the clients, so figures from such a run are not comparable with others.

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func kgoTraceOn() bool { return os.Getenv("ZKBRIDGE_BENCH_KGO_TRACE") != "" }

// kgoTraceMoved is ZKBRIDGE_BENCH_KGO_TRACE=moved (BenchmarkCrashFailoverDataPath): only the
// members of the groups the kill moves log, every level but the fetch and autocommit chatter (a
// lighter load than =all, which slowed the 900 clients of a 300-group run to 2 s round trips).
func kgoTraceMoved() bool { return os.Getenv("ZKBRIDGE_BENCH_KGO_TRACE") == "moved" }

// kgoChatter is the per-fetch and per-autocommit debug lines =moved leaves out.
var kgoChatter = []string{"Fetch v", "autocommitting", "waiting for prior commit", "updated uncommitted", "updated committed", "polling", "issuing commit"}

var kgoTraces sync.Map // member → *kgoTrace

// kgoTrace is one client's log lines that bear on a stall.
type kgoTrace struct {
	mu    sync.Mutex
	lines []kgoTraceLine
}

type kgoTraceLine struct {
	at   time.Time
	line string
}

func kgoTraceOf(member string) kgo.Logger {
	t := &kgoTrace{}
	kgoTraces.Store(member, t)
	return t
}

func (t *kgoTrace) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (t *kgoTrace) Log(level kgo.LogLevel, msg string, kv ...any) {
	if kgoTraceMoved() && slices.ContainsFunc(kgoChatter, func(s string) bool { return strings.Contains(msg, s) }) {
		return
	}
	if level > kgo.LogLevelInfo && !slices.Contains([]string{"all", "moved"}, os.Getenv("ZKBRIDGE_BENCH_KGO_TRACE")) && !slices.ContainsFunc([]string{"retrying", "sharded request failed", "coordinator",
		"metadata", "commit", "read", "connection", "produc"}, func(s string) bool { return strings.Contains(msg, s) }) {
		return
	}
	var b strings.Builder
	b.WriteString(msg)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	t.mu.Lock()
	t.lines = append(t.lines, kgoTraceLine{time.Now(), b.String()})
	t.mu.Unlock()
}

// kgoTraceReport prints the retries of every member and of the producer between from and to, by
// request and error, the log of the three members with the longest commit gaps during their gap,
// and the producer's log during the longest gap of a partition's acknowledgements (produced).
func kgoTraceReport(from, to time.Time, gaps, produced map[string]*commitGap) {
	counts := map[string]int{}
	kgoTraces.Range(func(_, v any) bool {
		t := v.(*kgoTrace)
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, l := range t.lines {
			if l.at.Before(from) || l.at.After(to) || !strings.HasPrefix(l.line, "retrying request") {
				continue
			}
			req := ""
			for f := range strings.FieldsSeq(l.line) {
				if r, ok := strings.CutPrefix(f, "request="); ok {
					req = r
				}
			}
			counts[req+" "+retryCause(l.line)]++
		}
		return true
	})
	fmt.Fprintf(os.Stderr, "=== retried requests during the roll, over every member: %v\n", counts)

	for _, c := range append(longestGaps(gaps, 3), longestGaps(produced, 1)...) {
		v, ok := kgoTraces.Load(c.member)
		if !ok {
			continue
		}
		t := v.(*kgoTrace)
		t.mu.Lock()
		fmt.Fprintf(os.Stderr, "=== %s (%s): nothing from %s to %s (%v)\n", c.member, c.group,
			c.wfrom.Format("15:04:05.000"), c.wto.Format("15:04:05.000"), c.wto.Sub(c.wfrom).Round(time.Millisecond))
		for _, l := range t.lines {
			if l.at.After(c.wfrom.Add(-100*time.Millisecond)) && l.at.Before(c.wto.Add(100*time.Millisecond)) {
				fmt.Fprintf(os.Stderr, "%s %s\n", l.at.Format("15:04:05.000"), l.line)
			}
		}
		t.mu.Unlock()
	}
}

// longestGaps are the n gaps that lasted longest.
func longestGaps(gaps map[string]*commitGap, n int) []*commitGap {
	var worst []*commitGap
	for _, c := range gaps {
		worst = append(worst, c)
	}
	slices.SortFunc(worst, func(a, b *commitGap) int { return int(b.worst - a.worst) })
	return worst[:min(n, len(worst))]
}

// retryCause classifies a "retrying request" line of kgo's log.
func retryCause(line string) string {
	switch {
	case strings.Contains(line, "NOT_COORDINATOR"):
		return "NOT_COORDINATOR"
	case strings.Contains(line, "has died"): // errChosenBrokerDead: the broker was replaced or removed
		return "broker-stopped"
	case strings.Contains(line, "EOF"): // a connection the peer had closed, found at its next use
		return "EOF"
	case strings.Contains(line, "refused"):
		return "dial-refused"
	}
	return "other"
}

// kgoTraceDump writes member's kgo trace since from to dir/<member>.log (diagnosis of a lost
// session: ZKBRIDGE_BENCH_KGO_TRACE_DIR).
func kgoTraceDump(member string, from time.Time) {
	dir := os.Getenv("ZKBRIDGE_BENCH_KGO_TRACE_DIR")
	v, ok := kgoTraces.Load(member)
	if dir == "" || !ok {
		return
	}
	t := v.(*kgoTrace)
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, l := range t.lines {
		if l.at.After(from) {
			fmt.Fprintf(&b, "%s %s\n", l.at.Format("15:04:05.000"), l.line)
		}
	}
	_ = os.WriteFile(dir+"/"+member+".log", []byte(b.String()), 0o644)
}
