package zkstate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ParseBrokerRegistration reads /brokers/ids/<id>. It accepts every version Kafka wrote
// (kafka.zk.BrokerIdZNode documents them; before 1.1 kafka.utils.ZkUtils.registerBrokerInZk
// wrote them):
//
//	1  0.8.x      host, port, jmx_port (0.8.0/0.8.1: spaced, sorted fields; 0.8.1+: timestamp)
//	2  0.9        + endpoints ("PLAINTEXT://host:9092", ...)
//	3  0.10.0     + rack
//	4  0.10.2-2.6 + listener_security_protocol_map (KIP-103); host null and port -1 when
//	              no listener uses the PLAINTEXT protocol
//	5  2.7+       + features (ignored)
//
// Later versions are read the same way. Reading is lenient where the broker's own readers
// were: 0.8.2's Broker.createBroker read only host and port, so version and jmx_port may be
// missing (version then means 1). What must hold is that the broker names an address: a host
// or at least one endpoint, and every endpoint must have the listener://host:port form of
// kafka.cluster.EndPoint.createEndPoint. A port or jmx_port of 0 or less, or null, is stored
// as -1, the value Kafka writes for "none".
func ParseBrokerRegistration(id int32, data []byte) (BrokerRegistration, error) {
	obj, err := decodeObject(data)
	if err != nil {
		return BrokerRegistration{}, err
	}
	b := BrokerRegistration{ID: id, Version: 1, Port: -1, JMXPort: -1}

	if raw, ok := obj["version"]; ok && !isNull(raw) {
		v, err := intValue(raw, 1, math.MaxInt32)
		if err != nil {
			return BrokerRegistration{}, fmt.Errorf("%w: version: %v", ErrMalformed, err)
		}
		b.Version = int(v)
	}
	if raw, ok := obj["host"]; ok {
		if b.Host, err = stringValue(raw); err != nil {
			return BrokerRegistration{}, fmt.Errorf("%w: host: %v", ErrMalformed, err)
		}
	}
	if b.Port, err = optionalPort(obj, "port"); err != nil {
		return BrokerRegistration{}, err
	}
	if b.JMXPort, err = optionalPort(obj, "jmx_port"); err != nil {
		return BrokerRegistration{}, err
	}
	if raw, ok := obj["timestamp"]; ok && !isNull(raw) {
		// Nobody reads the broker timestamp; keep whatever text was written. Kafka writes a
		// string, some tools a number.
		raw = bytes.TrimSpace(raw)
		switch c := raw[0]; {
		case c == '"':
			if b.Timestamp, err = stringValue(raw); err != nil {
				return BrokerRegistration{}, fmt.Errorf("%w: timestamp: %v", ErrMalformed, err)
			}
		case c == '-' || (c >= '0' && c <= '9'):
			b.Timestamp = string(raw) // a JSON number, kept as written
		default:
			return BrokerRegistration{}, fmt.Errorf("%w: timestamp is %s, want a string or a number", ErrMalformed, snippet(raw))
		}
	}
	if raw, ok := obj["endpoints"]; ok && !isNull(raw) {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return BrokerRegistration{}, fmt.Errorf("%w: endpoints is %s, want an array of strings", ErrMalformed, snippet(raw))
		}
		for i, item := range list {
			s, err := stringValue(item)
			if err != nil || isNull(item) {
				return BrokerRegistration{}, fmt.Errorf("%w: endpoints[%d] is %s, want a string", ErrMalformed, i, snippet(item))
			}
			if _, err := parseEndpoint(s); err != nil {
				return BrokerRegistration{}, fmt.Errorf("%w: endpoints[%d]: %v", ErrMalformed, i, err)
			}
			b.Endpoints = append(b.Endpoints, s)
		}
	}
	if raw, ok := obj["rack"]; ok {
		if b.Rack, err = stringValue(raw); err != nil {
			return BrokerRegistration{}, fmt.Errorf("%w: rack: %v", ErrMalformed, err)
		}
	}
	if raw, ok := obj["listener_security_protocol_map"]; ok && !isNull(raw) {
		m, err := decodeMember(raw)
		if err != nil {
			return BrokerRegistration{}, fmt.Errorf("%w: listener_security_protocol_map is %s, want an object", ErrMalformed, snippet(raw))
		}
		for _, listener := range sortedKeys(m) {
			proto, err := stringValue(m[listener])
			if err != nil || proto == "" {
				return BrokerRegistration{}, fmt.Errorf("%w: listener_security_protocol_map: protocol of %q is %s, want a name",
					ErrMalformed, listener, snippet(m[listener]))
			}
			if b.ListenerSecurityProtocolMap == nil {
				b.ListenerSecurityProtocolMap = make(map[string]string, len(m))
			}
			b.ListenerSecurityProtocolMap[listener] = proto
		}
	}
	if b.Host == "" && len(b.Endpoints) == 0 {
		return BrokerRegistration{}, fmt.Errorf("%w: broker registration has neither a host nor endpoints", ErrMalformed)
	}
	return b, nil
}

