package legacy

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.hex and the worked examples of docs/legacy-protocol.md from the codec's output (review the diff before committing)")

const docPath = "../docs/legacy-protocol.md"

// goldenCases is one frame per message (plus the two other shapes of PingResponse). The same
// frames are the worked examples of docs/legacy-protocol.md §"Worked examples".
var goldenCases = []struct {
	name string // file testdata/golden/<name>.hex
	desc string
	msg  Message
}{
	{"consult_request", "ConsultRequest: no body", &ConsultRequest{}},
	{"consult_request_group", "ConsultRequest version 1: the coordinator of group g1, please", &ConsultRequest{GroupID: "g1"}},
	{"consult_response", "ConsultResponse: bridge 2 coordinates; two bridges listen on port 9099", &ConsultResponse{
		ErrorCode:     CodeNone,
		CoordinatorID: 2,
		Brokers: []Broker{
			{CreatorID: "br1", ID: 1, Host: "10.0.0.1", Port: 9099},
			{CreatorID: "br2", ID: 2, Host: "10.0.0.2", Port: 9099},
		},
	}},
	{"register_request", "RegisterRequest: consumer c1 of group g1, auto_commit on, 2 threads on topic t", &RegisterRequest{
		GroupID:         "g1",
		ConsumerID:      "c1",
		AutoCommit:      true,
		AutoOffsetReset: ResetLargest,
		PingIntervalMs:  3000,
		MaxPingRetries:  3,
		Subscription:    []TopicThreads{{Topic: "t", Threads: 2}},
	}},
	{"register_response", "RegisterResponse: refusal, the group is in kafka mode", &RegisterResponse{ErrorCode: CodeGroupModeRefused}},
	{"ping_request", "PingRequest: first retry after one unanswered request", &PingRequest{NumRetries: 1}},
	{"ping_response", "PingResponse: auto_commit on, next offsets t-0 42 and t-1 7", &PingResponse{
		HasOffsets: true,
		Offsets:    []PartitionOffset{{Topic: "t", Partition: 0, Offset: 42}, {Topic: "t", Partition: 1, Offset: 7}},
	}},
	{"ping_response_no_partitions", "PingResponse: auto_commit on, no partition owned", &PingResponse{HasOffsets: true}},
	{"ping_response_no_offsets", "PingResponse: auto_commit off, both fields absent", &PingResponse{}},
	{"stop_request", "StopRequest: no body", &StopRequest{}},
	{"stop_response", "StopResponse: fetchers stopped", &StopResponse{ErrorCode: CodeNone}},
	{"start_request", "StartRequest: t-0 from offset 42, t-1 has no committed offset and starts at smallest (-2)", &StartRequest{
		Assigned: []PartitionOffset{{Topic: "t", Partition: 0, Offset: 42}, {Topic: "t", Partition: 1, Offset: OffsetSmallest}},
	}},
	{"start_response", "StartResponse: fetchers started", &StartResponse{ErrorCode: CodeNone}},
}

// TestGolden checks every golden frame both ways: encoding the value gives the golden bytes and
// decoding the golden bytes gives the value.
func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", tc.name+".hex")
			got := AppendFrame(nil, tc.msg)
			if *update {
				text, err := dumpFrame(tc.desc, got)
				if err != nil {
					t.Fatalf("dumpFrame(%s): %v", tc.name, err)
				}
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			text, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden (run with -update to create it): %v", err)
			}
			want, err := parseHexDump(string(text))
			if err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("AppendFrame(%#v) =\n%x\nwant (%s)\n%x", tc.msg, got, path, want)
			}
			frame, err := ReadFrame(bytes.NewReader(want), 0)
			if err != nil {
				t.Fatalf("ReadFrame(%s) error: %v", path, err)
			}
			dec, err := Decode(frame)
			if err != nil {
				t.Fatalf("Decode(%s) error: %v", path, err)
			}
			if !reflect.DeepEqual(dec, tc.msg) {
				t.Errorf("Decode(%s) = %#v, want %#v", path, dec, tc.msg)
			}
		})
	}
}

