package newproto_test

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// DescribeGroups at every version, several groups per request, each
// answered on its own: a Stable group with its member (client id, "/ip"
// host, metadata, assignment, v4+ instance id), an unknown group as "Dead"
// with no error (Kafka's DeadGroup), an empty group id INVALID_GROUP_ID,
// and a group whose owner fails with that error and an empty summary.
// Authorized operations are INT32_MIN ("not provided") from v3.
func TestDescribeGroupsVersions(t *testing.T) {
	fg := newFakeGroups(t, withFailure(func(g string, _ group.Event) error {
		if g == "fenced" {
			return fmt.Errorf("owned by bridge-2: %w", newproto.ErrNotCoordinator)
		}
		return nil
	}))
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)
	id, _ := stableAlone(t, c, "described", "inst-d", []byte{9, 9})
	simpleCommit(t, c, "offsets-only", map[string]map[int32]int64{"orders": {0: 1}})

	for _, v := range kafkatest.Versions(0, 5) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			r := kmsg.NewPtrDescribeGroupsRequest()
			r.SetVersion(v)
			r.Groups = []string{"described", "unknown", "", "fenced", "offsets-only"}
			r.IncludeAuthorizedOperations = true
			resp := c.RoundTrip(r).(*kmsg.DescribeGroupsResponse)
			if len(resp.Groups) != len(r.Groups) {
				t.Fatalf("%d groups, want %d", len(resp.Groups), len(r.Groups))
			}
			type summary struct {
				group, state, ptype, proto string
				code                       int16
				members                    int
			}
			want := []summary{
				{"described", "Stable", "consumer", "range", 0, 1},
				{"unknown", "Dead", "", "", 0, 0},
				{"", "", "", "", int16(newproto.ErrInvalidGroupID), 0},
				{"fenced", "", "", "", int16(newproto.ErrNotCoordinator), 0},
				{"offsets-only", "Empty", "", "", 0, 0},
			}
			for i, g := range resp.Groups {
				got := summary{g.Group, g.State, g.ProtocolType, g.Protocol, g.ErrorCode, len(g.Members)}
				if got != want[i] {
					t.Errorf("group %d: %+v, want %+v", i, got, want[i])
				}
				if v >= 3 && g.AuthorizedOperations != math.MinInt32 {
					t.Errorf("group %q: authorized operations %d, want INT32_MIN", g.Group, g.AuthorizedOperations)
				}
			}
			m := resp.Groups[0].Members[0]
			if m.MemberID != id || m.ClientID != testClientID || m.ClientHost != "/127.0.0.1" ||
				!bytes.Equal(m.ProtocolMetadata, []byte{1, 2, 3}) || !bytes.Equal(m.MemberAssignment, []byte{9, 9}) {
				t.Errorf("member %+v", m)
			}
			if want := v >= 4; (m.InstanceID != nil) != want || (want && *m.InstanceID != "inst-d") {
				t.Errorf("instance id %v, want inst-d from v4 only", m.InstanceID)
			}
		})
	}
}
