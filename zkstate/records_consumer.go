package zkstate

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ErrMalformed marks znode data that none of the Kafka versions we read could have written.
// Every parse error in this package wraps it; the message says what is wrong, the caller adds
// the path.
var ErrMalformed = errors.New("malformed znode data")

// ErrRegistrationPending marks an ids znode that has no data yet: a consumer that is
// registering, not a malformed registration. kafka-node 3.0.1's HighLevelConsumer registers in
// two requests (lib/zookeeper.js registerConsumer creates the ephemeral znode empty, then sets
// its JSON), so every reader can meet one in between. It does not wrap ErrMalformed. (Kafka's
// own consumer fails its rebalance on such a znode and tries again, which a faithful 0.8.2
// reimplementation keeps doing with this error.)
var ErrRegistrationPending = errors.New("registration in progress: the ids znode has no data yet")

// maxThreadsPerTopic bounds a subscription's thread count. Kafka has no limit below 2^31-1
// (kafka.utils.Json reads numbers as 32-bit Ints), but every thread is a stream the consumer
// process serves, so no real consumer comes near this; a larger count is garbage, and
// accepting it would let one bad registration make ConsumerThreads allocate without bound.
const maxThreadsPerTopic = 10000

// ParseConsumerRegistration reads /consumers/<group>/ids/<consumerID>.
//
// It accepts what the ZooKeeper consumer wrote from Kafka 0.8.0 to 2.x:
//   - 0.8.0/0.8.1 (ZookeeperConsumerConnector.registerConsumerInZK via Utils.mergeJsonFields):
//     spaced, sorted fields and no timestamp;
//   - 0.8.2 to 2.x (registerConsumerInZK via kafka.utils.Json.encode): the timestamp as a
//     string of milliseconds;
//   - third-party tools that wrote the timestamp as a JSON number.
//
// A missing version means 1 (the only version ever written). A missing pattern means static;
// note that Kafka's own reader (TopicCount.constructTopicCount) throws on a missing pattern and
// treats an unknown one as static, whereas we accept the former and reject the latter: a
// pattern we do not know is a subscription we would expand wrongly.
//
// Thread counts must be integers in 1..10000 (see maxThreadsPerTopic).
//
// Empty data is a registration in progress (ErrRegistrationPending), not malformed.
//
// For white_list and black_list the single subscription key is the topic filter, not a topic
// (TopicCount.constructTopicCount reads topMap.head). A white_list with several keys that are
// all legal topic names is kafka-node's (one key per topic, each meant as a topic) and is read
// as the static subscription kafka-node means; any other wildcard with several keys is
// rejected, because Kafka would pick one of them arbitrarily.
func ParseConsumerRegistration(data []byte) (ConsumerRegistration, error) {
	if len(data) == 0 {
		return ConsumerRegistration{}, ErrRegistrationPending
	}
	obj, err := decodeObject(data)
	if err != nil {
		return ConsumerRegistration{}, err
	}
	r := ConsumerRegistration{Version: 1, Pattern: PatternStatic}

	if raw, ok := obj["version"]; ok && !isNull(raw) {
		v, err := intValue(raw, 1, math.MaxInt32)
		if err != nil {
			return ConsumerRegistration{}, fmt.Errorf("%w: version: %v", ErrMalformed, err)
		}
		r.Version = int(v)
	}

	if raw, ok := obj["pattern"]; ok && !isNull(raw) {
		var p string
		if err := json.Unmarshal(raw, &p); err != nil {
			return ConsumerRegistration{}, fmt.Errorf("%w: pattern is %s, want a string", ErrMalformed, snippet(raw))
		}
		switch p {
		case PatternStatic, PatternWhiteList, PatternBlackList:
			r.Pattern = p
		default:
			return ConsumerRegistration{}, fmt.Errorf("%w: unknown pattern %q, want %q, %q or %q",
				ErrMalformed, p, PatternStatic, PatternWhiteList, PatternBlackList)
		}
	}

	raw, ok := obj["subscription"]
	if !ok || isNull(raw) {
		return ConsumerRegistration{}, fmt.Errorf("%w: no subscription", ErrMalformed)
	}
	sub, err := decodeMember(raw)
	if err != nil {
		return ConsumerRegistration{}, fmt.Errorf("%w: subscription is %s, want an object", ErrMalformed, snippet(raw))
	}
	r.Subscription = make(map[string]int, len(sub))
	for _, topic := range sortedKeys(sub) {
		if topic == "" {
			return ConsumerRegistration{}, fmt.Errorf("%w: subscription has an empty topic name", ErrMalformed)
		}
		n, err := intValue(sub[topic], 1, maxThreadsPerTopic)
		if err != nil {
			return ConsumerRegistration{}, fmt.Errorf("%w: subscription: thread count of %q: %v, want 1 to %d",
				ErrMalformed, topic, err, maxThreadsPerTopic)
		}
		r.Subscription[topic] = int(n)
	}
	if r.Pattern == PatternWhiteList && len(r.Subscription) > 1 && allTopicNames(r.Subscription) {
		// kafka-node (lib/zookeeper.js registerConsumer) labels every registration white_list
		// and writes one key per topic it consumes; its own rebalance
		// (getConsumersPerTopic) reads every key as a topic. Kafka's consumers write one key,
		// the filter, and 0.8.2's constructTopicCount would read only the first key of this
		// one as a whitelist — a view no member of a kafka-node group shares. So it is read
		// as kafka-node meant it: a static subscription of those topics.
		r.Pattern = PatternStatic
	}
	if r.Pattern != PatternStatic && len(r.Subscription) > 1 {
		return ConsumerRegistration{}, fmt.Errorf("%w: %s subscription has %d topic filters, want 1 (or, for white_list, topic names: kafka-node's one key per topic)",
			ErrMalformed, r.Pattern, len(r.Subscription))
	}

	if raw, ok := obj["timestamp"]; ok && !isNull(raw) {
		ts, err := timestampValue(raw)
		if err != nil {
			return ConsumerRegistration{}, fmt.Errorf("%w: timestamp: %v", ErrMalformed, err)
		}
		r.TimestampMs = ts
	}
	return r, nil
}

