package zkconsumer

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/legacy"
)

func TestConsumerIDIsPrefixedWithTheGroup(t *testing.T) {
	id, err := consumerID(Config{GroupID: "g", ConsumerID: "c1"})
	if err != nil || id != "g_c1" {
		t.Errorf("configured id = %q, %v; want g_c1 (ZCC:111-123)", id, err)
	}
	id, err = consumerID(Config{GroupID: "g", Host: "host1"})
	if err != nil || !regexp.MustCompile(`^g_host1-[0-9]{13}-[0-9a-f]{1,8}$`).MatchString(id) {
		t.Errorf("generated id = %q, %v; want g_host1-<ms>-<uuid prefix>", id, err)
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	ok := Config{Connect: "127.0.0.1:2181", GroupID: "g", Subscription: map[string]int{"t": 1}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(minimal) = %v", err)
	}
	d := ok.withDefaults()
	if d.RebalanceMaxRetries != 4 || d.RebalanceBackoff != 2*time.Second || d.AutoCommitInterval != 60*time.Second ||
		d.AutoOffsetReset != "largest" || d.SessionTimeout != 6*time.Second || d.DisableAutoCommit {
		t.Errorf("defaults = %+v, want 0.8.2's", d)
	}
	if d.resetOffset() != OffsetLatest {
		t.Errorf("reset sentinel for largest = %d", d.resetOffset())
	}
	bad := ok
	bad.AutoOffsetReset = "earliest" // a later Kafka's name, refused by 0.8.2 (CC:71-78)
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "AutoOffsetReset") {
		t.Errorf("Validate(earliest) = %v", err)
	}
	bad = ok
	bad.Subscription = map[string]int{"t": 0}
	if err := bad.Validate(); err == nil {
		t.Errorf("Validate(0 streams) = nil")
	}
	for name, want := range map[string]legacy.Strategy{"roundrobin": legacy.StrategyRoundRobin, "": legacy.StrategyRange,
		"RoundRobin": legacy.StrategyRange, "range": legacy.StrategyRange} {
		if got := legacy.ParseStrategy(name); got != want {
			t.Errorf("strategy %q selects %q, want %q (PA:36-39)", name, got, want)
		}
	}
}

func TestRebalanceFailedError(t *testing.T) {
	cause := errors.New("boom")
	err := error(&RebalanceFailedError{ConsumerID: "g_c1", Retries: 4, Last: cause})
	if !errors.Is(err, ErrRebalanceFailed) || !errors.Is(err, cause) {
		t.Errorf("errors.Is fails on %v", err)
	}
	if !strings.Contains(err.Error(), "g_c1 can't rebalance after 4 retries") {
		t.Errorf("message = %q, want ZCC:633's", err)
	}
}
