package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/zkbridge/zkbridge/zkstate"
)

// groupView is what `groups describe` shows, built from a snapshot by pure code so the
// printers only format and the logic is tested without ZooKeeper.
type groupView struct {
	Group string `json:"group"`
	// Coordinator names the bridge that coordinates the group's Kafka members (placement over
	// the running bridges, zkbridge bridges); empty when none runs.
	Coordinator   string          `json:"coordinator,omitempty"`
	Members       []memberView    `json:"members"`
	Partitions    []partitionView `json:"partitions"`
	Unowned       []string        `json:"unowned"`
	StaleOwners   []string        `json:"stale_owners"`
	MissingTopics []string        `json:"missing_topics"`
	Problems      []problemView   `json:"problems"`
}

type memberView struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Node is the node id of the bridge hosting a kafka or legacy member; MemberID is a kafka
	// member's own member id and Instance its group.instance.id (zkstate.HostedMember).
	Node         *int32         `json:"node,omitempty"`
	MemberID     string         `json:"member_id,omitempty"`
	Instance     string         `json:"instance,omitempty"`
	Pattern      string         `json:"pattern"`
	Subscription map[string]int `json:"subscription"`
	Threads      int            `json:"threads"`
	Owned        []string       `json:"owned"`
	// Registering: its ids znode has no data yet (kafka-node writes it in two steps), so it has
	// no subscription until it is filled.
	Registering bool `json:"registering,omitempty"`
}

