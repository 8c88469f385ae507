package bridge

// Bridges of one service must answer Metadata alike (docs/several-bridges.md), or a client
// swaps its broker set at every refresh and cannot reach a coordinator that another bridge
// names. Two settings break that without any error: a bridge without the data path next to
// bridges with it (its Metadata lists the brokers of /brokers, theirs the relayed listeners),
// and a bridge with no reachable advertised host (one that advertises a wildcard or empty
// host, which clients cannot dial, or one that names itself by the host each client dialed,
// while the others name it by its host name). Every bridge reads every registration, so each
// computes the same disagreements, logs them once per change, exports their number
// (zkbridge_bridges_disagreements) and `zkbridge bridges` shows them.

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Kinds of Disagreement.
const (
	DisagreeDataPath = "data_path"       // relays to upstream brokers where others do not, or the reverse
	DisagreeHost     = "advertised_host" // advertises a host clients cannot be given alike
)

// Disagreement is one way a live bridge's registration makes its Metadata answers differ from
// the other bridges' of its service.
type Disagreement struct {
	Node   int32  `json:"node_id"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

func (d Disagreement) String() string { return fmt.Sprintf("bridge %d: %s", d.Node, d.Detail) }

// Disagreements returns what makes the answers of the bridges registered in live (not
// draining) differ, by node and kind; none for fewer than two bridges.
//
//   - Data path: when some relay and others do not, each bridge on the smaller side (the ones
//     without it on a tie) is named, with the others.
//   - Host: a bridge whose advertised Kafka address, or a proxy listener, has an empty or
//     wildcard host (0.0.0.0, ::) that clients would be told to dial; a bridge that names
//     itself by the host each client dialed (DialedHost).
func Disagreements(live []zkstate.BridgeRegistration) []Disagreement {
	if len(live) < 2 {
		return nil
	}
	var on, off []int32
	for _, r := range live {
		if r.DataPathOn() {
			on = append(on, r.NodeID)
		} else {
			off = append(off, r.NodeID)
		}
	}
	slices.Sort(on)
	slices.Sort(off)
	var out []Disagreement
	if len(on) > 0 && len(off) > 0 {
		if len(on) < len(off) {
			for _, n := range on {
				out = append(out, Disagreement{Node: n, Kind: DisagreeDataPath, Detail: fmt.Sprintf(
					"relays to the upstream brokers (data path) while bridges %v serve groups only: their Metadata lists the brokers of /brokers, this one's the relayed listeners", off)})
			}
		} else {
			for _, n := range off {
				out = append(out, Disagreement{Node: n, Kind: DisagreeDataPath, Detail: fmt.Sprintf(
					"serves groups only (no data path) while bridges %v relay to the upstream brokers: its Metadata lists the brokers of /brokers, theirs the relayed listeners", on)})
			}
		}
	}
	for _, r := range live {
		var bad []string
		if wildcardHost(r.KafkaAddr()) {
			bad = append(bad, "kafka "+r.KafkaAddr())
		}
		for _, id := range r.ProxyBrokers() {
			if wildcardHost(r.Proxy[id]) {
				bad = append(bad, fmt.Sprintf("proxy for broker %d %s", id, r.Proxy[id]))
			}
		}
		switch {
		case len(bad) > 0:
			out = append(out, Disagreement{Node: r.NodeID, Kind: DisagreeHost, Detail: fmt.Sprintf(
				"advertises no host clients can dial (%s): set --advertised-addr", strings.Join(bad, ", "))})
		case r.DialedHost:
			out = append(out, Disagreement{Node: r.NodeID, Kind: DisagreeHost, Detail: fmt.Sprintf(
				"listens on every interface without --advertised-addr: it names itself by the host each client dialed, the other bridges name it %s", r.KafkaAddr())})
		}
	}
	slices.SortFunc(out, func(a, b Disagreement) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// wildcardHost reports whether addr's host is empty or a wildcard address.
func wildcardHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // the registration's parser refused such addresses
	}
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// agreement follows the disagreements of the live view: each bridge that starts to disagree
// on something is logged once as a warning (not again while it goes on disagreeing on it,
// whatever else changes), each that stops once, and their number by kind is exported.
type agreement struct {
	last  []Disagreement
	gauge *prometheus.GaugeVec // kind
}

func newAgreementMetric(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "zkbridge", Subsystem: "bridges", Name: "disagreements",
		Help: "Live bridges of this service whose registration makes their Metadata differ from the others', by kind: data_path (relays where others do not, or the reverse), advertised_host (no host clients can be given alike). Should be 0; the log says which and why.",
	}, []string{"kind"})
	for _, k := range []string{DisagreeDataPath, DisagreeHost} {
		g.WithLabelValues(k)
	}
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("bridge: registering metrics: %w", err)
	}
	return g, nil
}

// agreementInput is what p's disagreements are computed from: our registration (once written)
// and the others', none draining.
func (p *peerSet) agreementInput() []zkstate.BridgeRegistration {
	live := make([]zkstate.BridgeRegistration, 0, len(p.others)+1)
	for _, r := range p.others {
		live = append(live, r)
	}
	if p.mine != nil && p.serving.Load() {
		live = append(live, *p.mine)
	}
	return live
}

// checkAgreement compares the live registrations (p.mu held) with what it found last time.
func (p *peerSet) checkAgreement() {
	now := Disagreements(p.agreementInput())
	a := &p.agree
	same := func(x, y Disagreement) bool { return x.Node == y.Node && x.Kind == y.Kind }
	for _, d := range now {
		if !slices.ContainsFunc(a.last, func(l Disagreement) bool { return same(l, d) }) {
			p.log.Warn().Int32("node_id", d.Node).Str("kind", d.Kind).
				Msgf("bridges of this service answer Metadata differently: bridge %d %s", d.Node, d.Detail)
		}
	}
	for _, d := range a.last {
		if !slices.ContainsFunc(now, func(n Disagreement) bool { return same(n, d) }) {
			p.log.Info().Int32("node_id", d.Node).Str("kind", d.Kind).Msg("bridges of this service agree again")
		}
	}
	a.last = now
	if a.gauge != nil {
		for _, k := range []string{DisagreeDataPath, DisagreeHost} {
			n := 0
			for _, d := range now {
				if d.Kind == k {
					n++
				}
			}
			a.gauge.WithLabelValues(k).Set(float64(n))
		}
	}
}

// Disagreements returns the disagreements among the live bridges this bridge last found.
func (b *Bridge) Disagreements() []Disagreement {
	b.peers.mu.Lock()
	defer b.peers.mu.Unlock()
	return slices.Clone(b.peers.agree.last)
}
