package newproto

import (
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// fillErrorCodes gives every ErrorCode field in v, at any depth, its own
// code from next, and every slice of structs two elements, so that a walk
// that misses a field or a level misses a code.
func fillErrorCodes(v reflect.Value, next *int16) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			if v.Type().Elem().Kind() != reflect.Struct || !v.CanSet() {
				return
			}
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillErrorCodes(v.Elem(), next)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := v.Field(i)
			if !t.Field(i).IsExported() {
				continue
			}
			if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 {
				*next++
				f.SetInt(int64(*next))
				continue
			}
			fillErrorCodes(f, next)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Struct {
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range v.Len() {
			fillErrorCodes(v.Index(i), next)
		}
	}
}

// The type-directed count of error codes (errorCodes) must find exactly
// what the reflective walk finds, for the response of every key the
// router serves, with an error code in every field at every level; and
// every such key must have a typed case (the reflective walk is only the
// fallback for error-shaped answers to keys outside the table).
func TestErrorCodesMatchReflection(t *testing.T) {
	for key := range supported {
		resp := kmsg.ResponseForKey(key)
		var n int16
		fillErrorCodes(reflect.ValueOf(resp), &n)
		if n == 0 {
			t.Fatalf("%s response: no ErrorCode field filled", kmsg.NameForKey(key))
		}
		typed := codeSet{}
		if !typedErrorCodes(resp, &typed) {
			t.Errorf("%s response (%T) has no typed error-code walk", kmsg.NameForKey(key), resp)
			continue
		}
		reflected := codeSet{}
		collectErrorCodes(reflect.ValueOf(resp), &reflected)
		got, want := slices.Sorted(slices.Values(typed.codes)), slices.Sorted(slices.Values(reflected.codes))
		if !slices.Equal(got, want) {
			t.Errorf("%s response: typed walk found codes %v, reflection %v", kmsg.NameForKey(key), got, want)
		}
		if len(want) != int(n) {
			t.Errorf("%s response: reflection found %d codes of the %d filled", kmsg.NameForKey(key), len(want), n)
		}
	}
}

// A response counts each code once, however many items carry it.
func TestErrorCodesDistinct(t *testing.T) {
	resp := kmsg.NewPtrOffsetCommitResponse()
	for _, code := range []int16{0, 27, 0, 27, 16} {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rp := kmsg.NewOffsetCommitResponseTopicPartition()
		rp.ErrorCode = code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
	}
	var s codeSet
	errorCodes(resp, &s)
	if want := []int16{27, 16}; !slices.Equal(s.codes, want) {
		t.Errorf("codes = %v, want %v", s.codes, want)
	}
}

func BenchmarkErrorCodesMetadata1000(b *testing.B) {
	resp := kmsg.NewPtrMetadataResponse()
	rt := kmsg.NewMetadataResponseTopic()
	for p := range int32(1000) {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Replicas, mp.ISR = p, []int32{1, 2, 3}, []int32{1, 2, 3}
		rt.Partitions = append(rt.Partitions, mp)
	}
	resp.Topics = append(resp.Topics, rt)
	b.Run("typed", func(b *testing.B) {
		for range b.N {
			var buf [8]int16
			s := codeSet{codes: buf[:0]}
			errorCodes(resp, &s)
		}
	})
	b.Run("reflect", func(b *testing.B) {
		for range b.N {
			var buf [8]int16
			s := codeSet{codes: buf[:0]}
			collectErrorCodes(reflect.ValueOf(resp), &s)
		}
	})
}
