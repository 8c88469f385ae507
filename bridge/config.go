package bridge

// The daemon's configuration: every knob of serve, its defaults and its validation.

import (
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/zkstate"
)

// SessionCheck is a policy for the Kafka members of mixed groups that could outlive a crash of
// the bridge (Config.MixedSessionCheck).
type SessionCheck string

// Session checks.
const (
	SessionCheckWarn   SessionCheck = "warn"
	SessionCheckRefuse SessionCheck = "refuse"
)

// Config configures a Bridge. Only ZKConnect is required; zero values mean the defaults above.
type Config struct {
	// ZKConnect is the ZooKeeper connect string, as Kafka's zookeeper.connect:
	// "host1:2181,host2:2181/optional/chroot".
	ZKConnect string
	// ZKSessionTimeout is the session timeout asked for (DefaultZKSessionTimeout). A connection
	// lost for longer than this fences every group: the session is as good as expired.
	ZKSessionTimeout time.Duration
	// ZKConnectTimeout bounds the wait for the first session (DefaultZKConnectTimeout).
	ZKConnectTimeout time.Duration
	// ZKDigest, when set as "user:password", authenticates the session (see zkstate.Config).
	ZKDigest string
	// ZKTLS, when set, connects to ZooKeeper over TLS (its secureClientPort, which ZKConnect
	// must name), with its CA and, for ssl.clientAuth=need, a client certificate.
	ZKTLS *tlsconfig.Client

	// Root is the bridge's own ZooKeeper subtree (DefaultRoot).
	Root string

	// KafkaListen is the address of the Kafka listener (DefaultKafkaListen); port 0 picks one
	// (see Addr).
	KafkaListen string
	// AdvertisedAddr is the host:port clients are told to reach the bridge at, in Metadata and
	// FindCoordinator. Empty: the Kafka listener's address, or, when it listens on every
	// interface, the address each client dialed.
	AdvertisedAddr string
	// NodeID is the bridge's broker id (DefaultNodeID when 0). It must not be a real broker's
	// id: Metadata replaces a broker with the same id by the bridge.
	NodeID int32
	// ClusterID is Metadata's cluster id (v2+); empty: null.
	ClusterID string

	// The data path (upstream.go). With an upstream cluster the bridge is the only address
	// Kafka clients need: it answers the group APIs and relays every other request to the real
	// brokers, one proxy listener per broker; Metadata comes from the brokers, rewritten to name
	// the proxy listeners (ClusterID is then the upstream's). Without one (neither Upstream nor
	// UpstreamFromZK) there is no relay. An upstream broker older than Kafka 0.10 makes Run fail.
	//
	// Upstream lists bootstrap brokers (host:port) asked for the cluster's brokers at start and
	// every MetadataMaxAge.
	Upstream []string
	// UpstreamFromZK takes the brokers registered in /brokers/ids of ZKConnect instead, and
	// follows them joining, leaving and moving.
	UpstreamFromZK bool
	// UpstreamAuto relays as UpstreamFromZK does when brokers are registered in /brokers/ids at
	// start, so that no client can bypass the bridge (bypass.go); with none registered the
	// bridge serves groups only. The serve command sets it unless --upstream,
	// --upstream-from-zk or --group-only is given.
	UpstreamAuto bool
	// ProxyListen is HOST:BASEPORT: broker k of the sorted broker list gets a proxy listener on
	// BASEPORT+k (BASEPORT 0: system-chosen ports). Empty, and no ProxyMap: the Kafka listener's
	// host and port+1.
	ProxyListen string
	// ProxyMap gives brokers (by id) explicit proxy listen addresses, over ProxyListen; with
	// ProxyMap and no ProxyListen only the mapped brokers are reachable.
	ProxyMap map[int32]string
	// UpstreamTLS, when set, makes the relay dial the upstream brokers over TLS (their SSL
	// listeners), verifying them with its CA (security.go); nil: plaintext.
	UpstreamTLS *tlsconfig.Client
	// UpstreamTimeout bounds the wait for a broker's response to a relayed request
	// (newproto.DefaultRelayTimeout when 0); past it the client's connection is closed.
	UpstreamTimeout time.Duration

	// LegacyListen is the address of the legacy (seed 001) coordinator listener, where
	// Consult/Register consumers connect (the serve command's default is DefaultLegacyListen);
	// empty: no legacy listener.
	LegacyListen string

	// AdminListen is the address of the admin HTTP listener with /metrics, /healthz and
	// /readyz (DefaultAdminListen).
	AdminListen string

	// Group is the group engine's configuration; the zero value means group.DefaultConfig().
	Group group.Config
	// MixedSessionCheck says what a mixed group does with a Kafka member whose session timeout
	// is not below the ZooKeeper session timeout the server granted the bridge (mixed.go:
	// checkCrashSafety): SessionCheckWarn (the default) admits, counts and logs it;
	// SessionCheckRefuse answers its JoinGroup INVALID_SESSION_TIMEOUT. It applies only
	// without the data path: with it, the members fetch through the bridge, which withholds
	// their fetches once it cannot vouch for its session (fetchgate.go).
	MixedSessionCheck SessionCheck
	// HeartbeatHold lets a Stable member's heartbeat wait up to this long for its group to
	// rebalance, so that the member hears of a rebalance at once instead of at its next
	// heartbeat (newproto.WithHeartbeatHold). 0: heartbeats are answered at once, as Kafka does.
	HeartbeatHold time.Duration
	// Strategy is the Kafka 0.8.2 assignor (partition.assignment.strategy) of the groups' zk
	// members, which the bridge must run too: in legacy groups and for the Kafka members of mixed
	// groups (legacy.StrategyRange when empty).
	Strategy legacy.Strategy

	WriteTimeout     time.Duration // DefaultWriteTimeout
	LoadTimeout      time.Duration // DefaultLoadTimeout
	MirrorRetry      time.Duration // DefaultMirrorRetry
	MetadataMaxAge   time.Duration // DefaultMetadataMaxAge
	GroupIdleTimeout time.Duration // DefaultGroupIdleTimeout
	DrainTimeout     time.Duration // DefaultDrainTimeout; negative: cancel in-flight requests at once
	HandoffTimeout   time.Duration // DefaultHandoffTimeout; negative: no hand-off at shutdown
	// DrainProducerLinger is how long after its drain began a bridge shutting down beside other
	// bridges, with the data path, keeps its proxy listeners open for the clients producing
	// through them to brokers the others serve now, unless those connections close first
	// (handover_linger.go). DefaultDrainProducerLinger when 0; negative: not at all.
	DrainProducerLinger time.Duration
	// LagInterval is how often, with an upstream, every group's lag is collected for /metrics
	// (lag.go); DefaultLagInterval when 0, negative: never.
	LagInterval time.Duration

	// KafkaTLS makes the Kafka listener and every proxy listener TLS listeners, LegacyTLS the
	// legacy listener, AdminTLS the admin listener (security.go); the zero value: plaintext,
	// which stays possible per listener for the clients that cannot do TLS (0.8-era consumers).
	// With a client CA the listener requires mutual TLS.
	KafkaTLS, LegacyTLS, AdminTLS tlsconfig.Server
	// AdminToken, when set, is the bearer token the admin listener requires on every path but
	// /healthz (security.go). The serve command reads it from a file or the environment.
	AdminToken string
	// PrincipalMappingRules map a client certificate's subject to its principal, as Kafka's
	// ssl.principal.mapping.rules ("RULE:^CN=(.*?),.*$/$1/,DEFAULT"; empty: DEFAULT).
	PrincipalMappingRules string
	// Authorizer "zookeeper" enforces Kafka's ACLs from ZooKeeper on the requests the bridge
	// answers (acls.go, newproto/authorize.go); empty: everything is allowed. SuperUsers is
	// super.users ("User:admin;User:ops"), AllowEveryoneIfNoACL allow.everyone.if.no.acl.found.
	Authorizer           string
	SuperUsers           string
	AllowEveryoneIfNoACL bool
	// SASLMechanisms, when set, make the Kafka listener (and the proxy listeners) require SASL
	// (scram.go): SCRAM-SHA-256 and SCRAM-SHA-512 against the credentials in ZooKeeper's
	// /config/users, PLAIN against SASLPlainFile ("user:password" lines). SASLSessionLifetime
	// is KIP-368's session lifetime (connections.max.reauth.ms; 0: none).
	SASLMechanisms      []string
	SASLPlainFile       string
	SASLSessionLifetime time.Duration
	// SASLForward, instead of SASLMechanisms, authenticates each Kafka client at its upstream
	// broker: its own SaslHandshake/SaslAuthenticate go over its own upstream connection
	// (newproto/sasl_forward.go), the broker's verdict and principal count for the group APIs
	// too, and the bridge holds no broker credentials. Needs the brokers from /brokers/ids
	// (UpstreamFromZK or UpstreamAuto), whose SASL_PLAINTEXT (SASL_SSL with UpstreamTLS)
	// endpoints it then relays to; lag is not collected (no credentials of its own).
	SASLForward bool

	// MaxGroups bounds the groups under Root: a group the bridge does not know yet is refused
	// (GROUP_MAX_SIZE_REACHED) once that many exist (limits.go). DefaultMaxGroups when 0;
	// negative: no limit.
	MaxGroups int
	// MaxCommitPartitions bounds the partitions of one OffsetCommit; a larger one is refused
	// (INVALID_COMMIT_OFFSET_SIZE). DefaultMaxCommitPartitions when 0; negative: no limit.
	MaxCommitPartitions int
	// MaxQueuedBytes bounds the bytes held in Kafka request frames being read, every
	// connection together (newproto.DefaultMaxQueuedBytes when 0; negative: no limit); a frame
	// that would exceed it closes its connection. MaxConnections and MaxConnectionsPerIP bound
	// the open connections of the Kafka listeners and, separately, of the legacy listener
	// (newproto.DefaultMaxConnections and no limit per address when 0; negative: no limit).
	MaxQueuedBytes                      int64
	MaxConnections, MaxConnectionsPerIP int

	// SoftwareVersion is the build's version, advertised in the bridge's registration for
	// operators (zkbridge bridges); empty: not advertised.
	SoftwareVersion string

	// Logger receives every log line of the bridge; the zero Logger logs nothing useful, so
	// callers pass theirs.
	Logger zerolog.Logger
}

