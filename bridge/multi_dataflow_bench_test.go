package bridge_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkCrashFailoverDataPath (issue 15's failover figure): 3 bridges relaying to a kfake
// cluster (6 partitions, every upstream broker served by one bridge), G groups of 3 static kgo
// members (session 45 s, seeds: every bridge) consuming what a producer keeps sending and
// committing every 500 ms. The bridge that is a child process is killed with SIGKILL (4 s
// ZooKeeper session). Reported:
//
//   - takeover-max-ms: the longest time from the kill until a survivor holds the epoch of a
//     group the dead bridge owned (target: session timeout + 1 s);
//   - served-max-ms: the longest time from the kill until such a group's committed offsets
//     advance again (its members commit through a survivor);
//   - rebalanced-groups: groups whose generation changed (target 0);
//   - double-owned: partitions a member was assigned while another member of its group held
//     them (member views; target 0);
//   - offsets-regressed: committed 0.8 offsets seen going backwards (target 0);
//   - sessions-lost: members that ended their session with partitions (kgo's OnPartitionsLost:
//     a heartbeat or commit that failed for good, e.g. two lookups in a row at dead addresses).
//
// and, to split the failover's time: takeover-zk-max-ms, the same as takeover-max-ms on
// ZooKeeper's clock (the epoch's mtime less the kill: this process, with the clients, polls late
// when the machine is busy) and takeover-zk-spread-ms, the first takeover to the last on that
// clock (the survivors' loads side by side, or queued); expiry-ms, from the kill until the dead bridge's
// registration is gone (ZooKeeper expired its session; the survivors are told at about the same
// time); takeover-p50-ms and served-p50-ms over the moved groups; served-after-takeover-max-ms,
// the longest time between a group's takeover and its first new commit (the clients' share).
//
// G is ZKBRIDGE_BENCH_GROUPS (default 30); the figure is 300. The kill comes
// ZKBRIDGE_BENCH_KILL_AFTER (default 6 s, past kgo's metadata.min.age) after every group was
// assigned. ZKBRIDGE_BENCH_SURVIVORS=child runs the two survivors as child processes too (as deployed; needed at 300 groups on a machine
// limited to 20,000 open files per process, where the survivors in this process failed to dial
// and listen with EMFILE after the kill; their logs are then not written). Diagnosis:
// ZKBRIDGE_BENCH_BRIDGE_LOG=<file> writes the survivors' info lines there (millisecond
// timestamps; with children, their whole logs go to <file>.<node id>); ZKBRIDGE_BENCH_KGO_LOG=1
// logs the first member of the first moved group, =all every member of the moved groups, =every
// every member of every group. ZKBRIDGE_BENCH_KGO_TRACE=all with ZKBRIDGE_BENCH_KGO_TRACE_DIR=<dir>
// writes each member that lost its session's whole kgo debug log of the 20 s before to
// <dir>/<member>.log (and the kill's time on stderr; =moved logs only the moved groups' members and
// leaves out their fetch and autocommit lines, a far lighter load); ZKBRIDGE_BENCH_DEAD picks the
// bridge killed (benchDead); ZKBRIDGE_BENCH_CHILD_LOG_LEVEL sets the
// children's log level (info by default); ZKBRIDGE_BENCH_TRACE_OUT=<file> writes each moved
// group's epoch write and its members' first answered commits there (writeTrace).
func BenchmarkCrashFailoverDataPath(b *testing.B) {
	groups := benchGroups()
	const parts, session = 6, 4 * time.Second
	for range b.N {
		b.StopTimer()
		connect, zk := startDfBenchCluster(b, parts)

		ids := []int32{9001, 9002, 9003}
		dead := benchDead()
		var seeds []string
		var survivors []*childBridge
		for _, id := range slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return id == dead }) {
			cfg := testBridgeConfig(connect, id, benchBridgeLog(b, id))
			if os.Getenv("ZKBRIDGE_BENCH_SURVIVORS") == "child" {
				// Each survivor in a process of its own, as deployed: at 300 groups this
				// process, holding the 900 clients, both survivors' ends of their connections
				// and the upstream cluster, reached the machine's 20,000 open files.
				s := startChildBridge(b, childSpec{ZKConnect: connect, NodeID: id, ZKSessionTimeout: cfg.ZKSessionTimeout, UpstreamFromZK: true, LogLevel: cmp.Or(os.Getenv("ZKBRIDGE_BENCH_CHILD_LOG_LEVEL"), "info")})
				keepChildLog(b, s, id)
				seeds = append(seeds, s.addr)
				survivors = append(survivors, s)
				continue
			}
			cfg.UpstreamFromZK, cfg.ProxyListen, cfg.MetadataMaxAge = true, "127.0.0.1:0", time.Second
			seeds = append(seeds, runBridge(b, cfg).Addr().String())
		}
		child := startChildBridge(b, childSpec{ZKConnect: connect, NodeID: dead, ZKSessionTimeout: session, UpstreamFromZK: true, LogLevel: "info"})
		seeds = append(seeds, child.addr)
		time.Sleep(time.Second) // registrations and proxy maps seen everywhere

		f := newFailoverRun(b, zk, seeds, groups, parts, func(g string) bool {
			o, _ := placement.Owner(g, ids)
			return o == dead
		})
		var affected []string
		for _, g := range f.names {
			if o, _ := placement.Owner(g, ids); o == dead {
				affected = append(affected, g)
			}
		}
		f.waitAssigned(b, 60*time.Second+time.Duration(groups)*200*time.Millisecond)
		// Commits flowing, and the kill comes in the members' steady state: kgo refreshes its
		// metadata when it joins and then at most every metadata.min.age (5 s), so a member
		// killed less than 5 s after its last refresh keeps the dead bridge's addresses until
		// then (two lookups at dead addresses end its session). A fleet's refreshes are spread
		// over metadata.max.age (5 min) in a service that has run for a while; right after the
		// groups were assigned, as here, every member's is recent. ZKBRIDGE_BENCH_KILL_AFTER=2s
		// kills 2 s after the assignment (the harsh case, and this benchmark's figure before
		// 2026-12-05).
		killAfter := 6 * time.Second
		if d, err := time.ParseDuration(os.Getenv("ZKBRIDGE_BENCH_KILL_AFTER")); err == nil {
			killAfter = d
		}
		steady := childrenCPU(b, survivors)
		time.Sleep(killAfter)
		gens := f.generations(b)

		gone := watchGone(b, zk, zkstate.BridgePath(bridge.DefaultRoot, dead))
		b.StartTimer()
		killed := time.Now()
		if os.Getenv("ZKBRIDGE_BENCH_KGO_TRACE_DIR") != "" {
			fmt.Fprintf(os.Stderr, "=== kill at %s\n", killed.Format("15:04:05.000"))
		}
		atKillCPU := childrenCPU(b, survivors)
		watchMetadata(b, seeds[:len(seeds)-1], killed)
		child.kill()
		// The members' own clock: a commit answered a second after the kill was answered by a
		// survivor (the dead bridge's last answers arrive within milliseconds; no survivor
		// takes a group before the session's expiry, 4 s).
		for _, gap := range f.gaps {
			gap.firstFrom(killed.Add(time.Second))
		}
		// Read after the kill: a commit the dead bridge was writing at the kill may still land
		// just after it, and is not a survivor serving the group.
		atKill := f.offsets(b)
		for atKill == nil && time.Since(killed) < session {
			// A read that failed (ZooKeeper or this process too busy to answer in time) would
			// count every group as served at the first read that works.
			atKill = f.offsets(b)
		}
		// Both polled at once: a group's offsets may advance before the last takeover.
		var takeover, takeoverZK map[string]time.Duration
		var takeoverErr error
		took := make(chan struct{})
		go func() {
			defer close(took)
			takeover, takeoverZK, takeoverErr = f.waitEpochs(affected, dead, killed, session+30*time.Second)
		}()
		served := f.waitAdvance(b, affected, atKill, killed, session+60*time.Second)
		<-took
		b.StopTimer()
		servedCPU := childrenCPU(b, survivors)
		if takeoverErr != nil {
			b.Fatal(takeoverErr)
		}
		expiry := (<-gone).Sub(killed)
		answered := f.firstCommits(affected, killed)
		// The clients' share on one clock: a group's first commit answered after its epoch
		// was written (both on this machine's clock: the server runs here).
		answeredAfter := map[string]time.Duration{}
		for g, d := range answered {
			if zkAt, ok := takeoverZK[g]; ok {
				answeredAfter[g] = d - zkAt
			}
		}
		writeTrace(f, affected, killed, takeoverZK)
		after := time.Duration(0)
		for g, d := range served {
			after = max(after, d-takeover[g])
		}

		time.Sleep(10 * time.Second) // a member that would rejoin does so by now
		rebalanced := 0
		for g, gen := range f.generations(b) {
			if gen != gens[g] {
				rebalanced++
				o, _ := placement.Owner(g, ids)
				b.Logf("rebalanced: %s generation %d -> %d (placement owner %d)", g, gens[g], gen, o)
			}
		}
		lost := f.lost.Load()
		f.stop()
		b.ReportMetric(float64(expiry.Milliseconds()), "expiry-ms")
		b.ReportMetric(float64(lost), "sessions-lost")
		b.ReportMetric(float64(quantile(takeover, 1).Milliseconds()), "takeover-max-ms")
		b.ReportMetric(float64(quantile(takeover, 0.5).Milliseconds()), "takeover-p50-ms")
		b.ReportMetric(float64(quantile(takeoverZK, 1).Milliseconds()), "takeover-zk-max-ms")
		b.ReportMetric(float64((quantile(takeoverZK, 1) - quantile(takeoverZK, 1/float64(max(len(takeoverZK), 1)))).Milliseconds()), "takeover-zk-spread-ms")
		b.ReportMetric(float64(quantile(served, 1).Milliseconds()), "served-max-ms")
		b.ReportMetric(float64(quantile(served, 0.5).Milliseconds()), "served-p50-ms")
		b.ReportMetric(float64(after.Milliseconds()), "served-after-takeover-max-ms")
		b.ReportMetric(float64(quantile(answered, 1).Milliseconds()), "commit-answered-max-ms")
		b.ReportMetric(float64(quantile(answered, 0.5).Milliseconds()), "commit-answered-p50-ms")
		b.ReportMetric(float64(len(answered)), "commit-answered-groups")
		b.ReportMetric(float64(quantile(answeredAfter, 1).Milliseconds()), "commit-answered-after-takeover-zk-max-ms")
		b.ReportMetric(float64(quantile(answeredAfter, 0.5).Milliseconds()), "commit-answered-after-takeover-zk-p50-ms")
		b.ReportMetric(float64(len(affected)), "groups-moved")
		b.ReportMetric(float64(rebalanced), "rebalanced-groups")
		b.ReportMetric(float64(f.double.Load()), "double-owned")
		b.ReportMetric(float64(f.regressed.Load()), "offsets-regressed")
		if len(survivors) > 0 {
			// The survivors' CPU (user and system, both processes), in the steady state
			// before the kill and from the kill until every moved group was served again.
			b.ReportMetric(float64((atKillCPU - steady).Milliseconds()), "survivors-cpu-steady-ms")
			b.ReportMetric(float64((servedCPU - atKillCPU).Milliseconds()), "survivors-cpu-failover-ms")
		}
	}
}

