package zkstate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
)

// The fuzz targets check what the bridge relies on when it reads znodes other programs wrote:
// parsing never panics, every rejection wraps ErrMalformed, and whatever parses survives
// Encode → Parse unchanged, with Encode's output fit for Kafka 0.8.2's reader.
// The golden samples (valid and malformed) seed the corpus.

// recordsSeed adds every file of dir, malformed ones included, to the corpus.
func recordsSeed(f *testing.F, dir string, add func(data []byte)) {
	f.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		add(data)
	}
	add([]byte(`null`))
	add([]byte(`{}`))
}

func FuzzParseConsumerRegistration(f *testing.F) {
	recordsSeed(f, "testdata/ids", func(d []byte) { f.Add(d) })
	f.Add([]byte(`{"version":1,"subscription":{"t":-2},"pattern":"static","timestamp":"1"}`))
	f.Add([]byte(`{"subscription":{"a\u00e9\\\"":10000},"pattern":"black_list","timestamp":-9223372036854775808}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := zkstate.ParseConsumerRegistration(data)
		if err != nil {
			if !errors.Is(err, zkstate.ErrMalformed) && (len(data) > 0 || !errors.Is(err, zkstate.ErrRegistrationPending)) {
				t.Fatalf("error %q does not wrap ErrMalformed", err)
			}
			return
		}
		enc := r.Encode()
		r2, err := zkstate.ParseConsumerRegistration(enc)
		if err != nil {
			t.Fatalf("Encode gave %s, which does not parse: %v", enc, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the value:\n from %+v\n  via %s\n   to %+v", r, enc, r2)
		}
		if enc2 := r2.Encode(); !bytes.Equal(enc, enc2) {
			t.Fatalf("Encode is not deterministic: %s then %s", enc, enc2)
		}
		recordsCheckInt32Numbers(t, enc)
		total := 0
		for _, n := range r.Subscription {
			total += n
		}
		if total > 100000 {
			return // valid, but expanding it would only measure the allocator
		}
		for topic, ids := range zkstate.ConsumerThreads("c", r) {
			if len(ids) != r.Subscription[topic] {
				t.Fatalf("%d thread ids for %q, want %d", len(ids), topic, r.Subscription[topic])
			}
		}
		if r.Pattern != zkstate.PatternStatic {
			// Expanding a wildcard must not panic whatever the filter; errors are fine.
			_, _ = zkstate.WildcardThreads("c", r, []string{"a", "__consumer_offsets", "logs.x"})
		}
	})
}

func FuzzParseBrokerRegistration(f *testing.F) {
	recordsSeed(f, "testdata/brokers", func(d []byte) { f.Add(int32(1), d) })
	f.Add(int32(-1), []byte(`{"version":4,"host":null,"port":-1,"endpoints":["A://[::1]:1","B://:2"],"listener_security_protocol_map":{"A":"PLAINTEXT"}}`))
	f.Add(int32(1001), []byte(`{"version":5,"endpoints":["x://y://h:1"],"timestamp":1e400,"jmx_port":null}`))
	f.Fuzz(func(t *testing.T, id int32, data []byte) {
		b, err := zkstate.ParseBrokerRegistration(id, data)
		if err != nil {
			if !errors.Is(err, zkstate.ErrMalformed) {
				t.Fatalf("error %q does not wrap ErrMalformed", err)
			}
			return
		}
		if b.ID != id {
			t.Fatalf("ID = %d, want %d", b.ID, id)
		}
		_, _, _ = b.Addr()
		enc := b.Encode()
		b2, err := zkstate.ParseBrokerRegistration(id, enc)
		if err != nil {
			t.Fatalf("Encode gave %s, which does not parse: %v", enc, err)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("round trip changed the value:\n from %+v\n  via %s\n   to %+v", b, enc, b2)
		}
		recordsCheckInt32Numbers(t, enc)
	})
}

func FuzzParseTopicAssignment(f *testing.F) {
	recordsSeed(f, "testdata/topics", func(d []byte) { f.Add(d) })
	f.Add([]byte(`{"version":2,"partitions":{"2147483647":[],"0":[-1,2147483647]},"adding_replicas":null}`))
	f.Add([]byte(`{"version":3,"partitions":{"0":[1]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAA"}`))
	f.Add([]byte(`{"version":3,"partitions":{},"topic_id":"_____________________w=="}`))
	f.Add([]byte(`{"topic_id":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := zkstate.ParseTopicAssignment(data)
		if err != nil {
			if !errors.Is(err, zkstate.ErrMalformed) {
				t.Fatalf("error %q does not wrap ErrMalformed", err)
			}
			return
		}
		ids := a.PartitionIDs()
		for i := 1; i < len(ids); i++ {
			if ids[i-1] >= ids[i] {
				t.Fatalf("PartitionIDs not strictly ascending: %v", ids)
			}
		}
		enc := a.Encode()
		a2, err := zkstate.ParseTopicAssignment(enc)
		if err != nil {
			t.Fatalf("Encode gave %s, which does not parse: %v", enc, err)
		}
		if !reflect.DeepEqual(a, a2) {
			t.Fatalf("round trip changed the value:\n from %+v\n  via %s\n   to %+v", a, enc, a2)
		}
		recordsCheckInt32Numbers(t, enc)
	})
}

func FuzzParseOffset(f *testing.F) {
	recordsSeed(f, "testdata/offsets", func(d []byte) { f.Add(d) })
	for _, s := range []string{"12a", "", " 42\n", "-1", "+7", "9223372036854775807", "-9223372036854775808", "0x10", "1_000"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := zkstate.ParseOffset(data)
		if err != nil {
			if !errors.Is(err, zkstate.ErrMalformed) {
				t.Fatalf("error %q does not wrap ErrMalformed", err)
			}
			return
		}
		enc := zkstate.FormatOffset(n)
		n2, err := zkstate.ParseOffset(enc)
		if err != nil || n2 != n {
			t.Fatalf("ParseOffset(FormatOffset(%d)) = %d, %v", n, n2, err)
		}
	})
}

func FuzzParseEpoch(f *testing.F) {
	recordsSeed(f, "testdata/epoch", func(data []byte) { f.Add(data) })
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := zkstate.ParseEpoch(data)
		if err != nil {
			if !errors.Is(err, zkstate.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if back, err := zkstate.ParseEpoch(e.Encode()); err != nil || back != e {
			t.Fatalf("%+v: round trip gave %+v, %v", e, back, err)
		}
	})
}

func FuzzParseOwnOffset(f *testing.F) {
	recordsSeed(f, "testdata/ownoffset", func(data []byte) { f.Add(data) })
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := zkstate.ParseOwnOffset(data)
		if err != nil {
			if !errors.Is(err, zkstate.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if back, err := zkstate.ParseOwnOffset(o.Encode()); err != nil || !reflect.DeepEqual(back, o) {
			t.Fatalf("%+v: round trip gave %+v, %v", o, back, err)
		}
	})
}

func FuzzParseGroupRecordHead(f *testing.F) {
	recordsSeed(f, "testdata/grouprecord", func(data []byte) { f.Add(data) })
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := zkstate.ParseGroupRecordHead(data); err != nil && !errors.Is(err, zkstate.ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
	})
}

// Owner data is read against the registered consumers: whatever it is, the answer is a
// registered consumer's only thread, or a thread id written back byte for byte.
func FuzzParseOwner(f *testing.F) {
	recordsSeed(f, "testdata/owners", func(data []byte) { f.Add(string(data), "") })
	f.Add("worker-1", "worker-1")
	f.Add("worker-1", "worker")
	f.Fuzz(func(t *testing.T, data, registered string) {
		cid, n, err := zkstate.ParseOwner(data, func(id string) bool { return id != "" && id == registered })
		switch {
		case err != nil:
			if !errors.Is(err, zkstate.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		case cid == registered && data == registered:
			if n != 0 {
				t.Fatalf("%q: a registered consumer's bare id read as thread %d", data, n)
			}
		case cid+"-"+strconv.Itoa(n) != data:
			t.Fatalf("%q read as thread %d of %q", data, n, cid)
		}
	})
}

// OwnOffset.Encode writes what encoding/json writes of the record, byte for byte (it was
// json.Marshal of this struct before it was assembled by hand).
func FuzzOwnOffsetEncode(f *testing.F) {
	f.Add(int64(1200), int32(3), "m", int64(1700000000000))
	f.Add(int64(0), int32(-1), "", int64(1700000000001))
	f.Add(int64(-1), int32(0), "a<b>&\"c\\\n\u2028\xff é", int64(-5))
	f.Fuzz(func(t *testing.T, offset int64, epoch int32, metadata string, ms int64) {
		type ownOffsetJSON struct {
			Version     int    `json:"version"`
			Offset      int64  `json:"offset"`
			LeaderEpoch int32  `json:"leader_epoch"`
			Metadata    string `json:"metadata"`
			Committed   string `json:"commit_timestamp"`
		}
		want, err := json.Marshal(ownOffsetJSON{Version: 1, Offset: offset, LeaderEpoch: epoch, Metadata: metadata, Committed: strconv.FormatInt(ms, 10)})
		if err != nil {
			t.Fatal(err)
		}
		if got := (zkstate.OwnOffset{Offset: offset, LeaderEpoch: epoch, Metadata: metadata, CommittedMs: ms}).Encode(); string(got) != string(want) {
			t.Fatalf("Encode = %s, encoding/json writes %s", got, want)
		}
	})
}
