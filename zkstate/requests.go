package zkstate

import "sync/atomic"

// Request kinds counted by Store.Requests, one per ZooKeeper request the Store sends. A
// watched read counts as its read (get, children, exists); a Snapshot's multiRead counts once
// per request whatever the number of reads it carries; pings are not counted.
const (
	ReqGet       = "get"
	ReqChildren  = "children"
	ReqExists    = "exists"
	ReqCreate    = "create"
	ReqSet       = "set"
	ReqDelete    = "delete"
	ReqMulti     = "multi"
	ReqMultiRead = "multiread"
)

// RequestKinds lists the kinds of Store.Requests in a fixed order (for metrics).
var RequestKinds = []string{ReqGet, ReqChildren, ReqExists, ReqCreate, ReqSet, ReqDelete, ReqMulti, ReqMultiRead}

// requestCounts are the Store's request counters, by kind: the cost of a feature in ZooKeeper
// requests is what an ensemble shared by hundreds of consumers pays for, so it is measured.
type requestCounts struct {
	n [8]atomic.Int64 // indexed as RequestKinds
}

func (r *requestCounts) add(kind string, n int) {
	for i, k := range RequestKinds {
		if k == kind {
			r.n[i].Add(int64(n))
			return
		}
	}
}

// Requests returns how many requests of each kind (RequestKinds) the Store has sent since Open.
func (s *Store) Requests() map[string]int64 {
	out := make(map[string]int64, len(RequestKinds))
	for i, k := range RequestKinds {
		out[k] = s.reqs.n[i].Load()
	}
	return out
}