// timestampValue reads milliseconds written either as a JSON string (Kafka) or as a JSON
// number (some tools).
func timestampValue(raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("%s is not a JSON string", snippet(raw))
		}
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is not a decimal number of milliseconds", snippet(raw))
		}
		return ms, nil
	}
	return intValue(raw, math.MinInt64, math.MaxInt64)
}

// Encode writes the registration exactly as Kafka 0.8.2's registerConsumerInZK does, with a
// fixed key order and sorted topics so equal registrations give equal bytes (an ephemeral
// re-created after a session expiry can then be compared with what is there).
//
// The timestamp is a JSON string on purpose: Kafka 0.8.2's kafka.utils.Json sets
// scala.util.parsing.json.JSON.globalNumberParser to String.toInt, so every JSON number it
// reads must fit a 32-bit Int and a millisecond timestamp would make every 0.8.2 consumer of
// the group fail to parse our registration (and so fail its rebalance).
//
// Version 0 is written as 1 and an empty pattern as static. Thread counts are written as
// they are; a registration from ParseConsumerRegistration has them in 1..10000.
func (r ConsumerRegistration) Encode() []byte {
	version := r.Version
	if version == 0 {
		version = 1
	}
	pattern := r.Pattern
	if pattern == "" {
		pattern = PatternStatic
	}
	b := make([]byte, 0, 80+32*len(r.Subscription))
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(version), 10)
	b = append(b, `,"subscription":{`...)
	for i, topic := range sortedKeys(r.Subscription) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, topic)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(r.Subscription[topic]), 10)
	}
	b = append(b, `},"pattern":`...)
	b = appendJSONString(b, pattern)
	b = append(b, `,"timestamp":"`...)
	b = strconv.AppendInt(b, r.TimestampMs, 10)
	b = append(b, `"}`...)
	return b
}

