package zkstate_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// benchLayout is a big group: consumers x 2 threads subscribed to topics x partitions, every
// partition owned (range assignment over the sorted threads) and with an offset.
func benchLayout(consumers, topics, partitions int) zkstate.Layout {
	l := zkstate.Layout{Topics: map[string]zkstate.TopicAssignment{}}
	sub := map[string]int{}
	for i := 0; i < topics; i++ {
		name := fmt.Sprintf("topic-%02d", i)
		a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{}}
		for p := 0; p < partitions; p++ {
			a.Partitions[int32(p)] = []int32{int32(p%3 + 1), int32((p+1)%3 + 1)}
		}
		l.Topics[name] = a
		sub[name] = 2
	}
	g := zkstate.LayoutGroup{Name: "big", Owners: map[zkstate.TopicPartition]string{}, Offsets: map[zkstate.TopicPartition]int64{}}
	var threads []string
	for c := 0; c < consumers; c++ {
		id := fmt.Sprintf("big_host%03d-1700000000000-%08x", c, c)
		g.Consumers = append(g.Consumers, zkstate.LayoutConsumer{ID: id, Registration: zkstate.ConsumerRegistration{
			Version: 1, Pattern: zkstate.PatternStatic, Subscription: sub, TimestampMs: 1700000000000,
		}})
		threads = append(threads, zkstate.ThreadIDs(id, 2)...)
	}
	sort.Strings(threads)
	for name := range l.Topics {
		for p := 0; p < partitions; p++ {
			tp := zkstate.TopicPartition{Topic: name, Partition: int32(p)}
			g.Owners[tp] = threads[p*len(threads)/partitions]
			g.Offsets[tp] = int64(1000 + p)
		}
	}
	l.Groups = []zkstate.LayoutGroup{g}
	return l
}

// BenchmarkSnapshot reads a group of 100 consumers x 2 threads over 10 topics x 100 partitions,
// with owners and offsets for all 1,000 partitions (about 2,100 znodes), from the real
// ZooKeeper: pipelined (the default) and one request at a time for comparison.
func BenchmarkSnapshot(b *testing.B) {
	connect := zktest.Connect(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	loader := zktest.OpenStore(b, connect)
	if err := zkstate.LoadLayout(ctx, loader, benchLayout(100, 10, 100)); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name      string
		pipeline  int
		multiRead bool
	}{{"multiread", zkstate.DefaultPipeline, true}, {"pipelined", zkstate.DefaultPipeline, false}, {"serial", 1, false}} {
		b.Run(bc.name, func(b *testing.B) {
			s := zktest.OpenStore(b, connect, func(c *zkstate.Config) { c.Pipeline = bc.pipeline; c.NoMultiRead = !bc.multiRead })
			var st zkstate.Stats
			for b.Loop() {
				snap, err := s.Snapshot(ctx, "big")
				if err != nil {
					b.Fatal(err)
				}
				if len(snap.Owners) != 1000 || len(snap.Offsets) != 1000 || len(snap.Consumers) != 100 {
					b.Fatalf("snapshot has %d owners, %d offsets, %d consumers; want 1000, 1000, 100",
						len(snap.Owners), len(snap.Offsets), len(snap.Consumers))
				}
				st = snap.Stats
			}
			b.ReportMetric(float64(st.Reads), "znodes/op")
			b.ReportMetric(float64(st.Requests), "requests/op")
			b.ReportMetric(float64(st.Waves), "waves/op")
		})
	}
}