// benchDead is the bridge BenchmarkCrashFailoverDataPath kills: ZKBRIDGE_BENCH_DEAD (9001, 9002 or
// 9003; 9003 by default). With three upstream brokers each bridge serves one (placement.Servers,
// since the eighteenth session: 2 of the 6 addresses in every client's Metadata die with any bridge);
// one by one (placement.Server, before) 9003 served two of them, 9002 one and 9001 none (3, 2 or 1
// of the 6).
func benchDead() int32 {
	switch os.Getenv("ZKBRIDGE_BENCH_DEAD") {
	case "9001":
		return 9001
	case "9002":
		return 9002
	}
	return 9003
}

// writeTrace writes, with ZKBRIDGE_BENCH_TRACE_OUT=<file> (diagnosis), the kill's time and, for
// each moved group, its epoch's write (ZooKeeper's mtime) and each member's first commit answered
// after the kill, all in unix ms: one line "kill <ms>", then "group <g> epochzk <ms> [m<i> <ms>]...",
// and under it one line per member, "member <g>-m<i> [<ms> <event>]...", its events from the kill
// on (traceLimit): each commit's outcome as its callback saw it ("ok", "code:<n>", "err:...") and
// its coordinator requests as kgo wrote ("w:commit@<node>") and read ("r:...") them and the
// connections it opened ("dial@<node>:<ms>"), to split the clients' share against the survivors'
// own timestamps.
func writeTrace(f *failoverRun, affected []string, killed time.Time, takeoverZK map[string]time.Duration) {
	out := os.Getenv("ZKBRIDGE_BENCH_TRACE_OUT")
	if out == "" {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "kill %d\n", killed.UnixMilli())
	for _, g := range affected {
		fmt.Fprintf(&sb, "group %s epochzk %d", g, killed.Add(takeoverZK[g]).UnixMilli())
		for m := range failoverMembers {
			if gap := f.gaps[fmt.Sprintf("%s-m%d", g, m)]; gap != nil {
				if at := gap.firstFrom(killed); !at.IsZero() {
					fmt.Fprintf(&sb, " m%d %d", m, at.UnixMilli())
				}
			}
		}
		sb.WriteString("\n")
		for m := range failoverMembers {
			gap := f.gaps[fmt.Sprintf("%s-m%d", g, m)]
			if gap == nil {
				continue
			}
			gap.mu.Lock()
			fmt.Fprintf(&sb, "member %s-m%d", g, m)
			for _, t := range gap.tries {
				fmt.Fprintf(&sb, " %d %s", t.at.UnixMilli(), t.outcome)
			}
			gap.mu.Unlock()
			sb.WriteString("\n")
		}
	}
	_ = os.WriteFile(out, []byte(sb.String()), 0o644)
}