// optionalPort reads a port-like member that may be missing or null; 0 and below mean none.
func optionalPort(obj map[string]json.RawMessage, name string) (int32, error) {
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return -1, nil
	}
	n, err := intValue(raw, math.MinInt32, math.MaxInt32)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrMalformed, name, err)
	}
	if n <= 0 {
		return -1, nil
	}
	return int32(n), nil
}

// endpointForm is the connection string form kafka.cluster.EndPoint.createEndPoint accepts:
// listener://host:port or listener://[ipv6]:port; the host may be empty (bind to all) and
// the listener name runs to the last "://" that leaves a valid host and port.
var endpointForm = regexp.MustCompile(`\A(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)\z`)

type endpoint struct {
	listener string // normalised as ListenerName.normalised does: upper case
	host     string
	port     int32
}

func parseEndpoint(s string) (endpoint, error) {
	m := endpointForm.FindStringSubmatch(s)
	if m == nil {
		return endpoint{}, fmt.Errorf("%q is not listener://host:port", s)
	}
	port, err := strconv.ParseInt(m[3], 10, 32)
	if err != nil {
		return endpoint{}, fmt.Errorf("%q: port out of range", s)
	}
	return endpoint{listener: strings.ToUpper(m[1]), host: m[2], port: int32(port)}, nil
}

// Addr returns the address a Kafka 0.8 client connects to: the first endpoint whose listener
// uses the PLAINTEXT security protocol, then the top-level host and port, which Kafka keeps
// "for compatibility with older clients" (BrokerIdZNode.encode). Without a
// listener_security_protocol_map a listener is named after its protocol (before KIP-103), so
// PLAINTEXT://... is the one. Endpoints with an empty host (bind to all interfaces) or no
// usable port are skipped. An IPv6 host is returned without brackets; use net.JoinHostPort.
func (b BrokerRegistration) Addr() (host string, port int32, err error) {
	return b.AddrFor("PLAINTEXT")
}

// AddrFor returns the address of the first endpoint whose listener uses security protocol
// (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), as Addr does for PLAINTEXT; the top-level host
// and port, always PLAINTEXT, count only for it.
func (b BrokerRegistration) AddrFor(protocol string) (host string, port int32, err error) {
	for _, s := range b.Endpoints {
		ep, err := parseEndpoint(s)
		if err != nil || ep.host == "" || ep.port <= 0 {
			continue
		}
		if strings.EqualFold(b.securityProtocol(ep.listener), protocol) {
			return ep.host, ep.port, nil
		}
	}
	if strings.EqualFold(protocol, "PLAINTEXT") && b.Host != "" && b.Port > 0 {
		return b.Host, b.Port, nil
	}
	if strings.EqualFold(protocol, "PLAINTEXT") {
		return "", 0, fmt.Errorf("broker %d has no PLAINTEXT endpoint and no host and port", b.ID)
	}
	return "", 0, fmt.Errorf("broker %d has no %s endpoint", b.ID, protocol)
}

// securityProtocol maps a normalised listener name to its protocol, as
// BrokerIdZNode.decode does: through listener_security_protocol_map when there is one (its
// keys are used as written, Kafka writes them normalised), else the name is the protocol.
func (b BrokerRegistration) securityProtocol(listener string) string {
	if b.ListenerSecurityProtocolMap == nil {
		return listener
	}
	return b.ListenerSecurityProtocolMap[listener]
}

