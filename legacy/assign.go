package legacy

// The Kafka 0.8.2 ZooKeeper-era partition assignors, recomputed in Go.
//
// A Kafka 0.8 high-level consumer ("zk" member in DESIGN.md) rebalances
// itself: every consumer of a group runs the same assignor over the same
// ZooKeeper view and claims the partitions that fall to its own threads. When
// the bridge hosts other members next to such consumers it must compute the
// very same answer, or two owners fight over /owners. This file is a
// reimplementation (not a copy) of
//
//	core/src/main/scala/kafka/consumer/PartitionAssignor.scala
//
// as of the apache/kafka tags 0.8.2.0, 0.8.2.1 and 0.8.2.2 (the file is
// identical in the three; 0.8.2-beta differs only elsewhere). Line numbers in
// the comments below ("PA.scala:NN") refer to that file at tag 0.8.2.2. The
// helpers it relies on were read at the same tag:
//
//	kafka/consumer/TopicCount.scala:33-37   ConsumerThreadId: toString "%s-%d", ordered by toString
//	kafka/common/TopicAndPartition.scala     toString "[%s,%d]"
//	kafka/utils/ZkUtils.scala:552-559       partitions of a topic, sorted numerically
//	kafka/utils/ZkUtils.scala:660-679       threads of a topic over all consumers, sorted
//	kafka/utils/Utils.scala:450-454         circularIterator
//
// Kafka runs the assignor once per consumer and keeps only that consumer's
// share; the functions here return the union over all consumers, which is
// what every consumer's share adds up to when they all read the same view.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// TopicPartition names one partition of one topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// String renders the partition as "topic-partition", e.g. "orders-3".
func (tp TopicPartition) String() string {
	return tp.Topic + "-" + strconv.FormatInt(int64(tp.Partition), 10)
}

// Subscription is what one consumer registered: topic -> its thread ids on
// that topic, "<consumerId>-<n>" with n counting from 0 per topic. A topic
// with no thread ids counts as not subscribed (0.8.2 asserts at least one
// stream per subscribed topic, TopicCount.scala:51).
type Subscription map[string][]string

// Input is the ZooKeeper view an assignor works on.
type Input struct {
	// Consumers maps a consumer id (a child of /consumers/<group>/ids) to
	// its subscription.
	Consumers map[string]Subscription
	// Partitions maps a topic to its partition ids (/brokers/topics/<t>).
	// A subscribed topic missing here has no partitions.
	Partitions map[string][]int32
}

// Assignment maps each assigned partition to the thread id that owns it,
// exactly the data 0.8.2 writes to /consumers/<group>/owners/<t>/<p>.
type Assignment map[TopicPartition]string

// Strategy names an assignor, as in the 0.8.2 consumer property
// partition.assignment.strategy.
type Strategy string

// The two strategies of Kafka 0.8.2 (ConsumerConfig.scala:52 and 181-182).
const (
	StrategyRange      Strategy = "range"
	StrategyRoundRobin Strategy = "roundrobin"
)

// ParseStrategy maps a partition.assignment.strategy value the way 0.8.2's
// PartitionAssignor.createInstance does (PA.scala:36-39): exactly
// "roundrobin" selects round-robin and ANY other value, including "" and
// "RoundRobin", silently selects range. Use it to predict what a zk consumer
// configured with name will run.
func ParseStrategy(name string) Strategy {
	if name == string(StrategyRoundRobin) {
		return StrategyRoundRobin
	}
	return StrategyRange
}

// ErrUnknownStrategy is returned by Assign for a strategy other than
// StrategyRange and StrategyRoundRobin.
var ErrUnknownStrategy = errors.New("legacy: unknown assignment strategy")

// ErrUnequalSubscriptions is wrapped by the error RoundRobin returns when the
// group does not meet 0.8.2's round-robin precondition (PA.scala:74-83).
var ErrUnequalSubscriptions = errors.New("legacy: round-robin assignment needs every topic to have the same consumer threads")

// Assign runs the named strategy. Unlike 0.8.2's createInstance it rejects
// unknown names (ErrUnknownStrategy) instead of falling back to range; run
// the name through ParseStrategy first to get 0.8.2's fallback.
func Assign(s Strategy, in Input) (Assignment, error) {
	switch s {
	case StrategyRange:
		return Range(in), nil
	case StrategyRoundRobin:
		return RoundRobin(in)
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownStrategy, string(s))
	}
}