// childrenCPU is the CPU time (user and system) the child bridges have used so far, from
// /proc/<pid>/stat.
func childrenCPU(b *testing.B, children []*childBridge) time.Duration {
	var total time.Duration
	for _, c := range children {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command name (in parentheses, which may hold spaces): the
		// state, then utime and stime as the 12th and 13th, in clock ticks (USER_HZ, 100 on
		// Linux).
		i := bytes.LastIndexByte(data, ')')
		f := strings.Fields(string(data[i+1:]))
		for _, s := range f[11:13] {
			ticks, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return total
}

// benchBridgeLog is a survivor's logger: warnings on the benchmark's log, or every info line in
// the file ZKBRIDGE_BENCH_BRIDGE_LOG names, with millisecond timestamps (diagnosis).
func benchBridgeLog(b *testing.B, id int32) zerolog.Logger {
	path := os.Getenv("ZKBRIDGE_BENCH_BRIDGE_LOG")
	if path == "" {
		return newLogger(b).Level(zerolog.WarnLevel)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	zerolog.TimeFieldFormat = "15:04:05.000" // the bridges' own lines too: this knob is for diagnosis
	return zerolog.New(zerolog.SyncWriter(f)).Level(zerolog.InfoLevel).With().Timestamp().Int32("bench_node", id).Logger()
}

// keepChildLog copies a child bridge's log next to the file ZKBRIDGE_BENCH_BRIDGE_LOG names
// (<file>.<id>) at cleanup, before its temporary directory is removed (diagnosis).
func keepChildLog(b *testing.B, c *childBridge, id int32) {
	path := os.Getenv("ZKBRIDGE_BENCH_BRIDGE_LOG")
	if path == "" {
		return
	}
	b.Cleanup(func() {
		if data, err := os.ReadFile(c.log); err == nil {
			_ = os.WriteFile(fmt.Sprintf("%s.%d", path, id), data, 0o644)
		}
	})
}

// watchGone returns a channel that receives the time the znode at p is seen deleted.
func watchGone(b *testing.B, zk *zkstate.Store, p string) <-chan time.Time {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	events, err := zk.WatchData(ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	gone := make(chan time.Time, 1)
	go func() {
		for ev := range events {
			if !ev.Exists {
				gone <- time.Now()
				return
			}
		}
	}()
	return gone
}

// quantile is the q-quantile (0 < q <= 1) of the durations in m; 0 when m is empty.
func quantile(m map[string]time.Duration, q float64) time.Duration {
	ds := slices.Sorted(maps.Values(m))
	if len(ds) == 0 {
		return 0
	}
	return ds[max(0, int(math.Ceil(q*float64(len(ds))))-1)]
}

// benchGroups is the number of groups the data-path benchmarks run: ZKBRIDGE_BENCH_GROUPS, 30 by
// default.
func benchGroups() int {
	if n, err := strconv.Atoi(os.Getenv("ZKBRIDGE_BENCH_GROUPS")); err == nil && n > 0 {
		return n
	}
	return 30
}

// startDfBenchCluster is the data-path benchmarks' world: a chroot and its store, and a kfake
// cluster of 3 brokers with dfTopic in parts partitions, registered in /brokers as Kafka does.
func startDfBenchCluster(b *testing.B, parts int32) (string, *zkstate.Store) {
	connect := zktest.Connect(b)
	zk := zktest.OpenStore(b, connect)
	kf, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(parts, dfTopic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	pinDfLeaders(b, kf, parts)
	loadDfLayout(b, zk, kf.ListenAddrs(), parts, func(_ int32, a string) string { return a })
	return connect, zk
}

// pinDfLeaders prints, on stderr, which upstream broker leads each partition, and with
// ZKBRIDGE_BENCH_PIN_LEADERS=1 first moves partition p to broker p%3 (as loadDfLayout writes it
// to ZooKeeper). kfake places leaders at random: in four traced crash runs at 300 groups the bridge
// killed served the leaders of 2, 5, 6 and 5 of the 6 partitions, and a member whose partitions are
// all behind it consumes, and so commits, nothing until its Metadata is refreshed (with the kill 2 s
// after the assignment: 9.2 s when all 6 were, 4.9-5.0 s when 5 were). Compare runs with the
// leaders printed, or pinned.
func pinDfLeaders(b *testing.B, kf *kfake.Cluster, parts int32) {
	pin := os.Getenv("ZKBRIDGE_BENCH_PIN_LEADERS") != ""
	var leaders []string
	for p := range parts {
		if pin {
			if err := kf.MoveTopicPartition(dfTopic, p, p%3); err != nil {
				b.Fatal(err)
			}
		}
		leaders = append(leaders, fmt.Sprintf("p%d@%d", p, kf.LeaderFor(dfTopic, p)))
	}
	fmt.Fprintf(os.Stderr, "upstream partition leaders (pinned %v): %s\n", pin, strings.Join(leaders, " "))
}

// failoverMembers is the number of static members of each group of a failoverRun.
const failoverMembers = 3

// failoverRun is the clients of BenchmarkCrashFailoverDataPath and what they saw.
type failoverRun struct {
	zk     *zkstate.Store
	names  []string
	parts  int32
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	held map[string]map[int32]string // group → partition → member holding it (member views)

	double, regressed atomic.Int64
	// lost counts the members that ended their session with partitions (OnPartitionsLost): a
	// heartbeat or commit that failed for good, after which the member rejoins.
	lost atomic.Int64
	// offMu orders the offset reads: the poller and waitAdvance both read, and an older read
	// recorded after a newer one would count as a regression that never happened.
	offMu sync.Mutex
	last  sync.Map // "group/partition" → int64, the last committed offset seen

	gaps    map[string]*commitGap // member → its successful commits (the map is not written after start)
	fetches map[string]*commitGap // member → its polls that returned records
	// produced is, by partition ("p<n>"), the producer's acknowledged records: a member has
	// nothing to fetch, and so nothing to commit, while the producer cannot produce.
	produced map[string]*commitGap
}

// commitGap is the longest time between two successful commits (or polls that returned
// records) of one member since startGaps.
type commitGap struct {
	group string
	mu    sync.Mutex
	last  time.Time
	worst time.Duration
	// member is the member's name ("" for a partition's), wfrom and wto the worst gap's ends.
	member     string
	wfrom, wto time.Time
	// armed and first: the first success at or after armed (zero: not armed).
	armed, first time.Time
	// tries is, with ZKBRIDGE_BENCH_TRACE_OUT, every commit's outcome (and the member's
	// coordinator requests on the wire: wire) from armed on, for traceLimit (writeTrace).
	tries []commitTry
}

// commitTry is one traced event of a member after the kill: a commit's outcome ("ok", the first
// partition's error, or the request's error) as its callback saw it, or (wire set) a coordinator
// request kgo wrote or read, or a connection it opened, with the broker's node id.
type commitTry struct {
	at      time.Time
	outcome string
	wire    bool
}

// traceLimit is how long after the kill a member's commits and wire events are traced.
const traceLimit = 15 * time.Second

// trace records ev from armed on (for traceLimit) when tracing.
func (c *commitGap) trace(ev commitTry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed.IsZero() && !ev.at.Before(c.armed.Add(-time.Second)) && ev.at.Before(c.armed.Add(traceLimit)) {
		c.tries = append(c.tries, ev)
	}
}

// traceCommit records a commit's outcome when tracing.
func (c *commitGap) traceCommit(err error, resp *kmsg.OffsetCommitResponse) {
	out := "ok"
	switch {
	case err != nil:
		out = "err:" + strings.ReplaceAll(err.Error(), " ", "_")
	case resp != nil:
	partitions:
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					out = fmt.Sprintf("code:%d", p.ErrorCode)
					break partitions
				}
			}
		}
	}
	c.trace(commitTry{at: time.Now(), outcome: out})
}

// wireTrace is a member's kgo hook (with ZKBRIDGE_BENCH_TRACE_OUT): its coordinator requests
// (FindCoordinator, OffsetCommit, JoinGroup, Heartbeat, SyncGroup) written and read, and the
// connections it opens, by broker.
type wireTrace struct{ gap *commitGap }

var traceKeys = map[int16]string{8: "commit", 10: "findcoord", 11: "join", 12: "heartbeat", 14: "sync", 18: "apiversions"}

func (w wireTrace) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if name, ok := traceKeys[key]; ok {
		w.gap.trace(commitTry{at: time.Now(), wire: true, outcome: fmt.Sprintf("w:%s@%d%s", name, meta.NodeID, errMark(err))})
	}
}

func (w wireTrace) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if name, ok := traceKeys[key]; ok {
		w.gap.trace(commitTry{at: time.Now(), wire: true, outcome: fmt.Sprintf("r:%s@%d%s", name, meta.NodeID, errMark(err))})
	}
}

