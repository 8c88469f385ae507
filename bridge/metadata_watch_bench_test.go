package bridge_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// watchMetadata, with ZKBRIDGE_BENCH_METADATA_WATCH=<file> (diagnosis), asks each of addrs for
// Metadata every 50 ms, one request at a time on a connection of its own, from killed for 10 s,
// and writes each answer there: when it was asked (ms after killed), how long it took, the brokers
// it names (id@port) and every partition that has an error or no leader. It shows what a client
// refreshing at a survivor is told, and how long it waits, while a crash failover runs.
func watchMetadata(b *testing.B, addrs []string, killed time.Time) {
	out := os.Getenv("ZKBRIDGE_BENCH_METADATA_WATCH")
	if out == "" {
		return
	}
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for _, addr := range addrs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			defer cl.Close()
			seed := cl.SeedBrokers()[0]
			for time.Since(killed) < 10*time.Second {
				asked := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, seed)
				cancel()
				line := fmt.Sprintf("%s asked %d took %d", addr, asked.Sub(killed).Milliseconds(), time.Since(asked).Milliseconds())
				if err != nil {
					line += " err " + err.Error()
				} else {
					var brokers, bad []string
					for _, br := range resp.Brokers {
						brokers = append(brokers, fmt.Sprintf("%d@%d", br.NodeID, br.Port))
					}
					slices.Sort(brokers)
					for _, t := range resp.Topics {
						for _, p := range t.Partitions {
							if p.ErrorCode != 0 || p.Leader < 0 {
								bad = append(bad, fmt.Sprintf("p%d:leader%d:err%d", p.Partition, p.Leader, p.ErrorCode))
							}
						}
					}
					line += " brokers " + strings.Join(brokers, ",") + " bad " + strings.Join(bad, ",")
				}
				mu.Lock()
				lines = append(lines, line)
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	b.Cleanup(func() {
		wg.Wait()
		_ = os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	})
}