// Encode writes the registration in version 4's layout (kafka.zk.BrokerIdZNode.encode) with
// a fixed key order. It is for fixtures and the demo: the bridge never registers a broker.
// Version 0 is written as 4; whatever the version, every field is written, so a reader of any
// version finds what it needs. An empty host is written as null and a port or jmx_port of 0 or
// less as -1, as Kafka does. The timestamp is a string, and every number fits 32 bits, so
// Kafka 0.8.2's reader (kafka.utils.Json, String.toInt for numbers) can read it.
func (b BrokerRegistration) Encode() []byte {
	version := b.Version
	if version == 0 {
		version = 4
	}
	out := make([]byte, 0, 160)
	out = append(out, `{"version":`...)
	out = strconv.AppendInt(out, int64(version), 10)
	out = append(out, `,"host":`...)
	if b.Host == "" {
		out = append(out, "null"...)
	} else {
		out = appendJSONString(out, b.Host)
	}
	out = append(out, `,"port":`...)
	out = strconv.AppendInt(out, int64(noneAsMinusOne(b.Port)), 10)
	out = append(out, `,"endpoints":[`...)
	for i, ep := range b.Endpoints {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, ep)
	}
	out = append(out, `],"jmx_port":`...)
	out = strconv.AppendInt(out, int64(noneAsMinusOne(b.JMXPort)), 10)
	if b.Timestamp != "" {
		out = append(out, `,"timestamp":`...)
		out = appendJSONString(out, b.Timestamp)
	}
	if b.Rack != "" {
		out = append(out, `,"rack":`...)
		out = appendJSONString(out, b.Rack)
	}
	if len(b.ListenerSecurityProtocolMap) > 0 {
		out = append(out, `,"listener_security_protocol_map":{`...)
		for i, listener := range sortedKeys(b.ListenerSecurityProtocolMap) {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, listener)
			out = append(out, ':')
			out = appendJSONString(out, b.ListenerSecurityProtocolMap[listener])
		}
		out = append(out, '}')
	}
	out = append(out, '}')
	return out
}

func noneAsMinusOne(port int32) int32 {
	if port <= 0 {
		return -1
	}
	return port
}

// ParseTopicAssignment reads /brokers/topics/<topic>: partition → replica broker ids.
// Version 1 (0.8 to 2.3, ZkUtils.replicaAssignmentZkData) has only "partitions"; version 2
// (2.4, KIP-455) adds "adding_replicas" and "removing_replicas", which the bridge does not need
// and ignores, and version 3 (2.8, KIP-516) "topic_id" (kafka.zk.TopicZNode), kept as TopicID.
// A missing "partitions" reads as no partitions, as TopicZNode.decode reads it. Partition keys
// must be decimal as Kafka writes them (partition.toString): no sign, no leading zeros. A
// missing or null "topic_id" is no id; one that is there must be a Uuid as Uuid.fromString
// reads it (URL-safe base64 of 16 bytes).
func ParseTopicAssignment(data []byte) (TopicAssignment, error) {
	obj, err := decodeObject(data)
	if err != nil {
		return TopicAssignment{}, err
	}
	t := TopicAssignment{Version: 1, Partitions: make(map[int32][]int32)}
	if raw, ok := obj["version"]; ok && !isNull(raw) {
		v, err := intValue(raw, 1, math.MaxInt32)
		if err != nil {
			return TopicAssignment{}, fmt.Errorf("%w: version: %v", ErrMalformed, err)
		}
		t.Version = int(v)
	}
	if raw, ok := obj["topic_id"]; ok && !isNull(raw) {
		s, err := stringValue(raw)
		if err != nil {
			return TopicAssignment{}, fmt.Errorf("%w: topic_id: %v", ErrMalformed, err)
		}
		if t.TopicID, err = ParseTopicID(s); err != nil {
			return TopicAssignment{}, fmt.Errorf("%w: topic_id: %v", ErrMalformed, err)
		}
	}
	raw, ok := obj["partitions"]
	if !ok || isNull(raw) {
		return t, nil
	}
	parts, err := decodeMember(raw)
	if err != nil {
		return TopicAssignment{}, fmt.Errorf("%w: partitions is %s, want an object", ErrMalformed, snippet(raw))
	}
	for _, key := range sortedKeys(parts) {
		if !isCanonicalDecimal(key) {
			return TopicAssignment{}, fmt.Errorf("%w: partitions: key %q is not a partition number", ErrMalformed, key)
		}
		p, err := strconv.ParseInt(key, 10, 32)
		if err != nil {
			return TopicAssignment{}, fmt.Errorf("%w: partitions: partition %s is out of range", ErrMalformed, key)
		}
		replicas, err := int32List(parts[key])
		if err != nil {
			return TopicAssignment{}, fmt.Errorf("%w: partitions: replicas of partition %s: %v", ErrMalformed, key, err)
		}
		t.Partitions[int32(p)] = replicas
	}
	return t, nil
}