func (w wireTrace) OnBrokerConnect(meta kgo.BrokerMetadata, dur time.Duration, _ net.Conn, err error) {
	w.gap.trace(commitTry{at: time.Now(), wire: true, outcome: fmt.Sprintf("dial@%d:%dms%s", meta.NodeID, dur.Milliseconds(), errMark(err))})
}

func errMark(err error) string {
	if err != nil {
		return "!" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	return ""
}

func (c *commitGap) committed(err error, resp *kmsg.OffsetCommitResponse) {
	if err != nil || resp == nil {
		return
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return
			}
		}
	}
	c.note()
}

// note records one success now.
func (c *commitGap) note() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.last.IsZero() && now.Sub(c.last) > c.worst {
		c.worst = now.Sub(c.last)
		c.wfrom, c.wto = c.last, now
	}
	c.last = now
	if !c.armed.IsZero() && c.first.IsZero() && !now.Before(c.armed) {
		c.first = now
	}
}

// firstFrom arms c at t (the next success at or after t is its first) or, armed, returns it.
func (c *commitGap) firstFrom(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed.IsZero() {
		c.armed = t
	}
	return c.first
}

// newFailoverRun starts the clients, committing every 500 ms; with ZKBRIDGE_BENCH_KGO_LOG set,
// the first member of the first group logged accepts logs.
func newFailoverRun(b *testing.B, zk *zkstate.Store, seeds []string, groups int, parts int32, logged func(group string) bool) *failoverRun {
	return startFailoverRun(b, zk, seeds, groups, parts, 500*time.Millisecond, logged)
}