// Range is 0.8.2's RangeAssignor (PA.scala:112-161). Per topic, the
// partitions in numeric order are cut into contiguous runs over the
// subscribed threads in string order, the first P%C threads taking one
// extra partition. Threads are compared as strings, so "c-10" comes before
// "c-2". Threads beyond the partitions get nothing.
func Range(in Input) Assignment {
	out := Assignment{}
	// PA.scala:126 iterates the topics of the consumer; over all consumers
	// that is every subscribed topic.
	for topic, threads := range threadsPerTopic(in) {
		// PA.scala:127-128: threads sorted as strings (ZkUtils.scala:676-677),
		// partitions sorted numerically (ZkUtils.scala:557).
		parts := sortedPartitions(in.Partitions[topic])
		// PA.scala:130-131.
		perThread := len(parts) / len(threads)
		withExtra := len(parts) % len(threads)
		for pos, thread := range threads { // PA.scala:136-137: pos = indexOf(thread)
			// PA.scala:139-140.
			start := perThread*pos + min(pos, withExtra)
			n := perThread
			if pos+1 <= withExtra {
				n++
			}
			// PA.scala:146-155: n <= 0 only logs a warning.
			for _, p := range parts[start : start+n] {
				out[TopicPartition{topic, p}] = thread
			}
		}
	}
	return out
}

// RoundRobin is 0.8.2's RoundRobinAssignor (PA.scala:57-110).
//
// Precondition (PA.scala:74-83): every subscribed topic must have the same
// set of threads over all consumers; otherwise an error wrapping
// ErrUnequalSubscriptions is returned, as 0.8.2 fails a require. That is
// what 0.8.2 actually checks: all consumers that subscribe to anything
// subscribe to the same topics, each with the same stream count on every
// topic; two consumers may still have different stream counts (A with 2
// streams on t and u, B with 1 on t and u passes), and a consumer with no
// subscription at all is simply left out.
//
// Then all threads, sorted as strings (PA.scala:85), are dealt the
// partitions of all topics sorted by the Java String.hashCode of
// TopicAndPartition.toString, which is "[topic,partition]"
// (PA.scala:94-100, TopicAndPartition.scala:37), one partition per thread
// round and round (Utils.circularIterator, PA.scala:102-106). See
// sortForRoundRobin for the exact order, ties included.
//
// Worked example (testdata/assign/roundrobin_worked.golden): topic "t" with
// partitions 0..11, consumers A and B with one thread each. For one topic,
// hashCode("[t,p]") grows with p while p has one digit:
//
//	"[t,0]": ((((91*31+116)*31+44)*31+48)*31+93)  =   87540032
//	"[t,9]":  87540032 + 9*31                       =   87540311
//	"[t,10]": ((((91*31+116)*31+44)*31+49)*31+48)*31+93
//	        = 2713740651, which wraps in 32 bits to  -1581226645
//	"[t,11]": -1581226645 + 31                      = -1581226614
//
// so the order is 10, 11, 0, 1, ..., 9 and A-0 gets 10, 0, 2, 4, 6, 8 and
// B-0 gets 11, 1, 3, 5, 7, 9.
func RoundRobin(in Input) (Assignment, error) {
	perTopic := threadsPerTopic(in)
	out := Assignment{}
	if len(perTopic) == 0 {
		// 0.8.2 would throw on ctx.consumersForTopic.head (PA.scala:75);
		// with nobody subscribed there is simply nothing to assign.
		return out, nil
	}
	topics := make([]string, 0, len(perTopic))
	for t := range perTopic {
		topics = append(topics, t)
	}
	slices.SortFunc(topics, javaCompare)
	// PA.scala:75-83 compares every topic to the head of a Scala HashMap;
	// any fixed reference topic gives the same verdict.
	head := topics[0]
	threads := perTopic[head]
	for _, t := range topics[1:] {
		if !slices.Equal(perTopic[t], threads) {
			return nil, fmt.Errorf("%w: topic %s has threads %v, topic %s has threads %v",
				ErrUnequalSubscriptions, t, perTopic[t], head, threads)
		}
	}
	order := sortForRoundRobin(topics, in.Partitions)
	for i, tp := range order { // PA.scala:102-106
		out[tp] = threads[i%len(threads)]
	}
	return out, nil
}

