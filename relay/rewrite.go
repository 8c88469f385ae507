package relay

// The pure part of the relay: which requests are relayed, the few header
// and body fields the relay reads, the ApiVersions table it advertises, the
// responses it rewrites, and where proxy listeners listen. No IO here;
// relay_test.go and the fuzz targets call these directly.

import (
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/newproto"
)

// route says what the relay does with a request.
type route uint8

const (
	// routeLocal: answered by the Handler (the group APIs, ApiVersions).
	routeLocal route = iota
	// routeRelay: forwarded byte for byte; the response too.
	routeRelay
	// routeRewrite: forwarded byte for byte; the response names brokers
	// and is decoded, rewritten and re-encoded (Metadata,
	// DescribeCluster).
	routeRewrite
	// routeFindCoordinator: group keys are answered by the Handler,
	// transaction keys relayed and rewritten.
	routeFindCoordinator
	// routeRefuse: a group API the bridge does not serve; relaying it
	// would put the client's group in the real cluster's coordinator,
	// behind the bridge's back. The Handler answers it (unsupported.go:
	// UNSUPPORTED_VERSION) and ApiVersions does not list it.
	routeRefuse
)

// routeOf classifies an api key. The group APIs are the ones in the
// ApiVersions table (regKey) that are not Metadata: the bridge is their
// coordinator.
func routeOf(key int16) route {
	switch kmsg.Key(key) {
	case kmsg.ApiVersions:
		return routeLocal
	case kmsg.SASLHandshake, kmsg.SASLAuthenticate:
		// The connection's own authentication (newproto's sasl.go): with SASL
		// forwarded, newproto sends them to the broker itself (ForwardSASL);
		// relayed undecoded, a re-authentication could change who the upstream
		// connection is without the bridge knowing.
		return routeLocal
	case kmsg.Metadata, kmsg.DescribeCluster:
		return routeRewrite
	case kmsg.FindCoordinator:
		return routeFindCoordinator
	case kmsg.TxnOffsetCommit, // sent to the group coordinator: the bridge
		kmsg.OffsetDelete,
		kmsg.ConsumerGroupHeartbeat, kmsg.ConsumerGroupDescribe, // KIP-848
		kmsg.ShareGroupHeartbeat, kmsg.ShareGroupDescribe, kmsg.ShareFetch, kmsg.ShareAcknowledge, // KIP-932
		kmsg.DescribeShareGroupOffsets, kmsg.AlterShareGroupOffsets, kmsg.DeleteShareGroupOffsets,
		kmsg.StreamsGroupHeartbeat, kmsg.StreamsGroupDescribe: // KIP-1071
		if newproto.Serves(key) {
			return routeLocal
		}
		return routeRefuse
	}
	if newproto.Serves(key) {
		return routeLocal
	}
	if kmsg.RequestForKey(key) == nil {
		// No schema: the header cannot be told flexible or not, and
		// ApiVersions never advertised it. Kafka closes on an unknown
		// key; so does frame.go.
		return routeLocal
	}
	return routeRelay
}

// relayCeiling caps a relayed key's advertised versions where a newer
// version's response names brokers by address inside a response the relay
// does not decode: Produce v10+ and Fetch v16+ carry NodeEndpoints with a
// NOT_LEADER_OR_FOLLOWER error (KIP-951). Below the cap the leader is
// named by id only and the client resolves it through the (rewritten)
// Metadata. Clients lose only KIP-951's shortcut.
func relayCeiling(key int16) (int16, bool) {
	switch kmsg.Key(key) {
	case kmsg.Produce:
		return 9, true
	case kmsg.Fetch:
		return 15, true
	}
	return 0, false
}

// versionRange is an inclusive range of api versions.
type versionRange struct{ min, max int16 }

// relayHeader is what the relay reads of a request: the fixed head of the
// request header.
type relayHeader struct {
	key, version int16
	corr         int32
}

// peekHeader reads the api key, version and correlation id of a frame
// (without its size prefix).
func peekHeader(frame []byte) (relayHeader, error) {
	if len(frame) < 8 {
		return relayHeader{}, newproto.BadFrame(newproto.RejectHeader, "header shorter than 8 bytes (%d)", len(frame))
	}
	return relayHeader{
		key:     int16(binary.BigEndian.Uint16(frame)),
		version: int16(binary.BigEndian.Uint16(frame[2:])),
		corr:    int32(binary.BigEndian.Uint32(frame[4:])),
	}, nil
}

