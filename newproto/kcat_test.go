package newproto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// kcat (librdkafka) is a second, independent client: `kcat -L` negotiates
// ApiVersions and asks Metadata for all topics, as a wildcard consumer does.
// Debian's kcat package installs it; CI sets ZKBRIDGE_REQUIRE_ZK=1 and
// installs it, so there a missing kcat fails instead of skipping.
func TestKcatListsMetadata(t *testing.T) {
	kcat := kafkatest.KcatPath(t)

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

// kcat's balanced consumer (-G) is librdkafka's consumer group: it joins
// through our coordinator (ApiVersions, FindCoordinator v2, JoinGroup v5
// with KIP-394's second join, SyncGroup v3 with its range assignment as
// leader, Heartbeat v3, OffsetFetch v7) and then fails to fetch, which is
// fine here. Run once as a dynamic member and once static
// (group.instance.id, KIP-345); each shows up in DescribeGroups with
// librdkafka's client id, and its assignment covers every partition.
func TestKcatJoinsGroup(t *testing.T) {
	kafkatest.KcatPath(t)
	for _, instance := range []string{"", "kcat-1"} {
		t.Run("instance="+instance, func(t *testing.T) {
			ts, fg := kgoGroupServer(t)
			g := "kcat-group" + instance
			var extra []string
			if instance != "" {
				extra = []string{"-X", "group.instance.id=" + instance}
			}
			kafkatest.StartKcat(t, ts.addr, g, kgoTopic, extra...)

			raw := kafkatest.Dial(t, ts.addr)
			zktest.Eventually(t, 20*time.Second, "kcat's member Stable", func() bool {
				d := fg.describe(g)
				return d.State == group.Stable && len(d.Members) == 1
			})
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.SetVersion(5)
			r.Groups = []string{g}
			dg := raw.RoundTrip(r).(*kmsg.DescribeGroupsResponse).Groups[0]
			if dg.ErrorCode != 0 || dg.State != "Stable" || len(dg.Members) != 1 {
				t.Fatalf("DescribeGroups: %s %s with %d members", codeName(dg.ErrorCode), dg.State, len(dg.Members))
			}
			m := dg.Members[0]
			inst := ""
			if m.InstanceID != nil {
				inst = *m.InstanceID
			}
			if m.ClientID != "rdkafka" || m.ClientHost != "/127.0.0.1" || inst != instance {
				t.Errorf("member client %q host %q instance %q, want rdkafka /127.0.0.1 %q", m.ClientID, m.ClientHost, inst, instance)
			}
			var a kmsg.ConsumerMemberAssignment
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				t.Fatalf("assignment %x: %v", m.MemberAssignment, err)
			}
			var parts []int32
			for _, at := range a.Topics {
				if at.Topic == kgoTopic {
					parts = append(parts, at.Partitions...)
				}
			}
			if !coverOnce(6, parts) {
				t.Errorf("assignment %v, want partitions 0-5", parts)
			}
			t.Logf("kcat: member %s protocol %s partitions %v", m.MemberID, dg.Protocol, parts)
		})
	}
}

// kgo and librdkafka in one group on "range" (kgo leads): the assignment
// the leader wrote for both covers every partition once.
func TestKcatAndKgoMixedGroup(t *testing.T) {
	kafkatest.KcatPath(t)
	ts, fg := kgoGroupServer(t)
	const g = "kcat-kgo"
	o := newOwnership()
	newGroupMember(t, ts, o, g, "kgo", kgo.Balancers(kgo.RangeBalancer()))
	zktest.Eventually(t, 10*time.Second, "kgo alone is Stable", func() bool {
		d := fg.describe(g)
		return d.State == group.Stable && len(d.Members) == 1
	})
	kafkatest.StartKcat(t, ts.addr, g, kgoTopic)
	zktest.Eventually(t, 20*time.Second, "kgo and kcat Stable", func() bool {
		d := fg.describe(g)
		return d.State == group.Stable && len(d.Members) == 2
	})
	raw := kafkatest.Dial(t, ts.addr)
	state, assigned, clients := describeAssignments(t, raw, g)
	var lists [][]int32
	var names []string
	for id, ps := range assigned {
		lists = append(lists, ps)
		names = append(names, clients[id])
	}
	sort.Strings(names)
	if state != "Stable" || !coverOnce(6, lists...) || fmt.Sprint(names) != "[kgo-test@/127.0.0.1 rdkafka@/127.0.0.1]" {
		t.Errorf("DescribeGroups: %s %v %v, want Stable, kgo and rdkafka covering 0-5 once", state, names, assigned)
	}
}
