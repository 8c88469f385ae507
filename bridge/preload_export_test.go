package bridge

// PreparedTakeovers is how many groups b has prepared to take from peer once its session ends
// (preload.go); -1 while none are prepared (the peer does not look dead, or the reads are not in).
func PreparedTakeovers(b *Bridge, peer int32) int {
	b.coord.pre.mu.Lock()
	defer b.coord.pre.mu.Unlock()
	p := b.coord.pre.byPeer[peer]
	if p == nil || !p.done {
		return -1
	}
	return len(p.groups)
}