// produceAcks reads a Produce request's acks without decoding the rest:
// a broker sends no response to acks=0, so neither may the relay wait for
// one. The body starts (Kafka's ProduceRequest schema):
//
//	v0-v2:  acks int16, timeout_ms int32, topics ...
//	v3-v8:  transactional_id nullable string (int16 length), acks, ...
//	v9+:    transactional_id compact nullable string (uvarint length+1), acks, ...
//
// and the request header before it is header v1 (v0-v8: client id) or v2
// (v9+: client id, then tagged fields).
func produceAcks(frame []byte, version int16) (int16, error) {
	probe := kmsg.ProduceRequest{Version: version}
	if version < 0 || version > probe.MaxVersion() {
		return 0, newproto.BadFrame(newproto.RejectVersion, "Produce v%d cannot be read (codec knows v0-v%d)", version, probe.MaxVersion())
	}
	b := newproto.NewFrameReader(frame)
	b.Take(8) // key, version, correlation id
	b.NullableString()
	flexible := probe.IsFlexible()
	if flexible {
		b.SkipTags()
	}
	if version >= 3 {
		if flexible {
			if n := b.Uvarint(); n > 0 {
				b.Take(int(min(n-1, uint64(len(frame)+1))))
			}
		} else {
			b.NullableString()
		}
	}
	acks := b.Int16()
	if !b.OK() {
		return 0, newproto.BadFrame(newproto.RejectBody, "Produce v%d request too short to hold acks", version)
	}
	return acks, nil
}

// responseCorrelationID reads a response frame's correlation id (the frame
// includes its size prefix and is at least 8 bytes: readResponseFrame).
func responseCorrelationID(raw []byte) int32 {
	return int32(binary.BigEndian.Uint32(raw[4:]))
}

// responseBody returns the body of a response frame (size prefix
// included): after the correlation id and, for flexible versions, the
// header's tagged fields (response header v1), except for ApiVersions,
// whose response header is always v0 (KIP-511).
func responseBody(raw []byte, key, version int16) ([]byte, error) {
	b := newproto.NewFrameReader(raw[8:])
	resp := kmsg.ResponseForKey(key)
	if resp == nil {
		return nil, fmt.Errorf("api key %d has no response schema", key)
	}
	resp.SetVersion(version)
	if resp.IsFlexible() && key != int16(kmsg.ApiVersions) {
		b.SkipTags()
	}
	if !b.OK() {
		return nil, fmt.Errorf("%s v%d response header malformed", kmsg.NameForKey(key), version)
	}
	return b.Rest(), nil
}

// rewriteResponse decodes a response frame, lets edit change it, and
// encodes it again with the same correlation id and header tags.
func rewriteResponse(raw []byte, key, version int16, edit func(kmsg.Response)) ([]byte, error) {
	body, err := responseBody(raw, key, version)
	if err != nil {
		return nil, err
	}
	resp := kmsg.ResponseForKey(key)
	resp.SetVersion(version)
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("decoding %s v%d response: %w", kmsg.NameForKey(key), version, err)
	}
	edit(resp)
	head := raw[4 : len(raw)-len(body)] // correlation id and header tags
	out := make([]byte, 4, len(raw)+64)
	out = append(out, head...)
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out, nil
}

// addressBook is what a rewrite needs to know: where each upstream
// broker's proxy listener is, and the bridge's own node. Host is the
// advertised host, or the one the client dialed. With several bridges
// (Config.Peers) it also holds the other bridges and the brokers one of
// them serves.
type addressBook struct {
	host  string
	ports map[int32]int32 // upstream node id → its proxy listener's port
	self  newproto.Broker // the bridge's node: the group coordinator
	// bridges are the other live bridges, listed in Metadata as
	// themselves; elsewhere the upstream brokers another bridge serves,
	// at that bridge's proxy listener (shared: read only).
	bridges   []newproto.Broker
	elsewhere map[int32]newproto.Broker
	// draining: this bridge is shutting down (Proxy.Drain), and is not
	// listed while another bridge is (drain.go).
	draining bool
}

