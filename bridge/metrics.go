package bridge

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/zkstate"
)

// metrics are the bridge's own Prometheus metrics, on the registry the Bridge owns (never the
// global one). The Kafka listener registers its metrics (zkbridge_kafka_*) on the same registry.
type metrics struct {
	groupsLoaded prometheus.Gauge
	events       *prometheus.CounterVec // event
	writes       *prometheus.CounterVec // result: ok, fenced, error
	writeSeconds prometheus.Histogram
	offsets      prometheus.Counter
	generations  prometheus.Counter
	fenced       prometheus.Counter
	mirrorErrors prometheus.Counter
	zkConnected  prometheus.Gauge
	// registrationDeleted counts deletions of our registration by another client (register_own.go).
	registrationDeleted prometheus.Counter

	// Group modes (modes.go).
	groupModes   *prometheus.GaugeVec   // mode: groups this bridge knows in each mode
	modeRefusals *prometheus.CounterVec // request: kafka_join, legacy_register
	foreignZK    *prometheus.GaugeVec   // group: zk members of a kafka or finalized group

	// Mixed groups (mixed.go).
	mixedClaimSeconds prometheus.Histogram
	mixedRebalances   *prometheus.CounterVec // cause
	mixedCrashUnsafe  *prometheus.GaugeVec   // group

	members    *prometheus.GaugeVec   // group, kind
	rebalances *prometheus.CounterVec // cause

	// Limits (limits.go).
	limitRefusals *prometheus.CounterVec // limit
	topicCheck    prometheus.Gauge

	// parkedSeconds: requests kept for a group moving here from a bridge that looks dead
	// (park.go), by outcome.
	parkedSeconds *prometheus.HistogramVec // outcome: served, refused
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		groupsLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "loaded",
			Help: "Groups loaded in this bridge (one actor each).",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "requests_total",
			Help: "Group requests stepped into the group engine, by event.",
		}, []string{"event"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "writes_total",
			Help: "Fenced ZooKeeper writes of group state and offsets, by result (ok, fenced: another bridge took the group over, error: ZooKeeper failed past the write timeout).",
		}, []string{"result"}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "write_seconds",
			Help:    "Duration of group writes to ZooKeeper, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		offsets: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "offsets_committed_total",
			Help: "Partition offsets committed to ZooKeeper.",
		}),
		generations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "stable_generations_total",
			Help: "Generations that became Stable (or were loaded Stable).",
		}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "fenced_total",
			Help: "Groups this bridge stopped serving because a write was lost or the ZooKeeper session was.",
		}),
		mirrorErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "mirror", Name: "errors_total",
			Help: "Kafka 0.8 ownership znodes (ids, owners) that could not be written or removed (retried).",
		}),
		zkConnected: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "zookeeper", Name: "connected",
			Help: "1 while the bridge has a ZooKeeper session, else 0.",
		}),
		registrationDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "bridges", Name: "registration_deleted_total",
			Help: "Times another ZooKeeper client deleted this bridge's registration (<root>/bridges/<node-id>) while its session lived: every group was fenced and the registration made again. Should be 0.",
		}),
		groupModes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "by_mode",
			Help: "Groups with a mode record, by mode (legacy, mixed, kafka, finalized), as this bridge last saw them.",
		}, []string{"mode"}),
		modeRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "mode_refusals_total",
			Help: "Requests refused because of the group's mode: kafka_join (a Kafka JoinGroup in a legacy group), kafka_join_mixed (a Kafka member of a mixed group without an eager consumer assignor), kafka_join_mixed_session (a Kafka member of a mixed group whose session timeout could outlive a crash of the bridge, with --mixed-session-check=refuse), legacy_register (a legacy Register in a kafka or finalized group), offset_commit_unchecked (an OffsetCommit v0, or v1 without a member, to a finalized group).",
		}, []string{"request"}),
		foreignZK: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "group", Name: "foreign_zk_members",
			Help: "ZooKeeper (0.8) consumers registered in /consumers/<g>/ids of a kafka or finalized group that no running bridge holds: the bridge cannot stop them.",
		}, []string{"group"}),
		parkedSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "parked_seconds",
			Help:    "Group requests kept while the group's owner looked dead and the group was moving to this bridge: the time until the group was ours (outcome served: the request went on to the group) or until the request was answered NOT_COORDINATOR (refused: the owner came back, the wait's bound passed, the bridge stopped or the client went).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 11),
		}, []string{"outcome"}),
		mixedClaimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "zkbridge", Subsystem: "mixed", Name: "claim_seconds",
			Help:    "Mixed groups: time from a generation's join barrier to its Kafka members' owner znodes claimed (waiting for zk and legacy members to release them included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		mixedCrashUnsafe: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "mixed", Name: "crash_unsafe_members",
			Help: "Kafka members of a mixed group whose session timeout is not below the bridge's ZooKeeper session timeout: if this bridge crashed, zk and legacy members could take their partitions (when its session expires) while they still consume them (until they give up on their coordinator, their session timeout by default for franz-go and librdkafka).",
		}, []string{"group"}),
		mixedRebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "mixed", Name: "rebalances_total",
			Help: "Rebalances of mixed groups' Kafka members started by the bridge, by cause: other_members_or_topics (a zk or legacy member came or went, a topic's partitions changed), assignor_changed (the group became mixed, or this bridge took it over).",
		}, []string{"cause"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "group", Name: "members",
			Help: "Members of a group by kind: kafka (served by this bridge's engine), and, in mixed groups, legacy and zk as registered in /consumers/<g>/ids (legacy: a bridge's hosted member; zk: a 0.8 consumer).",
		}, []string{"group", "kind"}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "groups", Name: "rebalances_total",
			Help: "Rebalances the group engine started, by cause: member_join, member_rejoin (new metadata, a rejoining leader or static member), member_leave (LeaveGroup or session timeout), sync_timeout, other_kinds (a mixed group's zk or legacy members or topics changed), assignor_changed (the group became mixed), restore, other.",
		}, []string{"cause"}),
		limitRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "limits", Name: "refusals_total",
			Help: "Requests (for commits: partitions) refused by a limit, by limit: unknown_topic_or_partition (a commit for a topic or partition /brokers/topics does not list), negative_offset (a commit of an offset below -1), commit_partitions (a commit of more than --max-commit-partitions partitions), groups (a new group past --max-groups).",
		}, []string{"limit"}),
		topicCheck: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "limits", Name: "topic_check",
			Help: "1 while commits are checked against /brokers/topics; 0 while ZooKeeper has no /brokers/topics (no Kafka cluster registered) and offsets of any topic are accepted.",
		}),
	}
	m.topicCheck.Set(1)
	m.exportZeros()
	if err := m.register(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// exportZeros creates every labelled series a dashboard expects, so that they read 0 rather than
// missing until the first event.
func (m *metrics) exportZeros() {
	for _, l := range []string{limitUnknownTopic, limitNegativeOffset, limitCommitPartitions, limitGroups} {
		m.limitRefusals.WithLabelValues(l)
	}
	for _, c := range []string{"member_join", "member_rejoin", "member_leave", "sync_timeout", "other_kinds", "assignor_changed", "restore", "other"} {
		m.rebalances.WithLabelValues(c)
	}
	for _, ev := range []string{"join", "sync", "heartbeat", "heartbeat_release", "leave", "offset_commit", "describe", "delete"} {
		m.events.WithLabelValues(ev) // export zeros
	}
	for _, r := range []string{"ok", "fenced", "error"} {
		m.writes.WithLabelValues(r)
	}
	for _, mode := range []string{"legacy", "mixed", "kafka", "finalized"} {
		m.groupModes.WithLabelValues(mode)
	}
	for _, r := range []string{"kafka_join", "kafka_join_mixed", "kafka_join_mixed_session", "legacy_register", "offset_commit_unchecked"} {
		m.modeRefusals.WithLabelValues(r)
	}
}

// register registers every collector, the Go runtime's and the process's included.
func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		m.groupsLoaded, m.events, m.writes, m.writeSeconds, m.offsets, m.generations, m.fenced, m.mirrorErrors, m.zkConnected, m.registrationDeleted,
		m.groupModes, m.modeRefusals, m.foreignZK, // group modes (modes.go)
		m.mixedClaimSeconds, m.mixedRebalances, m.mixedCrashUnsafe, // mixed groups (mixed.go)
		m.members, m.rebalances,
		m.limitRefusals, m.topicCheck, // limits.go
		m.parkedSeconds, // park.go
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("bridge: registering metrics: %w", err)
		}
	}
	return nil
}

