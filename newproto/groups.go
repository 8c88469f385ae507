package newproto

// The group-coordinator APIs translated to the group engine (bridge/group).
//
// GroupCoordinator is the Coordinator the bridge plugs into Config: each
// group API has its own file (08_offset_commit.go ... 42_delete_groups.go)
// that turns the kmsg request into a group.Event, hands it to Groups.Do,
// and turns the group.Reply into the kmsg response at the request's
// version. The translation is pure apart from that one call: no state, no
// clock; the randomness of new member ids is an option.
//
// Errors:
//   - The engine's outcome (a reply's group.ErrorCode) goes on the wire
//     through wireCode (errors.go), the one place the two numberings meet.
//   - An error from Groups that wraps an ErrorCode (NOT_COORDINATOR when
//     another bridge owns the group, COORDINATOR_NOT_AVAILABLE while
//     ZooKeeper is away, INVALID_GROUP_ID for a name ZooKeeper cannot
//     hold) is answered as that code, in the request's shape: per group for
//     the APIs that carry several groups (DescribeGroups, DeleteGroups,
//     OffsetFetch v8), so one failing group does not fail the others; for
//     the others the method returns the error and the router shapes it
//     (unsupported.go errorResponse). Any other error becomes
//     COORDINATOR_NOT_AVAILABLE (retriable) and is logged.
//   - After ctx is done the client is gone: the error is returned as is
//     and the router closes the connection.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
)

// Groups is the group engine as newproto sees it.
type Groups interface {
	// Do steps the event built by build (with a Token the owner assigns) into the named group's
	// machine and returns the reply that answers it, after every ZooKeeper write it depends on.
	Do(ctx context.Context, group string, build func(group.Token) group.Event) (group.Reply, error)
	// FetchOffsets returns committed offsets of the group (topics nil: all of them); a partition
	// with no commit is absent.
	FetchOffsets(ctx context.Context, group string, topics map[string][]int32) ([]CommittedOffset, error)
	// ListGroups lists the groups this bridge knows.
	ListGroups(ctx context.Context) ([]GroupListing, error)
}

// CommittedOffset is one committed offset as OffsetFetch returns it.
type CommittedOffset struct {
	Topic       string
	Partition   int32
	Offset      int64 // the next offset to consume
	LeaderEpoch int32 // -1 when unknown
	Metadata    string
}

// GroupListing is one group as ListGroups returns it; State is Kafka's
// name (group.State.String(): "Empty", "Stable", ...).
type GroupListing struct {
	Group, ProtocolType, State string
}

// GroupCoordinator implements Coordinator on top of Groups.
//
// What it expects of Groups beyond the interface's contract:
//   - Describe and Delete of a group the owner does not know should not
//     create it: answer group.ErrGroupIDNotFound (in the reply, or as an
//     error wrapping ErrGroupIDNotFound). DescribeGroups shows such a group
//     as "Dead" with no error, as Kafka does; DeleteGroups answers
//     GROUP_ID_NOT_FOUND.
//   - FetchOffsets is only asked for topics with at least one partition,
//     or for all topics (nil).
//   - Do, FetchOffsets and ListGroups are called concurrently, from the
//     goroutines of many requests.
type GroupCoordinator struct {
	groups Groups
	uuid   func() string
	log    zerolog.Logger
	// parallel bounds the concurrent Do/FetchOffsets calls of one
	// request that names several groups.
	parallel int
	// hold is how long a Stable member's heartbeat may wait for a
	// rebalance (WithHeartbeatHold); 0: answered at once.
	hold time.Duration
}

var _ Coordinator = (*GroupCoordinator)(nil)

// Available implements Availability when Groups does; else it is always available.
func (gc *GroupCoordinator) Available() error {
	if a, ok := gc.groups.(Availability); ok {
		return a.Available()
	}
	return nil
}

// GroupCoordinatorOption configures a GroupCoordinator.
type GroupCoordinatorOption func(*GroupCoordinator)

// WithUUIDs sets the source of the random part of new member ids (Kafka's
// format is "<client id>-<uuid>", or "<group.instance.id>-<uuid>" for a
// static member). The default is a random (version 4) UUID from
// crypto/rand; tests inject a deterministic sequence.
func WithUUIDs(fn func() string) GroupCoordinatorOption {
	return func(gc *GroupCoordinator) {
		if fn != nil {
			gc.uuid = fn
		}
	}
}

// WithLogger sets the logger for errors from Groups that carry no Kafka
// error code and are answered COORDINATOR_NOT_AVAILABLE per group (the
// router logs those of whole requests itself). Default: no logging.
func WithLogger(log zerolog.Logger) GroupCoordinatorOption {
	return func(gc *GroupCoordinator) { gc.log = log }
}