// NewConsumerID builds a consumer id the way Kafka 0.8.2's ZookeeperConsumerConnector does
// (consumerIdString): <group>_<host>-<nowMs>-<uuid prefix>.
//
// The uuid prefix is Java's uuid.getMostSignificantBits.toHexString.substring(0,8).
// Long.toHexString prints the 64 bits unsigned, in lower case, without leading zeros, so for
// a UUID starting 0a1b... the prefix is "a1b..." and not "0a1b....". We reproduce that rather
// than the canonical UUID text so our ids look like every other member's. Java would throw
// when the hex text is shorter than 8 characters (the top 32 bits all zero); we use the whole
// text instead.
func NewConsumerID(group, host string, nowMs int64, uuid [16]byte) string {
	msb := binary.BigEndian.Uint64(uuid[:8]) // java.util.UUID's most significant bits
	prefix := strconv.FormatUint(msb, 16)
	if len(prefix) > 8 {
		prefix = prefix[:8]
	}
	return group + "_" + host + "-" + strconv.FormatInt(nowMs, 10) + "-" + prefix
}

// ThreadIDs lists a consumer's thread ids, <consumerID>-0 to <consumerID>-(threads-1), as
// TopicCount.makeConsumerThreadIdsPerTopic (0.8.2) numbers them. These are the values the
// owner znodes hold.
func ThreadIDs(consumerID string, threads int) []string {
	if threads <= 0 {
		return nil
	}
	ids := make([]string, threads)
	for i := range ids {
		ids[i] = consumerID + "-" + strconv.Itoa(i)
	}
	return ids
}

// ParseThreadID splits a thread id (the data of an owner znode) into its consumer id and
// thread number. It splits at the last '-' because consumer ids contain dashes themselves
// (<group>_<host>-<ms>-<uuid>). The number must be written as ConsumerThreadId.toString
// writes it (%d: no sign, no leading zeros), so that ParseThreadID and ThreadIDs are inverse
// and owner data can be compared as strings.
func ParseThreadID(threadID string) (consumerID string, n int, err error) {
	i := strings.LastIndexByte(threadID, '-')
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: thread id %q is not <consumerID>-<n>", ErrMalformed, threadID)
	}
	num := threadID[i+1:]
	if !isCanonicalDecimal(num) {
		return "", 0, fmt.Errorf("%w: thread id %q does not end in a thread number", ErrMalformed, threadID)
	}
	v, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return "", 0, fmt.Errorf("%w: thread id %q: thread number out of range", ErrMalformed, threadID)
	}
	return threadID[:i], int(v), nil
}

// ParseOwner reads the data of an owner znode, /consumers/<g>/owners/<t>/<p>, as the client
// that wrote it meant it, and returns the owning consumer and its thread number:
//
//   - Kafka's ZookeeperConsumerConnector (0.8.2 to 2.x) writes the owning thread id,
//     <consumerID>-<n> (ParseThreadID);
//   - kafka-node 3.0.1's HighLevelConsumer (lib/zookeeper.js addPartitionOwnership) writes its
//     bare consumer id. It registers one thread per topic (`"<topic>": 1`), so the id names
//     that consumer's only thread, 0.
//
// registered reports whether a consumer id is registered in /consumers/<g>/ids. An owner that is
// exactly a registered consumer id is read as that consumer's first, so that a kafka-node id
// ending in -<digits> (its id option is free text: "worker-1") is not taken for thread 1 of a
// consumer "worker". Anything else must be a thread id; errors wrap ErrMalformed.
func ParseOwner(data string, registered func(consumerID string) bool) (consumerID string, thread int, err error) {
	if data != "" && registered != nil && registered(data) {
		return data, 0, nil
	}
	return ParseThreadID(data)
}

