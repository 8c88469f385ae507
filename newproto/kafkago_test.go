package newproto_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// segmentio/kafka-go's ConsumerGroup is an older client than kgo: it
// speaks FindCoordinator v0, JoinGroup v1 or v2, SyncGroup v0, Heartbeat
// v0, OffsetFetch v1, OffsetCommit v2 (with a retention time) and
// LeaveGroup v0, and its consumer-protocol member metadata says version 1
// but leaves out the owned partitions that version 1 has.

// startKafkaGoMember runs one kafka-go ConsumerGroup of groupName on kgoTopic.
func startKafkaGoMember(t *testing.T, addr, groupName string) *kafkatest.KafkaGoMember {
	t.Helper()
	return kafkatest.StartKafkaGo(t, kafkatest.KafkaGoGroupConfig(groupName, kgoTopic, addr))
}

// coverOnce reports whether the partition lists hold 0..n-1 exactly once,
// none empty.
func coverOnce(n int32, lists ...[]int32) bool {
	seen := map[int32]int{}
	for _, l := range lists {
		if len(l) == 0 {
			return false
		}
		for _, p := range l {
			seen[p]++
		}
	}
	if len(seen) != int(n) {
		return false
	}
	for p := range n {
		if seen[p] != 1 {
			return false
		}
	}
	return true
}

// Two kafka-go members form a Stable group covering every partition once
// (kafka-go's leader runs its range assignor); a commit through the
// Generation is read back with OffsetFetch.
func TestKafkaGoConsumerGroup(t *testing.T) {
	ts, fg := kgoGroupServer(t)
	const g = "kafkago-group"
	a := startKafkaGoMember(t, ts.addr, g)
	b := startKafkaGoMember(t, ts.addr, g)

	zktest.Eventually(t, 20*time.Second, "2 kafka-go members cover 6 partitions", func() bool {
		_, ga, _, pa := a.Current(kgoTopic)
		_, gb, _, pb := b.Current(kgoTopic)
		d := fg.describe(g)
		return d.State == group.Stable && len(d.Members) == 2 && ga == gb && ga == int32(d.Generation) && coverOnce(6, pa, pb)
	})
	gen, _, idA, pa := a.Current(kgoTopic)
	_, _, _, pb := b.Current(kgoTopic)
	t.Logf("a %v b %v", pa, pb)

	if err := gen.CommitOffsets(map[string]map[int]int64{kgoTopic: {int(pa[0]): 77}}); err != nil {
		t.Fatalf("Generation.CommitOffsets: %v", err)
	}
	raw := kafkatest.Dial(t, ts.addr)
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.SetVersion(1)
	fetch.Group = g
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = kgoTopic, []int32{pa[0]}
	fetch.Topics = append(fetch.Topics, ft)
	got := flattenFetch(raw.RoundTrip(fetch).(*kmsg.OffsetFetchResponse))
	if want := []fetched{{kgoTopic, pa[0], 77, -1, "", 0}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OffsetFetch after kafka-go's commit: %v, want %v", got, want)
	}
	if d := fg.describe(g); d.Members[0].ClientHost != "/127.0.0.1" || (d.Members[0].MemberID != group.MemberID(idA) && d.Members[1].MemberID != group.MemberID(idA)) {
		t.Errorf("described members %+v", d.Members)
	}
}

// kgo and kafka-go in one group, agreeing on "range", whichever joins
// first: the assignment covers every partition once, with kgo leading in
// the end. kgo's leader decodes kafka-go's member metadata (version 1
// without owned partitions) fine. kafka-go's leader cannot decode kgo's
// (version 3: owned partitions, generation, rack): it reports "unable to
// read metadata for member", leaves the group and joins again with a new
// member id, and kgo, now the only member that rejoined, leads. So a mixed
// group converges, one extra rebalance later.
func TestKgoAndKafkaGoMixedGroup(t *testing.T) {
	for _, kgoLeads := range []bool{true, false} {
		t.Run(fmt.Sprintf("kgo leads %v", kgoLeads), func(t *testing.T) {
			ts, fg := kgoGroupServer(t)
			g := fmt.Sprintf("mixed-%v", kgoLeads)
			o := newOwnership()
			var kg *kafkatest.KafkaGoMember
			startKgo := func() {
				newGroupMember(t, ts, o, g, "kgo", kgo.Balancers(kgo.RangeBalancer()))
			}
			first := func() bool { d := fg.describe(g); return d.State == group.Stable && len(d.Members) == 1 }
			if kgoLeads {
				startKgo()
				zktest.Eventually(t, 10*time.Second, "kgo alone is Stable", first)
				kg = startKafkaGoMember(t, ts.addr, g)
			} else {
				kg = startKafkaGoMember(t, ts.addr, g)
				zktest.Eventually(t, 10*time.Second, "kafka-go alone is Stable", first)
				startKgo()
			}
			zktest.Eventually(t, 20*time.Second, "kgo and kafka-go cover 6 partitions", func() bool {
				_, gen, _, ps := kg.Current(kgoTopic)
				d := fg.describe(g)
				return d.State == group.Stable && len(d.Members) == 2 && gen == int32(d.Generation) && coverOnce(6, ps, o.of("kgo"))
			})
			d := fg.describe(g)
			if d.ProtocolName != "range" || !strings.HasPrefix(string(d.Leader), "kgo-test-") {
				t.Errorf("protocol %q leader %q, want range and kgo", d.ProtocolName, d.Leader)
			}
			_, _, _, ps := kg.Current(kgoTopic)
			t.Logf("leader %s: kgo %v kafka-go %v", d.Leader, o.of("kgo"), ps)
		})
	}
}