// lookup returns the address clients reach broker id at through the
// bridges: the proxy listener of the bridge that serves it, ok false when
// that is this bridge and the broker has no proxy listener (yet).
func (a *addressBook) lookup(id int32) (string, int32, bool) {
	if b, ok := a.elsewhere[id]; ok {
		return b.Host, b.Port, true
	}
	p, ok := a.ports[id]
	return a.host, p, ok
}

// isBridge reports whether id is a bridge's node id (ours or another's):
// that node stands for any upstream broker with the id (Config.NodeID must
// be chosen apart from the real brokers').
func (a *addressBook) isBridge(id int32) bool {
	return id == a.self.NodeID || slices.ContainsFunc(a.bridges, func(b newproto.Broker) bool { return b.NodeID == id })
}

// rewriteMetadata points every broker at the proxy listener that serves
// it and lists the bridges' nodes (ours, and the other live bridges of the
// service): the same brokers at the same addresses from every bridge. A
// broker without a listener (one the bridge has not caught up with) is left
// out and the partitions it leads are reported LEADER_NOT_AVAILABLE with
// leader -1, as Kafka reports a leader missing from its metadata cache: the
// client asks again shortly. A broker with a bridge's node id is replaced
// by the bridge. A draining bridge is not listed while another is.
func (a *addressBook) rewriteMetadata(resp kmsg.Response) {
	m := resp.(*kmsg.MetadataResponse)
	kept := m.Brokers[:0]
	listed := make(map[int32]bool, len(m.Brokers)+1)
	for _, b := range m.Brokers {
		host, port, ok := a.lookup(b.NodeID)
		if !ok || a.isBridge(b.NodeID) {
			continue
		}
		b.Host, b.Port = host, port
		kept = append(kept, b)
		listed[b.NodeID] = true
	}
	nodes := a.bridges
	if !a.draining || len(a.bridges) == 0 {
		nodes = append([]newproto.Broker{a.self}, nodes...)
	}
	for _, n := range nodes {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port, b.Rack = n.NodeID, n.Host, n.Port, n.Rack
		kept = append(kept, b)
	}
	m.Brokers = kept
	slices.SortFunc(m.Brokers, func(x, y kmsg.MetadataResponseBroker) int { return int(x.NodeID) - int(y.NodeID) })
	if !listed[m.ControllerID] {
		m.ControllerID = -1
	}
	for i := range m.Topics {
		for j := range m.Topics[i].Partitions {
			p := &m.Topics[i].Partitions[j]
			if p.ErrorCode == 0 && p.Leader >= 0 && !listed[p.Leader] {
				p.Leader = -1
				p.ErrorCode = int16(newproto.ErrLeaderNotAvailable)
			}
		}
	}
}

// rewriteDescribeCluster points every broker at the proxy listener that
// serves it and leaves out those without one. The bridge's node is not added: it serves
// no admin request, and DescribeCluster describes the brokers.
func (a *addressBook) rewriteDescribeCluster(resp kmsg.Response) {
	m := resp.(*kmsg.DescribeClusterResponse)
	kept := m.Brokers[:0]
	listed := map[int32]bool{}
	for _, b := range m.Brokers {
		host, port, ok := a.lookup(b.NodeID)
		if !ok || a.isBridge(b.NodeID) {
			continue
		}
		b.Host, b.Port = host, port
		kept = append(kept, b)
		listed[b.NodeID] = true
	}
	m.Brokers = kept
	if !listed[m.ControllerID] {
		m.ControllerID = -1
	}
}

// rewriteFindCoordinator points each transaction coordinator at the proxy
// listener that serves it; one without a listener is COORDINATOR_NOT_AVAILABLE, which
// clients retry.
func (a *addressBook) rewriteFindCoordinator(resp kmsg.Response) {
	m := resp.(*kmsg.FindCoordinatorResponse)
	fix := func(code *int16, node *int32, host *string, port *int32) {
		if *code != 0 {
			return
		}
		if h, p, ok := a.lookup(*node); ok {
			*host, *port = h, p
			return
		}
		*code, *node, *host, *port = int16(newproto.ErrCoordinatorNotAvailable), -1, "", -1
	}
	if m.Version < 4 {
		fix(&m.ErrorCode, &m.NodeID, &m.Host, &m.Port)
		return
	}
	for i := range m.Coordinators {
		c := &m.Coordinators[i]
		fix(&c.ErrorCode, &c.NodeID, &c.Host, &c.Port)
	}
}