// WithParallelism bounds how many groups of one DescribeGroups,
// DeleteGroups or OffsetFetch (v8) request are asked at once (default 16;
// values below 1 mean 1).
func WithParallelism(n int) GroupCoordinatorOption {
	return func(gc *GroupCoordinator) { gc.parallel = max(n, 1) }
}

// WithHeartbeatHold lets a Stable member's heartbeat wait up to d for its
// group to rebalance (12_heartbeat.go), so that the member hears of a
// rebalance at once instead of at its next heartbeat. d must stay below
// every client's request timeout (kafka-go's coordinator Timeout, 5 s by
// default, is the shortest we know of) and a third of its session
// timeout. 0, the default, answers heartbeats at once.
func WithHeartbeatHold(d time.Duration) GroupCoordinatorOption {
	return func(gc *GroupCoordinator) { gc.hold = max(d, 0) }
}

// NewGroupCoordinator returns the Coordinator that serves the group APIs
// from g.
func NewGroupCoordinator(g Groups, opts ...GroupCoordinatorOption) *GroupCoordinator {
	gc := &GroupCoordinator{groups: g, uuid: randomUUID, log: zerolog.Nop(), parallel: 16}
	for _, o := range opts {
		o(gc)
	}
	return gc
}

// randomUUID returns a version 4 UUID in its text form, as Java's
// UUID.randomUUID().toString() that Kafka puts in member ids.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// newMemberID is Kafka's GroupMetadata.generateMemberId: the instance id
// (static member) or the client id, a dash, a UUID.
func (gc *GroupCoordinator) newMemberID(clientID string, inst group.InstanceID) group.MemberID {
	prefix := clientID
	if inst != "" {
		prefix = string(inst)
	}
	return group.MemberID(prefix + "-" + gc.uuid())
}

// errEmptyGroupID is Kafka's isValidGroupId failing: the group APIs answer
// an empty group id with INVALID_GROUP_ID.
var errEmptyGroupID = fmt.Errorf("empty group id: %w", ErrInvalidGroupID)

func checkGroupID(name string) error {
	if name == "" {
		return errEmptyGroupID
	}
	return nil
}

// do runs one event through Groups and checks that the reply is the type
// the event is answered with.
func do[R group.Reply](ctx context.Context, g Groups, name string, build func(group.Token) group.Event) (R, error) {
	var zero R
	reply, err := g.Do(ctx, name, build)
	if err != nil {
		return zero, err
	}
	r, ok := reply.(R)
	if !ok {
		return zero, fmt.Errorf("group %q answered with %T, want %T", name, reply, zero)
	}
	return r, nil
}

// errorCode is the code a per-group error is answered with: the
// ErrorCode err wraps, else COORDINATOR_NOT_AVAILABLE (logged: the client
// only sees a retriable code, the operator needs the cause).
func (gc *GroupCoordinator) errorCode(err error, api kmsg.Key, name string) int16 {
	if code, ok := codeOf(err); ok {
		return int16(code)
	}
	gc.log.Warn().Err(err).Str("api", kmsg.NameForKey(int16(api))).Str("group", name).
		Msg("group engine failed; answering COORDINATOR_NOT_AVAILABLE")
	return int16(ErrCoordinatorNotAvailable)
}

// eachGroup calls fn(i) for i in [0, n) with at most gc.parallel calls at
// once and returns when all have returned. Requests naming several groups
// ask them concurrently: each group has its own actor, and a slow one (a
// ZooKeeper write) should not delay the others.
func (gc *GroupCoordinator) eachGroup(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	sem := make(chan struct{}, gc.parallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}

// clientHost is the member's host as Kafka reports it in DescribeGroups:
// InetAddress.toString() of the client's address, "/" then the IP when
// no host name was resolved (Kafka resolves none for clients). Java
// prints IPv6 addresses uncompressed ("/0:0:0:0:0:0:0:1").
func clientHost(a net.Addr) string {
	switch a := a.(type) {
	case nil:
		return ""
	case *net.TCPAddr:
		return "/" + javaIP(a.IP)
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		host = a.String()
	}
	if ip := net.ParseIP(host); ip != nil {
		return "/" + javaIP(ip)
	}
	return "/" + strings.TrimPrefix(host, "/")
}

// javaIP formats ip as Java's InetAddress.getHostAddress does.
func javaIP(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil || len(ip) != net.IPv6len {
		return ip.String()
	}
	var b strings.Builder
	for i := 0; i < net.IPv6len; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(strconv.FormatUint(uint64(ip[i])<<8|uint64(ip[i+1]), 16))
	}
	return b.String()
}

// optString turns an optional wire string into the engine's "" for none.
func optString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nilIfEmpty is the wire's null for the engine's "".
func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return kmsg.StringPtr(s)
}
