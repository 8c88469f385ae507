package legacy

import (
	"errors"
	"fmt"
	"strconv"
)

// Decoding failures. Every error returned by Decode and ReadFrame wraps exactly one of these, so
// a connection shell can pick its reaction with errors.Is: ErrUnsupportedVersion is answered
// with CodeUnsupportedVersion where the answer has an error_code, everything else closes the
// offending connection (DESIGN §5).
var (
	// ErrMalformed: the bytes do not follow docs/legacy-protocol.md (short input, negative or
	// oversize length, invalid UTF-8, trailing bytes, inconsistent counts).
	ErrMalformed = errors.New("malformed legacy frame")
	// ErrUnknownType: the request_type_id is not in the table of §"Type ids".
	ErrUnknownType = errors.New("unknown legacy message type")
	// ErrUnsupportedVersion: the version field names a version this codec does not speak.
	ErrUnsupportedVersion = errors.New("unsupported legacy protocol version")
	// ErrFrameTooLarge: the size prefix declares more than the reader's limit. It is reported
	// before any buffer for the frame is allocated.
	ErrFrameTooLarge = errors.New("legacy frame too large")
)

// DecodeError says where a frame failed to decode. Err wraps one of ErrMalformed,
// ErrUnknownType or ErrUnsupportedVersion and carries the detail.
type DecodeError struct {
	Type    Type   // from the header; zero when the header itself was short
	Version int16  // from the header
	Field   string // wire name of the field, e.g. "brokers_info[2].host"; empty for trailing bytes
	Offset  int    // byte offset of the field within the frame (after the size prefix)
	Err     error
}

func (e *DecodeError) Error() string {
	switch {
	case e.Field == "":
		return fmt.Sprintf("legacy: decode %v v%d: %v", e.Type, e.Version, e.Err)
	case e.Offset < headerLen && errors.Is(e.Err, ErrMalformed):
		return fmt.Sprintf("legacy: decode frame header: field %s at offset %d: %v", e.Field, e.Offset, e.Err)
	}
	return fmt.Sprintf("legacy: decode %v v%d: field %s at offset %d: %v", e.Type, e.Version, e.Field, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrorCode is the error_code int16 carried by ConsultResponse, RegisterResponse, StopResponse
// and StartResponse. The table below is the only place legacy wire codes are defined
// (docs/legacy-protocol.md §"Error codes" mirrors it; a test keeps the two in step).
//
// Codes this package does not know (sent by a newer peer) decode fine: String prints
// ErrorCode(n) and Err returns a CodeError for them.
type ErrorCode int16

// Error codes of protocol version 0. Numbers are stable: never renumber, only append.
const (
	CodeNone                    ErrorCode = 0
	CodeUnknown                 ErrorCode = 1
	CodeInvalidRequest          ErrorCode = 2
	CodeUnsupportedVersion      ErrorCode = 3
	CodeNotCoordinator          ErrorCode = 4
	CodeGroupModeRefused        ErrorCode = 5
	CodeIllegalState            ErrorCode = 6
	CodeCoordinatorNotAvailable ErrorCode = 7
	CodeInvalidPingSettings     ErrorCode = 8
	CodeConsumerIDInUse         ErrorCode = 9
)

type codeInfo struct {
	name        string
	description string
}

var codeTable = map[ErrorCode]codeInfo{
	CodeNone:                    {"NONE", "no error"},
	CodeUnknown:                 {"UNKNOWN", "unexpected error on the sender's side"},
	CodeInvalidRequest:          {"INVALID_REQUEST", "the request decoded but a value is not acceptable (empty group_id, unknown auto_offset_reset, threads < 1, offset < -2, ...)"},
	CodeUnsupportedVersion:      {"UNSUPPORTED_VERSION", "the request's version is not spoken by the receiver; retry with version 0"},
	CodeNotCoordinator:          {"NOT_COORDINATOR", "this bridge does not coordinate the group; consult again"},
	CodeGroupModeRefused:        {"GROUP_MODE_REFUSED", "the group's mode (kafka or finalized) refuses legacy members; the consumer must stop and report it"},
	CodeIllegalState:            {"ILLEGAL_STATE", "the message is not valid in the connection's current state"},
	CodeCoordinatorNotAvailable: {"COORDINATOR_NOT_AVAILABLE", "no coordinator is known yet; consult again after a backoff"},
	CodeInvalidPingSettings:     {"INVALID_PING_SETTINGS", "ping_interval_ms or max_ping_retries is outside the coordinator's accepted range"},
	CodeConsumerIDInUse:         {"CONSUMER_ID_IN_USE", "a live member of the group already registered this consumer_id"},
}

// String returns the code's wire name, e.g. "GROUP_MODE_REFUSED".
func (c ErrorCode) String() string {
	if info, ok := codeTable[c]; ok {
		return info.name
	}
	return "ErrorCode(" + strconv.Itoa(int(c)) + ")"
}

// Description returns one sentence on what the code means and what the receiver should do.
func (c ErrorCode) Description() string {
	if info, ok := codeTable[c]; ok {
		return info.description
	}
	return "error code unknown to this version of zkbridge"
}

// Err returns nil for CodeNone and a CodeError otherwise, so callers can write
// `if err := resp.ErrorCode.Err(); err != nil` and test with errors.Is(err, CodeX.Err()).
func (c ErrorCode) Err() error {
	if c == CodeNone {
		return nil
	}
	return CodeError{Code: c}
}

// CodeError is a non-zero ErrorCode received from (or to be sent to) the peer. It is a
// comparable value, so errors.Is(err, CodeGroupModeRefused.Err()) works.
type CodeError struct {
	Code ErrorCode
}

func (e CodeError) Error() string {
	return fmt.Sprintf("legacy: %v (%d): %s", e.Code, int16(e.Code), e.Code.Description())
}
