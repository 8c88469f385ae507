package bridge

import (
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge/group"
)

// A mixed group's one engine takes each kind's part of its configuration from the side that
// serves that kind, whichever side starts first: the Kafka settings from the Kafka coordinator
// (here an initial rebalance delay of 0, not Kafka's default 3 s), the legacy ones from the
// legacy coordinator.
func TestHostMachineTakesEachSidesConfig(t *testing.T) {
	kafka := group.DefaultConfig()
	kafka.InitialRebalanceDelay = 0
	kafka.MaxSize = 7
	legacy := group.LegacyConfig{RebalanceDelay: 50 * time.Millisecond, RetryBackoff: time.Second, RetryBackoffMax: 2 * time.Second}
	for _, kafkaFirst := range []bool{true, false} {
		h := newHost("g", nil)
		var m1, m2 *group.Machine
		if kafkaFirst {
			m1, m2 = h.machine(&kafka, nil), h.machine(nil, &legacy)
		} else {
			m1, m2 = h.machine(nil, &legacy), h.machine(&kafka, nil)
		}
		if m1 != m2 {
			t.Fatalf("kafka first %v: the two sides got two machines", kafkaFirst)
		}
		want := kafka
		want.Legacy = legacy
		if got := m1.Config(); got != want {
			t.Errorf("kafka first %v: config %+v, want %+v", kafkaFirst, got, want)
		}
	}
}
