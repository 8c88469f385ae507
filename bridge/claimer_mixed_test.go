package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A registration rewritten in place changes the 0.8.2 assignment as much as one that comes or
// goes, and every zk member computes it from the registrations' data. The group's claimer
// watches /consumers/<g>/ids once for the bridge's members of every kind, children and the
// data of every other registration (a 0.8.2 consumer watches only the children, ZCC:896; the
// legacy members watched the data too, the Kafka members did not), so the Kafka members of a
// mixed group rebalance when another member's subscription is rewritten, as the legacy ones do.
func TestIntegration_MixedKafkaMembersSeeARegistrationRewrittenInPlace(t *testing.T) {
	t.Parallel()
	mc := newMixedCluster(t, "rw", map[string]int{"ta": 4, "tb": 4})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	mc.kafkaMember("k1")
	share := func(parts ...string) []mtp { // "ta-2"
		var out []mtp
		for _, p := range parts {
			out = append(out, mtp{Topic: p[:2], Partition: int32(p[3] - '0')})
		}
		return out
	}
	zktest.Eventually(t, 30*time.Second, "k1 consuming every partition",
		mc.views.consumes("k1", share("ta-0", "ta-1", "ta-2", "ta-3", "tb-0", "tb-1", "tb-2", "tb-3")...))

	// Another member, first in sort order, registers for ta. It claims nothing: the Kafka
	// member's partitions never wait for it.
	other := zktest.OpenStore(t, mc.connect)
	id := zkstate.IDPath(mc.group, mc.group+"_0other")
	reg := func(topic string) []byte {
		return zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{topic: 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1}.Encode()
	}
	if err := other.Create(ctx, id, reg("ta"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
		t.Fatal(err)
	}
	// Range over [other, k1]: ta-0 and ta-1 are the other's, all of tb is k1's.
	zktest.Eventually(t, 30*time.Second, "k1 consuming its share beside the other member",
		mc.views.consumes("k1", share("ta-2", "ta-3", "tb-0", "tb-1", "tb-2", "tb-3")...))

	// Once the group has settled (its fingerprints of the join can ask for another rebalance
	// or two: no rebalance for a second, and the watch of the other kinds counts the other
	// member as a zk member), the other member subscribes to tb instead, written over its
	// registration.
	rebalances := func() string {
		var out []string
		for _, l := range strings.Split(modeMetrics(t, mc.b), "\n") {
			if strings.HasPrefix(l, "zkbridge_mixed_rebalances_total") || strings.HasPrefix(l, `zkbridge_group_members{group="rw",kind="zk"}`) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "; ")
	}
	last, since := rebalances(), time.Now()
	zktest.Eventually(t, 20*time.Second, "the group settled", func() (bool, string) {
		if now := rebalances(); now != last {
			last, since = now, time.Now()
		}
		return time.Since(since) > time.Second && strings.Contains(last, `kind="zk"} 1`), last
	})
	if _, err := other.Set(ctx, id, reg("tb"), -1); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 15*time.Second, "k1 rebalanced to its new share",
		mc.views.consumes("k1", share("ta-0", "ta-1", "ta-2", "ta-3", "tb-2", "tb-3")...))
	mc.views.check(t)
}
