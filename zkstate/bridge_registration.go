package zkstate

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
)

// BridgeRegistration is the JSON of <root>/bridges/<node-id> (BridgePath), the ephemeral a
// running bridge keeps in its session: what the other bridges of one service need to name it
// to clients (its advertised Kafka address, its legacy listener, the proxy listener it serves
// for each upstream broker), which placement rule it computes, and, for operators, its admin
// listener, its software version and since when it runs.
//
//	{"version":2,"node_id":9001,"kafka":"0.0.0.0:9092","advertised":"bridge-1:9092",
//	 "legacy":"bridge-1:9190","admin":"127.0.0.1:9191","proxy":{"1":"bridge-1:9093"},
//	 "software":"v1.4.0","placement":1,"started":"1700000000000","pid":4242}
//
// and, while it shuts down, "draining":true; "data_path":true when it relays to upstream
// brokers, "dialed_host":true when it has no advertised host of its own (DialedHost).
//
// Version 1 (bridges before several bridges were one service) had no legacy, proxy, software
// and placement fields: it parses with them empty, Placement 0 (no rule).
//
// A registration is created once per incarnation, so a watch of <root>/bridges' children sees
// every change of the live set; a bridge rewrites it in place when its proxy listeners change
// (an upstream broker joins or leaves) and when it drains, so the others also watch its data.
// The proxy map was part of version 2 from the start (bridges before the data path was placed
// across bridges left it empty): filling it needs no new version.
type BridgeRegistration struct {
	NodeID int32
	// Kafka is the Kafka listener's address as bound; Advertised the host:port clients are told
	// (empty: the listener's, see KafkaAddr).
	Kafka      string
	Advertised string
	Legacy     string // the legacy (seed 001) listener's advertised address; empty: none
	Admin      string
	// Proxy maps an upstream broker id to the proxy listener this bridge serves it on (the data
	// path); empty without one.
	Proxy map[int32]string
	// Software is the bridge's build version; Placement the placement rule version it
	// computes (package placement's Version).
	Software  string
	Placement int
	// BrokerPlacement is the rule it serves upstream brokers by (package placement's
	// BrokerVersion); 0 before the field: one broker at a time (placement.Server).
	BrokerPlacement int
	StartedMs       int64 // Unix milliseconds, written as a string like Kafka's timestamps
	PID             int
	// Draining marks a bridge that is shutting down: it is out of the live set (no group maps to
	// it), yet still alive, so its groups are taken over only once it has handed each over.
	Draining bool
	// DataPath says the bridge relays to upstream brokers: its Metadata is theirs, rewritten
	// (relay.Peers), not built from /brokers. Bridges of one service must agree on it.
	// Registrations before the field: true when Proxy is not empty (DataPathOn).
	DataPath bool
	// DialedHost says the bridge listens on every interface without an advertised address: it
	// names itself to its own clients at the host each one dialed, while Advertised holds this
	// machine's host name for the other bridges to give, so their answers may differ.
	DialedHost bool
}

// DataPathOn reports whether the bridge relays to upstream brokers, also for a registration
// written before the data_path field (such a bridge advertised proxy listeners).
func (r BridgeRegistration) DataPathOn() bool { return r.DataPath || len(r.Proxy) > 0 }

// BridgeRegistrationVersion is the version Encode writes.
const BridgeRegistrationVersion = 2

type bridgeRegistrationJSON struct {
	Version    int               `json:"version"`
	NodeID     *int32            `json:"node_id"`
	Kafka      string            `json:"kafka"`
	Advertised string            `json:"advertised,omitempty"`
	Legacy     string            `json:"legacy,omitempty"`
	Admin      string            `json:"admin"`
	Proxy      map[string]string `json:"proxy,omitempty"`
	Software   string            `json:"software,omitempty"`
	Placement  int               `json:"placement,omitempty"`
	Brokers    int               `json:"broker_placement,omitempty"`
	Started    string            `json:"started"`
	PID        int               `json:"pid"`
	Draining   bool              `json:"draining,omitempty"`
	DataPath   bool              `json:"data_path,omitempty"`
	DialedHost bool              `json:"dialed_host,omitempty"`
}

