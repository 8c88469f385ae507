package bridge_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A broker lists only the groups it coordinates (Kafka's ListGroups is answered per broker, and
// admin clients ask every broker and concatenate): with several bridges, each lists the groups
// placement gives it, so the union names every group once.
func TestIntegration_ListGroupsSeveralBridges(t *testing.T) {
	t.Parallel()
	connect := zktest.Connect(t)
	ctx := t.Context()
	zk := zktest.OpenStore(t, connect)
	multiLayout(t, zk)

	var names []string
	for i := range 10 {
		g := fmt.Sprintf("lg-%d", i)
		names = append(names, g)
		// A 0.8 group: offsets only, as an idle ZooKeeper-era group leaves it.
		p := zkstate.OffsetPath(g, "orders", 0)
		if err := zk.Create(ctx, p, []byte("5"), zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	ids := []int32{9001, 9002}
	a := startBridge(t, connect, ids[0], nil)
	b := startBridge(t, connect, ids[1], nil)

	listed := func(r *running) []string {
		list, err := r.ListGroups(ctx)
		if err != nil {
			t.Fatalf("ListGroups: %v", err)
		}
		var out []string
		for _, l := range list {
			if slices.Contains(names, l.Group) {
				out = append(out, l.Group)
			}
		}
		slices.Sort(out)
		return out
	}
	for i, r := range []*running{a, b} {
		var want []string
		for _, g := range names {
			if o, _ := placement.Owner(g, ids); o == ids[i] {
				want = append(want, g)
			}
		}
		slices.Sort(want)
		zktest.Eventually(t, 10*time.Second, fmt.Sprintf("bridge %d lists the groups it coordinates", ids[i]), func() (bool, string) {
			got := listed(r)
			return slices.Equal(got, want), fmt.Sprintf("got %v, want %v", got, want)
		})
	}
}
