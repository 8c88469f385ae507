package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/newproto"
)

// serveCommand runs the bridge daemon until SIGINT or SIGTERM (main's signal.NotifyContext
// cancels c.Context): then it stops accepting, answers what is in flight, drains the Kafka
// connections and closes the ZooKeeper session, and exits 0.
func serveCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the bridge: the Kafka group coordinator for unmodified Kafka clients, with state in ZooKeeper",
		Description: "Serves the Kafka group APIs on --kafka-listen, keeps every group's state under --root in\n" +
			"ZooKeeper (a restarted bridge carries on without a rebalance), and mirrors offsets and\n" +
			"ownership into /consumers/<group> in the Kafka 0.8 layout. /metrics, /healthz, /readyz and\n" +
			"/bridges (the live bridges as this one sees them) are served on --admin-listen. Legacy (seed 001) consumers Consult and Register on\n" +
			"--legacy-listen. With --upstream or --upstream-from-zk the bridge also relays every other\n" +
			"Kafka request to the real brokers (one proxy listener per broker, see --proxy-listen), so\n" +
			"clients need bootstrap.servers=<bridge> only; without either it relays to the brokers\n" +
			"registered in /brokers/ids when there are any at start (--group-only: never, for tests\n" +
			"and demos; clients may then bypass the bridge). SIGTERM shuts down cleanly.",
		Flags: serveFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := serveConfig(c, e)
			if err != nil {
				return err
			}
			b, err := bridge.New(cfg)
			if err != nil {
				return usageError{err.Error()}
			}
			if err := b.Run(c.Context); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
}