// TestDocExamples keeps the worked examples of docs/legacy-protocol.md identical to the golden
// files: each example is the fenced block right after a "<!-- golden: NAME.hex -->" marker.
func TestDocExamples(t *testing.T) {
	docBytes, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(docBytes)
	for _, tc := range goldenCases {
		golden, err := os.ReadFile(filepath.Join("testdata", "golden", tc.name+".hex"))
		if err != nil {
			t.Fatal(err)
		}
		marker := "<!-- golden: " + tc.name + ".hex -->\n```text\n"
		i := strings.Index(doc, marker)
		if i < 0 {
			t.Errorf("%s has no worked example %q", docPath, marker)
			continue
		}
		start := i + len(marker)
		end := strings.Index(doc[start:], "```")
		if end < 0 {
			t.Errorf("%s: example %s is not closed", docPath, tc.name)
			continue
		}
		end += start
		if doc[start:end] != string(golden) {
			if *update {
				doc = doc[:start] + string(golden) + doc[end:]
				continue
			}
			t.Errorf("%s: example %s differs from testdata/golden/%s.hex (run go test ./legacy -run TestGolden -update)\ngot:\n%s\nwant:\n%s", docPath, tc.name, tc.name, doc[start:end], golden)
		}
	}
	if *update && doc != string(docBytes) {
		if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDocErrorCodes keeps docs/legacy-protocol.md §"Error codes" in step with errors.go.
func TestDocErrorCodes(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	for c := range codeTable {
		row := fmt.Sprintf("| %d | `%s` |", int16(c), c)
		if !bytes.Contains(doc, []byte(row)) {
			t.Errorf("%s lacks the error code row %q", docPath, row)
		}
	}
	for ty, name := range typeNames {
		row := fmt.Sprintf("| %s | %d | `0x%04x` |", name, int16(ty), uint16(ty))
		if !bytes.Contains(doc, []byte(row)) {
			t.Errorf("%s lacks the type id row %q", docPath, row)
		}
	}
}

// TestRoundTrip encodes and decodes values chosen for their edges: empty arrays, unicode,
// extreme integers.
func TestRoundTrip(t *testing.T) {
	long := strings.Repeat("é", math.MaxInt16/2) // 32766 bytes, the longest even-length string
	tests := []struct {
		name string
		msg  Message
	}{
		{"consult response empty", &ConsultResponse{ErrorCode: CodeCoordinatorNotAvailable, CoordinatorID: -1}},
		{"consult response extremes", &ConsultResponse{
			ErrorCode:     math.MinInt16,
			CoordinatorID: math.MaxInt32,
			Brokers: []Broker{
				{CreatorID: "", ID: math.MinInt32, Host: "", Port: math.MaxInt32},
				{CreatorID: "брокер-ü", ID: math.MaxInt32, Host: "例え.example", Port: 0},
			},
		}},
		{"register empty strings", &RegisterRequest{}},
		{"register unicode", &RegisterRequest{
			GroupID:         "グループ",
			ConsumerID:      "consumer-🚀",
			AutoCommit:      false,
			AutoOffsetReset: "whatever", // meaning is judged by the coordinator, not the codec
			PingIntervalMs:  math.MaxInt32,
			MaxPingRetries:  math.MaxInt16,
			Subscription:    []TopicThreads{{Topic: "a", Threads: math.MaxInt32}, {Topic: "ß", Threads: math.MinInt32}},
		}},
		{"register long string", &RegisterRequest{GroupID: long, ConsumerID: long + "x"}},
		{"register response unknown code", &RegisterResponse{ErrorCode: math.MaxInt16}},
		{"ping min", &PingRequest{NumRetries: math.MinInt16}},
		{"ping max", &PingRequest{NumRetries: math.MaxInt16}},
		{"ping response extremes", &PingResponse{HasOffsets: true, Offsets: []PartitionOffset{
			{Topic: "ü", Partition: math.MaxInt32, Offset: math.MaxInt64},
			{Topic: "", Partition: math.MinInt32, Offset: math.MinInt64},
		}}},
		{"start empty", &StartRequest{}},
		{"start extremes", &StartRequest{Assigned: []PartitionOffset{{Topic: "x", Partition: 0, Offset: math.MaxInt64}, {Topic: "x", Partition: 1, Offset: OffsetLargest}}}},
		{"stop response code", &StopResponse{ErrorCode: CodeIllegalState}},
		{"start response code", &StartResponse{ErrorCode: CodeUnknown}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.msg.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			frame := AppendFrame(nil, tc.msg)
			got, err := Decode(frame[4:])
			if err != nil {
				t.Fatalf("Decode(AppendFrame(%v)) error: %v", tc.msg.Type(), err)
			}
			if !reflect.DeepEqual(got, tc.msg) {
				t.Errorf("Decode(AppendFrame(m)) = %#v, want %#v", got, tc.msg)
			}
			// Appending to a non-empty buffer leaves its prefix alone and frames the same bytes.
			prefix := []byte("keep")
			if again := AppendFrame(prefix, tc.msg); !bytes.Equal(again[:4], []byte("keep")) || !bytes.Equal(again[4:], frame) {
				t.Errorf("AppendFrame(%q, m) = %x, want %q followed by %x", prefix, again, prefix, frame)
			}
		})
	}
}

// TestEmptySliceEncodesAsNil: an empty non-nil slice and a nil slice are the same on the wire
// (Decode returns nil for both).
func TestEmptySliceEncodesAsNil(t *testing.T) {
	pairs := []struct{ a, b Message }{
		{&ConsultResponse{Brokers: []Broker{}}, &ConsultResponse{}},
		{&RegisterRequest{Subscription: []TopicThreads{}}, &RegisterRequest{}},
		{&StartRequest{Assigned: []PartitionOffset{}}, &StartRequest{}},
		{&PingResponse{HasOffsets: true, Offsets: []PartitionOffset{}}, &PingResponse{HasOffsets: true}},
		{&PingResponse{Offsets: []PartitionOffset{}}, &PingResponse{}},
	}
	for _, p := range pairs {
		if a, b := AppendFrame(nil, p.a), AppendFrame(nil, p.b); !bytes.Equal(a, b) {
			t.Errorf("AppendFrame(%#v) = %x, want %x as for %#v", p.a, a, b, p.b)
		}
	}
}

// TestPingResponseOffsetsNeverDropped: offsets set without HasOffsets are still encoded (seed
// 001 "Handling PingRequest" 1.2); decoding then reports HasOffsets.
func TestPingResponseOffsetsNeverDropped(t *testing.T) {
	in := &PingResponse{Offsets: []PartitionOffset{{Topic: "t", Partition: 3, Offset: 9}}}
	got, err := Decode(AppendFrame(nil, in)[4:])
	if err != nil {
		t.Fatal(err)
	}
	want := &PingResponse{HasOffsets: true, Offsets: in.Offsets}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode(AppendFrame(%#v)) = %#v, want %#v", in, got, want)
	}
}

// frameOf builds a frame body (no size prefix) from a header and raw body bytes.
func frameOf(ty Type, version int16, body ...[]byte) []byte {
	b := appendInt16(nil, int16(ty))
	b = appendInt16(b, version)
	for _, p := range body {
		b = append(b, p...)
	}
	return b
}

func i16(v int16) []byte { return appendInt16(nil, v) }
func i32(v int32) []byte { return appendInt32(nil, v) }
func i64(v int64) []byte { return appendInt64(nil, v) }
func str(s string) []byte {
	return appendString(nil, s)
}

var malformedCases = []struct {
	name      string
	frame     []byte
	sentinel  error
	field     string // DecodeError.Field
	wantType  Type
	errSubstr string
}{
	{"empty", nil, ErrMalformed, "request_type_id", 0, "needs 2 bytes"},
	{"one byte", []byte{0x00}, ErrMalformed, "request_type_id", 0, "needs 2 bytes"},
	{"no version", []byte{0x00, 0x66, 0x00}, ErrMalformed, "version", 0, "needs 2 bytes"},
	{"unknown type", frameOf(7, 0), ErrUnknownType, "request_type_id", 7, "7 (0x0007)"},
	{"kafka produce key", frameOf(0, 0), ErrUnknownType, "request_type_id", 0, ""},
	{"unknown response type", frameOf(TypeStartResponse+1, 0), ErrUnknownType, "request_type_id", TypeStartResponse + 1, "0x8069"},
	{"version 1", frameOf(TypePingRequest, 1, i16(0)), ErrUnsupportedVersion, "version", TypePingRequest, "version 1"},
	{"version -1", frameOf(TypeStopRequest, -1), ErrUnsupportedVersion, "version", TypeStopRequest, ""},
	{"consult version 2", frameOf(TypeConsultRequest, 2, i16(1), []byte("g")), ErrUnsupportedVersion, "version", TypeConsultRequest, "versions 0 to 1"},
	{"consult version 1 without group", frameOf(TypeConsultRequest, 1), ErrMalformed, "group_id", TypeConsultRequest, "needs 2 bytes"},
	{"consult version 1 empty group", frameOf(TypeConsultRequest, 1, i16(0)), ErrMalformed, "group_id", TypeConsultRequest, "empty group_id"},
	{"consult version 0 with a body", frameOf(TypeConsultRequest, 0, i16(1), []byte("g")), ErrMalformed, "", TypeConsultRequest, "3 trailing"},
	{"trailing byte after empty body", frameOf(TypeStopRequest, 0, []byte{0}), ErrMalformed, "", TypeStopRequest, "1 trailing bytes"},
	{"trailing bytes after ping", frameOf(TypePingRequest, 0, i16(1), []byte{1, 2}), ErrMalformed, "", TypePingRequest, "2 trailing"},
	{"short int16", frameOf(TypeStopResponse, 0, []byte{0}), ErrMalformed, "error_code", TypeStopResponse, "needs 2 bytes, 1 left"},
	{"short int32", frameOf(TypeConsultResponse, 0, i16(0), []byte{0, 0, 0}), ErrMalformed, "coordinator_id", TypeConsultResponse, ""},
	{"null string", frameOf(TypeRegisterRequest, 0, i16(-1)), ErrMalformed, "group_id", TypeRegisterRequest, "null string"},
	{"negative string length", frameOf(TypeRegisterRequest, 0, i16(-2)), ErrMalformed, "group_id", TypeRegisterRequest, "negative string length -2"},
	{"string beyond input", frameOf(TypeRegisterRequest, 0, i16(300), []byte("abc")), ErrMalformed, "group_id", TypeRegisterRequest, "exceeds the 3 bytes left"},
	{"invalid utf8", frameOf(TypeRegisterRequest, 0, str("g"), i16(2), []byte{0xc3, 0x28}), ErrMalformed, "consumer_id", TypeRegisterRequest, "UTF-8"},
	{"boolean 2", frameOf(TypeRegisterRequest, 0, str("g"), str("c"), []byte{2}), ErrMalformed, "auto_commit", TypeRegisterRequest, "0 or 1"},
	{"null array", frameOf(TypeStartRequest, 0, i32(-1)), ErrMalformed, "assigned_parts", TypeStartRequest, "null array"},
	{"negative array count", frameOf(TypeStartRequest, 0, i32(-7)), ErrMalformed, "assigned_parts", TypeStartRequest, "negative array count"},
	{"huge array count", frameOf(TypeStartRequest, 0, i32(math.MaxInt32), str("t")), ErrMalformed, "assigned_parts", TypeStartRequest, "needs at least"},
	{"count beyond elements", frameOf(TypeConsultResponse, 0, i16(0), i32(1), i32(2), str("a"), i32(1), str("h"), i32(1)), ErrMalformed, "brokers_info", TypeConsultResponse, ""},
	{"short element field", frameOf(TypeStartRequest, 0, i32(2), str("t"), i32(0), i64(1), str("uuuuuu"), i32(0), []byte{0, 0, 0}), ErrMalformed, "assigned_parts[1].offset", TypeStartRequest, "int64 needs 8 bytes"},
	{"nested string too long", frameOf(TypeRegisterRequest, 0, str("g"), str("c"), []byte{1}, str("smallest"), i32(1), i16(1), i32(1), i16(90), i32(1)), ErrMalformed, "subscription[0].topic", TypeRegisterRequest, "string length 90"},
	{"ping response one byte", frameOf(TypePingResponse, 0, []byte{0}), ErrMalformed, "num_partition", TypePingResponse, ""},
	{"ping response no array", frameOf(TypePingResponse, 0, i16(0)), ErrMalformed, "offset_info", TypePingResponse, "array count needs 4 bytes"},
	{"ping response count mismatch", frameOf(TypePingResponse, 0, i16(2), i32(1), str("t"), i32(0), i64(5)), ErrMalformed, "offset_info", TypePingResponse, "differs from num_partition 2"},
	{"ping response negative num_partition", frameOf(TypePingResponse, 0, i16(-1), i32(0)), ErrMalformed, "offset_info", TypePingResponse, "differs from num_partition -1"},
	{"ping response bad topic", frameOf(TypePingResponse, 0, i16(1), i32(1), i16(50), []byte("abcdefghijkl")), ErrMalformed, "offset_info[0].topic", TypePingResponse, "string length 50 exceeds the 12 bytes left"},
}

// TestDecodeMalformed: every rejection wraps its sentinel and names the field.
func TestDecodeMalformed(t *testing.T) {
	for _, tc := range malformedCases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.frame)
			if err == nil {
				t.Fatalf("Decode(%x) = %#v, want error wrapping %v", tc.frame, m, tc.sentinel)
			}
			if m != nil {
				t.Errorf("Decode(%x) returned message %#v with error", tc.frame, m)
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("Decode(%x) error = %v, want one wrapping %v", tc.frame, err, tc.sentinel)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode(%x) error %T is not a *DecodeError", tc.frame, err)
			}
			if de.Field != tc.field {
				t.Errorf("Decode(%x) error field = %q, want %q (error: %v)", tc.frame, de.Field, tc.field, err)
			}
			if de.Type != tc.wantType {
				t.Errorf("Decode(%x) error type = %v, want %v", tc.frame, de.Type, tc.wantType)
			}
			if !strings.Contains(err.Error(), tc.errSubstr) {
				t.Errorf("Decode(%x) error = %q, want it to contain %q", tc.frame, err, tc.errSubstr)
			}
			if tc.field != "" && !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Decode(%x) error = %q, want it to name field %q", tc.frame, err, tc.field)
			}
		})
	}
}

