package bridge

// Lag for /metrics, in kafka_exporter's names, so the dashboards and alerts
// operators already have keep working:
//
//	kafka_consumergroup_current_offset{consumergroup,topic,partition}  the committed offset
//	kafka_consumergroup_lag{consumergroup,topic,partition}             log end - committed (>= 0)
//	kafka_topic_partition_current_offset{topic,partition}              the log end offset
//
// Every group ZooKeeper knows (/consumers and <root>/groups) is collected, finalized groups
// included: the committed offsets are what OffsetFetch answers (Bridge.FetchOffsets). The log
// end offsets come from the upstream brokers in one ListOffsets per partition leader for all
// groups' partitions at once. One refresh runs at a time, LagInterval after the previous one
// ended (a slow refresh delays the next, it never piles up), and the series of a group or
// partition that is gone are dropped at the next refresh.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/relay"
	"github.com/zkbridge/zkbridge/zkstate"
)

// DefaultLagInterval is how often lag is collected when an upstream is configured.
const DefaultLagInterval = 30 * time.Second

// lagParallel bounds the groups whose offsets are read at once.
const lagParallel = 16

type lagMetrics struct {
	lag, current, logEnd *prometheus.GaugeVec
	seconds              prometheus.Gauge
	errors, refreshes    prometheus.Counter
}

func newLagMetrics(reg prometheus.Registerer) *lagMetrics {
	labels := []string{"consumergroup", "topic", "partition"}
	m := &lagMetrics{
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kafka_consumergroup_lag",
			Help: "Log end offset minus the group's committed offset, per partition (kafka_exporter's name)."}, labels),
		current: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kafka_consumergroup_current_offset",
			Help: "The group's committed offset, per partition, as OffsetFetch answers it (kafka_exporter's name)."}, labels),
		logEnd: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kafka_topic_partition_current_offset",
			Help: "The partition's log end offset on the upstream brokers (kafka_exporter's name)."}, []string{"topic", "partition"}),
		seconds: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "zkbridge", Subsystem: "lag", Name: "refresh_seconds",
			Help: "How long the last lag refresh took."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "zkbridge", Subsystem: "lag", Name: "refresh_errors_total",
			Help: "Lag refreshes that failed (the series keep their last values)."}),
		refreshes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "zkbridge", Subsystem: "lag", Name: "refreshes_total",
			Help: "Lag refreshes run, failed ones included."}),
	}
	reg.MustRegister(m.lag, m.current, m.logEnd, m.seconds, m.errors, m.refreshes)
	return m
}

// collectLag refreshes the lag series every LagInterval until ctx ends.
func (b *Bridge) collectLag(ctx context.Context, store *zkstate.Store, up *relay.Upstream) {
	m := newLagMetrics(b.reg)
	dial, err := upstreamDialer(b.cfg.UpstreamTLS)
	if err != nil {
		b.log.Warn().Err(err).Msg("lag: no client for the upstream brokers; lag not collected")
		return
	}
	lc := &lagClient{dial: dial}
	defer lc.close()
	for {
		start := time.Now()
		if err := b.refreshLag(ctx, store, up, lc, m); err != nil && ctx.Err() == nil {
			m.errors.Inc()
			b.log.Warn().Err(err).Msg("lag refresh failed")
		}
		m.seconds.Set(time.Since(start).Seconds())
		m.refreshes.Inc()
		select {
		case <-ctx.Done():
			return
		case <-time.After(b.cfg.LagInterval):
		}
	}
}

type lagPoint struct {
	group     string
	topic     string
	partition int32
	offset    int64
}

