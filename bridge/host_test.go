package bridge_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/zkbridge/zkbridge/bridge"
)

// One goroutine owns a group, whatever its members' kinds (DESIGN §3): a mixed group with a
// Kafka member and a legacy member on one bridge has one goroutine that steps both kinds'
// events.
func TestIntegration_MixedGroupHasOneOwner(t *testing.T) {
	mc := newMixedCluster(t, "one-owner", map[string]int{"ta": 4})
	mc.legacyMember("l1")
	k1, _ := mc.kafkaMember("k1")
	mc.waitConverged(45*time.Second, 2, map[string]*kgo.Client{"k1": k1})
	if n := bridge.GroupOwners(mc.b.Bridge, "one-owner"); n != 1 {
		t.Errorf("%d goroutines own group one-owner, want 1", n)
	}
}
