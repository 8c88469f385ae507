package bridge_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// On a cluster whose topics carry ids (Kafka 2.8+ in ZooKeeper mode writes them to
// /brokers/topics/<t>, KIP-516) the bridge hands them out in Metadata and serves OffsetFetch
// v10, which names topics by id: franz-go's consumer then reads its committed offsets with no
// Metadata request per OffsetFetch (issue 3: against a ZooKeeper-era cluster each of 1,000
// members asked for the topic once more). The committed offset comes back by id, and a request
// by name from kgo's admin path (which fills the ids from Metadata) too.
func TestIntegration_TopicIDsOffsetFetchV10(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	loadTopicsWithIDs(t, zk, map[string]int32{"orders": 4})
	id := zkstate.LayoutTopicID("orders")
	b := startBridge(t, connect, clientsNode, nil)
	const g = "ids"
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	// A commit to the empty group (generation -1), through the wire: the group is a kafka
	// group from then on, and orders/2 is at 41 in the 0.8 znode.
	creq := wireCommit(g, "", -1, "orders", 2, 41)
	cresp, err := creq.RequestWith(reqCtx, cl)
	if err != nil || len(cresp.Topics) != 1 || cresp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("OffsetCommit: %+v, %v", cresp, err)
	}
	if d, _, err := zk.Get(ctx, zkstate.OffsetPath(g, "orders", 2)); err != nil || string(d) != "41" {
		t.Fatalf("0.8 offset znode: %q %v", d, err)
	}

	// ApiVersions: OffsetFetch up to v10, since every topic has an id.
	av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(reqCtx, cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range av.ApiKeys {
		if k.ApiKey == int16(kmsg.OffsetFetch) && k.MaxVersion != 10 {
			t.Errorf("OffsetFetch advertised up to v%d, want v10", k.MaxVersion)
		}
	}
	// Metadata: the znode's id.
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("orders")
	mreq.Topics = append(mreq.Topics, mt)
	meta, err := mreq.RequestWith(reqCtx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].TopicID != id {
		t.Fatalf("Metadata topics %+v, want orders with id %x", meta.Topics, id)
	}
	// OffsetFetch v10 by id.
	freq := kmsg.NewPtrOffsetFetchRequest()
	freq.SetVersion(10)
	fg := kmsg.NewOffsetFetchRequestGroup()
	fg.Group = g
	ft := kmsg.NewOffsetFetchRequestGroupTopic()
	ft.TopicID, ft.Partitions = id, []int32{2, 3}
	fg.Topics = append(fg.Topics, ft)
	freq.Groups = append(freq.Groups, fg)
	resp, err := freq.RequestWith(reqCtx, cl)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]int64{}
	for _, rg := range resp.Groups {
		for _, rt := range rg.Topics {
			for _, p := range rt.Partitions {
				if rt.TopicID != id || p.ErrorCode != 0 {
					t.Errorf("v10 answer: topic id %x, partition %d, error %d", rt.TopicID, p.Partition, p.ErrorCode)
				}
				got[p.Partition] = p.Offset
			}
		}
	}
	if got[2] != 41 || got[3] != -1 {
		t.Errorf("OffsetFetch v10 by id: %v, want 2→41 and 3→-1", got)
	}

	// By name, as admin tools ask (kgo fills the id from Metadata and sends v10), with the
	// answer named again.
	nreq := kmsg.NewPtrOffsetFetchRequest()
	ng := kmsg.NewOffsetFetchRequestGroup()
	ng.Group = g
	nt := kmsg.NewOffsetFetchRequestGroupTopic()
	nt.Topic, nt.Partitions = "orders", []int32{2}
	ng.Topics = append(ng.Topics, nt)
	nreq.Groups = append(nreq.Groups, ng)
	nresp, err := nreq.RequestWith(reqCtx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(nresp.Groups) != 1 || len(nresp.Groups[0].Topics) != 1 || nresp.Groups[0].Topics[0].Topic != "orders" ||
		nresp.Groups[0].Topics[0].Partitions[0].Offset != 41 {
		t.Errorf("OffsetFetch by name (v%d): %+v, want orders/2 at 41", nresp.Version, nresp.Groups)
	}

	// A kgo consumer of the group gets its assignment and reads its offsets with v10.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()), kgo.ConsumerGroup(g), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.HeartbeatInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for pctx.Err() == nil {
			consumer.PollFetches(pctx)
		}
	}()
	v10 := regexp.MustCompile(`(?m)^zkbridge_kafka_requests_total\{api="OffsetFetch",api_key="9",api_version="10"\} (\d+)$`)
	zktest.Eventually(t, 20*time.Second, "the consumer's OffsetFetch v10", func() (bool, string) {
		_, body := httpGet(t, "http://"+b.AdminAddr().String()+"/metrics")
		m := v10.FindStringSubmatch(body)
		if m == nil {
			return false, "no OffsetFetch v10 counted yet"
		}
		n, _ := strconv.Atoi(m[1])
		return n >= 3, fmt.Sprintf("%d OffsetFetch v10 requests (the test's own are two); %v", n, regexp.MustCompile(`(?m)^zkbridge_kafka_requests_total\{api="(OffsetFetch|JoinGroup|SyncGroup)".*$`).FindAllString(body, -1))
	})
}
