package newproto_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge/group"
	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// DeleteGroups at every version, each group answered on its own: an Empty
// group is deleted with its offsets, a group with members is
// NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND, an empty id
// INVALID_GROUP_ID (KIP-229).
func TestDeleteGroupsVersions(t *testing.T) {
	fg := newFakeGroups(t)
	ts := groupServer(t, fg, newproto.Config{})
	c := kafkatest.Dial(t, ts.addr)

	for _, v := range kafkatest.Versions(0, 2) {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			empty, busy := fmt.Sprintf("del-empty-v%d", v), fmt.Sprintf("del-busy-v%d", v)
			simpleCommit(t, c, empty, map[string]map[int32]int64{"orders": {0: 5}})
			stableAlone(t, c, busy, "", []byte{1})

			r := kmsg.NewPtrDeleteGroupsRequest()
			r.SetVersion(v)
			r.Groups = []string{empty, busy, "del-unknown", ""}
			resp := c.RoundTrip(r).(*kmsg.DeleteGroupsResponse)
			want := []int16{0, int16(newproto.ErrNonEmptyGroup), int16(newproto.ErrGroupIDNotFound), int16(newproto.ErrInvalidGroupID)}
			if len(resp.Groups) != len(want) {
				t.Fatalf("%d groups, want %d", len(resp.Groups), len(want))
			}
			for i, g := range resp.Groups {
				if g.Group != r.Groups[i] || g.ErrorCode != want[i] {
					t.Errorf("group %d: %q %s, want %q %s", i, g.Group, codeName(g.ErrorCode), r.Groups[i], codeName(want[i]))
				}
			}
			if d := fg.describe(empty); d.State != group.Dead || len(fg.committed(empty)) != 0 {
				t.Errorf("deleted group: %s with %d offsets, want gone", d.State, len(fg.committed(empty)))
			}
			if d := fg.describe(busy); d.State != group.Stable {
				t.Errorf("busy group %s, want Stable", d.State)
			}
		})
	}
}