// KafkaAddr is the address clients are told to reach the bridge's Kafka listener at: the
// advertised one, else the listener's.
func (r BridgeRegistration) KafkaAddr() string {
	if r.Advertised != "" {
		return r.Advertised
	}
	return r.Kafka
}

// Encode writes the registration's JSON (BridgeRegistrationVersion).
func (r BridgeRegistration) Encode() []byte {
	node := r.NodeID
	j := bridgeRegistrationJSON{Version: BridgeRegistrationVersion, NodeID: &node, Kafka: r.Kafka, Advertised: r.Advertised,
		Legacy: r.Legacy, Admin: r.Admin, Software: r.Software, Placement: r.Placement,
		Brokers: r.BrokerPlacement, Started: strconv.FormatInt(r.StartedMs, 10), PID: r.PID, Draining: r.Draining,
		DataPath: r.DataPath, DialedHost: r.DialedHost}
	if len(r.Proxy) > 0 {
		j.Proxy = make(map[string]string, len(r.Proxy))
		for id, addr := range r.Proxy {
			j.Proxy[strconv.Itoa(int(id))] = addr
		}
	}
	b, _ := json.Marshal(j) // map keys are sorted: one registration, one encoding
	return b
}

// ParseBridgeRegistration reads a bridge registration (version 1 or 2). A registration without
// a node id, or whose addresses are not host:port, names no bridge a client could reach: an
// error wrapping ErrMalformed.
func ParseBridgeRegistration(data []byte) (BridgeRegistration, error) {
	if _, err := decodeObject(data); err != nil {
		return BridgeRegistration{}, fmt.Errorf("bridge registration: %w", err)
	}
	var j bridgeRegistrationJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return BridgeRegistration{}, fmt.Errorf("%w: bridge registration: %v", ErrMalformed, err)
	}
	if j.Version < 1 {
		return BridgeRegistration{}, fmt.Errorf("%w: bridge registration version %d", ErrMalformed, j.Version)
	}
	if j.NodeID == nil || *j.NodeID < 0 {
		return BridgeRegistration{}, fmt.Errorf("%w: bridge registration names no node_id", ErrMalformed)
	}
	r := BridgeRegistration{NodeID: *j.NodeID, Kafka: j.Kafka, Advertised: j.Advertised, Legacy: j.Legacy, Admin: j.Admin,
		Software: j.Software, Placement: j.Placement, BrokerPlacement: j.Brokers, PID: j.PID, Draining: j.Draining,
		DataPath: j.DataPath, DialedHost: j.DialedHost}
	for _, a := range []struct{ field, addr string }{{"kafka", j.Kafka}, {"advertised", j.Advertised}, {"legacy", j.Legacy}, {"admin", j.Admin}} {
		if a.addr == "" && a.field != "kafka" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return BridgeRegistration{}, fmt.Errorf("%w: bridge registration %s %q is not host:port", ErrMalformed, a.field, a.addr)
		}
	}
	if len(j.Proxy) > 0 {
		r.Proxy = make(map[int32]string, len(j.Proxy))
		for k, addr := range j.Proxy {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil || id < 0 {
				return BridgeRegistration{}, fmt.Errorf("%w: bridge registration proxy broker id %q", ErrMalformed, k)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return BridgeRegistration{}, fmt.Errorf("%w: bridge registration proxy %s %q is not host:port", ErrMalformed, k, addr)
			}
			r.Proxy[int32(id)] = addr
		}
	}
	if j.Started != "" {
		ms, err := strconv.ParseInt(j.Started, 10, 64)
		if err != nil {
			return BridgeRegistration{}, fmt.Errorf("%w: bridge registration started %q", ErrMalformed, j.Started)
		}
		r.StartedMs = ms
	}
	return r, nil
}

// ProxyBrokers returns the upstream broker ids the registration serves, sorted.
func (r BridgeRegistration) ProxyBrokers() []int32 {
	ids := make([]int32, 0, len(r.Proxy))
	for id := range r.Proxy {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
