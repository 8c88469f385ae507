package bridge

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves the admin listener:
//
//   - /metrics: Prometheus text, from the Bridge's own registry;
//   - /healthz: 200 while the process runs (liveness: restart me only if this fails);
//   - /readyz: 200 while the bridge has a ZooKeeper session and its Kafka listener serves, else
//     503 with the reasons, one a line (readiness: send me clients only if this succeeds); when
//     ready, "ok" and a "note: " line for what an operator should know (bypass.go; groups whose
//     mode record does not parse, modes.go).
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
	return mux
}