// TestDecodeTruncated cuts every golden frame at every byte offset: each cut is rejected
// (never a panic), except that cutting PingResponse's body to nothing leaves the valid frame of
// a consumer without auto_commit — the seed's "should not exist" form. The size prefix is what
// tells the two apart on a stream, which TestReadFrameTruncated checks.
func TestDecodeTruncated(t *testing.T) {
	for _, tc := range goldenCases {
		frame := AppendFrame(nil, tc.msg)[4:]
		for n := 0; n < len(frame); n++ {
			m, err := Decode(frame[:n])
			if tc.msg.Type() == TypePingResponse && n == headerLen {
				if err != nil || !reflect.DeepEqual(m, &PingResponse{}) {
					t.Errorf("Decode(%s[:%d]) = %#v, %v; want &PingResponse{}, nil", tc.name, n, m, err)
				}
				continue
			}
			if err == nil {
				t.Errorf("Decode(%s[:%d]) = %#v, want error", tc.name, n, m)
			} else if !errors.Is(err, ErrMalformed) {
				t.Errorf("Decode(%s[:%d]) error = %v, want ErrMalformed", tc.name, n, err)
			}
		}
	}
}

func TestReadFrameTruncated(t *testing.T) {
	for _, tc := range goldenCases {
		full := AppendFrame(nil, tc.msg)
		for n := 0; n < len(full); n++ {
			frame, err := ReadFrame(bytes.NewReader(full[:n]), 0)
			switch {
			case n == 0 && err != io.EOF:
				t.Errorf("ReadFrame(%s[:0]) = %x, %v; want io.EOF", tc.name, frame, err)
			case n > 0 && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("ReadFrame(%s[:%d]) = %x, %v; want io.ErrUnexpectedEOF", tc.name, n, frame, err)
			}
		}
	}
}

