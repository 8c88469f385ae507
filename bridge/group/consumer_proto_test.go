package group

// Consumer-protocol bytes in scenario files. A metadata or assignment written `$...` is encoded
// as Kafka's consumer protocol, so that rules reading it (resume.go) see real bytes; outputs show
// the same `$...` text back. Anything else stays opaque bytes, as in every other scenario.
//
//	$t1+t2             ConsumerProtocolSubscription v1 of topics t1, t2, owning nothing
//	$t1+t2!t1.0+t1.1   the same, owning t1/0 and t1/1
//	$t1+t2@r1          the same, in rack r1 (v3)
//	$=t1.0+t1.1        ConsumerProtocolAssignment of t1/0 and t1/1 ($= alone: nothing)

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kmsg"
)

var consumerAliases sync.Map // encoded bytes (as a string) → the `$...` text they came from

func (h *harness) bytes(s string) []byte {
	if !strings.HasPrefix(s, "$") {
		return []byte(s)
	}
	var b []byte
	if rest, ok := strings.CutPrefix(s, "$="); ok {
		a := kmsg.NewConsumerMemberAssignment()
		a.Version = 1
		ps := h.partitions(rest)
		for _, t := range slices.Sorted(maps.Keys(ps)) {
			a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: ps[t]})
		}
		b = a.AppendTo(nil)
	} else {
		m := kmsg.NewConsumerMemberMetadata()
		m.Version = 1
		rest := s[1:]
		if r, rack, ok := strings.Cut(rest, "@"); ok {
			m.Version, m.Rack, rest = 3, &rack, r
		}
		topics, owned, _ := strings.Cut(rest, "!")
		m.Topics = strings.Split(topics, "+")
		ps := h.partitions(owned)
		for _, t := range slices.Sorted(maps.Keys(ps)) {
			m.OwnedPartitions = append(m.OwnedPartitions, kmsg.ConsumerMemberMetadataOwnedPartition{Topic: t, Partitions: ps[t]})
		}
		b = m.AppendTo(nil)
	}
	consumerAliases.Store(string(b), s)
	return b
}

// partitions parses t1.0+t1.1+t2.0 (in order, one topic's partitions together).
func (h *harness) partitions(s string) map[string][]int32 {
	out := map[string][]int32{}
	if s == "" {
		return out
	}
	for _, tp := range strings.Split(s, "+") {
		t, p, ok := strings.Cut(tp, ".")
		n, err := strconv.Atoi(p)
		if !ok || err != nil {
			h.fail("partition %q: want topic.partition", tp)
		}
		out[t] = append(out[t], int32(n))
	}
	return out
}

// show prints bytes a scenario wrote as `$...` the same way, and any other bytes as a string.
func show(b []byte) string {
	if s, ok := consumerAliases.Load(string(b)); ok {
		return s.(string)
	}
	return string(b)
}
