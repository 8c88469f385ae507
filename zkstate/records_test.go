package zkstate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Golden samples of what each Kafka version (and kafka-node 3.0.1, the last ZooKeeper-era
// client of Node.js) wrote live in testdata/<kind>/; files named malformed-* must be rejected,
// pending-* are registrations in progress. Every file needs a row in its table and every row a file, so
// a sample cannot be added without saying what it must parse to.

type recordsGoldenCase[T any] struct {
	want T
	// errHas, for malformed-* files, is a part of the error message that says what is wrong.
	errHas string
	// errIs is the error a sample that is not malformed, but not a value either, must give (a
	// registration in progress); it must not wrap ErrMalformed.
	errIs error
}

// recordsWalkGolden runs check on every file of dir and makes sure cases and files match.
func recordsWalkGolden[T any](t *testing.T, dir string, cases map[string]recordsGoldenCase[T],
	parse func([]byte) (T, error)) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]bool)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		seen[name] = true
		tc, ok := cases[name]
		if !ok {
			t.Errorf("%s/%s has no row in the test table", dir, name)
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			got, err := parse(data)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) || errors.Is(err, zkstate.ErrMalformed) {
					t.Fatalf("parse %q: %+v, %v; want %v, not malformed", data, got, err, tc.errIs)
				}
				return
			}
			if strings.HasPrefix(name, "malformed-") {
				if err == nil {
					t.Fatalf("parsed %s as %+v, want an error", data, got)
				}
				if !errors.Is(err, zkstate.ErrMalformed) {
					t.Errorf("error %q does not wrap ErrMalformed", err)
				}
				if !strings.Contains(err.Error(), tc.errHas) {
					t.Errorf("error %q does not say %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse %s: %v", data, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parse %s\n got %+v\nwant %+v", data, got, tc.want)
			}
		})
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("table row %s has no file in %s", name, dir)
		}
	}
}

