package bridge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkconsumer"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// nodeModule returns node and the environment that lets it load module at version: from
// ZKBRIDGE_NODE_PATH, else from the cache directory .ci/run installs npm packages in
// (<user cache dir>/zkbridge-node/node_modules). Without them the test is skipped, or fails
// when ZKBRIDGE_REQUIRE_ZK=1 (CI must run it).
func nodeModule(t *testing.T, module, version string) (node string, env []string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("ZKBRIDGE_REQUIRE_ZK") == "1" {
			t.Fatalf(format+" (ZKBRIDGE_REQUIRE_ZK=1; .ci/run installs it)", args...)
		}
		t.Skipf(format, args...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed: %v", err)
	}
	dir := os.Getenv("ZKBRIDGE_NODE_PATH")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			missing("no ZKBRIDGE_NODE_PATH and no cache directory: %v", err)
		}
		dir = filepath.Join(cache, "zkbridge-node", "node_modules")
	}
	env = []string{"NODE_PATH=" + dir}
	check := exec.Command(node, "-e", fmt.Sprintf(`if (require(%q).version !== %q) process.exit(3)`, module+"/package.json", version))
	check.Env = append(os.Environ(), env...)
	if err := check.Run(); err != nil {
		missing("%s %s is not in %s (npm install --prefix %s %s@%s): %v", module, version, dir, filepath.Dir(dir), module, version, err)
	}
	return node, env
}

// kafkajsEvent is one line of testdata/kafkajs/consumer.js.
type kafkajsEvent struct {
	Event      string             `json:"event"`
	Member     string             `json:"member"`
	Protocol   string             `json:"protocol"`
	Assignment map[string][]int32 `json:"assignment"`
	Partition  int32              `json:"partition"`
	Offset     int64              `json:"offset"`
	Value      string             `json:"value"`
	Error      string             `json:"error"`
}

