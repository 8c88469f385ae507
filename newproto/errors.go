package newproto

import (
	"errors"
	"fmt"

	"github.com/zkbridge/zkbridge/bridge/group"
)

// ErrorCode is a Kafka protocol error code, with the meaning Kafka gives it
// (org.apache.kafka.common.protocol.Errors). This file is the one place
// where newproto names the codes it puts on the wire.
//
// ErrorCode implements error so that a Coordinator can return one, wrapped
// with %w and context, and the router turns it into the response's error
// code at a single boundary:
//
//	return nil, fmt.Errorf("group %q is owned by bridge %s: %w", g, owner, newproto.ErrNotCoordinator)
type ErrorCode int16

// The codes newproto and its Coordinator use. The names are Kafka's, in Go
// spelling, so that a grep for the Kafka name in upper snake case
// (errorInfo below) or for the number finds them.
const (
	ErrUnknownServerError        ErrorCode = -1  // UNKNOWN_SERVER_ERROR
	ErrUnknownTopicOrPartition   ErrorCode = 3   // UNKNOWN_TOPIC_OR_PARTITION
	ErrLeaderNotAvailable        ErrorCode = 5   // LEADER_NOT_AVAILABLE
	ErrOffsetMetadataTooLarge    ErrorCode = 12  // OFFSET_METADATA_TOO_LARGE
	ErrCoordinatorLoadInProgress ErrorCode = 14  // COORDINATOR_LOAD_IN_PROGRESS
	ErrCoordinatorNotAvailable   ErrorCode = 15  // COORDINATOR_NOT_AVAILABLE
	ErrNotCoordinator            ErrorCode = 16  // NOT_COORDINATOR
	ErrIllegalGeneration         ErrorCode = 22  // ILLEGAL_GENERATION
	ErrInconsistentGroupProtocol ErrorCode = 23  // INCONSISTENT_GROUP_PROTOCOL
	ErrInvalidGroupID            ErrorCode = 24  // INVALID_GROUP_ID
	ErrUnknownMemberID           ErrorCode = 25  // UNKNOWN_MEMBER_ID
	ErrInvalidSessionTimeout     ErrorCode = 26  // INVALID_SESSION_TIMEOUT
	ErrRebalanceInProgress       ErrorCode = 27  // REBALANCE_IN_PROGRESS
	ErrInvalidCommitOffsetSize   ErrorCode = 28  // INVALID_COMMIT_OFFSET_SIZE
	ErrGroupAuthorizationFailed  ErrorCode = 30  // GROUP_AUTHORIZATION_FAILED
	ErrUnsupportedVersion        ErrorCode = 35  // UNSUPPORTED_VERSION
	ErrInvalidRequest            ErrorCode = 42  // INVALID_REQUEST
	ErrNonEmptyGroup             ErrorCode = 68  // NON_EMPTY_GROUP
	ErrGroupIDNotFound           ErrorCode = 69  // GROUP_ID_NOT_FOUND
	ErrMemberIDRequired          ErrorCode = 79  // MEMBER_ID_REQUIRED
	ErrGroupMaxSizeReached       ErrorCode = 81  // GROUP_MAX_SIZE_REACHED
	ErrFencedInstanceID          ErrorCode = 82  // FENCED_INSTANCE_ID
	ErrGroupSubscribedToTopic    ErrorCode = 86  // GROUP_SUBSCRIBED_TO_TOPIC
	ErrUnstableOffsetCommit      ErrorCode = 88  // UNSTABLE_OFFSET_COMMIT
	ErrUnknownTopicID            ErrorCode = 100 // UNKNOWN_TOPIC_ID
)

// errorInfo holds Kafka's name and default message for each code above.
// Retriable follows Kafka's RetriableException hierarchy: clients retry
// those by themselves.

// The security error codes (authorize.go, sasl.go).
const (
	ErrTopicAuthorizationFailed   ErrorCode = 29 // TOPIC_AUTHORIZATION_FAILED
	ErrClusterAuthorizationFailed ErrorCode = 31 // CLUSTER_AUTHORIZATION_FAILED
	ErrUnsupportedSASLMechanism   ErrorCode = 33 // UNSUPPORTED_SASL_MECHANISM
	ErrIllegalSASLState           ErrorCode = 34 // ILLEGAL_SASL_STATE
	ErrSASLAuthenticationFailed   ErrorCode = 58 // SASL_AUTHENTICATION_FAILED
)

func init() {
	for c, info := range map[ErrorCode][2]string{
		ErrTopicAuthorizationFailed:   {"TOPIC_AUTHORIZATION_FAILED", "Topic authorization failed."},
		ErrClusterAuthorizationFailed: {"CLUSTER_AUTHORIZATION_FAILED", "Cluster authorization failed."},
		ErrUnsupportedSASLMechanism:   {"UNSUPPORTED_SASL_MECHANISM", "The broker does not support the requested SASL mechanism."},
		ErrIllegalSASLState:           {"ILLEGAL_SASL_STATE", "Request is not valid given the current SASL state."},
		ErrSASLAuthenticationFailed:   {"SASL_AUTHENTICATION_FAILED", "SASL Authentication failed."},
	} {
		errorInfo[c] = struct {
			name      string
			message   string
			retriable bool
		}{info[0], info[1], false}
	}
}

