package legacy

import (
	"fmt"
	"math"
)

// Message is one of the ten message types below, always as a pointer (*PingRequest, ...), as
// Decode returns them. The interface is sealed: only this package's types implement it.
type Message interface {
	// Type is the frame's request_type_id.
	Type() Type
	// AppendTo appends the body (everything after the version field) to dst. Encoding the same
	// value twice gives the same bytes, and every decoded value re-encodes to the bytes it was
	// decoded from.
	AppendTo(dst []byte) []byte
	// Validate reports whether the value can be encoded: strings of at most 32767 bytes of
	// UTF-8, counts that fit their fields. It does not judge meaning (an unknown
	// auto_offset_reset is encodable); the receiver answers that with CodeInvalidRequest.
	Validate() error

	readFrom(r *reader)
}

// Smallest encodings of one array element, used to refuse impossible counts before allocating.
const (
	minBrokerLen          = 2 + 4 + 2 + 4 // creator_id "", id, host "", port
	minTopicThreadsLen    = 2 + 4         // topic "", threads
	minPartitionOffsetLen = 2 + 4 + 8     // topic "", partition, offset
)

// auto_offset_reset values (seed 001 "RegisterRequest": "currently either smallest or largest",
// the values of Kafka 0.8's auto.offset.reset).
const (
	ResetSmallest = "smallest"
	ResetLargest  = "largest"
)

// Start offsets that stand for "nothing committed: apply auto_offset_reset", with the values
// Kafka's OffsetRequest uses for EarliestTime (-2) and LatestTime (-1). The consumer resolves
// them against the partition's leader before fetching.
const (
	OffsetSmallest int64 = -2
	OffsetLargest  int64 = -1
)

// ResetOffset maps an auto_offset_reset value to its Start offset sentinel; ok is false for any
// other value.
func ResetOffset(reset string) (offset int64, ok bool) {
	switch reset {
	case ResetSmallest:
		return OffsetSmallest, true
	case ResetLargest:
		return OffsetLargest, true
	}
	return 0, false
}

// ConsultRequest asks any bridge for the broker list and the coordinator's id (seed 001
// "ConsultRequest", sent at step 2 of consumerStartup). Version 0 has no body; version 1
// (ConsultVersionGroup) names the consumer's group, so that one of several bridges can name
// that group's coordinator. A ConsultRequest with a GroupID is encoded at version 1, one
// without at version 0.
type ConsultRequest struct {
	GroupID string
}

func (*ConsultRequest) Type() Type { return TypeConsultRequest }

func (m *ConsultRequest) AppendTo(dst []byte) []byte {
	if m.GroupID == "" {
		return dst
	}
	return appendString(dst, m.GroupID)
}

func (m *ConsultRequest) Validate() error {
	return checkString(m.Type(), "group_id", m.GroupID)
}

func (m *ConsultRequest) readFrom(r *reader) {
	if r.version < ConsultVersionGroup {
		return
	}
	if m.GroupID = r.string("group_id"); m.GroupID == "" && r.err == nil {
		r.fail("group_id", "version %d names a group, and an empty group_id names none", ConsultVersionGroup)
	}
}

func (m *ConsultRequest) version() int16 {
	if m.GroupID == "" {
		return Version
	}
	return ConsultVersionGroup
}

func (*ConsultRequest) maxVersion() int16 { return ConsultVersionGroup }

// ConsultResponse answers ConsultRequest (seed 001 "ConsultResponse").
type ConsultResponse struct {
	ErrorCode ErrorCode
	// CoordinatorID is the id of the coordinating bridge, one of Brokers[].ID, or -1 with
	// CodeCoordinatorNotAvailable. The seed prints int16, but broker ids are int32 everywhere
	// else (its own broker_struct, /brokers/ids in 0.8): an int16 could not name every id the
	// list can hold, so the wire type is int32.
	CoordinatorID int32
	Brokers       []Broker // brokers_info
}