func TestParseConsumerRegistrationGolden(t *testing.T) {
	static := func(ts int64, sub map[string]int) zkstate.ConsumerRegistration {
		return zkstate.ConsumerRegistration{Version: 1, Subscription: sub, Pattern: zkstate.PatternStatic, TimestampMs: ts}
	}
	type c = recordsGoldenCase[zkstate.ConsumerRegistration]
	cases := map[string]c{
		"kafka-0.8.1-static.json": {want: static(0, map[string]int{"events": 2})},
		"kafka-0.8.2-static.json": {want: static(1428513173734, map[string]int{"clicks": 1, "views": 3})},
		"kafka-0.8.2-white_list.json": {want: zkstate.ConsumerRegistration{
			Version: 1, Subscription: map[string]int{`logs\..*`: 2}, Pattern: zkstate.PatternWhiteList, TimestampMs: 1428513201956}},
		"kafka-0.8.2-black_list.json": {want: zkstate.ConsumerRegistration{
			Version: 1, Subscription: map[string]int{"__.*|test-.*": 1}, Pattern: zkstate.PatternBlackList, TimestampMs: 1428513377101}},
		"kafka-0.9.0-static.json":           {want: static(1453929417353, map[string]int{"orders": 4, "payments": 4, "refunds": 1})},
		"kafka-2.3-static.json":             {want: static(1570701004383, map[string]int{"test01": 2, "test02": 3})},
		"tool-numeric-timestamp.json":       {want: static(1500000000000, map[string]int{"metrics": 1})},
		"tool-no-pattern-no-timestamp.json": {want: static(0, map[string]int{"metrics": 1})},
		// kafka-node 3.0.1 (lib/zookeeper.js registerConsumer) writes its JSON by hand, with a
		// space after each topic's colon, a white_list pattern and 1 per topic; a single topic
		// reads as the whitelist of that topic, which is what a 0.8.2 consumer reads too.
		"kafka-node-3.0.1-white_list.json": {want: zkstate.ConsumerRegistration{
			Version: 1, Subscription: map[string]int{"orders": 1}, Pattern: zkstate.PatternWhiteList, TimestampMs: 1764763200000}},
		// A kafka-node consumer of several topics writes one key per topic under the same
		// white_list label. Decision (issue 18): read it as kafka-node means it, a static
		// subscription of those topics, 1 thread each. kafka-node's own rebalance
		// (lib/zookeeper.js getConsumersPerTopic) reads every key as a topic, so every member
		// of a kafka-node group computes with that view; 0.8.2's
		// TopicCount.constructTopicCount would take only topMap.head, the first key (JSON order
		// up to 4 keys, hash order beyond), as a whitelist regex — a view no member of the group
		// shares, and Kafka's own consumers never write more than one key. A wildcard with
		// several keys that are not all topic names stays malformed (malformed-two-filters).
		"kafka-node-3.0.1-white_list-topics.json": {want: zkstate.ConsumerRegistration{
			Version: 1, Subscription: map[string]int{"orders": 1, "payments": 1, "refunds": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1764763200000}},
		// ... and it creates the ephemeral znode empty first, then sets that JSON: in between
		// the consumer is registering.
		"pending-kafka-node-3.0.1.json": {errIs: zkstate.ErrRegistrationPending},

		"malformed-truncated.json":          {errHas: "not JSON"},
		"malformed-not-json.json":           {errHas: "not JSON"},
		"malformed-negative-threads.json":   {errHas: `thread count of "t": -2 is out of range`},
		"malformed-zero-threads.json":       {errHas: `thread count of "t": 0 is out of range`},
		"malformed-string-threads.json":     {errHas: `thread count of "t": "2" is not an integer`},
		"malformed-fractional-threads.json": {errHas: `thread count of "t": 1.5 is not an integer`},
		"malformed-threads-overflow.json":   {errHas: `thread count of "t": 2147483648 is out of range`},
		"malformed-threads-too-many.json":   {errHas: `thread count of "t": 10001 is out of range`},
		"malformed-no-subscription.json":    {errHas: "no subscription"},
		"malformed-subscription-array.json": {errHas: "subscription is [\"t\"], want an object"},
		"malformed-unknown-pattern.json":    {errHas: `unknown pattern "regex"`},
		"malformed-timestamp-text.json":     {errHas: "timestamp"},
		"malformed-two-filters.json":        {errHas: "white_list subscription has 2 topic filters"},
	}
	recordsWalkGolden(t, "testdata/ids", cases, zkstate.ParseConsumerRegistration)
}

func TestParseBrokerRegistrationGolden(t *testing.T) {
	type c = recordsGoldenCase[zkstate.BrokerRegistration]
	cases := map[string]c{
		"kafka-0.8.0-v1.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 1, Host: "kafka1", Port: 9092, JMXPort: -1}},
		"kafka-0.8.1-v1.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 1, Host: "kafka1", Port: 9092, JMXPort: 9999, Timestamp: "1399990000000"}},
		"kafka-0.8.2-v1.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 1, Host: "kafka1", Port: 9092, JMXPort: -1, Timestamp: "1428512949385"}},
		"kafka-0.9.0-v2.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 2, Host: "kafka1", Port: 9092, JMXPort: -1, Timestamp: "1452201839633",
			Endpoints: []string{"PLAINTEXT://kafka1:9092", "SSL://kafka1:9093"}}},
		"kafka-0.10.0-v3-rack.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 3, Host: "kafka2.dc1", Port: 9092, JMXPort: 9999, Timestamp: "1466985807242",
			Endpoints: []string{"PLAINTEXT://kafka2.dc1:9092"}, Rack: "us-east-1a"}},
		"kafka-2.4-v4-listeners.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 4, Host: "kafka-0.kafka-headless", Port: 9092, JMXPort: -1, Timestamp: "1588067321034",
			Endpoints:                   []string{"EXTERNAL://kafka-0.example.com:9093", "INTERNAL://kafka-0.kafka-headless:9092"},
			Rack:                        "eu-west-1b",
			ListenerSecurityProtocolMap: map[string]string{"INTERNAL": "PLAINTEXT", "EXTERNAL": "SSL"}}},
		"kafka-2.4-v4-no-plaintext.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 4, Port: -1, JMXPort: -1, Timestamp: "1588067321034",
			Endpoints:                   []string{"SASL_SSL://kafka3:9094"},
			ListenerSecurityProtocolMap: map[string]string{"SASL_SSL": "SASL_SSL"}}},
		"kafka-2.7-v5-ipv6.json": {want: zkstate.BrokerRegistration{
			ID: 7, Version: 5, Host: "2001:db8::5", Port: 9092, JMXPort: -1, Timestamp: "1610000000000",
			Endpoints:                   []string{"PLAINTEXT://[2001:db8::5]:9092"},
			ListenerSecurityProtocolMap: map[string]string{"PLAINTEXT": "PLAINTEXT"}}},

		"malformed-truncated.json":            {errHas: "not JSON"},
		"malformed-endpoints-string.json":     {errHas: "endpoints is \"PLAINTEXT://kafka1:9092\", want an array"},
		"malformed-endpoint-no-listener.json": {errHas: `endpoints[0]: "kafka1:9092" is not listener://host:port`},
		"malformed-port-string.json":          {errHas: `port: "9092" is not an integer`},
		"malformed-no-address.json":           {errHas: "neither a host nor endpoints"},
		"malformed-version-0.json":            {errHas: "version: 0 is out of range"},
	}
	recordsWalkGolden(t, "testdata/brokers", cases, func(data []byte) (zkstate.BrokerRegistration, error) {
		return zkstate.ParseBrokerRegistration(7, data)
	})
}

