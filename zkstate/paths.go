package zkstate

import (
	"path"
	"strconv"
)

// The Kafka 0.8 layout (kafka.utils.ZkUtils in 0.8.2). Every path the project reads or writes
// is built here, so the layout is stated once.
const (
	ConsumersPath = "/consumers"
	BrokerIDsPath = "/brokers/ids"
	TopicsPath    = "/brokers/topics"
)

// GroupPath is /consumers/<group>.
func GroupPath(group string) string { return path.Join(ConsumersPath, group) }

// IDsPath is /consumers/<group>/ids, the parent of the members' ephemeral registrations.
func IDsPath(group string) string { return path.Join(GroupPath(group), "ids") }

// IDPath is /consumers/<group>/ids/<consumerID>.
func IDPath(group, consumerID string) string { return path.Join(IDsPath(group), consumerID) }

// OwnersPath is /consumers/<group>/owners.
func OwnersPath(group string) string { return path.Join(GroupPath(group), "owners") }

// OwnersTopicPath is /consumers/<group>/owners/<topic>.
func OwnersTopicPath(group, topic string) string { return path.Join(OwnersPath(group), topic) }

// OwnerPath is /consumers/<group>/owners/<topic>/<partition>; it holds the owning thread id.
func OwnerPath(group, topic string, partition int32) string {
	return path.Join(OwnersTopicPath(group, topic), strconv.Itoa(int(partition)))
}

// OffsetsPath is /consumers/<group>/offsets.
func OffsetsPath(group string) string { return path.Join(GroupPath(group), "offsets") }

// OffsetsTopicPath is /consumers/<group>/offsets/<topic>.
func OffsetsTopicPath(group, topic string) string { return path.Join(OffsetsPath(group), topic) }

// OffsetPath is /consumers/<group>/offsets/<topic>/<partition>; it holds the next offset to
// consume as decimal text.
func OffsetPath(group, topic string, partition int32) string {
	return path.Join(OffsetsTopicPath(group, topic), strconv.Itoa(int(partition)))
}

// BrokerPath is /brokers/ids/<id>.
func BrokerPath(id int32) string { return path.Join(BrokerIDsPath, strconv.Itoa(int(id))) }

// TopicPath is /brokers/topics/<topic>; it holds the replica assignment.
func TopicPath(topic string) string { return path.Join(TopicsPath, topic) }

// PartitionStatePath is /brokers/topics/<topic>/partitions/<partition>/state.
func PartitionStatePath(topic string, partition int32) string {
	return path.Join(TopicPath(topic), "partitions", strconv.Itoa(int(partition)), "state")
}
