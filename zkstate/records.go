package zkstate

// Record types of the Kafka 0.8 layout. The parse and encode functions live beside them in
// records_*.go; this file only declares the shapes every other file agrees on.
//
// Reading is lenient (everything Kafka 0.8.2 to 2.x wrote); writing is strict (only what Kafka
// 0.8.2's own JSON reader accepts: kafka.utils.Json maps every JSON number to a 32-bit Int, so a
// millisecond timestamp must be written as a string).

// TopicPartition names one partition of one topic.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// ConsumerRegistration is the JSON of /consumers/<g>/ids/<consumerID> (ephemeral):
//
//	{"version":1,"subscription":{"<topic>":<threads>},"pattern":"static|white_list|black_list","timestamp":"<ms>"}
//
// For white_list and black_list patterns the subscription's single key is the topic filter
// regex and its value the thread count (TopicCount.constructTopicCount in 0.8.2).
type ConsumerRegistration struct {
	Version      int
	Subscription map[string]int
	Pattern      string // PatternStatic, PatternWhiteList or PatternBlackList
	// TimestampMs is the registration time in Unix milliseconds; 0 when absent. Read from a
	// string or a number, always written as a string.
	TimestampMs int64
}

// Subscription patterns, as 0.8.2's TopicCount writes them.
const (
	PatternStatic    = "static"
	PatternWhiteList = "white_list"
	PatternBlackList = "black_list"
)

// BrokerRegistration is the JSON of /brokers/ids/<id> (versions 1 to 4; version 1 has no
// endpoints, version 2 adds endpoints, 3 adds rack, 4 adds listener_security_protocol_map).
type BrokerRegistration struct {
	ID        int32 // from the znode name, not the JSON
	Version   int
	Host      string // may be empty when only endpoints are given
	Port      int32  // -1 when only endpoints are given
	JMXPort   int32
	Timestamp string
	Endpoints []string // e.g. "PLAINTEXT://host:9092"
	Rack      string
	// ListenerSecurityProtocolMap maps a listener name to its security protocol (v4).
	ListenerSecurityProtocolMap map[string]string
}

// TopicAssignment is the JSON of /brokers/topics/<topic>: partition → replica broker ids.
//
//	{"version":1,"partitions":{"0":[1,2]}}
type TopicAssignment struct {
	Version    int
	Partitions map[int32][]int32
	// TopicID is the topic's id (KIP-516) that Kafka 2.8+ writes as "topic_id"; zero when the
	// znode has none, as on a cluster that never ran 2.8.
	TopicID [16]byte
}

// PartitionState is the JSON of /brokers/topics/<t>/partitions/<p>/state.
type PartitionState struct {
	Version         int
	ControllerEpoch int32
	Leader          int32
	LeaderEpoch     int32
	ISR             []int32
}