func TestParseTopicAssignmentGolden(t *testing.T) {
	type c = recordsGoldenCase[zkstate.TopicAssignment]
	thirteen := make(map[int32][]int32)
	for p := int32(0); p < 13; p++ {
		thirteen[p] = []int32{p%3 + 1}
	}
	// "VfWVpbHvQj2Jg3WDr2hBbQ", the id of kafka-2.8-v3-topic-id.json.
	topicID := [16]byte{0x55, 0xf5, 0x95, 0xa5, 0xb1, 0xef, 0x42, 0x3d, 0x89, 0x83, 0x75, 0x83, 0xaf, 0x68, 0x41, 0x6d}
	cases := map[string]c{
		"kafka-0.8.2-v1.json": {want: zkstate.TopicAssignment{Version: 1,
			Partitions: map[int32][]int32{0: {1, 2}, 1: {2, 3}, 2: {3, 1}}}},
		"kafka-1.1-v1-13-partitions.json": {want: zkstate.TopicAssignment{Version: 1, Partitions: thirteen}},
		"kafka-2.4-v2-reassigning.json": {want: zkstate.TopicAssignment{Version: 2,
			Partitions: map[int32][]int32{0: {1, 2, 4}, 1: {2, 3}}}},
		"kafka-2.8-v3-topic-id.json": {want: zkstate.TopicAssignment{Version: 3,
			Partitions: map[int32][]int32{0: {1, 2, 3}}, TopicID: topicID}},
		// Uuid.fromString accepts the padded form too.
		"topic-id-padded.json": {want: zkstate.TopicAssignment{Version: 3,
			Partitions: map[int32][]int32{0: {1}}, TopicID: topicID}},

		"malformed-truncated.json":          {errHas: "not JSON"},
		"malformed-partition-name.json":     {errHas: `key "zero" is not a partition number`},
		"malformed-negative-partition.json": {errHas: `key "-1" is not a partition number`},
		"malformed-replicas-string.json":    {errHas: `replicas of partition 0: "1,2" is not an array`},
		"malformed-partitions-array.json":   {errHas: "partitions is [[1,2]], want an object"},
		"malformed-topic-id.json":           {errHas: `topic_id: "not-a-uuid" is not the base64 of a 16-byte Uuid`},
		"malformed-topic-id-number.json":    {errHas: "topic_id: "},
	}
	recordsWalkGolden(t, "testdata/topics", cases, zkstate.ParseTopicAssignment)
}

func TestParsePartitionStateGolden(t *testing.T) {
	type c = recordsGoldenCase[zkstate.PartitionState]
	cases := map[string]c{
		"kafka-0.8.2.json": {want: zkstate.PartitionState{
			Version: 1, ControllerEpoch: 3, Leader: 1, LeaderEpoch: 5, ISR: []int32{1, 2}}},
		"kafka-1.0-no-leader.json": {want: zkstate.PartitionState{
			Version: 1, ControllerEpoch: 7, Leader: -1, LeaderEpoch: 12, ISR: []int32{2}}},
		"kafka-3.2-extra-member.json": {want: zkstate.PartitionState{
			Version: 1, ControllerEpoch: 1, Leader: 2, LeaderEpoch: 0, ISR: []int32{2, 3, 1}}},

		"malformed-no-isr.json":        {errHas: "no isr"},
		"malformed-leader-string.json": {errHas: `leader: "1" is not an integer`},
		"malformed-isr-number.json":    {errHas: "isr: 1 is not an array"},
	}
	recordsWalkGolden(t, "testdata/state", cases, zkstate.ParsePartitionState)
}

func TestParseOffsetGolden(t *testing.T) {
	type c = recordsGoldenCase[int64]
	cases := map[string]c{
		"kafka-0.8.2.txt":            {want: 1337},
		"kafka-0.8.2-zero.txt":       {want: 0},
		"zkcli-trailing-newline.txt": {want: 9876543210123},

		"malformed-12a.txt":         {errHas: `offset "12a" is not a decimal`},
		"malformed-empty.txt":       {errHas: "empty offset"},
		"malformed-overflow.txt":    {errHas: "not a decimal 64-bit integer"},
		"malformed-json-string.txt": {errHas: "not a decimal"},
	}
	recordsWalkGolden(t, "testdata/offsets", cases, zkstate.ParseOffset)
}

// recordsGoldenData returns the contents of the valid (not malformed-*) samples in dir.
func recordsGoldenData(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]byte)
	for _, e := range entries {
		// pending-* samples (a registration in progress) hold no value to encode.
		if e.IsDir() || strings.HasPrefix(e.Name(), "malformed-") || strings.HasPrefix(e.Name(), "pending-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = data
	}
	return out
}

