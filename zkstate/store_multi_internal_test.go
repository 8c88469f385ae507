package zkstate

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"
)

func chunkTestStore(max int) *Store {
	open := zk.WorldACL(zk.PermAll)
	return &Store{chroot: "/chroot", maxMulti: max, openACL: open, ownACL: open}
}

func indexed(ops ...Op) []indexedOp {
	out := make([]indexedOp, len(ops))
	for i, op := range ops {
		out[i] = indexedOp{op: op, origin: i}
	}
	return out
}

func TestOpSizeMatchesJuteEncoding(t *testing.T) {
	s := chunkTestStore(DefaultMaxMultiBytes)
	// create: header 9, path 4+len("/chroot/a")=13, data 4+3, ACL list 4 + (4 + 4+5 "world" +
	// 4+6 "anyone"), flags 4.
	if got, want := s.opSize(CreateOp("/a", []byte("xyz"), CreateOptions{})), 9+13+7+4+23+4; got != want {
		t.Errorf("opSize(create /a) = %d, want %d", got, want)
	}
	if got, want := s.opSize(SetOp("/a", []byte("xyz"), 3)), 9+13+7+4; got != want {
		t.Errorf("opSize(set /a) = %d, want %d", got, want)
	}
	if got, want := s.opSize(CheckOp("/a", 3)), 9+13+4; got != want {
		t.Errorf("opSize(check /a) = %d, want %d", got, want)
	}
}

func TestPlanChunksSplitsUnderTheLimitAndRepeatsGuards(t *testing.T) {
	s := chunkTestStore(10_000)
	data := bytes.Repeat([]byte("x"), 1000)
	ops := []Op{CheckOp("/epoch", 7), CheckOp("/written", 1)}
	for i := 0; i < 30; i++ {
		ops = append(ops, CreateOp(fmt.Sprintf("/n%02d", i), data, CreateOptions{}))
	}
	ops = append(ops, SetOp("/written", nil, 1))
	chunks, err := s.planChunks(indexed(ops...), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 3 {
		t.Fatalf("planChunks made %d requests of 30 KB, want at least 3 under 10 KB", len(chunks))
	}
	next := 0 // the caller's ops must appear once each, in order, besides repeated guards
	for i, ch := range chunks {
		size := requestOverhead
		for j, o := range ch.ops {
			size += s.opSize(o.op)
			if i > 0 && j == 0 {
				// Only /epoch is a guard: the batch writes /written, so its check is not repeated.
				if o.origin != 0 {
					t.Errorf("request %d starts with op %d, want the guard op 0", i, o.origin)
				}
				continue
			}
			if o.origin != next {
				t.Errorf("request %d op %d is the caller's op %d, want %d", i, j, o.origin, next)
			}
			next++
		}
		if size > s.maxMulti {
			t.Errorf("request %d is %d bytes, over %d", i, size, s.maxMulti)
		}
		if ch.lastOrigin != next-1 {
			t.Errorf("request %d lastOrigin = %d, want %d", i, ch.lastOrigin, next-1)
		}
	}
	if next != len(ops) {
		t.Errorf("requests hold %d of the caller's %d ops", next, len(ops))
	}

	if _, err := s.planChunks(indexed(ops...), true); !errors.Is(err, ErrMultiTooLarge) {
		t.Errorf("atomic planChunks of 30 KB = %v, want ErrMultiTooLarge", err)
	}
	huge := CreateOp("/huge", bytes.Repeat([]byte("x"), 20_000), CreateOptions{})
	var me *MultiError
	if _, err := s.planChunks(indexed(CreateOp("/a", nil, CreateOptions{}), huge), false); !errors.As(err, &me) || me.Index != 1 || !errors.Is(err, ErrMultiTooLarge) {
		t.Errorf("planChunks with a 20 KB op = %v, want op 1 too large", err)
	}
}

func TestACLPolicyKeepsTheKafkaLayoutOpen(t *testing.T) {
	open := zk.WorldACL(zk.PermAll)
	own := append(zk.DigestACL(zk.PermAll, "u", "p"), zk.WorldACL(zk.PermRead)...)
	s := &Store{chroot: "/kafka", openACL: open, ownACL: own}
	for _, tc := range []struct {
		full string
		open bool
	}{
		{"/kafka", true},
		{"/kafka/consumers", true},
		{"/kafka/consumers/g/offsets/t/0", true},
		{"/kafka/brokers/ids/1", true},
		{"/kafka/zkbridge", false},
		{"/kafka/zkbridge/groups/g", false},
		{"/kafka/consumersX", false},
	} {
		got := s.aclForFull(tc.full)
		if isOpen := len(got) == 1 && got[0] == open[0]; isOpen != tc.open {
			t.Errorf("aclForFull(%s) = %v, want open=%v", tc.full, got, tc.open)
		}
	}
}

// A batch of many small ops (a 1,000-partition offset commit: ~2,000 sets, well under the byte
// limit) is split into requests of at most maxMultiOps ops, each starting with the guards; an
// atomic batch stays one request.
func TestPlanChunksCapsOpsPerRequest(t *testing.T) {
	s := chunkTestStore(DefaultMaxMultiBytes)
	ops := []Op{CheckOp("/epoch", 3)}
	for i := range 2000 {
		ops = append(ops, SetOp(fmt.Sprintf("/consumers/g/offsets/t/%d", i), []byte("12345"), -1))
	}
	for _, maxOps := range []int{maxMultiOps, 7, 1} {
		chunks, err := s.splitChunks(indexed(ops...), false, maxOps)
		if err != nil {
			t.Fatal(err)
		}
		limit := max(maxOps, 2) // the guard and at least one op
		if want := (len(ops) - 1 + limit - 2) / (limit - 1); len(chunks) != want {
			t.Errorf("maxOps %d: %d requests, want %d", maxOps, len(chunks), want)
		}
		next := 0
		for i, ch := range chunks {
			if len(ch.ops) > limit {
				t.Errorf("maxOps %d: request %d has %d ops", maxOps, i, len(ch.ops))
			}
			for j, o := range ch.ops {
				if i > 0 && j == 0 {
					if o.origin != 0 {
						t.Errorf("maxOps %d: request %d starts with op %d, want the guard", maxOps, i, o.origin)
					}
					continue
				}
				if o.origin != next {
					t.Fatalf("maxOps %d: request %d op %d is the caller's op %d, want %d", maxOps, i, j, o.origin, next)
				}
				next++
			}
		}
		if next != len(ops) {
			t.Errorf("maxOps %d: requests hold %d of the caller's %d ops", maxOps, next, len(ops))
		}
	}
	if chunks, err := s.planChunks(indexed(ops...), true); err != nil || len(chunks) != 1 {
		t.Errorf("atomic: %d requests (%v), want one", len(chunks), err)
	}
	if chunks, err := s.planChunks(indexed(ops[:maxMultiOps]...), false); err != nil || len(chunks) != 1 {
		t.Errorf("%d ops: %d requests (%v), want one", maxMultiOps, len(chunks), err)
	}
}
