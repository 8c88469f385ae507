// Package placement decides which bridge coordinates a group: every bridge computes the same
// answer from the same set of live bridges, with no coordination beyond that set.
//
// The rule is rendezvous (highest random weight) hashing: each live bridge gets a score for the
// group, the highest score wins. Two properties make it fit for several bridges as one service:
//   - a bridge joining takes only the groups whose new highest score is its own (about 1/N of
//     them), and each such group moves from exactly one old owner;
//   - a bridge leaving gives up only its own groups, spread over the survivors in proportion.
//
// The scores are a wire fact between bridges of different versions during a rolling upgrade:
// Version names the rule, and a change to the hash is a new version that bridges advertise in
// their registration before any of them uses it.
package placement

import (
	"slices"
	"strconv"
)

// Version of the placement rule computed by Owner. Bridges advertise it in their registration so
// that a rolling upgrade never runs two rules at once.
const Version = 1

// Owner returns the node that coordinates group among the live nodes, and false when there is
// none. The order of nodes does not matter; duplicates count once.
func Owner(group string, nodes []int32) (int32, bool) {
	if len(nodes) == 0 {
		return 0, false
	}
	g := groupHash(group)
	best, bestScore := nodes[0], score(g, nodes[0])
	for _, n := range nodes[1:] {
		s := score(g, n)
		// Ties (probability 2^-64) go to the lower node id, so the answer never depends on order.
		if s > bestScore || (s == bestScore && n < best) {
			best, bestScore = n, s
		}
	}
	return best, true
}

// Ranked returns nodes in the order they would own group: the owner first, then the node that
// takes over if the owner goes, and so on. It does not modify nodes.
func Ranked(group string, nodes []int32) []int32 {
	g := groupHash(group)
	out := slices.Clone(nodes)
	slices.Sort(out)
	out = slices.Compact(out)
	slices.SortStableFunc(out, func(a, b int32) int {
		sa, sb := score(g, a), score(g, b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return out
}

// BrokerKey is the name nodes are ranked by for upstream broker id (the data path across several
// bridges: one bridge's proxy listener serves each broker). Brokers and groups share the rule;
// a group named "broker/1" merely shares broker 1's ranking.
func BrokerKey(id int32) string { return "broker/" + strconv.Itoa(int(id)) }

// Server returns the node that serves upstream broker id: the first of Ranked(BrokerKey(id),
// nodes) for which listens reports a proxy listener for the broker, so that when it goes the
// next in rank takes the broker. False when no node listens for it.
func Server(id int32, nodes []int32, listens func(node int32) bool) (int32, bool) {
	for _, n := range Ranked(BrokerKey(id), nodes) {
		if listens(n) {
			return n, true
		}
	}
	return 0, false
}

// BrokerVersion of the rule computed by Servers (1: Server, one broker at a time). Bridges
// advertise it in their registration, and use Servers only while every live bridge does, so that
// during a rolling upgrade every bridge names the same servers.
const BrokerVersion = 2

// Servers returns the node that serves each upstream broker of ids among nodes, balanced: the
// brokers in id order, each to the first of its ranking (Ranked(BrokerKey(id), nodes)) that
// listens for it and serves fewer than its share so far, the brokers divided by the nodes and
// rounded up; when every node that listens for it has its share, the first that listens. A
// broker no node listens for is left out. Server alone gives one node two or three of three
// brokers over three nodes 78 % of the time, and a node's death then takes that many of the
// brokers' addresses out of every client's Metadata at once; here each node serves one.
//
// A node joining or leaving moves the brokers whose bounded choice changed, which may be more
// than its own (Server's moves only those); upstream brokers are few, and a move changes only the
// address Metadata names for the broker (every bridge listens for every broker).
func Servers(ids []int32, nodes []int32, listens func(node, broker int32) bool) map[int32]int32 {
	ids = slices.Sorted(slices.Values(ids))
	ids = slices.Compact(ids)
	set := slices.Compact(slices.Sorted(slices.Values(nodes)))
	out := make(map[int32]int32, len(ids))
	if len(set) == 0 {
		return out
	}
	share := (len(ids) + len(set) - 1) / len(set)
	load := make(map[int32]int, len(set))
	for _, id := range ids {
		first, found := int32(0), false
		for _, n := range Ranked(BrokerKey(id), set) {
			if !listens(n, id) {
				continue
			}
			if !found {
				first, found = n, true
			}
			if load[n] < share {
				first = n
				break
			}
		}
		if found {
			out[id] = first
			load[first]++
		}
	}
	return out
}

// ServersBy is the servers of the brokers ids by rule, the oldest broker rule the live bridges
// advertise (0: a bridge from before the field): Servers from BrokerVersion on, else Server
// broker by broker, as older bridges compute them.
func ServersBy(rule int, ids []int32, nodes []int32, listens func(node, broker int32) bool) map[int32]int32 {
	if rule >= BrokerVersion {
		return Servers(ids, nodes, listens)
	}
	out := make(map[int32]int32, len(ids))
	for _, id := range ids {
		if n, ok := Server(id, nodes, func(n int32) bool { return listens(n, id) }); ok {
			out[id] = n
		}
	}
	return out
}

// Moves counts the groups whose owner differs between the node sets before and after.
func Moves(groups []string, before, after []int32) int {
	n := 0
	for _, g := range groups {
		a, okA := Owner(g, before)
		b, okB := Owner(g, after)
		if okA != okB || a != b {
			n++
		}
	}
	return n
}

// groupHash is FNV-1a over the group id's bytes: cheap, stable, defined without any library.
func groupHash(group string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(group); i++ {
		h ^= uint64(group[i])
		h *= prime
	}
	return h
}

// score mixes the group's hash with the node id. FNV alone distributes similar group ids
// ("orders-1", "orders-2") poorly in its high bits, so both halves go through a full-avalanche
// finalizer (splitmix64's) before and after they are combined.
func score(group uint64, node int32) uint64 {
	return mix(group ^ mix(uint64(uint32(node))+0x9e3779b97f4a7c15))
}

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