// ConsumerThreads maps each topic of a static registration to the consumer's thread ids for
// it; 0.8.2 numbers threads from 0 for every topic (TopicCount.makeConsumerThreadIdsPerTopic),
// so the same id can own partitions of several topics. A wildcard registration names a filter,
// not topics, so ConsumerThreads returns nil for it: use WildcardThreads.
func ConsumerThreads(consumerID string, r ConsumerRegistration) map[string][]string {
	if r.Pattern != PatternStatic && r.Pattern != "" {
		return nil
	}
	out := make(map[string][]string, len(r.Subscription))
	for topic, n := range r.Subscription {
		out[topic] = ThreadIDs(consumerID, n)
	}
	return out
}

// WildcardThreads expands a registration against the cluster's topics (the children of
// /brokers/topics), as WildcardTopicCount.getConsumerThreadIdsPerTopic does: white_list keeps
// the topics the filter matches, black_list those it does not, and internal topics are left
// out either way (the consumer default exclude.internal.topics=true). A static registration is
// returned as ConsumerThreads gives it, whatever the topics.
//
// The filter is read as kafka.consumer.TopicFilter reads it and matched as Java's
// String.matches does, i.e. against the whole topic name. It is taken as stored, once
// JSON-decoded. Consumers up to 0.10 store it escaped once (WildcardTopicCount.getTopicCountMap
// escapes it with JSONEscapeString for a Json.encode that does not escape). Consumers of 1.x
// store it escaped twice, because Json.legacyEncodeAsString escapes as well. Kafka's own
// rebalance reads every member's filter back from ZooKeeper in the same way, so the same
// backslashes give the same assignment. Java and RE2 agree on the syntax
// people use for topic filters; a filter using Java-only syntax (lookaround, backreferences,
// possessive quantifiers, \p{Digit}-style POSIX names) gives an error wrapping ErrMalformed.
func WildcardThreads(consumerID string, r ConsumerRegistration, topics []string) (map[string][]string, error) {
	switch r.Pattern {
	case PatternStatic, "":
		return ConsumerThreads(consumerID, r), nil
	case PatternWhiteList, PatternBlackList:
	default:
		return nil, fmt.Errorf("%w: unknown pattern %q", ErrMalformed, r.Pattern)
	}
	out := make(map[string][]string)
	// TopicCount.constructTopicCount treats an empty wildcard subscription as a static one
	// with no topics.
	if len(r.Subscription) == 0 {
		return out, nil
	}
	if len(r.Subscription) > 1 {
		return nil, fmt.Errorf("%w: %s subscription has %d topic filters, want 1",
			ErrMalformed, r.Pattern, len(r.Subscription))
	}
	var filter string
	var threads int
	for f, n := range r.Subscription {
		filter, threads = f, n
	}
	re, err := compileTopicFilter(filter)
	if err != nil {
		return nil, err
	}
	want := r.Pattern == PatternWhiteList
	for _, topic := range topics {
		if isInternalTopic(topic) {
			continue
		}
		if re.MatchString(topic) == want {
			out[topic] = ThreadIDs(consumerID, threads)
		}
	}
	return out, nil
}

// compileTopicFilter normalises a filter as kafka.consumer.TopicFilter does (trim, ',' to '|',
// drop spaces, strip quotes a properties file may have left) and anchors it at both ends,
// because Java's String.matches must match the whole input.
func compileTopicFilter(raw string) (*regexp.Regexp, error) {
	expr := strings.TrimFunc(raw, func(r rune) bool { return r <= ' ' }) // java.lang.String.trim
	expr = strings.ReplaceAll(expr, ",", "|")
	expr = strings.ReplaceAll(expr, " ", "")
	expr = strings.TrimLeft(expr, `"'`)
	expr = strings.TrimRight(expr, `"'`)
	// Compile the filter alone first: a filter such as "a)|(b" is invalid for Java but would
	// compile once wrapped, and would then escape the anchors.
	if _, err := regexp.Compile(expr); err != nil {
		return nil, fmt.Errorf("%w: topic filter %q is not a regular expression we can read: %w", ErrMalformed, raw, err)
	}
	return regexp.MustCompile(`\A(?:` + expr + `)\z`), nil
}