var errorInfo = map[ErrorCode]struct {
	name      string
	message   string
	retriable bool
}{
	ErrUnknownServerError:        {"UNKNOWN_SERVER_ERROR", "The server experienced an unexpected error when processing the request.", false},
	ErrUnknownTopicOrPartition:   {"UNKNOWN_TOPIC_OR_PARTITION", "This server does not host this topic-partition.", true},
	ErrLeaderNotAvailable:        {"LEADER_NOT_AVAILABLE", "There is no leader for this topic-partition as we are in the middle of a leadership election.", true},
	ErrOffsetMetadataTooLarge:    {"OFFSET_METADATA_TOO_LARGE", "The metadata field of the offset request was too large.", false},
	ErrCoordinatorLoadInProgress: {"COORDINATOR_LOAD_IN_PROGRESS", "The coordinator is loading and hence can't process requests.", true},
	ErrCoordinatorNotAvailable:   {"COORDINATOR_NOT_AVAILABLE", "The coordinator is not available.", true},
	ErrNotCoordinator:            {"NOT_COORDINATOR", "This is not the correct coordinator.", true},
	ErrIllegalGeneration:         {"ILLEGAL_GENERATION", "Specified group generation id is not valid.", false},
	ErrInconsistentGroupProtocol: {"INCONSISTENT_GROUP_PROTOCOL", "The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list.", false},
	ErrInvalidGroupID:            {"INVALID_GROUP_ID", "The configured groupId is invalid.", false},
	ErrUnknownMemberID:           {"UNKNOWN_MEMBER_ID", "The coordinator is not aware of this member.", false},
	ErrInvalidSessionTimeout:     {"INVALID_SESSION_TIMEOUT", "The session timeout is not within the range allowed by the broker (as configured by group.min.session.timeout.ms and group.max.session.timeout.ms).", false},
	ErrRebalanceInProgress:       {"REBALANCE_IN_PROGRESS", "The group is rebalancing, so a rejoin is needed.", false},
	ErrInvalidCommitOffsetSize:   {"INVALID_COMMIT_OFFSET_SIZE", "The committing offset data size is not valid.", false},
	ErrGroupAuthorizationFailed:  {"GROUP_AUTHORIZATION_FAILED", "Group authorization failed.", false},
	ErrUnsupportedVersion:        {"UNSUPPORTED_VERSION", "The version of API is not supported.", false},
	ErrInvalidRequest:            {"INVALID_REQUEST", "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.", false},
	ErrNonEmptyGroup:             {"NON_EMPTY_GROUP", "The group is not empty.", false},
	ErrGroupIDNotFound:           {"GROUP_ID_NOT_FOUND", "The group id does not exist.", false},
	ErrMemberIDRequired:          {"MEMBER_ID_REQUIRED", "The group member needs to have a valid member id before actually entering a consumer group.", false},
	ErrGroupMaxSizeReached:       {"GROUP_MAX_SIZE_REACHED", "The consumer group has reached its max size.", false},
	ErrGroupSubscribedToTopic:    {"GROUP_SUBSCRIBED_TO_TOPIC", "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.", false},
	ErrFencedInstanceID:          {"FENCED_INSTANCE_ID", "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.", false},
	ErrUnstableOffsetCommit:      {"UNSTABLE_OFFSET_COMMIT", "There are unstable offsets that need to be cleared.", true},
	ErrUnknownTopicID:            {"UNKNOWN_TOPIC_ID", "This server does not host this topic ID.", true},
}

// Name returns Kafka's name for the code, such as "NOT_COORDINATOR", or
// "ERROR_CODE_<n>" for a code this table does not list.
func (c ErrorCode) Name() string {
	if c == 0 {
		return "NONE"
	}
	if info, ok := errorInfo[c]; ok {
		return info.name
	}
	return fmt.Sprintf("ERROR_CODE_%d", int16(c))
}

// Retriable reports whether Kafka clients retry this error by themselves.
func (c ErrorCode) Retriable() bool { return errorInfo[c].retriable }

// Error returns the name, the number and Kafka's default message.
func (c ErrorCode) Error() string {
	if info, ok := errorInfo[c]; ok {
		return fmt.Sprintf("%s (%d): %s", info.name, int16(c), info.message)
	}
	return fmt.Sprintf("%s (%d)", c.Name(), int16(c))
}

// codeOf finds the ErrorCode in err's chain.
func codeOf(err error) (ErrorCode, bool) {
	var c ErrorCode
	if errors.As(err, &c) && c != 0 {
		return c, true
	}
	return 0, false
}

// wireCode is the Kafka error code for the group engine's outcome. The
// engine numbers its codes as Kafka does (bridge/group/errors.go), so the
// mapping is the identity; this is the one place that relies on it, and
// TestGroupErrorCodes checks that every engine code has the same name here.
func wireCode(c group.ErrorCode) int16 { return int16(c) }