func TestReadFrame(t *testing.T) {
	ping := AppendFrame(nil, &PingRequest{NumRetries: 2})
	stop := AppendFrame(nil, &StopRequest{})
	tests := []struct {
		name     string
		in       []byte
		max      int
		want     []byte
		sentinel error
	}{
		{"one frame", ping, 0, ping[4:], nil},
		{"exactly max", ping, len(ping) - 4, ping[4:], nil},
		{"one over max", ping, len(ping) - 5, nil, ErrFrameTooLarge},
		{"header only", stop, 4, stop[4:], nil},
		{"size below header", []byte{0, 0, 0, 3, 0, 0, 0}, 0, nil, ErrMalformed},
		{"size zero", []byte{0, 0, 0, 0}, 0, nil, ErrMalformed},
		{"negative size", []byte{0xff, 0xff, 0xff, 0xff}, 0, nil, ErrMalformed},
		{"size 2 GiB", []byte{0x7f, 0xff, 0xff, 0xff}, 0, nil, ErrFrameTooLarge},
		{"over default max", append(i32(DefaultMaxFrame+1), 0, 0), 0, nil, ErrFrameTooLarge},
		{"empty", nil, 0, nil, io.EOF},
		{"short prefix", []byte{0, 0}, 0, nil, io.ErrUnexpectedEOF},
		{"short body", ping[:len(ping)-1], 0, nil, io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadFrame(bytes.NewReader(tc.in), tc.max)
			if !errors.Is(err, tc.sentinel) || (tc.sentinel == nil) != (err == nil) {
				t.Fatalf("ReadFrame(%x, %d) error = %v, want %v", tc.in, tc.max, err, tc.sentinel)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("ReadFrame(%x, %d) = %x, want %x", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

func TestReadFrameSequence(t *testing.T) {
	var stream []byte
	msgs := []Message{&PingRequest{NumRetries: 0}, &StopRequest{}, goldenCases[1].msg, &StartResponse{}}
	for _, m := range msgs {
		stream = AppendFrame(stream, m)
	}
	r := bytes.NewReader(stream)
	for i, want := range msgs {
		frame, err := ReadFrame(r, 0)
		if err != nil {
			t.Fatalf("ReadFrame #%d: %v", i, err)
		}
		got, err := Decode(frame)
		if err != nil {
			t.Fatalf("Decode #%d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("frame #%d = %#v, want %#v", i, got, want)
		}
	}
	if _, err := ReadFrame(r, 0); err != io.EOF {
		t.Errorf("ReadFrame at end of stream error = %v, want io.EOF", err)
	}
}

// prefixOnlyReader serves a 4-byte size prefix and then fails the test on any further read: an
// oversize frame must be refused from the prefix alone.
type prefixOnlyReader struct {
	t      testing.TB
	prefix []byte
}

func (r *prefixOnlyReader) Read(p []byte) (int, error) {
	if len(r.prefix) == 0 {
		r.t.Errorf("ReadFrame read past the size prefix of an oversize frame (%d-byte read)", len(p))
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.prefix)
	r.prefix = r.prefix[n:]
	return n, nil
}

// TestReadFrameOversizeDoesNotAllocate declares a 2 GiB frame and proves that ReadFrame
// refuses it without reading past the prefix and without allocating anything near its size
// (DESIGN §5: "reject oversize frames before allocating").
func TestReadFrameOversizeDoesNotAllocate(t *testing.T) {
	prefix := []byte{0x7f, 0xff, 0xff, 0xff} // 2 GiB - 1
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(100, func() {
		_, err := ReadFrame(&prefixOnlyReader{t: t, prefix: prefix}, 0)
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("ReadFrame(2 GiB prefix) error = %v, want ErrFrameTooLarge", err)
		}
	})
	runtime.ReadMemStats(&after)
	if allocs > 8 {
		t.Errorf("ReadFrame(2 GiB prefix) made %v allocations per call, want at most 8 (the error)", allocs)
	}
	// 101 calls (AllocsPerRun warms up once); anything that allocated the frame would add
	// at least 2 GiB per call.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("ReadFrame(2 GiB prefix) x101 allocated %d bytes in total, want < 1 MiB", grew)
	}
	_, err := ReadFrame(&prefixOnlyReader{t: t, prefix: prefix}, 0)
	for _, s := range []string{"2147483647", strconv.Itoa(DefaultMaxFrame)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("ReadFrame(2 GiB prefix) error = %q, want it to mention %s", err, s)
		}
	}
}

func TestTypes(t *testing.T) {
	for ty, name := range typeNames {
		if got := ty.String(); got != name {
			t.Errorf("Type(%d).String() = %q, want %q", ty, got, name)
		}
		m := newMessage(ty)
		if m == nil || m.Type() != ty {
			t.Errorf("newMessage(%v) = %#v, want a message of that type", ty, m)
		}
		if ty.IsResponse() != strings.HasSuffix(name, "Response") {
			t.Errorf("%v.IsResponse() = %v", ty, ty.IsResponse())
		}
		req := ty.Request()
		if req.IsResponse() || req.Response() != ty.Response() || typeNames[req] != strings.TrimSuffix(strings.TrimSuffix(name, "Response"), "Request")+"Request" {
			t.Errorf("%v.Request() = %v, Response() = %v: not a request/response pair", ty, req, ty.Response())
		}
	}
	if got, want := TypePingResponse, Type(-32666); got != want || uint16(got) != 0x8066 {
		t.Errorf("TypePingResponse = %d (0x%04x), want %d (0x8066)", got, uint16(got), want)
	}
	if got := Type(0x1234).String(); got != "Type(0x1234)" {
		t.Errorf("Type(0x1234).String() = %q", got)
	}
}

func TestErrorCodes(t *testing.T) {
	if err := CodeNone.Err(); err != nil {
		t.Errorf("CodeNone.Err() = %v, want nil", err)
	}
	err := fmt.Errorf("register: %w", CodeGroupModeRefused.Err())
	if !errors.Is(err, CodeGroupModeRefused.Err()) {
		t.Errorf("errors.Is(%v, CodeGroupModeRefused.Err()) = false", err)
	}
	if errors.Is(err, CodeNotCoordinator.Err()) {
		t.Errorf("errors.Is(%v, CodeNotCoordinator.Err()) = true", err)
	}
	var ce CodeError
	if !errors.As(err, &ce) || ce.Code != CodeGroupModeRefused {
		t.Errorf("errors.As(%v, &CodeError) = %v", err, ce)
	}
	if !strings.Contains(err.Error(), "GROUP_MODE_REFUSED (5)") || !strings.Contains(err.Error(), "kafka") {
		t.Errorf("CodeGroupModeRefused.Err() = %q, want the name, number and a hint about the kafka mode", err)
	}
	if got := ErrorCode(99).String(); got != "ErrorCode(99)" {
		t.Errorf("ErrorCode(99).String() = %q", got)
	}
	if ErrorCode(99).Err() == nil {
		t.Error("ErrorCode(99).Err() = nil, want an error")
	}
	for c := range codeTable {
		if c.Description() == "" || c.String() == "" {
			t.Errorf("code %d has no name or description", int16(c))
		}
	}
}

func TestResetOffset(t *testing.T) {
	for _, tc := range []struct {
		reset string
		want  int64
		ok    bool
	}{{"smallest", -2, true}, {"largest", -1, true}, {"earliest", 0, false}, {"", 0, false}} {
		got, ok := ResetOffset(tc.reset)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ResetOffset(%q) = %d, %v; want %d, %v", tc.reset, got, ok, tc.want, tc.ok)
		}
	}
}

func TestValidate(t *testing.T) {
	tooLong := strings.Repeat("x", math.MaxInt16+1)
	bad := string([]byte{0xff})
	tests := []struct {
		name  string
		msg   Message
		field string
	}{
		{"group id too long", &RegisterRequest{GroupID: tooLong}, "group_id"},
		{"consumer id not utf8", &RegisterRequest{ConsumerID: bad}, "consumer_id"},
		{"reset not utf8", &RegisterRequest{AutoOffsetReset: bad}, "auto_offset_reset"},
		{"subscription topic", &RegisterRequest{Subscription: []TopicThreads{{Topic: "ok"}, {Topic: tooLong}}}, "subscription[1].topic"},
		{"broker host", &ConsultResponse{Brokers: []Broker{{Host: bad}}}, "brokers_info[0].host"},
		{"broker creator", &ConsultResponse{Brokers: []Broker{{CreatorID: tooLong}}}, "brokers_info[0].creator_id"},
		{"start topic", &StartRequest{Assigned: []PartitionOffset{{Topic: bad}}}, "assigned_parts[0].topic"},
		{"ping topic", &PingResponse{HasOffsets: true, Offsets: []PartitionOffset{{Topic: bad}}}, "offset_info[0].topic"},
		{"too many ping offsets", &PingResponse{HasOffsets: true, Offsets: make([]PartitionOffset, math.MaxInt16+1)}, "num_partition"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.msg.Validate()
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate() = %v, want ErrMalformed naming %s", err, tc.field)
			}
		})
	}
	for _, tc := range goldenCases {
		if err := tc.msg.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
		}
	}
	ok := &PingResponse{HasOffsets: true, Offsets: make([]PartitionOffset, math.MaxInt16)}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(32767 offsets) = %v, want nil", err)
	}
}

