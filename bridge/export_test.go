package bridge

// GroupOwners counts the goroutines that own group g's state on b: one per distinct goroutine
// running a side of the group (its Kafka members' actor, its legacy members' actor).
func GroupOwners(b *Bridge, g string) int {
	owners := map[any]bool{}
	b.coord.mu.Lock()
	if a := b.coord.actors[g]; a != nil {
		owners[ownerOf(a.host, a)] = true
	}
	b.coord.mu.Unlock()
	if lc := b.legacy.Load(); lc != nil {
		lc.mu.Lock()
		if lg := lc.groups[g]; lg != nil {
			owners[ownerOf(lg.host, lg)] = true
		}
		lc.mu.Unlock()
	}
	return len(owners)
}

// ownerOf is the goroutine owner of a side: its host, or the side itself when it runs on a
// goroutine of its own.
func ownerOf(h *host, side any) any {
	if h != nil {
		return h
	}
	return side
}

// LegacyMembers is the number of legacy consumers registered with b's legacy coordinator.
func LegacyMembers(b *Bridge) int {
	lc := b.legacy.Load()
	if lc == nil {
		return 0
	}
	return lc.Stats().Members
}
