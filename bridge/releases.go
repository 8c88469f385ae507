package bridge

import "sync"

// ownerReleases lets the claimers of one bridge wake each other. In a mixed group the Kafka
// members' claim (mixed.go) and the legacy coordinator's often wait for each other: each must
// let go of what moves to the other before the other can claim it. Without a signal each side
// notices the other's release only at the end of its backoff (50 ms doubling for the Kafka
// claim, 100 ms doubling for the legacy one), which made a legacy join wait 300 ms for a
// release that came after 200. Members the bridge does not drive (0.8 consumers, other
// bridges) are still noticed at the end of the backoff.
//
// A nil *ownerReleases does nothing, so actors built outside a Bridge work unchanged.
type ownerReleases struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{} // group → wake channels (capacity 1)
}

func newOwnerReleases() *ownerReleases {
	return &ownerReleases{subs: map[string]map[chan struct{}]struct{}{}}
}

// subscribe returns the channel a claimer of group waits on besides its backoff timer; nil
// (never ready) from a nil hub.
func (r *ownerReleases) subscribe(group string) chan struct{} {
	if r == nil {
		return nil
	}
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs[group] == nil {
		r.subs[group] = map[chan struct{}]struct{}{}
	}
	r.subs[group][ch] = struct{}{}
	return ch
}

func (r *ownerReleases) unsubscribe(group string, ch chan struct{}) {
	if r == nil || ch == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.subs[group], ch)
	if len(r.subs[group]) == 0 {
		delete(r.subs, group)
	}
}

// released wakes every claimer of group but self: owner znodes of the group were deleted. It
// never blocks; a claimer not waiting finds the wake pending and looks once more at its next
// wait, which costs one read.
func (r *ownerReleases) released(group string, self chan struct{}) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.subs[group] {
		if ch == self {
			continue
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