// dumpFrame renders a full frame (with size prefix) as the annotated hex dump of the golden
// files: one line per field, "# " comments, the field's wire name and value after the bytes.
// The field spans come from decoding the frame with a tracing reader.
func dumpFrame(desc string, full []byte) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", desc)
	line := func(bs []byte, note string) {
		h := hexBytes(bs)
		pad := 32 - len(h)
		if pad < 2 {
			pad = 2
		}
		b.WriteString(h + strings.Repeat(" ", pad) + "# " + note + "\n")
	}
	line(full[:4], fmt.Sprintf("size %d", len(full)-4))
	frame := full[4:]
	r := reader{src: frame}
	r.trace = func(path, kind string, start, end int) {
		bs := frame[start:end]
		var v string
		switch kind {
		case "int8":
			v = strconv.FormatBool(bs[0] == 1)
		case "int16":
			n := int16(uint16(bs[0])<<8 | uint16(bs[1]))
			v = strconv.Itoa(int(n))
			switch path {
			case "request_type_id":
				v = fmt.Sprintf("0x%04x %v", uint16(n), Type(n))
			case "error_code":
				v = fmt.Sprintf("%d %v", n, ErrorCode(n))
			}
		case "int32", "count":
			n := int32(uint32(bs[0])<<24 | uint32(bs[1])<<16 | uint32(bs[2])<<8 | uint32(bs[3]))
			v = strconv.Itoa(int(n))
			if kind == "count" {
				v = "count " + v
			}
		case "int64":
			var n int64
			for _, c := range bs {
				n = n<<8 | int64(c)
			}
			v = strconv.FormatInt(n, 10)
		case "string":
			v = strconv.Quote(string(bs[2:]))
		}
		line(bs, path+" "+v)
	}
	if _, err := r.decode(); err != nil {
		return "", err
	}
	return b.String(), nil
}