// recordsCheckInt32Numbers fails when data holds a JSON number that is not an integer in
// 32-bit range: Kafka 0.8.2's kafka.utils.Json parses every number with String.toInt, so such
// a number makes every 0.8.2 reader of the znode fail.
func recordsCheckInt32Numbers(t testing.TB, data []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("%s: %v", data, err)
			}
			return
		}
		n, ok := tok.(json.Number)
		if !ok {
			continue
		}
		v, err := n.Int64()
		if err != nil || v > math.MaxInt32 || v < math.MinInt32 {
			t.Errorf("%s: number %s does not fit a 32-bit Int", data, n)
		}
	}
}

func TestConsumerRegistrationEncode(t *testing.T) {
	tests := []struct {
		name string
		r    zkstate.ConsumerRegistration
		want string
	}{
		{
			name: "0.8.2 layout, topics sorted",
			r: zkstate.ConsumerRegistration{Version: 1, Pattern: zkstate.PatternStatic, TimestampMs: 1700000000000,
				Subscription: map[string]int{"t2": 1, "t1": 2}},
			want: `{"version":1,"subscription":{"t1":2,"t2":1},"pattern":"static","timestamp":"1700000000000"}`,
		},
		{
			name: "defaults: version 1, pattern static",
			r:    zkstate.ConsumerRegistration{Subscription: map[string]int{"a": 1}, TimestampMs: 5},
			want: `{"version":1,"subscription":{"a":1},"pattern":"static","timestamp":"5"}`,
		},
		{
			name: "no subscription",
			r:    zkstate.ConsumerRegistration{},
			want: `{"version":1,"subscription":{},"pattern":"static","timestamp":"0"}`,
		},
		{
			// The filter is JSON-escaped once, as 0.8.2's WildcardTopicCount.getTopicCountMap
			// (CoreUtils.JSONEscapeString) does before its non-escaping Json.encode.
			name: "white_list filter escaped",
			r: zkstate.ConsumerRegistration{Version: 1, Pattern: zkstate.PatternWhiteList, TimestampMs: 1,
				Subscription: map[string]int{`logs\..*|"a"&<b>`: 3}},
			want: `{"version":1,"subscription":{"logs\\..*|\"a\"&<b>":3},"pattern":"white_list","timestamp":"1"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.Encode()
			if string(got) != tt.want {
				t.Errorf("Encode\n got %s\nwant %s", got, tt.want)
			}
			recordsCheckInt32Numbers(t, got)
		})
	}
}

func TestEncodedNumbersFit32Bits(t *testing.T) {
	// A millisecond timestamp is the value that would break 0.8.2; see Encode.
	r := zkstate.ConsumerRegistration{Subscription: map[string]int{"t": 10000}, TimestampMs: math.MaxInt64}
	recordsCheckInt32Numbers(t, r.Encode())
	b := zkstate.BrokerRegistration{ID: 1, Host: "h", Port: math.MaxInt32, JMXPort: 9999,
		Timestamp: "1700000000000", Endpoints: []string{"PLAINTEXT://h:9092"}}
	recordsCheckInt32Numbers(t, b.Encode())
	for dir, encode := range map[string]func([]byte) ([]byte, error){
		"testdata/ids": func(d []byte) ([]byte, error) {
			r, err := zkstate.ParseConsumerRegistration(d)
			return r.Encode(), err
		},
		"testdata/brokers": func(d []byte) ([]byte, error) {
			b, err := zkstate.ParseBrokerRegistration(1, d)
			return b.Encode(), err
		},
		"testdata/topics": func(d []byte) ([]byte, error) {
			a, err := zkstate.ParseTopicAssignment(d)
			return a.Encode(), err
		},
	} {
		for name, data := range recordsGoldenData(t, dir) {
			enc, err := encode(data)
			if err != nil {
				t.Fatalf("%s/%s: %v", dir, name, err)
			}
			recordsCheckInt32Numbers(t, enc)
		}
	}
}

func TestRoundTripGolden(t *testing.T) {
	for name, data := range recordsGoldenData(t, "testdata/ids") {
		r, err := zkstate.ParseConsumerRegistration(data)
		if err != nil {
			t.Fatalf("ids/%s: %v", name, err)
		}
		enc := r.Encode()
		r2, err := zkstate.ParseConsumerRegistration(enc)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Errorf("ids/%s: Encode gave %s, parsed back as %+v, %v; want %+v", name, enc, r2, err, r)
		}
	}
	for name, data := range recordsGoldenData(t, "testdata/brokers") {
		b, err := zkstate.ParseBrokerRegistration(3, data)
		if err != nil {
			t.Fatalf("brokers/%s: %v", name, err)
		}
		enc := b.Encode()
		b2, err := zkstate.ParseBrokerRegistration(3, enc)
		if err != nil || !reflect.DeepEqual(b, b2) {
			t.Errorf("brokers/%s: Encode gave %s, parsed back as %+v, %v; want %+v", name, enc, b2, err, b)
		}
	}
	for name, data := range recordsGoldenData(t, "testdata/topics") {
		a, err := zkstate.ParseTopicAssignment(data)
		if err != nil {
			t.Fatalf("topics/%s: %v", name, err)
		}
		enc := a.Encode()
		a2, err := zkstate.ParseTopicAssignment(enc)
		if err != nil || !reflect.DeepEqual(a, a2) {
			t.Errorf("topics/%s: Encode gave %s, parsed back as %+v, %v; want %+v", name, enc, a2, err, a)
		}
	}
}

func TestRoundTripConstructed(t *testing.T) {
	r := zkstate.ConsumerRegistration{Version: 1, Pattern: zkstate.PatternBlackList, TimestampMs: 1428513173734,
		Subscription: map[string]int{`"quoted"\ topic, ünïcode`: 7}}
	if got, err := zkstate.ParseConsumerRegistration(r.Encode()); err != nil || !reflect.DeepEqual(got, r) {
		t.Errorf("consumer round trip: got %+v, %v; want %+v", got, err, r)
	}
	b := zkstate.BrokerRegistration{ID: 2, Version: 4, Host: "kafka2", Port: 9092, JMXPort: -1,
		Timestamp: "1700000000000", Endpoints: []string{"CLIENT://kafka2:9092", "REPL://kafka2:9093"},
		Rack: "r1", ListenerSecurityProtocolMap: map[string]string{"CLIENT": "PLAINTEXT", "REPL": "SSL"}}
	if got, err := zkstate.ParseBrokerRegistration(2, b.Encode()); err != nil || !reflect.DeepEqual(got, b) {
		t.Errorf("broker round trip: got %+v, %v; want %+v", got, err, b)
	}
	a := zkstate.TopicAssignment{Version: 1, Partitions: map[int32][]int32{0: {1, 2}, 10: {}, 2: {3}}}
	if got, err := zkstate.ParseTopicAssignment(a.Encode()); err != nil || !reflect.DeepEqual(got, a) {
		t.Errorf("topic round trip: got %+v, %v; want %+v", got, err, a)
	}
}

func TestBrokerEncode(t *testing.T) {
	b := zkstate.BrokerRegistration{ID: 1, Endpoints: []string{"SSL://k:9093"}, Timestamp: "1700000000000",
		ListenerSecurityProtocolMap: map[string]string{"SSL": "SSL"}}
	want := `{"version":4,"host":null,"port":-1,"endpoints":["SSL://k:9093"],"jmx_port":-1,` +
		`"timestamp":"1700000000000","listener_security_protocol_map":{"SSL":"SSL"}}`
	if got := string(b.Encode()); got != want {
		t.Errorf("Encode\n got %s\nwant %s", got, want)
	}
	b = zkstate.BrokerRegistration{ID: 1, Version: 4, Host: "k", Port: 9092, JMXPort: 9999, Rack: "a",
		Endpoints: []string{"PLAINTEXT://k:9092"}}
	want = `{"version":4,"host":"k","port":9092,"endpoints":["PLAINTEXT://k:9092"],"jmx_port":9999,"rack":"a"}`
	if got := string(b.Encode()); got != want {
		t.Errorf("Encode\n got %s\nwant %s", got, want)
	}
}

func TestBrokerAddr(t *testing.T) {
	tests := []struct {
		file     string
		host     string
		port     int32
		wantsErr bool
	}{
		{file: "kafka-0.8.0-v1.json", host: "kafka1", port: 9092},
		{file: "kafka-0.8.2-v1.json", host: "kafka1", port: 9092},
		{file: "kafka-0.9.0-v2.json", host: "kafka1", port: 9092},
		{file: "kafka-0.10.0-v3-rack.json", host: "kafka2.dc1", port: 9092},
		// EXTERNAL comes first but is SSL; INTERNAL maps to PLAINTEXT.
		{file: "kafka-2.4-v4-listeners.json", host: "kafka-0.kafka-headless", port: 9092},
		{file: "kafka-2.4-v4-no-plaintext.json", wantsErr: true},
		{file: "kafka-2.7-v5-ipv6.json", host: "2001:db8::5", port: 9092},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata/brokers", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			b, err := zkstate.ParseBrokerRegistration(1, data)
			if err != nil {
				t.Fatal(err)
			}
			host, port, err := b.Addr()
			if tt.wantsErr {
				if err == nil {
					t.Fatalf("Addr = %s:%d, want an error", host, port)
				}
				return
			}
			if err != nil || host != tt.host || port != tt.port {
				t.Errorf("Addr = %q, %d, %v; want %q, %d", host, port, err, tt.host, tt.port)
			}
		})
	}

	constructed := []struct {
		name string
		b    zkstate.BrokerRegistration
		host string
		port int32
		err  bool
	}{
		{
			name: "lower-case listener without a map is normalised",
			b:    zkstate.BrokerRegistration{Endpoints: []string{"plaintext://a:1"}},
			host: "a", port: 1,
		},
		{
			name: "with a map, a listener called PLAINTEXT may use another protocol",
			b: zkstate.BrokerRegistration{Endpoints: []string{"PLAINTEXT://a:1", "CLIENT://b:2"},
				ListenerSecurityProtocolMap: map[string]string{"PLAINTEXT": "SSL", "CLIENT": "PLAINTEXT"}},
			host: "b", port: 2,
		},
		{
			name: "empty endpoint host falls back to host and port",
			b:    zkstate.BrokerRegistration{Host: "c", Port: 3, Endpoints: []string{"PLAINTEXT://:9092"}},
			host: "c", port: 3,
		},
		{
			name: "listener missing from the map is skipped",
			b: zkstate.BrokerRegistration{Endpoints: []string{"OTHER://a:1"},
				ListenerSecurityProtocolMap: map[string]string{"CLIENT": "PLAINTEXT"}},
			err: true,
		},
		{
			name: "host without a port",
			b:    zkstate.BrokerRegistration{Host: "c", Port: -1},
			err:  true,
		},
	}
	for _, tt := range constructed {
		t.Run(tt.name, func(t *testing.T) {
			host, port, err := tt.b.Addr()
			if tt.err {
				if err == nil {
					t.Fatalf("Addr = %s:%d, want an error", host, port)
				}
				return
			}
			if err != nil || host != tt.host || port != tt.port {
				t.Errorf("Addr = %q, %d, %v; want %q, %d", host, port, err, tt.host, tt.port)
			}
		})
	}
}

func TestParseBrokerRegistrationLenient(t *testing.T) {
	tests := []struct {
		name string
		data string
		want zkstate.BrokerRegistration
	}{
		{
			name: "numeric timestamp kept as written",
			data: `{"version":2,"host":"h","port":1,"endpoints":[],"jmx_port":0,"timestamp":1700000000000}`,
			want: zkstate.BrokerRegistration{ID: 1, Version: 2, Host: "h", Port: 1, JMXPort: -1, Timestamp: "1700000000000"},
		},
		{
			name: "unknown higher version with endpoints only",
			data: `{"version":9,"endpoints":["PLAINTEXT://h:1"],"features":{"x":{"min_version":1}}}`,
			want: zkstate.BrokerRegistration{ID: 1, Version: 9, Port: -1, JMXPort: -1, Endpoints: []string{"PLAINTEXT://h:1"}},
		},
		{
			name: "no version, as 0.8.2's Broker.createBroker allowed",
			data: `{"host":"h","port":1}`,
			want: zkstate.BrokerRegistration{ID: 1, Version: 1, Host: "h", Port: 1, JMXPort: -1},
		},
		{
			name: "null rack and empty map",
			data: `{"version":4,"host":"h","port":1,"endpoints":["PLAINTEXT://h:1"],"rack":null,"listener_security_protocol_map":{}}`,
			want: zkstate.BrokerRegistration{ID: 1, Version: 4, Host: "h", Port: 1, JMXPort: -1, Endpoints: []string{"PLAINTEXT://h:1"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := zkstate.ParseBrokerRegistration(1, []byte(tt.data))
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseConsumerRegistrationKeysAreCaseSensitive(t *testing.T) {
	// encoding/json's struct decoding would read "Subscription"; Kafka's readers do not.
	_, err := zkstate.ParseConsumerRegistration([]byte(`{"version":1,"Subscription":{"t":1}}`))
	if !errors.Is(err, zkstate.ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

func TestTopicAssignmentEncode(t *testing.T) {
	a := zkstate.TopicAssignment{Partitions: map[int32][]int32{10: {3}, 2: {2, 3}, 0: {1, 2}, 1: {2, 3}}}
	want := `{"version":1,"partitions":{"0":[1,2],"1":[2,3],"2":[2,3],"10":[3]}}`
	if got := string(a.Encode()); got != want {
		t.Errorf("Encode\n got %s\nwant %s", got, want)
	}
	if got, want := a.PartitionIDs(), []int32{0, 1, 2, 10}; !slices.Equal(got, want) {
		t.Errorf("PartitionIDs = %v, want %v", got, want)
	}
}

// A topic id is written as Kafka 2.8's TopicZNode.encode writes it, and read back.
func TestTopicAssignmentEncodeTopicID(t *testing.T) {
	id, err := zkstate.ParseTopicID("VfWVpbHvQj2Jg3WDr2hBbQ")
	if err != nil {
		t.Fatal(err)
	}
	a := zkstate.TopicAssignment{Version: 3, Partitions: map[int32][]int32{0: {1}}, TopicID: id}
	want := `{"version":3,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{},"topic_id":"VfWVpbHvQj2Jg3WDr2hBbQ"}`
	if got := string(a.Encode()); got != want {
		t.Errorf("Encode\n got %s\nwant %s", got, want)
	}
	if got, err := zkstate.ParseTopicAssignment(a.Encode()); err != nil || !reflect.DeepEqual(got, a) {
		t.Errorf("round trip: got %+v, %v; want %+v", got, err, a)
	}
	if got := zkstate.FormatTopicID(id); got != "VfWVpbHvQj2Jg3WDr2hBbQ" {
		t.Errorf("FormatTopicID = %s", got)
	}
	for _, bad := range []string{"", "VfWVpbHvQj2Jg3WDr2hBb", "VfWVpbHvQj2Jg3WDr2hBbQA", "VfWVpbHvQj2Jg3WDr2hB+Q", "VfWVpbHvQj2Jg3WDr2hBbQ=A"} {
		if _, err := zkstate.ParseTopicID(bad); err == nil {
			t.Errorf("ParseTopicID(%q) succeeded, want an error", bad)
		}
	}
}

func TestNewConsumerID(t *testing.T) {
	tests := []struct {
		name string
		uuid [16]byte
		want string
	}{
		{
			name: "full-width most significant bits",
			uuid: [16]byte{0xf5, 0xd1, 0x1e, 0x4b, 0x9a, 0x3c, 0x4d, 0x2e, 0x80, 1, 2, 3, 4, 5, 6, 7},
			want: "hello-group_mi-OptiPlex-7050-1570701002210-f5d11e4b",
		},
		{
			// Long.toHexString drops the leading zero, so the prefix shifts by one digit.
			name: "leading zero nibble dropped",
			uuid: [16]byte{0x0a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x45, 0x67},
			want: "hello-group_mi-OptiPlex-7050-1570701002210-abcdef01",
		},
		{
			name: "hex text shorter than 8",
			uuid: [16]byte{0, 0, 0, 0, 0, 0, 0x4a, 0xbc},
			want: "hello-group_mi-OptiPlex-7050-1570701002210-4abc",
		},
		{
			name: "all zero",
			want: "hello-group_mi-OptiPlex-7050-1570701002210-0",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := zkstate.NewConsumerID("hello-group", "mi-OptiPlex-7050", 1570701002210, tt.uuid)
			if got != tt.want {
				t.Errorf("NewConsumerID = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestThreadIDs(t *testing.T) {
	id := "g_host-1570701002210-f5d11e4b"
	got := zkstate.ThreadIDs(id, 3)
	want := []string{id + "-0", id + "-1", id + "-2"}
	if !slices.Equal(got, want) {
		t.Errorf("ThreadIDs = %v, want %v", got, want)
	}
	if got := zkstate.ThreadIDs(id, 0); len(got) != 0 {
		t.Errorf("ThreadIDs(0) = %v, want none", got)
	}
	for i, tid := range want {
		c, n, err := zkstate.ParseThreadID(tid)
		if err != nil || c != id || n != i {
			t.Errorf("ParseThreadID(%q) = %q, %d, %v; want %q, %d", tid, c, n, err, id, i)
		}
	}
}

func TestParseThreadIDRejects(t *testing.T) {
	for _, tid := range []string{"", "noDash", "-1", "c-", "c-01", "c-+1", "c-1a", "c-99999999999"} {
		if c, n, err := zkstate.ParseThreadID(tid); !errors.Is(err, zkstate.ErrMalformed) {
			t.Errorf("ParseThreadID(%q) = %q, %d, %v; want ErrMalformed", tid, c, n, err)
		}
	}
}

func TestConsumerThreads(t *testing.T) {
	r := zkstate.ConsumerRegistration{Pattern: zkstate.PatternStatic, Subscription: map[string]int{"a": 2, "b": 1}}
	got := zkstate.ConsumerThreads("c", r)
	want := map[string][]string{"a": {"c-0", "c-1"}, "b": {"c-0"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ConsumerThreads = %v, want %v", got, want)
	}
	r.Pattern = zkstate.PatternWhiteList
	if got := zkstate.ConsumerThreads("c", r); got != nil {
		t.Errorf("ConsumerThreads(white_list) = %v, want nil", got)
	}
}

func TestWildcardThreads(t *testing.T) {
	topics := []string{"logs.app", "logs.web", "logsXweb", "metrics", "__consumer_offsets", "__transaction_state", "test-1"}
	tests := []struct {
		name    string
		pattern string
		filter  string
		want    []string // matching topics; each gets threads c-0, c-1
		err     bool
	}{
		{name: "white_list escaped dot", pattern: zkstate.PatternWhiteList, filter: `logs\..*`, want: []string{"logs.app", "logs.web"}},
		{name: "white_list matches whole names", pattern: zkstate.PatternWhiteList, filter: `logs`, want: nil},
		{name: "white_list comma list with spaces", pattern: zkstate.PatternWhiteList, filter: ` metrics, test-1 `, want: []string{"metrics", "test-1"}},
		{name: "white_list quotes from a properties file", pattern: zkstate.PatternWhiteList, filter: `"metrics"`, want: []string{"metrics"}},
		{name: "white_list never yields internal topics", pattern: zkstate.PatternWhiteList, filter: `.*`,
			want: []string{"logs.app", "logs.web", "logsXweb", "metrics", "test-1"}},
		{name: "black_list", pattern: zkstate.PatternBlackList, filter: `logs.*|test-.*`, want: []string{"metrics"}},
		{name: "anchors cannot be escaped", pattern: zkstate.PatternWhiteList, filter: `metrics)|(logs`, err: true},
		{name: "Java-only syntax", pattern: zkstate.PatternWhiteList, filter: `(?!__).*`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := zkstate.ConsumerRegistration{Pattern: tt.pattern, Subscription: map[string]int{tt.filter: 2}}
			got, err := zkstate.WildcardThreads("c", r, topics)
			if tt.err {
				if !errors.Is(err, zkstate.ErrMalformed) {
					t.Fatalf("got %v, %v; want ErrMalformed", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var gotTopics []string
			for topic, ids := range got {
				gotTopics = append(gotTopics, topic)
				if !slices.Equal(ids, []string{"c-0", "c-1"}) {
					t.Errorf("threads of %s = %v", topic, ids)
				}
			}
			sort.Strings(gotTopics)
			if !slices.Equal(gotTopics, tt.want) {
				t.Errorf("topics = %v, want %v", gotTopics, tt.want)
			}
		})
	}

	static := zkstate.ConsumerRegistration{Pattern: zkstate.PatternStatic, Subscription: map[string]int{"gone": 1}}
	got, err := zkstate.WildcardThreads("c", static, topics)
	if err != nil || !reflect.DeepEqual(got, map[string][]string{"gone": {"c-0"}}) {
		t.Errorf("WildcardThreads(static) = %v, %v", got, err)
	}
}

func TestFormatOffset(t *testing.T) {
	for _, n := range []int64{0, 1, 1337, math.MaxInt64, -1} {
		got, err := zkstate.ParseOffset(zkstate.FormatOffset(n))
		if err != nil || got != n {
			t.Errorf("ParseOffset(FormatOffset(%d)) = %d, %v", n, got, err)
		}
	}
	if got := string(zkstate.FormatOffset(1337)); got != "1337" {
		t.Errorf("FormatOffset(1337) = %q", got)
	}
}

// Owner znodes hold what the client that wrote them meant: a thread id (Kafka's consumer), or
// kafka-node's bare consumer id, its only thread. The registered consumers of these samples:
func TestParseOwnerGolden(t *testing.T) {
	registered := map[string]bool{
		"billing_host1-1700000000000-1a2b3c4d":         true,
		"billing_5b3f0c1e-2f6d-4e8a-9b1c-0123456789ab": true,
		"billing_5b3f0c1e-2f6d-4e8a-9b1c-123456":       true,
		"worker-1":                                     true, // kafka-node's id option is free text
	}
	type owner struct {
		Consumer string
		Thread   int
	}
	type c = recordsGoldenCase[owner]
	recordsWalkGolden(t, "testdata/owners", map[string]c{
		"kafka-0.8.2.txt":      {want: owner{"billing_host1-1700000000000-1a2b3c4d", 1}},
		"kafka-node-3.0.1.txt": {want: owner{"billing_5b3f0c1e-2f6d-4e8a-9b1c-0123456789ab", 0}},
		// A uuid whose last group is all digits is not a thread number of another consumer.
		"kafka-node-3.0.1-digits.txt":    {want: owner{"billing_5b3f0c1e-2f6d-4e8a-9b1c-123456", 0}},
		"kafka-node-3.0.1-custom-id.txt": {want: owner{"worker-1", 0}},
		// A bare id names its consumer only while it is registered (kafka-node's owner znodes
		// are ephemerals: they go with it).
		"malformed-bare-unregistered.txt": {errHas: "is not <consumerID>-<n>"},
		"malformed-empty.txt":             {errHas: "is not <consumerID>-<n>"},
	}, func(data []byte) (owner, error) {
		cid, n, err := zkstate.ParseOwner(string(data), func(id string) bool { return registered[id] })
		return owner{cid, n}, err
	})
}
