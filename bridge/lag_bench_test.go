package bridge_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// BenchmarkLagRefresh is the cost of one lag refresh of the daemon (issue 18 item 6) at 1,000
// groups × 100 partitions: 100 topics of 100 partitions on 3 kfake brokers, 10 groups per
// topic, each with a committed offset in /consumers/<g>/offsets for every partition (100,000
// znodes). The bridge refreshes back to back (--lag-interval 1ms); per refresh it reports the
// ZooKeeper requests, the Kafka requests by key as the brokers saw them, and the CPU of this
// process (the bridge and kfake; ZooKeeper runs in its own). Loading the znodes takes a while:
// run it alone, with -benchtime=5x.
func BenchmarkLagRefresh(b *testing.B) {
	setupLagBench(b).run(b)
}

type lagBenchEnv struct {
	counts  *[100]atomic.Int64
	metrics string
}

func setupLagBench(b *testing.B) *lagBenchEnv {
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

	connect := zktest.Connect(b)
	zk := zktest.OpenStore(b, connect)
	ctx := b.Context()
	opt := zkstate.CreateOptions{Parents: true}
	start := time.Now()
	for ti, topic := range names {
		for gi := range groupsPerTopic {
			g := fmt.Sprintf("g%04d", ti*groupsPerTopic+gi)
			ops := make([]zkstate.Op, 0, partitions)
			for p := range partitions {
				ops = append(ops, zkstate.CreateOp(zkstate.OffsetPath(g, topic, int32(p)), zkstate.FormatOffset(0), opt))
			}
			if err := zk.Multi(ctx, ops...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Logf("loaded %d groups × %d partitions in %v", topics*groupsPerTopic, partitions, time.Since(start).Round(time.Second))

	br := startBridgeTB(b, connect, func(c *bridge.Config) {
		c.ProxyListen = "127.0.0.1:0"
		c.Upstream = kf.ListenAddrs()
		c.LagInterval = time.Millisecond
	})
	return &lagBenchEnv{counts: &counts, metrics: "http://" + br.AdminAddr().String() + "/metrics"}
}

func (env *lagBenchEnv) run(b *testing.B) {
	counts := env.counts
	scrape := func() (refreshes, zkReqs int64) {
		resp, err := http.Get(env.metrics)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := regexp.MustCompile(`(?m)^zkbridge_lag_refreshes_total (\d+)`).FindSubmatch(body); m != nil {
			refreshes, _ = strconv.ParseInt(string(m[1]), 10, 64)
		}
		for _, m := range regexp.MustCompile(`(?m)^zkbridge_zk_requests_total\{kind="[a-z_]+"\} (\d+)`).FindAllSubmatch(body, -1) {
			n, _ := strconv.ParseInt(string(m[1]), 10, 64)
			zkReqs += n
		}
		return refreshes, zkReqs
	}
	waitRefreshes := func(n int64) {
		for {
			if r, _ := scrape(); r >= n {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The first refresh warms up (connections, the first Metadata).
	waitRefreshes(1)
	r0, z0 := scrape()
	waitRefreshes(r0 + 1) // a whole refresh from its start
	r0, z0 = scrape()
	lo, md, av := counts[kmsg.ListOffsets].Load(), counts[kmsg.Metadata].Load(), counts[kmsg.ApiVersions].Load()
	cpu0 := cpuTime()
	b.ResetTimer()
	t0 := time.Now()
	waitRefreshes(r0 + int64(b.N))
	wall := time.Since(t0)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	r1, z1 := scrape()
	n := float64(r1 - r0)
	b.ReportMetric(wall.Seconds()*1000/n, "ms/refresh")
	b.ReportMetric(cpu.Seconds()*1000/n, "cpu-ms/refresh")
	b.ReportMetric(float64(z1-z0)/n, "zk-reqs/refresh")
	b.ReportMetric(float64(counts[kmsg.ListOffsets].Load()-lo)/n, "listoffsets/refresh")
	b.ReportMetric(float64(counts[kmsg.Metadata].Load()-md)/n, "metadata/refresh")
	b.ReportMetric(float64(counts[kmsg.ApiVersions].Load()-av)/n, "connections/refresh")
}