// A default kafkajs 2.2.4 consumer — its eager assignor is named RoundRobinAssigner — in a mixed
// group with an unmodified 0.8 (zk) member, through the bridge's data path (issue 18 item 3;
// before, the bridge refused it with INCONSISTENT_GROUP_PROTOCOL and a message blaming
// cooperative rebalancing). It is admitted under its own protocol name, gets the 0.8.2 range
// share the zk member computes too, never consumes a partition the zk member owns (the
// members' views), reads every record of its partitions, and takes all of them once the zk
// member leaves. A franz-go default member (cooperative-sticky only) has no protocol in common
// with it and gets INCONSISTENT_GROUP_PROTOCOL, as Kafka answers it.
func TestIntegration_MixedKafkajsDefaultConsumer(t *testing.T) {
	t.Parallel()
	node, env := nodeModule(t, "kafkajs", "2.2.4")
	e := dfStart(t, dfOpts{fromZK: true})
	const g = "kjs"
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if _, _, err := zkstate.InitMode(ctx, e.zk, bridge.DefaultRoot, g, zkstate.ModeMixed, "test", "kafkajs in a mixed group"); err != nil {
		t.Fatal(err)
	}
	v := newViews()

	// The zk member: an unmodified 0.8.2 consumer that only records what it owns.
	zc, err := zkconsumer.New(ctx, zkconsumer.Config{
		Connect: e.connect, GroupID: g, ConsumerID: "z1", Subscription: map[string]int{dfTopic: 1},
		SessionTimeout: 6 * time.Second, RebalanceBackoff: 200 * time.Millisecond, RebalanceMaxRetries: 50,
		Logger: newLogger(t).With().Str("zk_member", "z1").Logger(),
		Handler: zkconsumer.Handler{
			OnAssign: func(offsets map[zkstate.TopicPartition]int64) { v.assign("z1", slices.Collect(maps.Keys(offsets))) },
			OnRevoke: func() { v.revoke("z1", nil) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	zctx, stopZ := context.WithCancel(context.Background())
	zdone := make(chan error, 1)
	go func() { zdone <- zc.Run(zctx) }()
	stopZK := sync.OnceFunc(func() {
		stopZ()
		cctx, c2 := context.WithTimeout(context.Background(), 20*time.Second)
		defer c2()
		_ = zc.Close(cctx)
		<-zdone
	})
	t.Cleanup(stopZK)

	// Uncompressed: kafkajs has no snappy, kgo's default producer compression.
	prod, err := kgo.NewClient(append(dfClientOpts(e.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	all := make([]int32, e.parts)
	for p := range all {
		all[p] = int32(p)
	}
	values := dfProduce(t, prod, "kjs", 60, all)

	// The kafkajs consumer.
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "kafkajs", "consumer.js"), e.addr, g, dfTopic)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		joins  []kafkajsEvent
		seen   = map[string]int32{}
		crashs []string
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev kafkajsEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			if ev.Event != "msg" {
				t.Logf("kafkajs: %s", sc.Text())
			}
			mu.Lock()
			switch ev.Event {
			case "join":
				joins = append(joins, ev)
				v.revoke("kafkajs", nil)
				v.assign("kafkajs", kgoParts(ev.Assignment))
			case "rebalancing":
				v.revoke("kafkajs", nil)
			case "msg":
				seen[ev.Value] = ev.Partition
			case "crash", "fatal":
				crashs = append(crashs, ev.Error)
			}
			mu.Unlock()
		}
	}()
	stopJS := sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-readDone
		_ = cmd.Wait()
	})
	t.Cleanup(stopJS)

	// converged: the owner znodes are the 0.8.2 range over the two consumers, kafkajs's last
	// assignment is its share, and it read every record of it.
	converged := func(consumers int) (bool, string) {
		snap, err := e.zk.Snapshot(ctx, g)
		if err != nil {
			return false, err.Error()
		}
		if len(snap.Consumers) != consumers || len(snap.Owners) != int(e.parts) {
			return false, fmt.Sprintf("%d registrations, %d owners", len(snap.Consumers), len(snap.Owners))
		}
		mu.Lock()
		defer mu.Unlock()
		if len(joins) == 0 {
			return false, "kafkajs has not joined"
		}
		last := joins[len(joins)-1]
		if last.Protocol != "RoundRobinAssigner" {
			return false, "selected protocol " + last.Protocol
		}
		mine := map[int32]bool{}
		for _, p := range last.Assignment[dfTopic] {
			mine[p] = true
		}
		for tp, th := range snap.Owners {
			if isZ := th == g+"_z1-0"; isZ == mine[tp.Partition] {
				return false, fmt.Sprintf("%s-%d owned by %s, kafkajs assigned %v", tp.Topic, tp.Partition, th, last.Assignment)
			}
		}
		for i, val := range values {
			if p := int32(i) % e.parts; mine[p] {
				if _, ok := seen[val]; !ok {
					return false, fmt.Sprintf("kafkajs has not read %s of partition %d", val, p)
				}
			}
		}
		return true, ""
	}
	zktest.Eventually(t, 40*time.Second, "kafkajs and the zk member share the group", func() (bool, string) { return converged(2) })

	// franz-go's default balancer has no protocol in common with RoundRobinAssigner.
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = g, "consumer", 6000, 5000
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{dfTopic}
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "cooperative-sticky", meta.AppendTo(nil)
	join.Protocols = append(join.Protocols, proto)
	cl, err := kgo.NewClient(dfClientOpts(e.addr)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := join.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Errorf("a cooperative-sticky-only joiner of the kafkajs group: error %d, want INCONSISTENT_GROUP_PROTOCOL", resp.ErrorCode)
	}

	// The zk member leaves: kafkajs takes every partition and reads all of them.
	stopZK()
	zktest.Eventually(t, 40*time.Second, "kafkajs alone in the group", func() (bool, string) { return converged(1) })
	stopJS()
	v.check(t)
	mu.Lock()
	defer mu.Unlock()
	for _, c := range crashs {
		t.Errorf("kafkajs crashed: %s", c)
	}
	t.Logf("kafkajs joined %d times, read %d distinct records", len(joins), len(seen))
}
