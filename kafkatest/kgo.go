package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// KgoGroupOpts are the kgo options of a consumer-group member as the tests run it: manual
// commits, a 10 s session, a 5 s rebalance and retry timeout, and heartbeats every 200 ms, so
// that a member notices a rebalance within a fraction of a second. Options appended after these
// win (kgo applies them in order).
func KgoGroupOpts(group, topic string, seeds ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(10 * time.Second),
		kgo.RebalanceTimeout(5 * time.Second),
		kgo.HeartbeatInterval(200 * time.Millisecond),
		kgo.RetryTimeout(5 * time.Second),
	}
}

// NewKgo creates a kgo client with opts; t.Cleanup closes it.
func NewKgo(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// KgoMember is a kgo consumer-group member whose partitions of one topic (from
// OnPartitionsAssigned, -Revoked and -Lost) and group-management errors are recorded.
type KgoMember struct {
	*kgo.Client
	topic string

	mu     sync.Mutex
	owned  map[int32]bool
	errors []error
}

type manageErrorHook func(error)

func (h manageErrorHook) OnGroupManageError(err error) { h(err) }

// StartKgo starts a member of group consuming topic from seed (KgoGroupOpts, heartbeating every
// 100 ms); opts go last and win. t.Cleanup closes it.
func StartKgo(t testing.TB, seed, group, topic string, opts ...kgo.Opt) *KgoMember {
	t.Helper()
	m := &KgoMember{topic: topic, owned: map[int32]bool{}}
	update := func(add bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range ps[topic] {
				if add {
					m.owned[p] = true
				} else {
					delete(m.owned, p)
				}
			}
		}
	}
	base := append(KgoGroupOpts(group, topic, seed),
		kgo.HeartbeatInterval(100*time.Millisecond),
		kgo.OnPartitionsAssigned(update(true)),
		kgo.OnPartitionsRevoked(update(false)),
		kgo.OnPartitionsLost(update(false)),
		kgo.WithHooks(manageErrorHook(func(err error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.errors = append(m.errors, err)
		})))
	m.Client = NewKgo(t, append(base, opts...)...)
	return m
}

// Partitions returns the partitions of the topic the member owns now, sorted.
func (m *KgoMember) Partitions() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.owned))
}

// Fenced reports whether kgo's group management failed with FENCED_INSTANCE_ID, and the
// errors it reported.
func (m *KgoMember) Fenced() (bool, []error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, err := range m.errors {
		if errors.Is(err, kerr.FencedInstanceID) {
			return true, slices.Clone(m.errors)
		}
	}
	return false, slices.Clone(m.errors)
}

// PollKgo creates a kgo client with opts and polls its fetches, as an application's loop does,
// until stop or the end of the test; stop also closes the client and may be called more than
// once.
func PollKgo(t testing.TB, opts ...kgo.Opt) (cl *kgo.Client, stop func()) {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
			time.Sleep(20 * time.Millisecond) // a poll that fails returns at once: do not spin
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done; cl.Close() }) }
	t.Cleanup(stop)
	return cl, stop
}

// KgoCommit commits offsets of topic (partition → offset) through cl and returns the request's
// error or the first partition's error code as an error.
func KgoCommit(ctx context.Context, cl *kgo.Client, topic string, offsets map[int32]int64) error {
	eo := map[int32]kgo.EpochOffset{}
	for p, o := range offsets {
		eo[p] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	var commitErr error
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: eo},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			if err != nil {
				return
			}
			for _, tp := range resp.Topics {
				for _, p := range tp.Partitions {
					if p.ErrorCode != 0 && commitErr == nil {
						commitErr = fmt.Errorf("%s/%d: %w", tp.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
					}
				}
			}
		})
	return commitErr
}