// sortForRoundRobin lays out the partitions of topics in 0.8.2's round-robin
// order. PA.scala:88-100 flattens ctx.partitionsForTopic (a Scala 2.10
// mutable.HashMap, topic -> partitions sorted ascending) and sorts the result
// with sortWith(hash1 < hash2), where hash is the signed 32-bit Java
// String.hashCode of "[topic,partition]". sortWith is stable
// (java.util.Arrays.sort of objects), so partitions with equal hashes keep
// the flattening order:
//
//   - same topic: ascending partition id, exact;
//   - different topics: the iteration order of that HashMap. Scala 2.10.4
//     (the default build of Kafka 0.8.2) and 2.11.x walk a mutable.HashMap
//     from the highest bucket to the lowest (HashTable.scala foreachEntry),
//     so the topic in the higher bucket comes first; see scalaBucket. Two
//     topics in the SAME bucket are ordered by the insertion history of the
//     maps involved, which goes back to the key order of each consumer's
//     JSON registration and is not part of Input (0.8.2 consumers may even
//     disagree among themselves there). That case, which needs two
//     "[topic,partition]" strings with equal hashCode AND topics in the same
//     bucket (for instance topics "Aa" and "BB", whose hashCodes are equal),
//     is broken by topic name in Java order: a documented guess. Kafka builds
//     for Scala 2.9 used another bucket function; ties follow 2.10/2.11.
func sortForRoundRobin(topics []string, partitions map[string][]int32) []TopicPartition {
	type entry struct {
		tp     TopicPartition
		hash   int32
		bucket uint32
	}
	bits := scalaTableBits(len(topics))
	var entries []entry
	for _, t := range topics {
		bucket := scalaBucket(javaHash(t), bits)
		for _, p := range sortedPartitions(partitions[t]) {
			// TopicAndPartition.toString: "[%s,%d]".format(topic, partition).
			// Java's %d follows the default locale; ASCII digits assumed.
			key := "[" + t + "," + strconv.FormatInt(int64(p), 10) + "]"
			entries = append(entries, entry{TopicPartition{t, p}, javaHash(key), bucket})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if a.hash != b.hash {
			if a.hash < b.hash {
				return -1
			}
			return 1
		}
		if a.tp.Topic == b.tp.Topic {
			return cmpInt32(a.tp.Partition, b.tp.Partition)
		}
		if a.bucket != b.bucket {
			if a.bucket > b.bucket { // higher bucket is iterated first
				return -1
			}
			return 1
		}
		return javaCompare(a.tp.Topic, b.tp.Topic)
	})
	out := make([]TopicPartition, len(entries))
	for i, e := range entries {
		out[i] = e.tp
	}
	return out
}

// scalaTableBits returns log2 of the table length of a Scala 2.10
// mutable.HashMap holding n keys added one by one: 16 slots at first,
// doubled whenever the size exceeds 75% of the length (HashTable.scala:
// initialSize 16, defaultLoadFactor 750/1000, addEntry0 then resize).
func scalaTableBits(n int) uint {
	bits := uint(4)
	for n > (3<<bits)/4 {
		bits++
	}
	return bits
}

// scalaBucket is the bucket of a key with hashCode h in a Scala 2.10/2.11
// mutable.HashMap of 1<<bits slots (HashTable.scala index and improve,
// scala.util.hashing.byteswap32). The seed is bitCount(15) = 4: it is fixed
// when the table is created with 16 slots and not changed by resizes.
func scalaBucket(h int32, bits uint) uint32 {
	const seed = 4
	x := uint32(h) * 0x9e3775cd
	x = x>>24 | x>>8&0xff00 | x<<8&0xff0000 | x<<24 // Integer.reverseBytes
	x *= 0x9e3775cd
	x = x>>seed | x<<(32-seed)
	return x >> (32 - bits)
}

