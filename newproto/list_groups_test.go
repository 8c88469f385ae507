package newproto_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// ListGroups at every version: every group with its protocol type, sorted;
// from v4 its state and a case-insensitive states filter (KIP-518).
func TestListGroupsVersions(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	stableAlone(t, c, "list-stable", "", []byte{1})
	simpleCommit(t, c, "list-empty", map[string]map[int32]int64{"orders": {0: 1}})

	type listed struct{ group, ptype, state string }
	list := func(v int16, states ...string) []listed {
		r := kmsg.NewPtrListGroupsRequest()
		r.SetVersion(v)
		r.StatesFilter = states
		resp := c.RoundTrip(r).(*kmsg.ListGroupsResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("v%d: %s", v, codeName(resp.ErrorCode))
		}
		var out []listed
		for _, g := range resp.Groups {
			out = append(out, listed{g.Group, g.ProtocolType, g.GroupState})
		}
		return out
	}
	for _, v := range kafkatest.Versions(0, 4) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			want := []listed{{"list-empty", "", ""}, {"list-stable", "consumer", ""}}
			if v >= 4 {
				want = []listed{{"list-empty", "", "Empty"}, {"list-stable", "consumer", "Stable"}}
			}
			if got := list(v); !reflect.DeepEqual(got, want) {
				t.Errorf("all: %v, want %v", got, want)
			}
			if v < 4 {
				return
			}
			if got := list(v, "stable"); !reflect.DeepEqual(got, want[1:]) {
				t.Errorf("filter stable: %v, want %v", got, want[1:])
			}
			if got := list(v, "Empty", "Dead"); !reflect.DeepEqual(got, want[:1]) {
				t.Errorf("filter Empty, Dead: %v, want %v", got, want[:1])
			}
		})
	}
}

// A failing Groups.ListGroups is the top-level error.
func TestListGroupsError(t *testing.T) {
	fg := newFakeGroups(t, withFailure(func(string, group.Event) error {
		return fmt.Errorf("zookeeper: %w", errors.Join(errors.New("session expired"), newproto.ErrCoordinatorLoadInProgress))
	}))
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	r := kmsg.NewPtrListGroupsRequest()
	r.SetVersion(4)
	if resp := c.RoundTrip(r).(*kmsg.ListGroupsResponse); resp.ErrorCode != int16(newproto.ErrCoordinatorLoadInProgress) || len(resp.Groups) != 0 {
		t.Errorf("%s with %d groups, want COORDINATOR_LOAD_IN_PROGRESS", codeName(resp.ErrorCode), len(resp.Groups))
	}
}
