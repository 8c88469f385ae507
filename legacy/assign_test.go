package legacy

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The -update flag rewrites testdata/assign/*.golden. It is registered only
// if no other test file of the package registered one already, so that the
// package's tests can share a single -update.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// sub builds a Subscription from topic, stream count pairs, with the thread
// ids 0.8.2 would register: "<consumer>-0" .. "<consumer>-(n-1)".
func sub(consumer string, topicCounts ...any) Subscription {
	s := Subscription{}
	for i := 0; i < len(topicCounts); i += 2 {
		s[topicCounts[i].(string)] = ThreadIDs(consumer, topicCounts[i+1].(int))
	}
	return s
}

// parts returns partition ids 0..n-1.
func parts(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

type assignCase struct {
	name     string
	about    string
	strategy Strategy
	in       Input
}

var assignCases = []assignCase{
	{
		name:     "range_issue_3x2",
		about:    "the issue's example: 3 consumers x 2 threads, 10 partitions",
		strategy: StrategyRange,
		in: Input{
			Consumers: map[string]Subscription{
				"A": sub("A", "orders", 2), "B": sub("B", "orders", 2), "C": sub("C", "orders", 2),
			},
			Partitions: map[string][]int32{"orders": parts(10)},
		},
	},
	{
		name:     "range_kafka_doc",
		about:    "the example in the RangeAssignor doc comment, PartitionAssignor.scala:116-119",
		strategy: StrategyRange,
		in: Input{
			Consumers:  map[string]Subscription{"C1": sub("C1", "t", 2), "C2": sub("C2", "t", 2)},
			Partitions: map[string][]int32{"t": parts(5)},
		},
	},
	{
		name:     "range_string_sorted_threads",
		about:    "12 threads sort as strings: c-0 c-1 c-10 c-11 c-2 ... c-9",
		strategy: StrategyRange,
		in: Input{
			Consumers:  map[string]Subscription{"c": sub("c", "t", 12)},
			Partitions: map[string][]int32{"t": parts(14)},
		},
	},
	{
		name:     "range_uneven_subscriptions",
		about:    "consumers subscribe to different topics with different counts; audit has no subscriber",
		strategy: StrategyRange,
		in: Input{
			Consumers: map[string]Subscription{
				"A": sub("A", "orders", 2, "payments", 1),
				"B": sub("B", "orders", 1),
				"C": sub("C", "payments", 3),
			},
			Partitions: map[string][]int32{"orders": parts(5), "payments": parts(4), "audit": parts(3)},
		},
	},
	{
		name:     "range_more_threads_than_partitions",
		about:    "6 threads, 4 partitions: the last two threads get nothing",
		strategy: StrategyRange,
		in: Input{
			Consumers:  map[string]Subscription{"A": sub("A", "t", 3), "B": sub("B", "t", 3)},
			Partitions: map[string][]int32{"t": parts(4)},
		},
	},
	{
		name:     "range_missing_topic",
		about:    "a subscribed topic without partitions in ZooKeeper assigns nothing",
		strategy: StrategyRange,
		in: Input{
			Consumers:  map[string]Subscription{"A": sub("A", "t", 1, "ghost", 1)},
			Partitions: map[string][]int32{"t": parts(2)},
		},
	},
	{
		name:     "roundrobin_worked",
		about:    "worked example of RoundRobin's doc comment: [t,10] and [t,11] hash negative and come first",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers:  map[string]Subscription{"A": sub("A", "t", 1), "B": sub("B", "t", 1)},
			Partitions: map[string][]int32{"t": parts(12)},
		},
	},
	{
		name:     "roundrobin_two_topics",
		about:    "2 consumers x 2 threads on 2 topics",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers: map[string]Subscription{
				"A": sub("A", "orders", 2, "payments", 2),
				"B": sub("B", "orders", 2, "payments", 2),
			},
			Partitions: map[string][]int32{"orders": parts(4), "payments": parts(3)},
		},
	},
	{
		name:     "roundrobin_stream_counts_differ_between_consumers",
		about:    "allowed by 0.8.2: each topic has the same thread set {A-0,A-1,B-0}",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers: map[string]Subscription{
				"A": sub("A", "t", 2, "u", 2),
				"B": sub("B", "t", 1, "u", 1),
			},
			Partitions: map[string][]int32{"t": parts(4), "u": parts(4)},
		},
	},
	{
		name:     "roundrobin_consumer_without_subscription",
		about:    "a consumer with no topics is left out, not an error",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers: map[string]Subscription{
				"A": sub("A", "t", 1), "B": {}, "C": sub("C", "t", 1),
			},
			Partitions: map[string][]int32{"t": parts(3)},
		},
	},
	{
		name:     "roundrobin_rejects_unequal_topics",
		about:    "B does not subscribe to payments",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers: map[string]Subscription{
				"A": sub("A", "orders", 1, "payments", 1),
				"B": sub("B", "orders", 1),
			},
			Partitions: map[string][]int32{"orders": parts(2), "payments": parts(2)},
		},
	},
	{
		name:     "roundrobin_rejects_unequal_streams",
		about:    "A has 2 streams on orders but 1 on payments",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers:  map[string]Subscription{"A": sub("A", "orders", 2, "payments", 1)},
			Partitions: map[string][]int32{"orders": parts(2), "payments": parts(2)},
		},
	},
	{
		name:     "roundrobin_hash_tie_buckets",
		about:    "[zdkbkm,p] and [cagsiqd,p+7] have equal hashCodes; zdkbkm is in the higher Scala bucket (6 > 4 of 16) and comes first",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers:  map[string]Subscription{"A": sub("A", "cagsiqd", 1, "zdkbkm", 1), "B": sub("B", "cagsiqd", 1, "zdkbkm", 1)},
			Partitions: map[string][]int32{"cagsiqd": parts(10), "zdkbkm": parts(3)},
		},
	},
	{
		name:     "roundrobin_hash_tie_same_bucket",
		about:    "topics Aa and BB have equal hashCodes, so one bucket: the order of their ties is a documented guess (Java string order)",
		strategy: StrategyRoundRobin,
		in: Input{
			Consumers:  map[string]Subscription{"A": sub("A", "Aa", 1, "BB", 1), "B": sub("B", "Aa", 1, "BB", 1)},
			Partitions: map[string][]int32{"Aa": parts(2), "BB": parts(2)},
		},
	},
}

// TestAssignGolden compares each case's rendering with
// testdata/assign/<name>.golden; -update rewrites the files.
func TestAssignGolden(t *testing.T) {
	for _, c := range assignCases {
		t.Run(c.name, func(t *testing.T) {
			got := renderCase(c)
			path := filepath.Join("testdata", "assign", c.name+".golden")
			if updateGolden() {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the computed result (run with -update to rewrite after review):\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}

// renderCase writes a case in the golden format: a header describing the
// input, for round-robin the laid-out order with each "[topic,partition]"
// hashCode, then every thread with its partitions, or the error.
func renderCase(c assignCase) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Kafka 0.8.2 %s assignor: %s\n", c.strategy, c.about)
	b.WriteString("# generated by: go test ./legacy -run TestAssignGolden -update\n")
	fmt.Fprintf(&b, "strategy %s\n", c.strategy)
	for _, topic := range slices.Sorted(maps.Keys(c.in.Partitions)) {
		fmt.Fprintf(&b, "topic %s", topic)
		for _, p := range c.in.Partitions[topic] {
			fmt.Fprintf(&b, " %d", p)
		}
		b.WriteString("\n")
	}
	for _, consumer := range slices.Sorted(maps.Keys(c.in.Consumers)) {
		fmt.Fprintf(&b, "consumer %s", consumer)
		s := c.in.Consumers[consumer]
		for _, topic := range slices.Sorted(maps.Keys(s)) {
			fmt.Fprintf(&b, " %s=%s", topic, strings.Join(s[topic], ","))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")

	a, err := Assign(c.strategy, c.in)
	if err != nil {
		fmt.Fprintf(&b, "error %v\n", err)
		return b.String()
	}
	if c.strategy == StrategyRoundRobin {
		b.WriteString("# round-robin order: hashCode(\"[topic,partition]\") ascending, owner\n")
		topics := slices.Sorted(maps.Keys(threadsPerTopic(c.in)))
		for _, tp := range sortForRoundRobin(topics, c.in.Partitions) {
			key := fmt.Sprintf("[%s,%d]", tp.Topic, tp.Partition)
			fmt.Fprintf(&b, "order %-14s %11d %s\n", key, javaHash(key), a[tp])
		}
		b.WriteString("\n")
	}
	byThread := map[string][]TopicPartition{}
	for tp, th := range a {
		byThread[th] = append(byThread[th], tp)
	}
	var threads []string
	for _, s := range c.in.Consumers {
		for _, ts := range s {
			threads = append(threads, ts...)
		}
	}
	slices.SortFunc(threads, javaCompare)
	for _, th := range slices.Compact(threads) {
		list := byThread[th]
		slices.SortFunc(list, compareTopicPartitions)
		fmt.Fprintf(&b, "thread %s", th)
		if len(list) == 0 {
			b.WriteString(" -")
		}
		for _, tp := range list {
			fmt.Fprintf(&b, " %s", tp)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func caseNamed(t *testing.T, name string) assignCase {
	t.Helper()
	for _, c := range assignCases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no case %s", name)
	return assignCase{}
}

// ownersOf lists the owners of topic's partitions 0..n-1 in order.
func ownersOf(a Assignment, topic string, n int) []string {
	out := make([]string, n)
	for p := range out {
		out[p] = a[TopicPartition{topic, int32(p)}]
	}
	return out
}

// TestRangeExplicit pins the documented examples independently of the
// golden files.
func TestRangeExplicit(t *testing.T) {
	tests := []struct {
		name  string
		topic string
		want  []string // owner of partition 0, 1, ...
	}{
		// Issue: A-0 {0,1}, A-1 {2,3}, B-0 {4,5}, B-1 {6,7}, C-0 {8}, C-1 {9}.
		{"range_issue_3x2", "orders", []string{"A-0", "A-0", "A-1", "A-1", "B-0", "B-0", "B-1", "B-1", "C-0", "C-1"}},
		// PartitionAssignor.scala:119: p0 -> C1-0, p1 -> C1-0, p2 -> C1-1, p3 -> C2-0, p4 -> C2-1.
		{"range_kafka_doc", "t", []string{"C1-0", "C1-0", "C1-1", "C2-0", "C2-1"}},
		// 14 partitions over 12 threads in string order; the first two take two.
		{"range_string_sorted_threads", "t", []string{
			"c-0", "c-0", "c-1", "c-1", "c-10", "c-11", "c-2", "c-3", "c-4", "c-5", "c-6", "c-7", "c-8", "c-9"}},
		{"range_more_threads_than_partitions", "t", []string{"A-0", "A-1", "A-2", "B-0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := caseNamed(t, tt.name)
			a := Range(c.in)
			if got := ownersOf(a, tt.topic, len(tt.want)); !slices.Equal(got, tt.want) {
				t.Errorf("owners = %v, want %v", got, tt.want)
			}
			if len(a) != len(tt.want) {
				t.Errorf("assigned %d partitions, want %d", len(a), len(tt.want))
			}
		})
	}
}

// TestRoundRobinWorkedExample pins the hand-computed example of RoundRobin's
// doc comment.
func TestRoundRobinWorkedExample(t *testing.T) {
	a, err := RoundRobin(caseNamed(t, "roundrobin_worked").in)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A-0", "B-0", "A-0", "B-0", "A-0", "B-0", "A-0", "B-0", "A-0", "B-0", "A-0", "B-0"}
	// Order 10, 11, 0, 1, ..., 9 dealt to A-0, B-0, A-0, ...: 10 -> A-0,
	// 11 -> B-0, 0 -> A-0, 1 -> B-0, ...
	want[10], want[11] = "A-0", "B-0"
	if got := ownersOf(a, "t", 12); !slices.Equal(got, want) {
		t.Errorf("owners = %v, want %v", got, want)
	}
}

// TestRoundRobinTieOrder pins how equal hashCodes of different topics are
// ordered (see sortForRoundRobin).
func TestRoundRobinTieOrder(t *testing.T) {
	// Both hashCodes verified with OpenJDK 17: -600219813.
	if javaHash("[zdkbkm,0]") != javaHash("[cagsiqd,7]") {
		t.Fatal("expected a hashCode tie")
	}
	if b1, b2 := scalaBucket(javaHash("zdkbkm"), 4), scalaBucket(javaHash("cagsiqd"), 4); b1 != 6 || b2 != 4 {
		t.Fatalf("buckets = %d, %d; want 6, 4", b1, b2)
	}
	order := sortForRoundRobin([]string{"cagsiqd", "zdkbkm"}, map[string][]int32{"cagsiqd": parts(10), "zdkbkm": parts(3)})
	for p := int32(0); p < 3; p++ {
		i := slices.Index(order, TopicPartition{"zdkbkm", p})
		if order[i+1] != (TopicPartition{"cagsiqd", p + 7}) {
			t.Errorf("after zdkbkm-%d comes %v, want cagsiqd-%d", p, order[i+1], p+7)
		}
	}
	// Same bucket (Aa and BB share a hashCode): Java string order.
	order = sortForRoundRobin([]string{"BB", "Aa"}, map[string][]int32{"Aa": parts(2), "BB": parts(2)})
	want := []TopicPartition{{"Aa", 0}, {"BB", 0}, {"Aa", 1}, {"BB", 1}}
	if !slices.Equal(order, want) {
		t.Errorf("order = %v, want %v", order, want)
	}
}

func TestRoundRobinRejects(t *testing.T) {
	for _, name := range []string{"roundrobin_rejects_unequal_topics", "roundrobin_rejects_unequal_streams"} {
		t.Run(name, func(t *testing.T) {
			a, err := RoundRobin(caseNamed(t, name).in)
			if !errors.Is(err, ErrUnequalSubscriptions) {
				t.Fatalf("err = %v, want ErrUnequalSubscriptions", err)
			}
			if a != nil {
				t.Errorf("assignment = %v, want nil", a)
			}
		})
	}
}

// TestJavaHash checks javaHash against values printed by OpenJDK 17's
// String.hashCode.
func TestJavaHash(t *testing.T) {
	tests := []struct {
		s    string
		want int32
	}{
		{"", 0},
		{"t", 116},
		{"[t,0]", 87540032},
		{"[t,9]", 87540311},
		{"[t,10]", -1581226645},
		{"[t,11]", -1581226614},
		{"[orders,0]", -1093576615},
		{"[orders,3]", -1093576522},
		{"[payments,2]", 1617066511},
		{"Aa", 2112},
		{"BB", 2112},
		{"[Aa,0]", -1626752098},
		{"[BB,0]", -1626752098},
		{"orders", -1008770331},
		{"payments", 1382682413},
		{"[😀,1]", -412844102}, // surrogate pair
		{"\ufffdx", 2031643},
		{"\ue000", 57344},
		{"[café,12]", -1499810388},
	}
	for _, tt := range tests {
		if got := javaHash(tt.s); got != tt.want {
			t.Errorf("javaHash(%q) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

// TestJavaCompare checks javaCompare against OpenJDK 17's String.compareTo.
func TestJavaCompare(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"c-10", "c-2", -1},
		{"😀", "\ufffd", -1}, // Go byte order says +1: high surrogate 0xD83D < 0xFFFD
		{"\ue000", "😀", 1},
		{"a", "ab", -1},
		{"ab", "a", 1},
		{"x", "x", 0},
		{"A-0", "a-0", -1},
		{"", "", 0},
	}
	for _, tt := range tests {
		if got := javaCompare(tt.a, tt.b); got != tt.want {
			t.Errorf("javaCompare(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestScalaBucket checks scalaBucket against a line-by-line Java
// transcription of Scala 2.10.4's HashTable.index, improve and
// scala.util.hashing.byteswap32, run on OpenJDK 17.
func TestScalaBucket(t *testing.T) {
	tests := []struct {
		topic string
		bits  uint
		want  uint32
	}{
		{"orders", 4, 11}, {"orders", 5, 23}, {"orders", 6, 47}, {"orders", 10, 755},
		{"payments", 4, 0}, {"payments", 5, 0}, {"payments", 6, 1}, {"payments", 10, 28},
		{"zdkbkm", 4, 6}, {"cagsiqd", 4, 4},
	}
	for _, tt := range tests {
		if got := scalaBucket(javaHash(tt.topic), tt.bits); got != tt.want {
			t.Errorf("scalaBucket(%q, %d) = %d, want %d", tt.topic, tt.bits, got, tt.want)
		}
	}
	for n, want := range map[int]uint{0: 4, 1: 4, 12: 4, 13: 5, 24: 5, 25: 6, 48: 6, 49: 7} {
		if got := scalaTableBits(n); got != want {
			t.Errorf("scalaTableBits(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestAssignStrategies(t *testing.T) {
	in := caseNamed(t, "roundrobin_two_topics").in
	if _, err := Assign("RoundRobin", in); !errors.Is(err, ErrUnknownStrategy) {
		t.Errorf("Assign(RoundRobin) err = %v, want ErrUnknownStrategy", err)
	}
	for name, want := range map[string]Strategy{
		"roundrobin": StrategyRoundRobin, "range": StrategyRange, "": StrategyRange, "RoundRobin": StrategyRange, "sticky": StrategyRange,
	} {
		if got := ParseStrategy(name); got != want {
			t.Errorf("ParseStrategy(%q) = %q, want %q", name, got, want)
		}
	}
	a, err := RoundRobin(Input{})
	if err != nil || len(a) != 0 {
		t.Errorf("RoundRobin(empty) = %v, %v; want empty, nil", a, err)
	}
}

func TestByConsumer(t *testing.T) {
	a := Range(caseNamed(t, "range_uneven_subscriptions").in)
	got := a.ByConsumer()
	want := map[string][]TopicPartition{
		// orders: threads A-0 A-1 B-0, 5 partitions -> 2, 2, 1.
		// payments: threads A-0 C-0 C-1 C-2, 4 partitions -> 1 each.
		"A": {{"orders", 0}, {"orders", 1}, {"orders", 2}, {"orders", 3}, {"payments", 0}},
		"B": {{"orders", 4}},
		"C": {{"payments", 1}, {"payments", 2}, {"payments", 3}},
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ByConsumer = %v, want %v", got, want)
	}
	for thread, want := range map[string]string{
		"A-0": "A", "host-1700000000000-abcd-12": "host-1700000000000-abcd", "noSuffix": "noSuffix",
		"trailing-": "trailing-", "x-y": "x-y", "-3": "",
	} {
		if got := ConsumerOf(thread); got != want {
			t.Errorf("ConsumerOf(%q) = %q, want %q", thread, got, want)
		}
	}
}

// randomInput builds a random group. With equal set, every consumer that
// subscribes subscribes to all topics with one stream count (so round-robin
// accepts it); otherwise topics and counts vary freely.
func randomInput(r *rand.Rand, equal bool) Input {
	in := Input{Consumers: map[string]Subscription{}, Partitions: map[string][]int32{}}
	nTopics := 1 + r.Intn(4)
	topics := make([]string, nTopics)
	for i := range topics {
		topics[i] = "topic" + strconv.Itoa(i)
		n := r.Intn(25)
		ps := make([]int32, 0, n)
		for p := 0; p < n; p++ {
			if r.Intn(8) != 0 { // leave gaps now and then
				ps = append(ps, int32(p))
			}
		}
		in.Partitions[topics[i]] = ps
	}
	for c := 0; c < 1+r.Intn(6); c++ {
		id := fmt.Sprintf("consumer%d-host-%d", c, r.Intn(3))
		s := Subscription{}
		streams := 1 + r.Intn(12)
		for _, t := range topics {
			switch {
			case equal && streams > 0:
				s[t] = ThreadIDs(id, streams)
			case !equal && r.Intn(3) != 0:
				s[t] = ThreadIDs(id, 1+r.Intn(12))
			}
		}
		if equal && r.Intn(6) == 0 {
			s = Subscription{} // a consumer without subscription
		}
		in.Consumers[id] = s
	}
	return in
}

// shuffled copies in with every map rebuilt in another insertion order and
// every slice shuffled (thread and partition lists are sets to 0.8.2).
func shuffled(r *rand.Rand, in Input) Input {
	out := Input{Consumers: map[string]Subscription{}, Partitions: map[string][]int32{}}
	consumers := slices.Collect(maps.Keys(in.Consumers))
	r.Shuffle(len(consumers), func(i, j int) { consumers[i], consumers[j] = consumers[j], consumers[i] })
	for _, c := range consumers {
		s := Subscription{}
		for t, ths := range in.Consumers[c] {
			ths = slices.Clone(ths)
			r.Shuffle(len(ths), func(i, j int) { ths[i], ths[j] = ths[j], ths[i] })
			s[t] = ths
		}
		out.Consumers[c] = s
	}
	for t, ps := range in.Partitions {
		ps = slices.Clone(ps)
		r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		out.Partitions[t] = ps
	}
	return out
}

// checkCoverage verifies that every partition of a subscribed topic is
// assigned exactly once (a map key is unique, so: assigned at all), only to a
// thread subscribed to its topic, and that nothing else is assigned.
func checkCoverage(t *testing.T, in Input, a Assignment) {
	t.Helper()
	subscribed := map[string]map[string]bool{} // topic -> threads
	for _, s := range in.Consumers {
		for topic, ths := range s {
			for _, th := range ths {
				if subscribed[topic] == nil {
					subscribed[topic] = map[string]bool{}
				}
				subscribed[topic][th] = true
			}
		}
	}
	want := 0
	for topic, ps := range in.Partitions {
		if len(subscribed[topic]) == 0 {
			continue
		}
		for _, p := range ps {
			want++
			owner, ok := a[TopicPartition{topic, p}]
			if !ok {
				t.Fatalf("%s-%d unassigned", topic, p)
			}
			if !subscribed[topic][owner] {
				t.Fatalf("%s-%d assigned to %s, not subscribed to %s", topic, p, owner, topic)
			}
		}
	}
	if len(a) != want {
		t.Fatalf("assigned %d partitions, want %d", len(a), want)
	}
}

func TestRangeProperties(t *testing.T) {
	r := rand.New(rand.NewSource(20150301))
	for i := 0; i < 1000; i++ {
		in := randomInput(r, false)
		a := Range(in)
		checkCoverage(t, in, a)
		// Per topic, counts differ by at most one and never increase along
		// the sorted thread list.
		for topic, threads := range threadsPerTopic(in) {
			counts := map[string]int{}
			for tp, th := range a {
				if tp.Topic == topic {
					counts[th]++
				}
			}
			for j := 1; j < len(threads); j++ {
				prev, cur := counts[threads[j-1]], counts[threads[j]]
				if cur > prev || prev-cur > 1 {
					t.Fatalf("topic %s: %s has %d, %s has %d", topic, threads[j-1], prev, threads[j], cur)
				}
			}
		}
		for k := 0; k < 3; k++ {
			if b := Range(shuffled(r, in)); !maps.Equal(a, b) {
				t.Fatalf("Range depends on input order:\n%v\n%v", a, b)
			}
		}
	}
}

func TestRoundRobinProperties(t *testing.T) {
	r := rand.New(rand.NewSource(20150302))
	for i := 0; i < 1000; i++ {
		in := randomInput(r, true)
		a, err := RoundRobin(in)
		if err != nil {
			t.Fatalf("equal subscriptions rejected: %v", err)
		}
		checkCoverage(t, in, a)
		// Over all topics, thread counts differ by at most one.
		counts := map[string]int{}
		for _, th := range a {
			counts[th]++
		}
		if len(a) > 0 {
			for _, ths := range threadsPerTopic(in) {
				lo, hi := len(a), 0
				for _, th := range ths {
					lo, hi = min(lo, counts[th]), max(hi, counts[th])
				}
				if hi-lo > 1 {
					t.Fatalf("unbalanced: counts %v", counts)
				}
				break
			}
		}
		for k := 0; k < 3; k++ {
			b, err := RoundRobin(shuffled(r, in))
			if err != nil || !maps.Equal(a, b) {
				t.Fatalf("RoundRobin depends on input order (%v):\n%v\n%v", err, a, b)
			}
		}

		// Unequal random groups: either rejected or, when they happen to
		// be equal, a full assignment.
		in = randomInput(r, false)
		if a, err := RoundRobin(in); err == nil {
			checkCoverage(t, in, a)
		} else if !errors.Is(err, ErrUnequalSubscriptions) {
			t.Fatalf("unexpected error %v", err)
		}
	}
}