// Broker is the seed's broker_struct: one bridge instance serving the legacy port.
type Broker struct {
	// CreatorID is the 0.7 broker registration's creator id; a bridge sends its instance name.
	CreatorID string
	ID        int32
	Host      string
	Port      int32
}

func (*ConsultResponse) Type() Type { return TypeConsultResponse }

func (m *ConsultResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendInt32(dst, m.CoordinatorID)
	return appendArray(dst, m.Brokers, func(dst []byte, b *Broker) []byte {
		dst = appendString(dst, b.CreatorID)
		dst = appendInt32(dst, b.ID)
		dst = appendString(dst, b.Host)
		return appendInt32(dst, b.Port)
	})
}

func (m *ConsultResponse) Validate() error {
	if err := checkCount(m.Type(), "brokers_info", len(m.Brokers)); err != nil {
		return err
	}
	for i, b := range m.Brokers {
		if err := checkString(m.Type(), fmt.Sprintf("brokers_info[%d].creator_id", i), b.CreatorID); err != nil {
			return err
		}
		if err := checkString(m.Type(), fmt.Sprintf("brokers_info[%d].host", i), b.Host); err != nil {
			return err
		}
	}
	return nil
}

func (m *ConsultResponse) readFrom(r *reader) {
	m.ErrorCode = ErrorCode(r.int16("error_code"))
	m.CoordinatorID = r.int32("coordinator_id")
	m.Brokers = readArray(r, "brokers_info", minBrokerLen, func(r *reader, b *Broker) {
		b.CreatorID = r.string("creator_id")
		b.ID = r.int32("id")
		b.Host = r.string("host")
		b.Port = r.int32("port")
	})
}

// RegisterRequest is the consumer's one and only request to the coordinator after it connects
// (seed 001 "RegisterRequest"; step 5 of consumerStartup). A successful registration has no
// response: the consumer next reads a Stop or Ping request within PingIntervalMs.
type RegisterRequest struct {
	GroupID    string
	ConsumerID string
	AutoCommit bool
	// AutoOffsetReset is ResetSmallest or ResetLargest. The seed misspells the wire field
	// auto_offset_rest; the spec names it auto_offset_reset (same position and type).
	AutoOffsetReset string
	// PingIntervalMs is both the coordinator's ping period and the time the consumer has to
	// answer any request.
	PingIntervalMs int32
	// MaxPingRetries is the number of consecutive unanswered requests after which the
	// coordinator treats the consumer as dead.
	MaxPingRetries int16
	// Subscription is not in the seed, whose coordinator nevertheless "gets the topics that are
	// interested by the group" and reads "the number of threads for each topic" (seed 001
	// "rebalance (group)", steps 1-2): a 0.8 consumer publishes exactly this topic → thread
	// count map in its /consumers/<g>/ids registration, so the consumer sends it here.
	Subscription []TopicThreads
}

// TopicThreads is one entry of a static subscription: how many consumer threads (streams) the
// consumer runs for Topic, as in 0.8's TopicCount.
type TopicThreads struct {
	Topic   string
	Threads int32
}

func (*RegisterRequest) Type() Type { return TypeRegisterRequest }

func (m *RegisterRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.GroupID)
	dst = appendString(dst, m.ConsumerID)
	dst = appendBool(dst, m.AutoCommit)
	dst = appendString(dst, m.AutoOffsetReset)
	dst = appendInt32(dst, m.PingIntervalMs)
	dst = appendInt16(dst, m.MaxPingRetries)
	return appendArray(dst, m.Subscription, func(dst []byte, s *TopicThreads) []byte {
		dst = appendString(dst, s.Topic)
		return appendInt32(dst, s.Threads)
	})
}

func (m *RegisterRequest) Validate() error {
	for _, f := range []struct{ name, s string }{
		{"group_id", m.GroupID},
		{"consumer_id", m.ConsumerID},
		{"auto_offset_reset", m.AutoOffsetReset},
	} {
		if err := checkString(m.Type(), f.name, f.s); err != nil {
			return err
		}
	}
	if err := checkCount(m.Type(), "subscription", len(m.Subscription)); err != nil {
		return err
	}
	for i, s := range m.Subscription {
		if err := checkString(m.Type(), fmt.Sprintf("subscription[%d].topic", i), s.Topic); err != nil {
			return err
		}
	}
	return nil
}