func hexBytes(bs []byte) string {
	parts := make([]string, len(bs))
	for i, c := range bs {
		parts[i] = hex.EncodeToString([]byte{c})
	}
	return strings.Join(parts, " ")
}

// parseHexDump reads a golden file: "#" starts a comment, whitespace is ignored, the rest is hex.
func parseHexDump(text string) ([]byte, error) {
	var digits strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	return hex.DecodeString(digits.String())
}

// A coordinator reading a consumer's answers: cut a frame, decode it, switch on its type.
func ExampleDecode() {
	stream := AppendFrame(nil, &PingResponse{HasOffsets: true, Offsets: []PartitionOffset{{Topic: "t", Partition: 0, Offset: 42}}})
	stream = AppendFrame(stream, &RegisterResponse{ErrorCode: CodeGroupModeRefused})

	r := bytes.NewReader(stream)
	for {
		frame, err := ReadFrame(r, DefaultMaxFrame)
		if err == io.EOF {
			return
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		m, err := Decode(frame)
		if err != nil {
			fmt.Println(err)
			return
		}
		switch m := m.(type) {
		case *PingResponse:
			fmt.Println(m.Type(), m.HasOffsets, m.Offsets)
		case *RegisterResponse:
			fmt.Println(m.ErrorCode.Err())
		}
	}
	// Output:
	// PingResponse true [{t 0 42}]
	// legacy: GROUP_MODE_REFUSED (5): the group's mode (kafka or finalized) refuses legacy members; the consumer must stop and report it
}