// mergeAPIVersions builds the ApiVersions table of a proxying listener from
// ours (local, what the Handler answered) and the upstream broker's:
//
//   - keys answered locally (the group APIs, ApiVersions): our range;
//   - FindCoordinator: ours intersected with the upstream's, since
//     transaction keys are relayed at the client's version;
//   - keys refused (routeRefuse): not listed;
//   - every other key the upstream lists: its range, intersected with what
//     kmsg knows (the relay reads headers, Produce's acks and the rewritten
//     responses with kmsg) and relayCeiling.
func mergeAPIVersions(local []kmsg.ApiVersionsResponseApiKey, upstream map[int16]versionRange) []kmsg.ApiVersionsResponseApiKey {
	ours := make(map[int16]versionRange, len(local))
	for _, k := range local {
		ours[k.ApiKey] = versionRange{k.MinVersion, k.MaxVersion}
	}
	merged := map[int16]versionRange{}
	for k, r := range ours {
		if routeOf(k) == routeLocal {
			merged[k] = r
		}
	}
	for k, r := range upstream {
		switch routeOf(k) {
		case routeLocal, routeRefuse:
			continue
		case routeFindCoordinator:
			if o, ok := ours[k]; ok {
				r = versionRange{max(r.min, o.min), min(r.max, o.max)}
			}
		default:
			req := kmsg.RequestForKey(k)
			if req == nil {
				continue
			}
			r.min = max(r.min, 0)
			r.max = min(r.max, req.MaxVersion())
			if c, ok := relayCeiling(k); ok {
				r.max = min(r.max, c)
			}
		}
		if r.min <= r.max {
			merged[k] = r
		}
	}
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(merged))
	for k, r := range merged {
		e := kmsg.NewApiVersionsResponseApiKey()
		e.ApiKey, e.MinVersion, e.MaxVersion = k, r.min, r.max
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y kmsg.ApiVersionsResponseApiKey) int { return int(x.ApiKey) - int(y.ApiKey) })
	return out
}

// portPlan gives each upstream broker the index of its proxy listener:
// BASEPORT+index. The first brokers seen get their rank in the sorted id
// list, as the configuration documents; a broker seen later gets the
// lowest free index, and a broker keeps its index for the life of the
// process even while it is away, so that neither a broker joining nor one
// leaving moves another broker's listener (clients hold addresses from
// Metadata).
type portPlan map[int32]int

// assign gives every id in ids an index and returns the plan.
func (p portPlan) assign(ids []int32) portPlan {
	if p == nil {
		p = portPlan{}
	}
	ids = slices.Sorted(slices.Values(ids))
	used := make(map[int]bool, len(p))
	for _, i := range p {
		used[i] = true
	}
	next := 0
	for _, id := range ids {
		if _, ok := p[id]; ok {
			continue
		}
		for used[next] {
			next++
		}
		p[id] = next
		used[next] = true
	}
	return p
}

// listenAddr is the listen address of broker id's proxy listener, "" if it
// gets none: an explicit entry wins, otherwise HOST:BASEPORT+index (a
// BASEPORT of 0 lets the system choose each port).
func (p portPlan) listenAddr(id int32, explicit map[int32]string, base string) (string, error) {
	if a, ok := explicit[id]; ok {
		return a, nil
	}
	if base == "" {
		return "", nil
	}
	host, bp, err := parseBaseAddr(base)
	if err != nil {
		return "", err
	}
	if bp == 0 {
		return net.JoinHostPort(host, "0"), nil
	}
	i, ok := p[id]
	if !ok {
		return "", fmt.Errorf("newproto: broker %d has no proxy port index", id)
	}
	if bp+i > 65535 {
		return "", fmt.Errorf("newproto: proxy port %d+%d for broker %d is out of range", bp, i, id)
	}
	return net.JoinHostPort(host, strconv.Itoa(bp+i)), nil
}

// parseBaseAddr splits Config.Listen, HOST:BASEPORT.
func parseBaseAddr(base string) (string, int, error) {
	host, port, err := net.SplitHostPort(base)
	if err != nil {
		return "", 0, fmt.Errorf("newproto: proxy listen address %q: %w", base, err)
	}
	bp, err := strconv.Atoi(port)
	if err != nil || bp < 0 || bp > 65535 {
		return "", 0, fmt.Errorf("newproto: proxy listen address %q: bad port", base)
	}
	return host, bp, nil
}