func (m *RegisterRequest) readFrom(r *reader) {
	m.GroupID = r.string("group_id")
	m.ConsumerID = r.string("consumer_id")
	m.AutoCommit = r.bool("auto_commit")
	m.AutoOffsetReset = r.string("auto_offset_reset")
	m.PingIntervalMs = r.int32("ping_interval_ms")
	m.MaxPingRetries = r.int16("max_ping_retries")
	m.Subscription = readArray(r, "subscription", minTopicThreadsLen, func(r *reader, s *TopicThreads) {
		s.Topic = r.string("topic")
		s.Threads = r.int32("threads")
	})
}

// RegisterResponse is not in the seed, where a registration has no answer. The coordinator sends
// it only to refuse a registration (GROUP_MODE_REFUSED, NOT_COORDINATOR, INVALID_REQUEST, ...)
// and then closes the connection, so that the consumer can report why instead of seeing a bare
// disconnect. Accepted registrations still get no response, as the seed says.
type RegisterResponse struct {
	ErrorCode ErrorCode
}

func (*RegisterResponse) Type() Type { return TypeRegisterResponse }
func (m *RegisterResponse) AppendTo(dst []byte) []byte {
	return appendInt16(dst, int16(m.ErrorCode))
}
func (*RegisterResponse) Validate() error { return nil }
func (m *RegisterResponse) readFrom(r *reader) {
	m.ErrorCode = ErrorCode(r.int16("error_code"))
}

// PingRequest checks that the consumer is alive and collects its offsets (seed 001
// "PingRequest").
type PingRequest struct {
	// NumRetries is 0 for a regular ping and n for the ping sent after n consecutive
	// unanswered requests ("indicate this is the #th ping retry").
	NumRetries int16
}

func (*PingRequest) Type() Type { return TypePingRequest }
func (m *PingRequest) AppendTo(dst []byte) []byte {
	return appendInt16(dst, m.NumRetries)
}
func (*PingRequest) Validate() error { return nil }
func (m *PingRequest) readFrom(r *reader) {
	m.NumRetries = r.int16("num_retries")
}

// PingResponse answers PingRequest (seed 001 "PingResponse", "Handling PingRequest"). With
// auto_commit the body is num_partition int16 then offset_info, whose int32 count must equal
// num_partition; without auto_commit "the last two fields should not exist" and the body is
// empty. It carries no error code.
type PingResponse struct {
	// HasOffsets says whether num_partition and offset_info are on the wire; a consumer
	// registered with auto_commit sets it, even when it owns no partition (num_partition 0).
	// AppendTo also writes them when Offsets is non-empty, so offsets are never dropped
	// silently. Decode sets it exactly when the fields were present.
	HasOffsets bool
	Offsets    []PartitionOffset // offset_info
}

// PartitionOffset is the seed's offset_struct and partition_struct: a partition and an offset.
// The seed types partition as a string that "already contains the broker id", the 0.7 naming
// ("<brokerId>-<part>"); 0.8 numbers partitions per topic (/brokers/topics/<t>/partitions/<n>,
// /consumers/<g>/owners/<t>/<n>), so the wire type is int32.
//
// Offset is always the next offset to consume, the value 0.8 writes to
// /consumers/<g>/offsets/<t>/<n>. In a StartRequest it may also be OffsetSmallest or
// OffsetLargest.
type PartitionOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}

func appendPartitionOffset(dst []byte, p *PartitionOffset) []byte {
	dst = appendString(dst, p.Topic)
	dst = appendInt32(dst, p.Partition)
	return appendInt64(dst, p.Offset)
}

func readPartitionOffset(r *reader, p *PartitionOffset) {
	p.Topic = r.string("topic")
	p.Partition = r.int32("partition")
	p.Offset = r.int64("offset")
}