// isInternalTopic reports whether a wildcard subscription must skip the topic: 0.8.2's
// kafka.common.Topic.InternalTopics holds __consumer_offsets, and 0.11 added the transaction
// log, __transaction_state.
func isInternalTopic(topic string) bool {
	return topic == "__consumer_offsets" || topic == "__transaction_state"
}

// ParseOffset reads /consumers/<group>/offsets/<topic>/<partition>: the next offset to
// consume as decimal text (ZookeeperConsumerConnector.commitOffsetToZooKeeper writes
// offset.toString). Surrounding white space, as a hand edit with zkCli leaves it, is
// tolerated. Negative values parse: Kafka never commits one, but refusing it would hide the
// znode from tools that want to show or repair it.
func ParseOffset(data []byte) (int64, error) {
	s := bytes.TrimSpace(data)
	if len(s) == 0 {
		return 0, fmt.Errorf("%w: empty offset", ErrMalformed)
	}
	n, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: offset %s is not a decimal 64-bit integer", ErrMalformed, snippet(s))
	}
	return n, nil
}

// FormatOffset writes an offset as Kafka's consumer does: decimal text, nothing else.
func FormatOffset(offset int64) []byte {
	return strconv.AppendInt(nil, offset, 10)
}

// JSON helpers shared by the record codecs of this package.

// decodeObject reads data as a single JSON object and keeps its members raw. Members are
// looked up by exact name: Kafka's readers are case-sensitive, whereas encoding/json's struct
// decoding would fold case. A repeated member keeps its last value, as in Kafka's readers.
func decodeObject(data []byte) (map[string]json.RawMessage, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("%w: not JSON: %s", ErrMalformed, snippet(data))
	}
	obj, err := decodeMember(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not a JSON object", ErrMalformed, snippet(data))
	}
	return obj, nil
}

// decodeMember reads a JSON value that must be an object.
func decodeMember(raw json.RawMessage) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("not an object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// intValue reads a JSON integer in [lo, hi]. Only plain integer literals count: Kafka 0.8.2
// parses numbers with String.toInt, which refuses "1.0" and "1e3".
func intValue(raw json.RawMessage, lo, hi int64) (int64, error) {
	raw = bytes.TrimSpace(raw)
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer", snippet(raw))
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range [%d, %d]", n, lo, hi)
	}
	return n, nil
}

// stringValue reads a JSON string or null (returned as "").
func stringValue(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("%s is not a string", snippet(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s is not a string", snippet(raw))
	}
	return s, nil
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// isCanonicalDecimal reports whether s is a non-negative decimal integer as %d writes it.
func isCanonicalDecimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// appendJSONString appends s as a JSON string. HTML characters stay literal: a topic filter
// such as "a|b&c" should read the same in zkCli as in the consumer's configuration.
func appendJSONString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic("zkstate: encoding a string cannot fail: " + err.Error())
	}
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// snippet shows at most 40 bytes of data in an error message: a valid JSON value as its
// compact text, anything else quoted.
func snippet(data []byte) string {
	const max = 40
	var buf bytes.Buffer
	if json.Compact(&buf, data) == nil {
		if buf.Len() > max {
			return string(buf.Bytes()[:max]) + "..."
		}
		return buf.String()
	}
	if len(data) > max {
		return strconv.Quote(string(data[:max])) + "..."
	}
	return strconv.Quote(string(data))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// allTopicNames reports whether every key of a subscription is a legal Kafka topic name
// (Topic.validate: 1 to 249 characters of [a-zA-Z0-9._-], not "." or ".."): a topic filter
// with any regular-expression syntax beyond "." is not one.
func allTopicNames(sub map[string]int) bool {
	for t := range sub {
		if len(t) > 249 || t == "." || t == ".." {
			return false
		}
		for _, c := range t {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}
