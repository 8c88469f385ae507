package bridge

import (
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
	"github.com/zkbridge/zkbridge/relay"
)

// BenchmarkLagLogEnds is the broker half of a lag refresh at 1,000 groups × 100 partitions
// (100 topics of 100 partitions on 3 kfake brokers, 10 groups per topic: 100,000 points,
// 10,000 distinct partitions), with the collector's client built anew for each refresh (as
// before) or kept (lagClient). Per refresh: the Kafka requests the brokers saw, by key, and
// the connections opened (one ApiVersions each).
func BenchmarkLagLogEnds(b *testing.B) {
	const topics, partitions, groupsPerTopic = 100, 100, 10
	var names []string
	for i := range topics {
		names = append(names, fmt.Sprintf("t%03d", i))
	}
	kf, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(partitions, names...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kf.Close)
	var counts [100]atomic.Int64
	for _, key := range []kmsg.Key{kmsg.ListOffsets, kmsg.Metadata, kmsg.ApiVersions} {
		kf.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
			kf.KeepControl()
			counts[key].Add(1)
			return nil, nil, false
		})
	}
	var brokers []newproto.Broker
	for i, a := range kf.ListenAddrs() {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		brokers = append(brokers, newproto.Broker{NodeID: int32(i), Host: host, Port: int32(p)})
	}
	up, err := relay.NewUpstream(relay.UpstreamConfig{Brokers: brokers})
	if err != nil {
		b.Fatal(err)
	}
	var points []lagPoint
	for ti, t := range names {
		for gi := range groupsPerTopic {
			for p := range partitions {
				points = append(points, lagPoint{group: fmt.Sprintf("g%04d", ti*groupsPerTopic+gi), topic: t, partition: int32(p)})
			}
		}
	}
	for _, reuse := range []bool{false, true} {
		name := "new-client-per-refresh"
		if reuse {
			name = "one-client"
		}
		b.Run(name, func(b *testing.B) {
			lc := &lagClient{}
			defer lc.close()
			refresh := func() {
				if !reuse {
					lc.close()
				}
				cl, err := lc.client(up)
				if err != nil {
					b.Fatal(err)
				}
				ends, err := logEnds(b.Context(), cl, points)
				if err != nil || len(ends) != topics*partitions {
					b.Fatalf("%d log ends, %v", len(ends), err)
				}
			}
			refresh() // warm-up: the kept client's connections and metadata
			lo, md, av := counts[kmsg.ListOffsets].Load(), counts[kmsg.Metadata].Load(), counts[kmsg.ApiVersions].Load()
			b.ResetTimer()
			for range b.N {
				refresh()
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(counts[kmsg.ListOffsets].Load()-lo)/n, "listoffsets/refresh")
			b.ReportMetric(float64(counts[kmsg.Metadata].Load()-md)/n, "metadata/refresh")
			b.ReportMetric(float64(counts[kmsg.ApiVersions].Load()-av)/n, "connections/refresh")
		})
	}
}
