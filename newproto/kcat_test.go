package newproto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/newproto"
)

// kcat (librdkafka) is a second, independent client: `kcat -L` negotiates
// ApiVersions and asks Metadata for all topics, as a wildcard consumer does.
// Debian's kcat package installs it; CI sets ZKBRIDGE_REQUIRE_ZK=1 and
// installs it, so there a missing kcat fails instead of skipping.
func TestKcatListsMetadata(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("ZKBRIDGE_REQUIRE_ZK") == "1" {
			t.Fatalf("kcat not installed (apt-get install -y kcat): %v", err)
		}
		t.Skip("kcat not installed; apt-get install -y kcat")
	}

	// The other brokers point at a loopback port nobody listens on:
	// librdkafka may try to connect to them, and must only find a
	// refusal on this machine.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := int32(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cluster := &fakeCluster{
		brokers: []newproto.Broker{{NodeID: 1, Host: "127.0.0.1", Port: deadPort}, {NodeID: 2, Host: "127.0.0.1", Port: deadPort}},
		topics: map[string][]newproto.Partition{
			"orders":   {{ID: 0, Leader: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}}, {ID: 1, Leader: 2, Replicas: []int32{2, 1}, ISR: []int32{2}}},
			"payments": {{ID: 0, Leader: 2, Replicas: []int32{2}, ISR: []int32{2}}},
		},
	}
	ts := startServer(t, newproto.Config{NodeID: 7, Cluster: cluster})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", ts.addr, "-L", "-J", "-m", "10")
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("kcat -L: %v\n%s\n%s", err, out, stderr)
	}

	var md struct {
		Controller int32 `json:"controllerid"`
		Brokers    []struct {
			ID   int32  `json:"id"`
			Name string `json:"name"`
		} `json:"brokers"`
		Topics []struct {
			Topic      string `json:"topic"`
			Partitions []struct {
				Partition int32 `json:"partition"`
				Leader    int32 `json:"leader"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	if err := json.Unmarshal(out, &md); err != nil {
		t.Fatalf("kcat output: %v\n%s", err, out)
	}
	var brokers []string
	for _, b := range md.Brokers {
		brokers = append(brokers, fmt.Sprintf("%d=%s", b.ID, b.Name))
	}
	sort.Strings(brokers)
	dead := fmt.Sprintf("127.0.0.1:%d", deadPort)
	want := []string{"1=" + dead, "2=" + dead, "7=" + ts.addr}
	if fmt.Sprint(brokers) != fmt.Sprint(want) {
		t.Errorf("brokers %v, want %v", brokers, want)
	}
	if md.Controller != 1 {
		t.Errorf("controller %d, want 1", md.Controller)
	}
	topics := map[string]int{}
	for _, tp := range md.Topics {
		topics[tp.Topic] = len(tp.Partitions)
	}
	if topics["orders"] != 2 || topics["payments"] != 1 || len(topics) != 2 {
		t.Errorf("topics %v, want orders:2 payments:1", topics)
	}
}
