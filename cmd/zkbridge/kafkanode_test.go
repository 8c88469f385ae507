package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// kafkaNode returns node and the environment that lets it load kafka-node 3.0.1: from
// ZKBRIDGE_NODE_PATH, else from the cache directory .ci/run installs it in
// (<user cache dir>/zkbridge-node/node_modules). Without them the test is skipped, or fails
// when ZKBRIDGE_REQUIRE_ZK=1 (CI must run it).
func kafkaNode(t *testing.T) (node string, env []string) {
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
	check := exec.Command(node, "-e", `if (require("kafka-node/package.json").version !== "3.0.1") process.exit(3)`)
	check.Env = append(os.Environ(), env...)
	if err := check.Run(); err != nil {
		missing("kafka-node 3.0.1 is not in %s (npm install --prefix %s kafka-node@3.0.1): %v", dir, filepath.Dir(dir), err)
	}
	return node, env
}

// A real kafka-node 3.0.1 HighLevelConsumer joins a group through ZooKeeper, with a stand-in
// broker registered in /brokers/ids as Kafka registers one. It writes its registration in two
// steps and its owner znodes with its bare consumer id (lib/zookeeper.js): every snapshot taken
// meanwhile reads it without a problem, and once it owns its partitions `groups describe` shows
// them as its own and the migrate census counts it as a zk member.
func TestIntegration_KafkaNodeHighLevelConsumer(t *testing.T) {
	node, env := kafkaNode(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	zkc := zktest.Connect(t)
	s := openTestStore(t, zkc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	addr := kf.ListenAddrs()[0]
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portText)
	broker := zkstate.BrokerRegistration{ID: 0, Version: 4, Host: host, Port: int32(port), JMXPort: -1, Timestamp: "1764763200000",
		Endpoints: []string{"PLAINTEXT://" + addr}, ListenerSecurityProtocolMap: map[string]string{"PLAINTEXT": "PLAINTEXT"}}
	topic := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{0: {0}, 1: {0}, 2: {0}, 3: {0}}}
	p := zkstate.CreateOptions{Parents: true}
	// /consumers too, as a Kafka broker creates it when it starts (ZkUtils.setupCommonPaths):
	// kafka-node creates /consumers/<g> but not its parent.
	if err := s.Multi(ctx, zkstate.CreateOp(zkstate.BrokerPath(0), broker.Encode(), p), zkstate.CreateOp(zkstate.TopicPath("orders"), topic.Encode(), p),
		zkstate.CreateOp(zkstate.ConsumersPath, nil, p)); err != nil {
		t.Fatal(err)
	}

	const g = "kn"
	cmd := exec.Command(node, filepath.Join("testdata", "kafkanode", "hlc.js"), zkc, g, "orders")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close() // it closes its consumer and exits
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("kafka-node stderr:\n%s", stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	id, ok := strings.CutPrefix(strings.TrimSpace(line), "id ")
	if err != nil || !ok {
		t.Fatalf("kafka-node did not say its id: %q, %v\n%s", line, err, stderr.String())
	}

	registering := false
	for {
		snap, err := s.Snapshot(ctx, g)
		switch {
		case errors.Is(err, zkstate.ErrNoNode):
		case err != nil:
			t.Fatal(err)
		case len(snap.Problems) > 0:
			t.Fatalf("snapshot while kafka-node joins: problems %v (consumers %+v, owners %v)", snap.Problems, snap.Consumers, snap.Owners)
		default:
			registering = registering || snap.Consumers[id].Registering
			owned := 0
			for _, thread := range snap.Owners {
				if cid, _, err := snap.OwnerOf(thread); err == nil && cid == id {
					owned++
				}
			}
			if owned == 4 {
				t.Logf("kafka-node %s owns its 4 partitions (seen registering: %v)", id, registering)
				goto owned
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafka-node never owned its partitions: %v", ctx.Err())
		case err := <-exited:
			t.Fatalf("kafka-node exited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
owned:
	r := runCLI(t, "groups", "describe", g, "--zk", zkc, "--output", "json")
	if r.code != exitOK {
		t.Fatalf("describe: exit %d: %s", r.code, r.stderr)
	}
	var v groupView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Members) != 1 || v.Members[0].ID != id || v.Members[0].Kind != kindZK || len(v.Members[0].Owned) != 4 ||
		len(v.StaleOwners) != 0 || len(v.Problems) != 0 || len(v.Unowned) != 0 {
		t.Errorf("describe of a kafka-node group:\n%s", r.stdout)
	}
	c, err := migrate.ReadCensus(ctx, s, testRoot, g, migrate.CensusOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Count(zkstate.KindZK) != 1 || len(c.Problems) != 0 {
		t.Errorf("census: %+v", c)
	}
}