func serveFlags() []cli.Flag {
	return append(append(zkFlags(),
		&cli.StringFlag{Name: "kafka-listen", Value: bridge.DefaultKafkaListen, EnvVars: []string{"ZKBRIDGE_KAFKA_LISTEN"},
			Usage: "address of the Kafka listener, host:port"},
		&cli.StringFlag{Name: "advertised-addr", EnvVars: []string{"ZKBRIDGE_ADVERTISED_ADDR"},
			Usage: "host:port clients are told to connect to (default: the Kafka listener's address, or the address each client dialed when it listens on all interfaces)"},
		&cli.IntFlag{Name: "node-id", Value: int(bridge.DefaultNodeID), EnvVars: []string{"ZKBRIDGE_NODE_ID"},
			Usage: "broker id of the bridge in Metadata and FindCoordinator; must not be a real broker's id (9000 stays clear of Kafka's usual ids), and must differ between bridges sharing a ZooKeeper"},
		&cli.StringFlag{Name: "legacy-listen", Value: bridge.DefaultLegacyListen, EnvVars: []string{"ZKBRIDGE_LEGACY_LISTEN"},
			Usage: "address of the legacy (seed 001) coordinator listener, host:port; empty to serve no legacy consumers"},
		&cli.StringFlag{Name: "admin-listen", Value: bridge.DefaultAdminListen, EnvVars: []string{"ZKBRIDGE_ADMIN_LISTEN"},
			Usage: "address of the admin HTTP listener (/metrics, /healthz, /readyz, /bridges)"},
		&cli.StringFlag{Name: "root", Value: bridge.DefaultRoot, EnvVars: []string{"ZKBRIDGE_ROOT"},
			Usage: "ZooKeeper path of the bridge's own state"},
		&cli.DurationFlag{Name: "zk-session-timeout", Value: bridge.DefaultZKSessionTimeout,
			Usage: "ZooKeeper session timeout; losing ZooKeeper for longer stops serving every group until it is back. A crashed, hung or paused bridge's zk and legacy members take over when this expires. With the data path (--upstream, --upstream-from-zk) its Kafka members fetch through it and get nothing more: while a mixed group's Kafka members hold partitions, the bridge withholds relayed fetches as long as no ZooKeeper reply vouches for its session (within nine tenths of this timeout) and, after losing it, until its mixed groups claim again. Without the data path keep it above the Kafka members' session.timeout.ms: they may consume until theirs expires (zkbridge_mixed_crash_unsafe_members counts those that could; --mixed-session-check=refuse turns them away). ZooKeeper clamps it to its maxSessionTimeout (20 ticks, 40s by default); the bridge logs the timeout it was granted"},
		&cli.StringFlag{Name: "mixed-session-check", Value: string(bridge.SessionCheckWarn), EnvVars: []string{"ZKBRIDGE_MIXED_SESSION_CHECK"},
			Usage: "what a mixed group does with a Kafka member whose session.timeout.ms is not below the ZooKeeper session timeout the server granted the bridge (such a member could go on consuming after a bridge crash while zk and legacy members take its partitions; without the data path only, since with it the member fetches through the bridge): warn admits it and counts it in zkbridge_mixed_crash_unsafe_members, refuse answers its JoinGroup INVALID_SESSION_TIMEOUT. The same goes for a legacy consumer of any group whose (max_ping_retries + 1) × ping_interval, the silence after which it stops, is not below that timeout (legacy consumers fetch from the brokers themselves): warn counts it in zkbridge_legacy_crash_unsafe_registrations_total, refuse answers INVALID_PING_SETTINGS"},
		&cli.DurationFlag{Name: "heartbeat-hold", EnvVars: []string{"ZKBRIDGE_HEARTBEAT_HOLD"},
			Usage: "let a Stable Kafka member's heartbeat wait for its group to rebalance, so members rejoin at once instead of at their next heartbeat (a rebalance then waits for no heartbeat interval: faster migrations, and mixed groups at least as fast as 0.8 consumers). A held heartbeat is answered when the group rebalances, when its connection sends another request, or at the latest at the group's next multiple of this duration (the holds of a group end together). It helps clients whose heartbeat.interval.ms is well below it. Keep it below every client's request timeout (kafka-go: 5s) and a third of its session.timeout.ms; 0 answers at once, as Kafka does"},
		// The data path: with an upstream, clients need only the bridge's address.
		&cli.StringFlag{Name: "upstream", EnvVars: []string{"ZKBRIDGE_UPSTREAM"},
			Usage: "bootstrap brokers of the real Kafka cluster (Kafka 0.10 or newer), host:port,...: the bridge then relays every non-group request to the brokers, so clients need bootstrap.servers=<bridge> only (default: relay to the brokers registered in /brokers/ids when there are any, else group APIs only; see --group-only)"},
		&cli.BoolFlag{Name: "group-only", EnvVars: []string{"ZKBRIDGE_GROUP_ONLY"},
			Usage: "serve the group APIs only, with no relay, even when brokers are registered in /brokers/ids (by default the bridge then relays to them, as with --upstream-from-zk, so that no client finds its coordinator on a broker and bypasses the bridge); for tests and demos: the bridge warns at start and in /readyz that clients may bypass it"},
		&cli.BoolFlag{Name: "upstream-from-zk", EnvVars: []string{"ZKBRIDGE_UPSTREAM_FROM_ZK"},
			Usage: "relay to the brokers registered in /brokers/ids of --zk, following them as they join, leave and move (instead of --upstream)"},
		&cli.StringFlag{Name: "proxy-listen", EnvVars: []string{"ZKBRIDGE_PROXY_LISTEN"},
			Usage: "HOST:BASEPORT of the proxy listeners that stand for the upstream brokers: broker k of the sorted broker list gets BASEPORT+k (default: the --kafka-listen host and its port+1)"},
		&cli.StringFlag{Name: "proxy-map", EnvVars: []string{"ZKBRIDGE_PROXY_MAP"},
			Usage: "explicit proxy listeners per upstream broker id, id=host:port,... (over --proxy-listen; alone, only the mapped brokers are reachable)"},
		&cli.DurationFlag{Name: "upstream-timeout", Value: bridge.DefaultUpstreamTimeout, EnvVars: []string{"ZKBRIDGE_UPSTREAM_TIMEOUT"},
			Usage: "how long a relayed request may wait for its broker's response before the client's connection is closed; must exceed the clients' fetch max wait and produce timeout"},
		&cli.DurationFlag{Name: "drain-producer-linger", Value: bridge.DefaultDrainProducerLinger, EnvVars: []string{"ZKBRIDGE_DRAIN_PRODUCER_LINGER"},
			Usage: "with the data path and other bridges live, how long after its drain began a bridge shutting down keeps relaying for the clients producing through its proxy listeners to brokers the other bridges serve now, unless their connections close first (the client refreshed its metadata and moved). kgo (franz-go) refreshes a producer's metadata no sooner than metadata.min.age (5s by default) after its previous refresh, whatever the error, and produces nothing meanwhile: closing sooner stalls a producer that refreshed shortly before the drain, e.g. at the previous bridge's departure in a rolling restart; 5.5s is that 5s and a margin. Then each such producer's next Produce is refused once (NOT_LEADER_OR_FOLLOWER), so that it refreshes while the listeners still answer, and the bridge waits up to 1s more for them to leave. The Java client and librdkafka refresh after retry.backoff.ms and do not need it. It lengthens each bridge's shutdown by up to this much; 0: the listeners close once the group members and fetchers have been told (at most 3s after the handover)"},
		&cli.DurationFlag{Name: "lag-interval", Value: bridge.DefaultLagInterval, EnvVars: []string{"ZKBRIDGE_LAG_INTERVAL"},
			Usage: "with an upstream, how often every group's lag is collected for /metrics (kafka_consumergroup_lag, kafka_consumergroup_current_offset, kafka_topic_partition_current_offset); negative: never"},
		&cli.StringFlag{Name: "assignment-strategy", Value: string(legacy.StrategyRange), EnvVars: []string{"ZKBRIDGE_ASSIGNMENT_STRATEGY"},
			Usage: "the 0.8.2 assignor of legacy and mixed groups, range or roundrobin: set it to the partition.assignment.strategy of the groups' ZooKeeper (0.8) consumers, since they compute the same assignment on their own"},
		// Limits (bridge/limits.go).
		&cli.IntFlag{Name: "max-groups", Value: bridge.DefaultMaxGroups, EnvVars: []string{"ZKBRIDGE_MAX_GROUPS"},
			Usage: "groups under --root past which a new group is refused (GROUP_MAX_SIZE_REACHED, counted in zkbridge_limits_refusals_total{limit=\"groups\"}); -1: no limit. Offsets are accepted only for topics and partitions /brokers/topics lists (UNKNOWN_TOPIC_OR_PARTITION otherwise), so a group holds at most one offset per partition of the cluster"},
		&cli.IntFlag{Name: "max-commit-partitions", Value: bridge.DefaultMaxCommitPartitions, EnvVars: []string{"ZKBRIDGE_MAX_COMMIT_PARTITIONS"},
			Usage: "partitions one OffsetCommit may carry; a larger commit is refused whole (INVALID_COMMIT_OFFSET_SIZE); -1: no limit"},
		&cli.Int64Flag{Name: "max-queued-bytes", Value: newproto.DefaultMaxQueuedBytes, EnvVars: []string{"ZKBRIDGE_MAX_QUEUED_BYTES"},
			Usage: "bytes the Kafka listeners may hold in request frames being read, every connection together (as Kafka's queued.max.request.bytes); a frame that would exceed it closes its connection (zkbridge_kafka_frames_rejected_total{reason=\"memory\"}); -1: no limit"},
		&cli.IntFlag{Name: "max-connections", Value: newproto.DefaultMaxConnections, EnvVars: []string{"ZKBRIDGE_MAX_CONNECTIONS"},
			Usage: "open connections past which a new one is closed at once, for the Kafka listeners and for the legacy listener each (Kafka's max.connections; zkbridge_kafka_connections_refused_total); -1: no limit"},
		&cli.IntFlag{Name: "max-connections-per-ip", EnvVars: []string{"ZKBRIDGE_MAX_CONNECTIONS_PER_IP"},
			Usage: "open connections from one client address past which a new one is closed at once, for the Kafka listeners and for the legacy listener each (Kafka's max.connections.per.ip); 0: no limit"},
	), securityFlags()...) // serve_security.go
}