func checkPartitionOffsets(msg Type, field string, ps []PartitionOffset) error {
	if err := checkCount(msg, field, len(ps)); err != nil {
		return err
	}
	for i, p := range ps {
		if err := checkString(msg, fmt.Sprintf("%s[%d].topic", field, i), p.Topic); err != nil {
			return err
		}
	}
	return nil
}

func (*PingResponse) Type() Type { return TypePingResponse }

func (m *PingResponse) AppendTo(dst []byte) []byte {
	if !m.HasOffsets && len(m.Offsets) == 0 {
		return dst
	}
	dst = appendInt16(dst, int16(len(m.Offsets)))
	return appendArray(dst, m.Offsets, appendPartitionOffset)
}

func (m *PingResponse) Validate() error {
	if len(m.Offsets) > math.MaxInt16 {
		return fmt.Errorf("legacy: %v: field num_partition: %w: %d partitions exceed the int16 count", m.Type(), ErrMalformed, len(m.Offsets))
	}
	return checkPartitionOffsets(m.Type(), "offset_info", m.Offsets)
}

func (m *PingResponse) readFrom(r *reader) {
	if r.remaining() == 0 {
		return // auto_commit is off: no num_partition, no offset_info
	}
	m.HasOffsets = true
	n := r.int16("num_partition")
	// "its size should be exactly num_partition": checked before the count is trusted.
	if count, ok := r.peekInt32(); ok && count >= 0 && count != int32(n) {
		r.fail("offset_info", "array count %d differs from num_partition %d", count, n)
	}
	m.Offsets = readArray(r, "offset_info", minPartitionOffsetLen, readPartitionOffset)
}

// StopRequest tells the consumer to stop all fetchers and drop their queues before a rebalance
// (seed 001 "StopRequest", "Handling StopRequest"). It has no body.
type StopRequest struct{}

func (*StopRequest) Type() Type                 { return TypeStopRequest }
func (*StopRequest) AppendTo(dst []byte) []byte { return dst }
func (*StopRequest) Validate() error            { return nil }
func (*StopRequest) readFrom(*reader)           {}

// StopResponse says the consumer's fetchers are stopped (seed 001 "StopResponse").
type StopResponse struct {
	ErrorCode ErrorCode
}

func (*StopResponse) Type() Type { return TypeStopResponse }
func (m *StopResponse) AppendTo(dst []byte) []byte {
	return appendInt16(dst, int16(m.ErrorCode))
}
func (*StopResponse) Validate() error { return nil }
func (m *StopResponse) readFrom(r *reader) {
	m.ErrorCode = ErrorCode(r.int16("error_code"))
}

// StartRequest hands the consumer its partitions and their starting offsets after a Stop (seed
// 001 "StartRequest"). One edit of the seed also prints num_partitions int16 before
// assigned_parts; the later edit has only the array, whose own count makes it redundant.
type StartRequest struct {
	Assigned []PartitionOffset // assigned_parts
}

func (*StartRequest) Type() Type { return TypeStartRequest }

func (m *StartRequest) AppendTo(dst []byte) []byte {
	return appendArray(dst, m.Assigned, appendPartitionOffset)
}

func (m *StartRequest) Validate() error {
	return checkPartitionOffsets(m.Type(), "assigned_parts", m.Assigned)
}

func (m *StartRequest) readFrom(r *reader) {
	m.Assigned = readArray(r, "assigned_parts", minPartitionOffsetLen, readPartitionOffset)
}

// StartResponse says the consumer has started fetching its assigned partitions (seed 001
// "StartResponse"; step 4.3 of the coordinator's rebalance waits for it).
type StartResponse struct {
	ErrorCode ErrorCode
}

func (*StartResponse) Type() Type { return TypeStartResponse }
func (m *StartResponse) AppendTo(dst []byte) []byte {
	return appendInt16(dst, int16(m.ErrorCode))
}
func (*StartResponse) Validate() error { return nil }
func (m *StartResponse) readFrom(r *reader) {
	m.ErrorCode = ErrorCode(r.int16("error_code"))
}
