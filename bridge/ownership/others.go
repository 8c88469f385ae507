package ownership

import (
	"slices"
	"strconv"
	"strings"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Resolve turns the registrations of a group's /consumers/<g>/ids (a zkstate Snapshot's
// Consumers and Problems) into Input.Others: every registration that is not one of the bridge's
// members being assigned (own), as consumer id → topic → thread count. A static subscription is
// taken as registered (TopicCount.constructTopicCount, TC:59-98); a white_list or black_list one
// is resolved against topics, the topics present in /brokers/topics, as
// WildcardTopicCount.getConsumerThreadIdsPerTopic does (zkstate.WildcardThreads).
//
// A registration that cannot be read — malformed JSON (Snapshot leaves it out of Consumers and
// reports it in Problems), or a topic filter we cannot compile — is left out and returned in
// skipped. A zk member fails its rebalance on it (it reads every registration for the
// AssignmentContext, PA:51-52), so the group has no assignment to agree on; leaving it out keeps
// the bridge's members running and every kind of them agreeing, which matters more: the
// bridge's claims must not wait on each other.
func Resolve(group string, consumers map[string]zkstate.Consumer, problems []zkstate.Problem,
	topics []string, own func(id string) bool) (others map[string]map[string]int, skipped []zkstate.Problem) {
	prefix := zkstate.IDsPath(group) + "/"
	for _, pr := range problems {
		if id, ok := strings.CutPrefix(pr.Path, prefix); ok && !strings.Contains(id, "/") && !own(id) {
			skipped = append(skipped, pr)
		}
	}
	others = make(map[string]map[string]int, len(consumers))
	for id, c := range consumers {
		if own(id) {
			continue
		}
		threads, err := zkstate.WildcardThreads(id, c.Registration, topics)
		if err != nil {
			skipped = append(skipped, zkstate.Problem{Path: zkstate.IDPath(group, id), Err: err})
			continue
		}
		sub := make(map[string]int, len(threads))
		for topic, ids := range threads {
			if len(ids) > 0 {
				sub[topic] = len(ids)
			}
		}
		others[id] = sub
	}
	slices.SortFunc(skipped, func(a, b zkstate.Problem) int { return strings.Compare(a.Path, b.Path) })
	return others, skipped
}

// ResolveSnapshot is Resolve over a snapshot, against the topics it knows, with ours the
// bridge's members being assigned.
func ResolveSnapshot(snap *zkstate.GroupSnapshot, ours map[string]bool) map[string]map[string]int {
	topics := make([]string, 0, len(snap.Partitions))
	for t := range snap.Partitions {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	others, _ := Resolve(snap.Group, snap.Consumers, nil, topics, func(id string) bool { return ours[id] })
	return others
}

// Fingerprint says what, besides the bridge's members being assigned (ours), a group's
// assignment depends on: every other registration's threads and the partition count of every
// subscribed topic, ours included. When it changes, the members must be assigned again.
func Fingerprint(snap *zkstate.GroupSnapshot, ours map[string]bool) string {
	var parts []string
	topics := map[string]bool{}
	for cid, sub := range ResolveSnapshot(snap, ours) {
		var ts []string
		for t, n := range sub {
			ts = append(ts, t+"="+strconv.Itoa(n))
			topics[t] = true
		}
		slices.Sort(ts)
		parts = append(parts, cid+"{"+strings.Join(ts, ",")+"}")
	}
	for cid, c := range snap.Consumers {
		if ours[cid] {
			for t := range c.Registration.Subscription {
				topics[t] = true
			}
		}
	}
	slices.Sort(parts)
	var ts []string
	for t := range topics {
		ts = append(ts, t+":"+strconv.Itoa(len(snap.Partitions[t])))
	}
	slices.Sort(ts)
	return strings.Join(parts, ";") + "|" + strings.Join(ts, ",")
}