// withDefaults fills the zero values.
func (c Config) withDefaults() Config {
	if c.ZKSessionTimeout == 0 {
		c.ZKSessionTimeout = DefaultZKSessionTimeout
	}
	if c.ZKConnectTimeout == 0 {
		c.ZKConnectTimeout = DefaultZKConnectTimeout
	}
	if c.Root == "" {
		c.Root = DefaultRoot
	}
	if c.KafkaListen == "" {
		c.KafkaListen = DefaultKafkaListen
	}
	if c.NodeID == 0 {
		c.NodeID = DefaultNodeID
	}
	if c.AdminListen == "" {
		c.AdminListen = DefaultAdminListen
	}
	if c.Strategy == "" {
		c.Strategy = legacy.StrategyRange
	}
	if c.MaxGroups == 0 {
		c.MaxGroups = DefaultMaxGroups
	}
	if c.MaxCommitPartitions == 0 {
		c.MaxCommitPartitions = DefaultMaxCommitPartitions
	}
	if c.Group == (group.Config{}) {
		c.Group = group.DefaultConfig()
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&c.WriteTimeout, DefaultWriteTimeout},
		{&c.LoadTimeout, DefaultLoadTimeout},
		{&c.MirrorRetry, DefaultMirrorRetry},
		{&c.MetadataMaxAge, DefaultMetadataMaxAge},
		{&c.LagInterval, DefaultLagInterval},
		{&c.GroupIdleTimeout, DefaultGroupIdleTimeout},
		{&c.DrainTimeout, DefaultDrainTimeout},
		{&c.HandoffTimeout, DefaultHandoffTimeout},
		{&c.DrainProducerLinger, DefaultDrainProducerLinger},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return c
}