type partitionView struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Owner     string `json:"owner,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
	// LogEnd and Lag are set when the brokers are known (lag.go).
	LogEnd *int64 `json:"log_end_offset,omitempty"`
	Lag    *int64 `json:"lag,omitempty"`
}

type problemView struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

// Member kinds (DESIGN §1). A bridge registers the kafka and legacy members it hosts in /ids in
// the 0.8 format, so that zk members count them, and writes beside each registration a
// hosted-member znode <root>/groups/<g>/hosted/<consumer-id> saying its kind (zkstate/hosted.go);
// a registration without one is a zk member, a 0.8 ZooKeeper consumer. kindBridge is what is
// left of the kind when a running bridge's session holds the registration but no hosted znode
// describes it (a bridge that does not write them).
const (
	kindZK     = zkstate.KindZK
	kindKafka  = zkstate.KindKafka
	kindLegacy = zkstate.KindLegacy
	kindBridge = "bridge"
)

// hostedRecord is a hosted-member znode as read: the record, and the session holding it.
type hostedRecord struct {
	zkstate.HostedMember
	Session int64 // the znode's ephemeral owner, 0 for a persistent node
}

// memberKinds tells what stands behind a group's registrations in /ids (memberKind).
// bridgeSessions (groups.go) reads it from ZooKeeper; tests give a fixed one.
type memberKinds interface {
	// hosted returns the group's hosted-member znodes by consumer id, and those that do not
	// parse.
	hosted(group string) (map[string]hostedRecord, []zkstate.Problem)
	// bridge reports whether a running bridge holds ZooKeeper session id.
	bridge(session int64) bool
}

// memberKind says what stands behind registration c: the kind of its hosted-member znode when
// one describes it — held by the same session as the registration, since a bridge writes both
// as ephemerals of its session (a mismatch is a leftover of another session, or one of the two
// is being re-created after an expiry) — else bridge when a running bridge holds the
// registration, else zk.
func memberKind(c zkstate.Consumer, h hostedRecord, hosted bool, k memberKinds) string {
	switch {
	case hosted && h.Session == c.EphemeralOwner:
		return h.Kind
	case c.EphemeralOwner != 0 && k.bridge(c.EphemeralOwner):
		return kindBridge
	}
	return kindZK
}

// buildGroupView shapes a snapshot for the printers; kinds tells each member's kind (see
// bridgeSessions). Hosted-member znodes that do not parse are listed with the snapshot's
// problems.
func buildGroupView(s *zkstate.GroupSnapshot, kinds memberKinds) groupView {
	hosted, hostedProblems := kinds.hosted(s.Group)
	v := groupView{Group: s.Group, MissingTopics: append([]string{}, s.MissingTopics...)}
	sort.Strings(v.MissingTopics)

	ownedBy := map[string][]zkstate.TopicPartition{} // consumer id -> partitions
	for tp, thread := range s.Owners {
		cid, _, err := s.OwnerOf(thread)
		if _, ok := s.Consumers[cid]; err != nil || !ok {
			v.StaleOwners = append(v.StaleOwners, fmt.Sprintf("%s owned by %s", tpString(tp), thread))
			continue
		}
		ownedBy[cid] = append(ownedBy[cid], tp)
	}
	sort.Strings(v.StaleOwners)

	// Unowned counts the partitions of the topics members subscribe to; when no member subscribes
	// to anything (none is registered), nobody consumes any partition, so every partition without
	// an owner counts.
	subscribed := map[string]bool{}
	consumed := false
	for id, c := range s.Consumers {
		h, ok := hosted[id]
		m := memberView{ID: id, Kind: memberKind(c, h, ok, kinds), Pattern: c.Registration.Pattern, Subscription: c.Registration.Subscription,
			Registering: c.Registering}
		if c.Registering {
			m.Pattern = ""
		}
		if m.Kind == kindKafka || m.Kind == kindLegacy {
			node := h.Node
			m.Node, m.MemberID, m.Instance = &node, h.Member, h.Instance
			if m.Kind == kindLegacy {
				m.MemberID = "" // the consumer id itself
			}
		}
		for t, n := range c.Registration.Subscription {
			consumed = true
			m.Threads += n
			if c.Registration.Pattern == zkstate.PatternStatic || c.Registration.Pattern == "" {
				subscribed[t] = true
			}
		}
		tps := ownedBy[id]
		sortTPs(tps)
		for _, tp := range tps {
			m.Owned = append(m.Owned, tpString(tp))
		}
		v.Members = append(v.Members, m)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })

	topics := make([]string, 0, len(s.Partitions))
	for t := range s.Partitions {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		for _, p := range s.Partitions[t] {
			tp := zkstate.TopicPartition{Topic: t, Partition: p}
			pv := partitionView{Topic: t, Partition: p, Owner: s.Owners[tp]}
			if off, ok := s.Offsets[tp]; ok {
				pv.Offset = &off
			}
			if pv.Owner == "" && (subscribed[t] || !consumed) {
				v.Unowned = append(v.Unowned, tpString(tp))
			}
			v.Partitions = append(v.Partitions, pv)
		}
	}
	for _, p := range append(slices.Clip(s.Problems), hostedProblems...) {
		v.Problems = append(v.Problems, problemView{Path: p.Path, Error: p.Err.Error()})
	}
	sort.Slice(v.Problems, func(i, j int) bool { return v.Problems[i].Path < v.Problems[j].Path })
	return v
}

func tpString(tp zkstate.TopicPartition) string { return fmt.Sprintf("%s/%d", tp.Topic, tp.Partition) }

func sortTPs(tps []zkstate.TopicPartition) {
	sort.Slice(tps, func(i, j int) bool {
		if tps[i].Topic != tps[j].Topic {
			return tps[i].Topic < tps[j].Topic
		}
		return tps[i].Partition < tps[j].Partition
	})
}

// compactRanges prints "orders/0-2, payments/1" for a sorted list of "topic/p" partitions, so a
// member owning 300 partitions still fits a terminal line.
func compactRanges(tps []string) string {
	type run struct {
		topic      string
		start, end int
	}
	var runs []run
	for _, s := range tps {
		i := strings.LastIndexByte(s, '/')
		var p int
		fmt.Sscan(s[i+1:], &p)
		t := s[:i]
		if n := len(runs); n > 0 && runs[n-1].topic == t && runs[n-1].end+1 == p {
			runs[n-1].end = p
			continue
		}
		runs = append(runs, run{t, p, p})
	}
	parts := make([]string, 0, len(runs))
	for _, r := range runs {
		if r.start == r.end {
			parts = append(parts, fmt.Sprintf("%s/%d", r.topic, r.start))
		} else {
			parts = append(parts, fmt.Sprintf("%s/%d-%d", r.topic, r.start, r.end))
		}
	}
	return strings.Join(parts, ", ")
}
