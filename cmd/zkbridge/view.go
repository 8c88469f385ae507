package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/zkbridge/zkbridge/zkstate"
)

// groupView is what `groups describe` shows, built from a snapshot by pure code so the
// printers only format and the logic is tested without ZooKeeper.
type groupView struct {
	Group         string          `json:"group"`
	Members       []memberView    `json:"members"`
	Partitions    []partitionView `json:"partitions"`
	Unowned       []string        `json:"unowned"`
	StaleOwners   []string        `json:"stale_owners"`
	MissingTopics []string        `json:"missing_topics"`
	Problems      []problemView   `json:"problems"`
}

type memberView struct {
	ID           string         `json:"id"`
	Kind         string         `json:"kind"`
	Pattern      string         `json:"pattern"`
	Subscription map[string]int `json:"subscription"`
	Threads      int            `json:"threads"`
	Owned        []string       `json:"owned"`
}

type partitionView struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Owner     string `json:"owner,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
}

type problemView struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

// Member kinds. A registration in /ids held by a running bridge's ZooKeeper session is a member
// the bridge serves (a kafka or legacy client: the bridge registers both in the 0.8 format so
// zk members count them); any other is a 0.8 ZooKeeper consumer.
const (
	kindZK     = "zk"
	kindBridge = "bridge"
)

// buildGroupView shapes a snapshot for the printers; bridgeSessions are the ZooKeeper sessions
// of the running bridges (see bridgeSessions).
func buildGroupView(s *zkstate.GroupSnapshot, bridgeSessions map[int64]bool) groupView {
	v := groupView{Group: s.Group, MissingTopics: append([]string{}, s.MissingTopics...)}
	sort.Strings(v.MissingTopics)

	ownedBy := map[string][]zkstate.TopicPartition{} // consumer id -> partitions
	for tp, thread := range s.Owners {
		cid, _, err := zkstate.ParseThreadID(thread)
		if _, ok := s.Consumers[cid]; err != nil || !ok {
			v.StaleOwners = append(v.StaleOwners, fmt.Sprintf("%s owned by %s", tpString(tp), thread))
			continue
		}
		ownedBy[cid] = append(ownedBy[cid], tp)
	}
	sort.Strings(v.StaleOwners)

	subscribed := map[string]bool{}
	for id, c := range s.Consumers {
		m := memberView{ID: id, Kind: kindZK, Pattern: c.Registration.Pattern, Subscription: c.Registration.Subscription}
		if c.EphemeralOwner != 0 && bridgeSessions[c.EphemeralOwner] {
			m.Kind = kindBridge
		}
		for t, n := range c.Registration.Subscription {
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
			if pv.Owner == "" && subscribed[t] {
				v.Unowned = append(v.Unowned, tpString(tp))
			}
			v.Partitions = append(v.Partitions, pv)
		}
	}
	for _, p := range s.Problems {
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