// newFailoverRunEvery is newFailoverRun with the members committing every commitEvery (the
// first member of the first group logs).
func newFailoverRunEvery(b *testing.B, zk *zkstate.Store, seeds []string, groups int, parts int32, commitEvery time.Duration) *failoverRun {
	return startFailoverRun(b, zk, seeds, groups, parts, commitEvery, func(string) bool { return true })
}

func startFailoverRun(b *testing.B, zk *zkstate.Store, seeds []string, groups int, parts int32, commitEvery time.Duration, logged func(group string) bool) *failoverRun {
	ctx, cancel := context.WithCancel(context.Background())
	f := &failoverRun{zk: zk, parts: parts, cancel: cancel, held: map[string]map[int32]string{}, gaps: map[string]*commitGap{}, fetches: map[string]*commitGap{},
		produced: map[string]*commitGap{}}
	for p := range parts {
		f.produced[fmt.Sprintf("p%d", p)] = &commitGap{group: fmt.Sprintf("p%d", p), member: "producer"}
	}
	b.Cleanup(f.stop)
	popts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(time.Minute), kgo.RetryTimeout(time.Minute)}
	if kgoTraceOn() && !kgoTraceMoved() {
		popts = append(popts, kgo.WithLogger(kgoTraceOf("producer")))
	}
	producer, err := kgo.NewClient(popts...)
	if err != nil {
		b.Fatal(err)
	}
	f.wg.Go(func() {
		defer producer.Close()
		for i := 0; ctx.Err() == nil; i++ {
			producer.Produce(ctx, &kgo.Record{Topic: dfTopic, Value: []byte(strconv.Itoa(i))}, func(r *kgo.Record, err error) {
				if err == nil {
					f.produced[fmt.Sprintf("p%d", r.Partition)].note()
				}
			})
			time.Sleep(5 * time.Millisecond)
		}
	})
	logging := false
	tracing := os.Getenv("ZKBRIDGE_BENCH_TRACE_OUT") != ""
	for i := range groups {
		g := fmt.Sprintf("fo-%d", i)
		f.names = append(f.names, g)
		f.mu.Lock() // the members of the groups made before may be assigned meanwhile
		f.held[g] = map[int32]string{}
		f.mu.Unlock()
		for m := range failoverMembers {
			member := fmt.Sprintf("%s-m%d", g, m)
			gap, fetched := &commitGap{group: g, member: member}, &commitGap{group: g, member: member}
			f.gaps[member], f.fetches[member] = gap, fetched
			opts := []kgo.Opt{
				kgo.SeedBrokers(seeds...),
				kgo.ConsumerGroup(g),
				kgo.InstanceID(member),
				kgo.ConsumeTopics(dfTopic),
				kgo.SessionTimeout(45 * time.Second),
				kgo.AutoCommitInterval(commitEvery),
				kgo.AutoCommitCallback(func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
					gap.committed(err, resp)
					if tracing {
						gap.traceCommit(err, resp)
					}
				}),
				kgo.FetchMaxWait(time.Second),
				kgo.RetryTimeout(time.Minute),
				kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { f.assigned(g, member, a[dfTopic]) }),
				kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { f.revoked(g, member, r[dfTopic]) }),
				kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, r map[string][]int32) {
					if len(r[dfTopic]) > 0 {
						f.lost.Add(1)
						kgoTraceDump(member, time.Now().Add(-20*time.Second))
					}
					f.revoked(g, member, r[dfTopic])
				}),
			}
			if d, err := time.ParseDuration(os.Getenv("ZKBRIDGE_BENCH_METADATA_MIN_AGE")); err == nil {
				// kgo refreshes its metadata at most every 5 s by default: a coordinator or a
				// partition leader it does not know yet waits for that.
				opts = append(opts, kgo.MetadataMinAge(d))
			}
			if kgoTraceOn() && (!kgoTraceMoved() || logged(g)) {
				opts = append(opts, kgo.WithLogger(kgoTraceOf(member)))
			}
			if tracing {
				opts = append(opts, kgo.WithHooks(wireTrace{gap}))
			}
			if kl := os.Getenv("ZKBRIDGE_BENCH_KGO_LOG"); kl == "every" || kl != "" && logged(g) && (kl == "all" || !logging && m == 0) {
				// Diagnosis: the first logged group's first member's client (all: every member
				// of every logged group), on stderr.
				logging = true
				opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string {
					return time.Now().Format("15:04:05.000 ") + member + " "
				})))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				b.Fatal(err)
			}
			f.wg.Go(func() {
				defer cl.CloseAllowingRebalance()
				for ctx.Err() == nil {
					if fs := cl.PollFetches(ctx); fs.NumRecords() > 0 {
						fetched.note()
					}
				}
			})
		}
	}
	f.wg.Go(func() { // committed offsets, for regressions
		for ctx.Err() == nil {
			_ = f.offsets(b)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	return f
}

func (f *failoverRun) assigned(g, member string, ps []int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range ps {
		if other, ok := f.held[g][p]; ok && other != member {
			f.double.Add(1)
		}
		f.held[g][p] = member
	}
}

func (f *failoverRun) revoked(g, member string, ps []int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range ps {
		if f.held[g][p] == member {
			delete(f.held[g], p)
		}
	}
}

// firstCommits is, per group, the time from the kill until a member's OffsetCommit was first
// answered without error by a survivor, read off the members' callbacks: no polling lag, where
// served-max-ms is as late as the benchmark's read of every offset znode (slow at 300 groups in
// the process of the 900 clients). A group none of whose members committed is left out (its
// served figure tells).
func (f *failoverRun) firstCommits(groups []string, killed time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, g := range groups {
		for m := range 3 {
			gap := f.gaps[fmt.Sprintf("%s-m%d", g, m)]
			if gap == nil {
				continue
			}
			if at := gap.firstFrom(killed); !at.IsZero() {
				if d, ok := out[g]; !ok || at.Sub(killed) < d {
					out[g] = at.Sub(killed)
				}
			}
		}
	}
	return out
}

// startGaps starts measuring commit and fetch gaps afresh: from now.
func (f *failoverRun) startGaps() {
	now := time.Now()
	for _, m := range []map[string]*commitGap{f.gaps, f.fetches, f.produced} {
		for _, c := range m {
			c.mu.Lock()
			c.last, c.worst, c.wfrom, c.wto = now, 0, time.Time{}, time.Time{}
			c.mu.Unlock()
		}
	}
}

// stalls is, per group, the longest time one of its members went without a successful commit
// since startGaps (counting the time since its last commit until now).
func (f *failoverRun) stalls() map[string]time.Duration { return worstGaps(f.gaps) }

// fetchStalls is stalls for polls that returned records: the data path's share of a stall (a
// member commits only what it consumed since its last commit).
func (f *failoverRun) fetchStalls() map[string]time.Duration { return worstGaps(f.fetches) }

// produceStalls is stalls for the producer's acknowledged records, by partition ("p<n>").
func (f *failoverRun) produceStalls() map[string]time.Duration { return worstGaps(f.produced) }

func worstGaps(gaps map[string]*commitGap) map[string]time.Duration {
	now := time.Now()
	out := map[string]time.Duration{}
	for _, c := range gaps {
		c.mu.Lock()
		out[c.group] = max(out[c.group], c.worst, now.Sub(c.last))
		c.mu.Unlock()
	}
	return out
}

// holders reads which bridge holds every group's epoch (0: none, or released).
func (f *failoverRun) holders(b *testing.B) map[string]int32 {
	paths := make([]string, len(f.names))
	for i, g := range f.names {
		paths[i] = zkstate.EpochPath(bridge.DefaultRoot, g)
	}
	reads, err := f.zk.GetMany(context.Background(), paths)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int32{}
	for i, r := range reads {
		if r.Err != nil {
			continue
		}
		if e, err := zkstate.ParseEpoch(r.Data); err == nil && !e.Released {
			out[f.names[i]] = e.NodeID
		}
	}
	return out
}

func (f *failoverRun) stop() {
	f.cancel()
	f.wg.Wait()
}

// waitAssigned waits until every partition of every group is held and each of the group's
// members holds some. Every partition held is not enough: a group whose first member joined
// alone holds them all in that member until the other two join, and the cooperative balancer
// hands them out in two more generations (the leader revokes, then rejoins, KIP-429), which a
// generation read then would count as a rebalance.
func (f *failoverRun) waitAssigned(b *testing.B, timeout time.Duration) {
	zktest.Eventually(b, timeout, "every group assigned", func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		short := 0
		for _, h := range f.held {
			holders := map[string]bool{}
			for _, m := range h {
				holders[m] = true
			}
			if len(h) != int(f.parts) || len(holders) != failoverMembers {
				short++
			}
		}
		return short == 0, fmt.Sprintf("%d of %d groups not fully assigned", short, len(f.held))
	})
}

// generations reads every group's generation from its record.
func (f *failoverRun) generations(b *testing.B) map[string]int64 {
	paths := make([]string, len(f.names))
	for i, g := range f.names {
		paths[i] = zkstate.GroupRecordPath(bridge.DefaultRoot, g)
	}
	reads, err := f.zk.GetMany(context.Background(), paths)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for i, r := range reads {
		var rec group.Record
		if r.Err == nil && json.Unmarshal(r.Data, &rec) == nil {
			out[f.names[i]] = int64(rec.Generation)
		}
	}
	return out
}

// offsets reads every group's committed offsets ("group/partition" → offset), counting those
// that went backwards since the last read.
func (f *failoverRun) offsets(b *testing.B) map[string]int64 { return f.offsetsOf(f.names) }

// offsetsOf is offsets for groups only: the failover's watch reads the groups it still waits
// for, not all of them (a benchmark that reads every offset znode of 300 groups 20 times a
// second is a larger load on ZooKeeper than the bridges' commits, in the very window it times).
func (f *failoverRun) offsetsOf(groups []string) map[string]int64 {
	f.offMu.Lock()
	defer f.offMu.Unlock()
	var keys, paths []string
	for _, g := range groups {
		for p := range f.parts {
			keys = append(keys, fmt.Sprintf("%s/%d", g, p))
			paths = append(paths, zkstate.OffsetPath(g, dfTopic, p))
		}
	}
	reads, err := f.zk.GetMany(context.Background(), paths)
	if err != nil {
		return nil
	}
	out := map[string]int64{}
	for i, r := range reads {
		if r.Err != nil {
			continue
		}
		off, err := zkstate.ParseOffset(r.Data)
		if err != nil {
			continue
		}
		out[keys[i]] = off
		if prev, ok := f.last.Swap(keys[i], off); ok && off < prev.(int64) {
			f.regressed.Add(1)
		}
	}
	return out
}

// waitEpochs returns, for each of groups, how long after killed its epoch was first seen held by
// a bridge other than dead, and how long after killed that bridge wrote it on ZooKeeper's clock
// (the znode's mtime: the server runs on this machine).
func (f *failoverRun) waitEpochs(groups []string, dead int32, killed time.Time, timeout time.Duration) (map[string]time.Duration, map[string]time.Duration, error) {
	left := slices.Clone(groups)
	out, zk := map[string]time.Duration{}, map[string]time.Duration{}
	for len(left) > 0 {
		if time.Since(killed) > timeout {
			return nil, nil, fmt.Errorf("%d groups still held by the dead bridge %v after the kill", len(left), timeout)
		}
		paths := make([]string, len(left))
		for i, g := range left {
			paths[i] = zkstate.EpochPath(bridge.DefaultRoot, g)
		}
		reads, err := f.zk.GetMany(context.Background(), paths)
		if err == nil {
			now := time.Since(killed)
			var still []string
			for i, r := range reads {
				e, perr := zkstate.ParseEpoch(r.Data)
				if r.Err != nil || perr != nil || e.NodeID == dead {
					still = append(still, left[i])
					continue
				}
				out[left[i]] = now
				zk[left[i]] = r.Stat.Mtime.Sub(killed)
			}
			left = still
		}
		// The epochs' times that count are their mtimes; this read's own time (takeover-*-ms)
		// is only as fine as its period.
		time.Sleep(50 * time.Millisecond)
	}
	return out, zk, nil
}

// waitAdvance returns, for each of groups, how long after killed it was first seen to have
// committed an offset past what it had committed at the kill.
func (f *failoverRun) waitAdvance(b *testing.B, groups []string, atKill map[string]int64, killed time.Time, timeout time.Duration) map[string]time.Duration {
	left := slices.Clone(groups)
	out := map[string]time.Duration{}
	for len(left) > 0 {
		if time.Since(killed) > timeout {
			b.Fatalf("%d groups committed nothing new %v after the kill", len(left), timeout)
		}
		now, offs := time.Since(killed), f.offsetsOf(left)
		var still []string
		for _, g := range left {
			advanced := false
			for p := range f.parts {
				k := fmt.Sprintf("%s/%d", g, p)
				if offs[k] > atKill[k] {
					advanced = true
				}
			}
			if !advanced {
				still = append(still, g)
				continue
			}
			out[g] = now
		}
		left = still
		time.Sleep(100 * time.Millisecond) // served-*-ms are as fine as this

	}
	return out
}