// javaHash is Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over the
// UTF-16 code units of s, in wrapping 32-bit arithmetic.
func javaHash(s string) int32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 {
			hi, lo := surrogates(r)
			h = 31*h + int32(hi)
			h = 31*h + int32(lo)
			continue
		}
		h = 31*h + int32(r)
	}
	return h
}

// javaCompare orders strings like Java's String.compareTo: by UTF-16 code
// units. It differs from Go's byte order only when a character above U+FFFF
// meets one in U+E000..U+FFFF. ConsumerThreadId.compare (TopicCount.scala:36)
// compares toString this way.
func javaCompare(a, b string) int {
	var pa, pb uint16 // pending low surrogates
	for {
		aDone, bDone := pa == 0 && a == "", pb == 0 && b == ""
		switch {
		case aDone && bDone:
			return 0
		case aDone:
			return -1
		case bDone:
			return 1
		}
		ua := nextUnit(&a, &pa)
		ub := nextUnit(&b, &pb)
		if ua != ub {
			if ua < ub {
				return -1
			}
			return 1
		}
	}
}

// nextUnit pops the next UTF-16 code unit of *s, keeping the low half of a
// surrogate pair in *pending.
func nextUnit(s *string, pending *uint16) uint16 {
	if *pending != 0 {
		u := *pending
		*pending = 0
		return u
	}
	r, size := utf8.DecodeRuneInString(*s)
	*s = (*s)[size:]
	if r >= 0x10000 {
		hi, lo := surrogates(r)
		*pending = lo
		return hi
	}
	return uint16(r)
}

func surrogates(r rune) (hi, lo uint16) {
	r -= 0x10000
	return uint16(0xd800 + r>>10), uint16(0xdc00 + r&0x3ff)
}

// threadsPerTopic gathers, per subscribed topic, the distinct thread ids of
// all consumers sorted as 0.8.2 sorts ConsumerThreadIds
// (ZkUtils.getConsumersPerTopic, ZkUtils.scala:660-679).
func threadsPerTopic(in Input) map[string][]string {
	sets := map[string]map[string]bool{}
	for _, sub := range in.Consumers {
		for topic, threads := range sub {
			if len(threads) == 0 {
				continue
			}
			if sets[topic] == nil {
				sets[topic] = map[string]bool{}
			}
			for _, th := range threads {
				sets[topic][th] = true
			}
		}
	}
	out := make(map[string][]string, len(sets))
	for topic, set := range sets {
		list := make([]string, 0, len(set))
		for th := range set {
			list = append(list, th)
		}
		slices.SortFunc(list, javaCompare)
		out[topic] = list
	}
	return out
}

// sortedPartitions returns the distinct ids ascending, as 0.8.2 reads them
// from the keys of the topic's JSON (ZkUtils.scala:557).
func sortedPartitions(ids []int32) []int32 {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

func cmpInt32(a, b int32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ThreadID builds the thread id of stream n of a consumer, "<consumer>-<n>"
// (ConsumerThreadId.toString, TopicCount.scala:34).
func ThreadID(consumer string, n int) string {
	return consumer + "-" + strconv.Itoa(n)
}

// ThreadIDs returns the ids of a consumer's first n streams on one topic.
func ThreadIDs(consumer string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = ThreadID(consumer, i)
	}
	return out
}

// ConsumerOf returns the consumer id in a thread id: everything before the
// last "-" when what follows it is a decimal stream number, else the whole
// thread id.
func ConsumerOf(thread string) string {
	i := strings.LastIndexByte(thread, '-')
	if i < 0 || i == len(thread)-1 {
		return thread
	}
	for _, c := range thread[i+1:] {
		if c < '0' || c > '9' {
			return thread
		}
	}
	return thread[:i]
}

// ByConsumer groups the assignment by consumer id (see ConsumerOf); each
// list is sorted by topic, then partition.
func (a Assignment) ByConsumer() map[string][]TopicPartition {
	out := map[string][]TopicPartition{}
	for tp, thread := range a {
		c := ConsumerOf(thread)
		out[c] = append(out[c], tp)
	}
	for _, list := range out {
		slices.SortFunc(list, compareTopicPartitions)
	}
	return out
}

func compareTopicPartitions(a, b TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmpInt32(a.Partition, b.Partition)
}