// event counts one request by its event type.
func (m *metrics) event(ev group.Event) {
	var name string
	switch ev.(type) {
	case group.JoinGroup:
		name = "join"
	case group.SyncGroup:
		name = "sync"
	case group.Heartbeat:
		name = "heartbeat"
	case group.ReleaseHeartbeat:
		name = "heartbeat_release" // a held heartbeat answered by the shell (heartbeat_hold.go)
	case group.LeaveGroup:
		name = "leave"
	case group.OffsetCommit:
		name = "offset_commit"
	case group.Describe:
		name = "describe"
	case group.Delete:
		name = "delete"
	default:
		return
	}
	m.events.WithLabelValues(name).Inc()
}

// zkRequests exports the Store's request counters (zkstate.Store.Requests) as
// zkbridge_zk_requests_total{kind}: what the bridge costs the ZooKeeper ensemble it shares
// with the brokers and every 0.8 consumer, by kind of request.
type zkRequests struct {
	store *zkstate.Store
	desc  *prometheus.Desc
}

func newZKRequests(store *zkstate.Store) *zkRequests {
	return &zkRequests{store: store, desc: prometheus.NewDesc("zkbridge_zk_requests_total",
		"ZooKeeper requests sent by the bridge's session, by kind (get, children, exists, create, set, delete, multi, multiread: one per request, whatever the number of reads it carries); pings not counted.",
		[]string{"kind"}, nil)}
}

func (z *zkRequests) Describe(ch chan<- *prometheus.Desc) { ch <- z.desc }

func (z *zkRequests) Collect(ch chan<- prometheus.Metric) {
	counts := z.store.Requests()
	for _, k := range zkstate.RequestKinds {
		ch <- prometheus.MustNewConstMetric(z.desc, prometheus.CounterValue, float64(counts[k]), k)
	}
}
