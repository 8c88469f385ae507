package group

import "strconv"

// ErrorCode is the outcome of a request, numbered as Apache Kafka numbers its error codes
// (org.apache.kafka.common.protocol.Errors) so that the Kafka adapter can pass it through and the
// legacy adapter can map it in one table. The names are protocol-neutral; the wire translation
// lives in each protocol package.
type ErrorCode int16

// Error codes the engine returns. Numbers are Kafka's.
const (
	// ErrNone means success.
	ErrNone ErrorCode = 0
	// ErrOffsetMetadataTooLarge: an offset's metadata string exceeds Config.MaxOffsetMetadata
	// (OFFSET_METADATA_TOO_LARGE).
	ErrOffsetMetadataTooLarge ErrorCode = 12
	// ErrCoordinatorNotAvailable: the group is Dead (deleted); the client looks the
	// coordinator up again and retries (COORDINATOR_NOT_AVAILABLE).
	ErrCoordinatorNotAvailable ErrorCode = 15
	// ErrNotCoordinator: this machine was fenced (another bridge owns the group)
	// (NOT_COORDINATOR).
	ErrNotCoordinator ErrorCode = 16
	// ErrIllegalGeneration: the request names another generation than the current one
	// (ILLEGAL_GENERATION).
	ErrIllegalGeneration ErrorCode = 22
	// ErrInconsistentGroupProtocol: no protocol in common with the group, or another protocol
	// type (INCONSISTENT_GROUP_PROTOCOL).
	ErrInconsistentGroupProtocol ErrorCode = 23
	// ErrUnknownMemberID: the member id is not (or no longer) in the group (UNKNOWN_MEMBER_ID).
	ErrUnknownMemberID ErrorCode = 25
	// ErrInvalidSessionTimeout: the session timeout is outside [MinSessionTimeout,
	// MaxSessionTimeout] (INVALID_SESSION_TIMEOUT).
	ErrInvalidSessionTimeout ErrorCode = 26
	// ErrRebalanceInProgress: the group is rebalancing; the member must (re)join
	// (REBALANCE_IN_PROGRESS).
	ErrRebalanceInProgress ErrorCode = 27
	// ErrNonEmptyGroup: the group still has members, so it cannot be deleted (NON_EMPTY_GROUP).
	ErrNonEmptyGroup ErrorCode = 68
	// ErrGroupIDNotFound: the group does not exist (GROUP_ID_NOT_FOUND).
	ErrGroupIDNotFound ErrorCode = 69
	// ErrMemberIDRequired: a new dynamic member must rejoin with the member id carried in the
	// reply (KIP-394, MEMBER_ID_REQUIRED).
	ErrMemberIDRequired ErrorCode = 79
	// ErrGroupMaxSizeReached: the group already has Config.MaxSize members
	// (GROUP_MAX_SIZE_REACHED).
	ErrGroupMaxSizeReached ErrorCode = 81
	// ErrFencedInstanceID: another member id now owns this group.instance.id (KIP-345,
	// FENCED_INSTANCE_ID).
	ErrFencedInstanceID ErrorCode = 82
)

var errorNames = map[ErrorCode]string{
	ErrNone:                      "NONE",
	ErrOffsetMetadataTooLarge:    "OFFSET_METADATA_TOO_LARGE",
	ErrCoordinatorNotAvailable:   "COORDINATOR_NOT_AVAILABLE",
	ErrNotCoordinator:            "NOT_COORDINATOR",
	ErrIllegalGeneration:         "ILLEGAL_GENERATION",
	ErrInconsistentGroupProtocol: "INCONSISTENT_GROUP_PROTOCOL",
	ErrUnknownMemberID:           "UNKNOWN_MEMBER_ID",
	ErrInvalidSessionTimeout:     "INVALID_SESSION_TIMEOUT",
	ErrRebalanceInProgress:       "REBALANCE_IN_PROGRESS",
	ErrNonEmptyGroup:             "NON_EMPTY_GROUP",
	ErrGroupIDNotFound:           "GROUP_ID_NOT_FOUND",
	ErrMemberIDRequired:          "MEMBER_ID_REQUIRED",
	ErrGroupMaxSizeReached:       "GROUP_MAX_SIZE_REACHED",
	ErrFencedInstanceID:          "FENCED_INSTANCE_ID",
}

// String returns Kafka's name for the code (e.g. "REBALANCE_IN_PROGRESS").
func (c ErrorCode) String() string {
	if s, ok := errorNames[c]; ok {
		return s
	}
	return "ERROR_" + strconv.Itoa(int(c))
}