// ParseTopicID reads a topic id as Kafka's Uuid.fromString does: URL-safe base64 of the 16
// bytes, as Uuid.toString writes it (22 characters, no padding) or padded to 24.
func ParseTopicID(s string) ([16]byte, error) {
	var id [16]byte
	enc := base64.RawURLEncoding
	if len(s) == 24 && strings.HasSuffix(s, "==") {
		enc = base64.URLEncoding
	}
	if len(s) == 22 || enc == base64.URLEncoding {
		if n, err := enc.Decode(id[:], []byte(s)); err == nil && n == len(id) {
			return id, nil
		}
	}
	return [16]byte{}, fmt.Errorf("%.40q is not the base64 of a 16-byte Uuid", s)
}

// FormatTopicID writes a topic id as Kafka's Uuid.toString does.
func FormatTopicID(id [16]byte) string { return base64.RawURLEncoding.EncodeToString(id[:]) }

// Encode writes the assignment as ZkUtils.replicaAssignmentZkData does, partitions in numeric
// order. Version 0 is written as 1. From version 2 it adds empty "adding_replicas" and
// "removing_replicas" (no reassignment under way), and a topic id as "topic_id", as
// kafka.zk.TopicZNode.encode does.
func (t TopicAssignment) Encode() []byte {
	version := t.Version
	if version == 0 {
		version = 1
	}
	b := make([]byte, 0, 32+16*len(t.Partitions))
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(version), 10)
	b = append(b, `,"partitions":{`...)
	for i, p := range t.PartitionIDs() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(p), 10)
		b = append(b, `":[`...)
		for j, r := range t.Partitions[p] {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(r), 10)
		}
		b = append(b, ']')
	}
	b = append(b, '}')
	if version >= 2 {
		b = append(b, `,"adding_replicas":{},"removing_replicas":{}`...)
	}
	if t.TopicID != ([16]byte{}) {
		b = append(b, `,"topic_id":"`...)
		b = append(b, FormatTopicID(t.TopicID)...)
		b = append(b, '"')
	}
	b = append(b, '}')
	return b
}

// PartitionIDs returns the topic's partitions in ascending order.
func (t TopicAssignment) PartitionIDs() []int32 {
	ids := make([]int32, 0, len(t.Partitions))
	for p := range t.Partitions {
		ids = append(ids, p)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// ParsePartitionState reads /brokers/topics/<topic>/partitions/<p>/state, written by the
// controller (ZkUtils.leaderAndIsrZkData, later kafka.zk.TopicPartitionStateZNode). leader,
// leader_epoch, controller_epoch and isr are required, as TopicPartitionStateZNode.decode
// requires them; members added later (leader_recovery_state in 3.2) are ignored. Leader -1
// means the partition has no leader.
func ParsePartitionState(data []byte) (PartitionState, error) {
	obj, err := decodeObject(data)
	if err != nil {
		return PartitionState{}, err
	}
	s := PartitionState{Version: 1}
	if raw, ok := obj["version"]; ok && !isNull(raw) {
		v, err := intValue(raw, 1, math.MaxInt32)
		if err != nil {
			return PartitionState{}, fmt.Errorf("%w: version: %v", ErrMalformed, err)
		}
		s.Version = int(v)
	}
	for _, f := range []struct {
		name string
		dst  *int32
	}{
		{"controller_epoch", &s.ControllerEpoch},
		{"leader", &s.Leader},
		{"leader_epoch", &s.LeaderEpoch},
	} {
		raw, ok := obj[f.name]
		if !ok {
			return PartitionState{}, fmt.Errorf("%w: no %s", ErrMalformed, f.name)
		}
		n, err := intValue(raw, math.MinInt32, math.MaxInt32)
		if err != nil {
			return PartitionState{}, fmt.Errorf("%w: %s: %v", ErrMalformed, f.name, err)
		}
		*f.dst = int32(n)
	}
	raw, ok := obj["isr"]
	if !ok {
		return PartitionState{}, fmt.Errorf("%w: no isr", ErrMalformed)
	}
	if s.ISR, err = int32List(raw); err != nil {
		return PartitionState{}, fmt.Errorf("%w: isr: %v", ErrMalformed, err)
	}
	return s, nil
}

// int32List reads a JSON array of 32-bit integers (broker ids). An empty array gives an empty,
// non-nil slice.
func int32List(raw json.RawMessage) ([]int32, error) {
	var items []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, fmt.Errorf("%s is not an array", snippet(raw))
	}
	out := make([]int32, 0, len(items))
	for i, item := range items {
		n, err := intValue(item, math.MinInt32, math.MaxInt32)
		if err != nil {
			return nil, fmt.Errorf("element %d: %v", i, err)
		}
		out = append(out, int32(n))
	}
	return out, nil
}
