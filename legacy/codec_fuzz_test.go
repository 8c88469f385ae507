package legacy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// FuzzDecode: Decode never panics, and whatever it accepts is canonical: re-encoding gives back
// exactly the input bytes (so the encoding is never longer than the input and never reads past
// it), decoding that again gives an equal value, and the value passes Validate.
func FuzzDecode(f *testing.F) {
	for _, tc := range goldenCases {
		f.Add(AppendFrame(nil, tc.msg)[4:])
	}
	for _, tc := range malformedCases {
		f.Add(tc.frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := Decode(frame)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode(%x) = %#v with error %v", frame, m, err)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode(%x) error %T is not a *DecodeError: %v", frame, err, err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("Decode(%x) error wraps no sentinel: %v", frame, err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Validate(Decode(%x)) = %v", frame, err)
		}
		enc := AppendFrame(nil, m)
		if got := int(binary.BigEndian.Uint32(enc)); got != len(enc)-4 {
			t.Fatalf("AppendFrame size prefix = %d, want %d", got, len(enc)-4)
		}
		if !bytes.Equal(enc[4:], frame) {
			t.Fatalf("AppendFrame(Decode(%x)) = %x, want the input back", frame, enc[4:])
		}
		again, err := Decode(enc[4:])
		if err != nil {
			t.Fatalf("Decode(AppendFrame(Decode(%x))) error: %v", frame, err)
		}
		if !reflect.DeepEqual(again, m) {
			t.Fatalf("Decode(AppendFrame(m)) = %#v, want %#v", again, m)
		}
	})
}

// FuzzReadFrame: ReadFrame never panics, never returns a frame over the limit or under the
// header, returns exactly the declared bytes, and reads nothing past the frame it returns.
func FuzzReadFrame(f *testing.F) {
	for _, tc := range goldenCases {
		f.Add(AppendFrame(nil, tc.msg), 0)
	}
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 1, 2, 3}, 0)
	f.Add([]byte{0xff, 0xff, 0xff, 0xfc}, 16)
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0}, 8)
	f.Add([]byte{0, 0, 0, 6, 0, 0x66, 0, 0, 0, 1, 9}, 6)
	f.Add([]byte{0, 0, 0, 6, 0, 0x66, 0, 0, 0, 1, 9}, 5)
	f.Fuzz(func(t *testing.T, stream []byte, max int) {
		if max > 1<<16 {
			max = 1 << 16 // keep the effective limit small so that huge declared sizes are exercised
		}
		limit := max
		if limit <= 0 {
			limit = DefaultMaxFrame
		}
		r := bytes.NewReader(stream)
		frame, err := ReadFrame(r, max)
		consumed := len(stream) - r.Len()
		if err != nil {
			if frame != nil {
				t.Fatalf("ReadFrame(%x, %d) = %x with error %v", stream, max, frame, err)
			}
			if len(stream) >= 4 {
				size := int64(int32(binary.BigEndian.Uint32(stream)))
				switch {
				case size < 4:
					if !errors.Is(err, ErrMalformed) || consumed != 4 {
						t.Fatalf("ReadFrame(size %d) = %v after %d bytes, want ErrMalformed after 4", size, err, consumed)
					}
				case size > int64(limit):
					if !errors.Is(err, ErrFrameTooLarge) || consumed != 4 {
						t.Fatalf("ReadFrame(size %d, max %d) = %v after %d bytes, want ErrFrameTooLarge after 4", size, max, err, consumed)
					}
				default:
					if !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("ReadFrame(size %d of %d bytes) = %v, want io.ErrUnexpectedEOF", size, len(stream)-4, err)
					}
				}
			}
			return
		}
		if len(frame) < 4 || len(frame) > limit {
			t.Fatalf("ReadFrame(%x, %d) returned %d bytes, outside [4, %d]", stream, max, len(frame), limit)
		}
		if consumed != 4+len(frame) || !bytes.Equal(frame, stream[4:consumed]) {
			t.Fatalf("ReadFrame(%x, %d) = %x after reading %d bytes, want the %d declared bytes", stream, max, frame, consumed, len(frame))
		}
		if m, err := Decode(frame); err == nil {
			if enc := AppendFrame(nil, m); !bytes.Equal(enc, stream[:consumed]) {
				t.Fatalf("AppendFrame(Decode(ReadFrame(%x))) = %x, want %x", stream, enc, stream[:consumed])
			}
		}
	})
}