func (b *Bridge) refreshLag(ctx context.Context, store *zkstate.Store, up *relay.Upstream, lc *lagClient, m *lagMetrics) error {
	names, err := lagGroups(ctx, store, b.cfg.Root)
	if err != nil {
		return err
	}
	var (
		mu     sync.Mutex
		points []lagPoint
	)
	sem := make(chan struct{}, lagParallel)
	var wg sync.WaitGroup
	for _, g := range names {
		if validName("group", g) != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			offs, err := b.FetchOffsets(ctx, g, nil)
			if err != nil {
				return // the group's series keep their values until it reads again
			}
			mu.Lock()
			for _, o := range offs {
				points = append(points, lagPoint{g, o.Topic, o.Partition, o.Offset})
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	cl, err := lc.client(up)
	if err != nil {
		return err
	}
	ends, err := logEnds(ctx, cl, points)
	if err != nil {
		return err
	}
	m.lag.Reset()
	m.current.Reset()
	m.logEnd.Reset()
	for tp, end := range ends {
		m.logEnd.WithLabelValues(tp.Topic, strconv.Itoa(int(tp.Partition))).Set(float64(end))
	}
	for _, p := range points {
		part := strconv.Itoa(int(p.partition))
		m.current.WithLabelValues(p.group, p.topic, part).Set(float64(p.offset))
		if end, ok := ends[zkstate.TopicPartition{Topic: p.topic, Partition: p.partition}]; ok {
			m.lag.WithLabelValues(p.group, p.topic, part).Set(float64(max(end-p.offset, 0)))
		}
	}
	return nil
}

// lagGroups is every group of /consumers and <root>/groups.
func lagGroups(ctx context.Context, store *zkstate.Store, root string) ([]string, error) {
	zkNames, err := store.Groups(ctx)
	if err != nil {
		return nil, fmt.Errorf("lag: list groups: %w", err)
	}
	own, _, err := store.Children(ctx, zkstate.BridgeGroupsPath(root))
	if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
		return nil, fmt.Errorf("lag: list groups: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, g := range append(zkNames, own...) {
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out, nil
}

// lagClient is the collector's client of the upstream brokers, kept from one refresh to the
// next: a client per refresh cost, every time, a connection to each broker with its ApiVersions
// (and SASL) and a Metadata request before the first ListOffsets. It is built again only when
// the upstream's broker set changes.
type lagClient struct {
	dial  func(context.Context, string, string) (net.Conn, error)
	cl    *kgo.Client
	seeds string
}

// client returns the client for the upstream's current brokers.
func (lc *lagClient) client(up *relay.Upstream) (*kgo.Client, error) {
	var seeds []string
	for _, br := range up.Brokers() {
		seeds = append(seeds, net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))))
	}
	if len(seeds) == 0 {
		return nil, errors.New("lag: no upstream broker known yet")
	}
	slices.Sort(seeds)
	key := strings.Join(seeds, ",")
	if lc.cl != nil && lc.seeds == key {
		return lc.cl, nil
	}
	lc.close()
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ClientID("zkbridge-lag")}
	if lc.dial != nil {
		opts = append(opts, kgo.Dialer(lc.dial))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("lag: client: %w", err)
	}
	lc.cl, lc.seeds = cl, key
	return cl, nil
}

func (lc *lagClient) close() {
	if lc.cl != nil {
		lc.cl.Close()
		lc.cl = nil
	}
}

// logEnds asks the upstream brokers for the log end offset of every partition of points, in
// one ListOffsets that kgo splits by partition leader: one request per broker leading any of
// them, from the client's cached metadata while it is fresh.
func logEnds(ctx context.Context, cl *kgo.Client, points []lagPoint) (map[zkstate.TopicPartition]int64, error) {
	ends := map[zkstate.TopicPartition]int64{}
	if len(points) == 0 {
		return ends, nil
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	byTopic := map[string]int{}
	seen := map[zkstate.TopicPartition]bool{}
	for _, p := range points {
		tp := zkstate.TopicPartition{Topic: p.topic, Partition: p.partition}
		if seen[tp] {
			continue
		}
		seen[tp] = true
		i, ok := byTopic[p.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[p.topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = p.topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p.partition, -1, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("lag: list offsets: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				ends[zkstate.TopicPartition{Topic: t.Topic, Partition: p.Partition}] = p.Offset
			}
		}
	}
	return ends, nil
}
