package bridge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves the admin listener:
//
//   - /metrics: Prometheus text, from the Bridge's own registry;
//   - /healthz: 200 while the process runs (liveness: restart me only if this fails);
//   - /readyz: 200 while the bridge has a ZooKeeper session, its registration exists in that
//     session (register_own.go) and its Kafka listener serves, else 503 with the reasons, one a
//     line (readiness: send me clients only if this succeeds); when
//     ready, "ok" and a "note: " line for what an operator should know (bypass.go; groups whose
//     mode record does not parse, modes.go);
//   - /bridges: the live bridges as this bridge sees them (BridgesView, JSON): each one's state,
//     "unreachable" for a peer that looks dead (peers_down.go). `zkbridge bridges` reads it.
func (b *Bridge) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(b.reg, promhttp.HandlerOpts{Registry: b.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if why := b.readiness(); len(why) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(why, "\n"))
			return
		}
		fmt.Fprintln(w, "ok")
		for _, n := range b.readinessNotes() { // bypass.go
			fmt.Fprintln(w, "note: "+n)
		}
	})
	mux.HandleFunc("GET /bridges", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(b.peers.bridgesView())
	})
	return mux
}

// The states of a live bridge in BridgesView.
const (
	// BridgeLive: counted in the live view and named in Metadata.
	BridgeLive = "live"
	// BridgeUnreachable: registered, but its Kafka listener refused every probe for 300 ms
	// after taking a connection (it looks dead): left out of Metadata and of legacy
	// brokers_info; its groups stay its own until its ZooKeeper session expires.
	BridgeUnreachable = "unreachable"
)

// BridgesView is the admin listener's /bridges: the live bridges as the bridge asked sees them.
type BridgesView struct {
	// NodeID is the bridge that answered.
	NodeID  int32         `json:"node_id"`
	Bridges []BridgeState `json:"bridges"`
}

// BridgeState is one live bridge in a BridgesView.
type BridgeState struct {
	NodeID int32  `json:"node_id"`
	State  string `json:"state"` // BridgeLive or BridgeUnreachable
}

// bridgesView is the live view with each peer's state (the admin listener's /bridges).
func (p *peerSet) bridgesView() BridgesView {
	v := p.current()
	out := BridgesView{NodeID: p.self, Bridges: make([]BridgeState, 0, len(v.ids))}
	for _, id := range v.ids {
		st := BridgeLive
		if !slices.Contains(v.named, id) {
			st = BridgeUnreachable
		}
		out.Bridges = append(out.Bridges, BridgeState{NodeID: id, State: st})
	}
	return out
}