// serveConfig is the bridge's configuration from serve's flags, or a usage error.
func serveConfig(c *cli.Context, e *env) (bridge.Config, error) {
	node := c.Int("node-id")
	if node < 0 || node > 1<<31-1 {
		return bridge.Config{}, usagef("--node-id %d: want a broker id from 0 to 2147483647", node)
	}
	if node == 0 {
		// bridge.Config reads 0 as "default"; a bridge standing for broker 0 is not
		// supported yet.
		return bridge.Config{}, usagef("--node-id 0 is not supported: choose an id no real broker uses")
	}
	upstream, err := bridge.ParseUpstream(c.String("upstream"))
	if err != nil {
		return bridge.Config{}, usagef("--upstream %q: %v", c.String("upstream"), err)
	}
	proxyMap, err := bridge.ParseProxyMap(c.String("proxy-map"))
	if err != nil {
		return bridge.Config{}, usagef("--proxy-map %q: %v", c.String("proxy-map"), err)
	}
	relay := len(upstream) > 0 || c.Bool("upstream-from-zk")
	switch {
	case relay && c.Bool("group-only"):
		return bridge.Config{}, usagef("--group-only excludes --upstream and --upstream-from-zk")
	case len(upstream) > 0 && c.Bool("upstream-from-zk"):
		return bridge.Config{}, usagef("--upstream and --upstream-from-zk are exclusive: take the brokers from seeds or from ZooKeeper")
	case c.Bool("group-only") && (c.String("proxy-listen") != "" || len(proxyMap) > 0):
		return bridge.Config{}, usagef("--proxy-listen and --proxy-map need a relay: they exclude --group-only")
	case c.Duration("upstream-timeout") <= 0:
		return bridge.Config{}, usagef("--upstream-timeout must be positive")
	}
	strategy := legacy.Strategy(c.String("assignment-strategy"))
	if strategy != legacy.StrategyRange && strategy != legacy.StrategyRoundRobin {
		return bridge.Config{}, usagef("--assignment-strategy %q: want range or roundrobin", c.String("assignment-strategy"))
	}
	check := bridge.SessionCheck(c.String("mixed-session-check"))
	if check != bridge.SessionCheckWarn && check != bridge.SessionCheckRefuse {
		return bridge.Config{}, usagef("--mixed-session-check %q: want warn or refuse", check)
	}
	if c.Duration("heartbeat-hold") < 0 {
		return bridge.Config{}, usagef("--heartbeat-hold must not be negative")
	}
	producerLinger := c.Duration("drain-producer-linger")
	switch {
	case producerLinger < 0:
		return bridge.Config{}, usagef("--drain-producer-linger must not be negative")
	case producerLinger == 0:
		producerLinger = -1 // bridge.Config: 0 is the default, negative none
	}
	timeout := c.Duration("zk-timeout")
	if timeout <= 0 {
		return bridge.Config{}, usagef("--zk-timeout must be positive")
	}
	cfg := bridge.Config{
		SoftwareVersion:     softwareVersion(),
		ZKConnect:           c.String("zk"),
		ZKSessionTimeout:    c.Duration("zk-session-timeout"),
		ZKConnectTimeout:    timeout,
		ZKDigest:            c.String("zk-digest"),
		Root:                c.String("root"),
		KafkaListen:         c.String("kafka-listen"),
		AdvertisedAddr:      c.String("advertised-addr"),
		NodeID:              int32(node),
		AdminListen:         c.String("admin-listen"),
		LegacyListen:        c.String("legacy-listen"),
		Upstream:            upstream,
		UpstreamFromZK:      c.Bool("upstream-from-zk"),
		ProxyListen:         c.String("proxy-listen"),
		ProxyMap:            proxyMap,
		UpstreamTimeout:     c.Duration("upstream-timeout"),
		LagInterval:         c.Duration("lag-interval"),
		Strategy:            strategy,
		HeartbeatHold:       c.Duration("heartbeat-hold"),
		DrainProducerLinger: producerLinger,
		MixedSessionCheck:   check,
		Logger:              e.log,
	}
	if err := securityConfig(c, &cfg); err != nil {
		return bridge.Config{}, err
	}
	cfg.UpstreamAuto = !relay && !c.Bool("group-only") // bridge/bypass.go
	cfg.MaxGroups, cfg.MaxCommitPartitions = c.Int("max-groups"), c.Int("max-commit-partitions")
	cfg.MaxQueuedBytes, cfg.MaxConnections, cfg.MaxConnectionsPerIP = c.Int64("max-queued-bytes"), c.Int("max-connections"), c.Int("max-connections-per-ip")
	return cfg, nil
}