// Validate reports every setting New would refuse, after applying the defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.ZKConnect == "" {
		errs = append(errs, errors.New("bridge: ZKConnect is required"))
	} else if err := (zkstate.Config{Connect: c.ZKConnect, SessionTimeout: c.ZKSessionTimeout, Digest: c.ZKDigest}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("bridge: %w", err))
	}
	if c.ZKSessionTimeout < 0 || c.ZKConnectTimeout < 0 {
		errs = append(errs, errors.New("bridge: ZooKeeper timeouts must not be negative"))
	}
	switch c.MixedSessionCheck {
	case "", SessionCheckWarn, SessionCheckRefuse:
	default:
		errs = append(errs, fmt.Errorf("bridge: MixedSessionCheck %q: want %q or %q", c.MixedSessionCheck, SessionCheckWarn, SessionCheckRefuse))
	}
	if c.HeartbeatHold < 0 {
		errs = append(errs, fmt.Errorf("bridge: HeartbeatHold %v is negative", c.HeartbeatHold))
	}
	if err := validRoot(c.Root); err != nil {
		errs = append(errs, err)
	}
	if _, _, err := net.SplitHostPort(c.KafkaListen); err != nil {
		errs = append(errs, fmt.Errorf("bridge: KafkaListen %q: %w", c.KafkaListen, err))
	}
	if c.LegacyListen != "" {
		if _, _, err := net.SplitHostPort(c.LegacyListen); err != nil {
			errs = append(errs, fmt.Errorf("bridge: LegacyListen %q: %w", c.LegacyListen, err))
		}
	}
	if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
		errs = append(errs, fmt.Errorf("bridge: AdminListen %q: %w", c.AdminListen, err))
	}
	if c.AdvertisedAddr != "" {
		if _, _, err := splitAdvertised(c.AdvertisedAddr); err != nil {
			errs = append(errs, err)
		}
	}
	if c.NodeID < 0 {
		errs = append(errs, fmt.Errorf("bridge: NodeID %d is negative (clients reserve negative ids for bootstrap brokers)", c.NodeID))
	}
	errs = append(errs, c.validateUpstream()...) // upstream.go
	errs = append(errs, c.validateTLS()...)      // security.go
	errs = append(errs, c.validateSASL()...)     // scram.go
	if err := c.Group.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("bridge: %w", err))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"WriteTimeout", c.WriteTimeout}, {"LoadTimeout", c.LoadTimeout}, {"MirrorRetry", c.MirrorRetry},
		{"MetadataMaxAge", c.MetadataMaxAge}, {"GroupIdleTimeout", c.GroupIdleTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("bridge: %s %v is negative", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// validRoot checks Config.Root: an absolute ZooKeeper path, not the root itself.
func validRoot(root string) error {
	if !strings.HasPrefix(root, "/") || root == "/" || strings.HasSuffix(root, "/") || path.Clean(root) != root {
		return fmt.Errorf("bridge: Root %q must be an absolute path such as %s", root, DefaultRoot)
	}
	return nil
}

// splitAdvertised splits an advertised host:port; both parts are required.
func splitAdvertised(addr string) (string, int32, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("bridge: AdvertisedAddr %q: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return "", 0, fmt.Errorf("bridge: AdvertisedAddr %q: want host:port with a port in 1-65535", addr)
	}
	return host, int32(p), nil
}
