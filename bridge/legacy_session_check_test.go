package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/zkstate"
)

// A legacy consumer stops consuming only after (max_ping_retries + 1) × ping_interval without a
// request from its coordinator (docs/legacy-protocol.md §8). If that is not below the bridge's
// ZooKeeper session timeout, a crashed bridge's zk and Kafka members would take its partitions
// while it still consumes them (checkCrashSafety). With SessionCheckRefuse its RegisterRequest
// is refused with INVALID_PING_SETTINGS; with the default it is admitted and counted; a consumer
// that stops in time is admitted either way.
func TestIntegration_LegacySessionCheck(t *testing.T) {
	t.Parallel()
	legacyCheckLeaks(t)
	store := legacyOpenStore(t, legacyConnect(t))
	t.Cleanup(func() { store.Close() })
	legacySetTopic(t, store, "t", 1)
	quarter := store.SessionTimeout() / 4
	for _, tc := range []struct {
		check   SessionCheck
		retries int16 // of quarter-timeout pings: 3 stops at the timeout, 2 before it
		want    legacy.ErrorCode
		counted string // the zkbridge_legacy_crash_unsafe_registrations_total result, or ""
	}{
		{SessionCheckRefuse, 3, legacy.CodeInvalidPingSettings, "refused"},
		{SessionCheckRefuse, 2, legacy.CodeNone, ""},
		{SessionCheckWarn, 3, legacy.CodeNone, "admitted"},
		{"", 2, legacy.CodeNone, ""},
	} {
		reg := prometheus.NewRegistry()
		env := legacyStart(t, store, "", func(c *LegacyConfig) { c.SessionCheck, c.Registerer = tc.check, reg })
		rr := legacyRawRegister("g", "c", true, "t")
		rr.PingIntervalMs, rr.MaxPingRetries = int32(quarter.Milliseconds()), tc.retries
		raw := legacyDialRaw(t, env.addr, rr)
		m, err := raw.read(legacyWait)
		if err != nil {
			t.Fatalf("%q, %d retries: %v", tc.check, tc.retries, err)
		}
		// Admitted, the consumer hears next from its group's rebalance (a StopRequest); refused,
		// it gets the error in a RegisterResponse.
		resp, refused := m.(*legacy.RegisterResponse)
		switch {
		case tc.want == legacy.CodeNone && refused:
			t.Errorf("%q, %d retries: refused with %v, want admitted", tc.check, tc.retries, resp.ErrorCode)
		case tc.want != legacy.CodeNone && (!refused || resp.ErrorCode != tc.want):
			t.Errorf("%q, %d retries: got %#v, want RegisterResponse %v", tc.check, tc.retries, m, tc.want)
		}
		if tc.want != legacy.CodeNone {
			if _, err := raw.read(legacyWait); !errors.Is(err, io.EOF) {
				t.Errorf("%q: after the refusal: %v, want the connection closed", tc.check, err)
			}
		}
		counted := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "zkbridge_legacy_crash_unsafe_registrations_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					counted[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
		for _, result := range []string{"admitted", "refused"} {
			want := 0.0
			if result == tc.counted {
				want = 1
			}
			if v, ok := counted[result]; !ok || v != want {
				t.Errorf("%q, %d retries: %s registrations counted %v (exported %v), want %v", tc.check, tc.retries, result, v, ok, want)
			}
		}
		raw.conn.Close()
		env.stop()
	}
}

// The legacy client's defaults stop a consumer, after its coordinator went quiet, before the
// bridge's default ZooKeeper session expires and 0.8 consumers take its partitions.
func TestLegacyClientDefaultsAreCrashSafe(t *testing.T) {
	silence := time.Duration(legacy.DefaultMaxPingRetries+1) * legacy.DefaultPingInterval
	if silence >= DefaultZKSessionTimeout {
		t.Errorf("(DefaultMaxPingRetries + 1) × DefaultPingInterval = %v, not below the default session timeout %v", silence, DefaultZKSessionTimeout)
	}
}

// A coordinator cut from ZooKeeper stops its consumers before the server can expire its session
// and 0.8 consumers take their partitions (fenceUnvouched): it closes their connections once its
// session lease lapses. A consumer that commits nothing gets pings that need no ZooKeeper, so
// without this it would go on consuming after its owner znodes were gone.
func TestIntegration_LegacyUnvouchedSessionStopsConsumers(t *testing.T) {
	legacyCheckLeaks(t)
	store, proxy, connect := legacyProxiedStore(t, 4*time.Second)
	observer := legacyOpenStore(t, connect)
	t.Cleanup(func() { observer.Close() })
	legacySetTopic(t, observer, "t", 1)
	env := legacyStart(t, store, "", nil)

	var mu sync.Mutex
	var stopped time.Time
	c := legacyRunConsumer(t, env.addr, "g", "a", map[string]int{"t": 1}, legacyConsumerOpts{
		onStop: func(string) {
			mu.Lock()
			defer mu.Unlock()
			if stopped.IsZero() {
				stopped = time.Now()
			}
		},
	})
	legacyWaitStable(t, observer, "g", []*legacyTestConsumer{c}, map[string][]int32{"t": {0}})
	mu.Lock()
	stopped = time.Time{} // the Stops of the first rebalance do not count
	mu.Unlock()

	cut := time.Now()
	proxy.Freeze()
	owner := zkstate.OwnerPath("g", "t", 0)
	var gone time.Time
	legacyEventually(t, "the server expires the coordinator's session", func() (bool, string) {
		ok, _, err := observer.Exists(context.Background(), owner)
		if err == nil && !ok {
			gone = time.Now()
			return true, ""
		}
		return false, fmt.Sprintf("%s still there: %v", owner, err)
	})
	mu.Lock()
	at := stopped
	mu.Unlock()
	t.Logf("cut at 0: the consumer stopped at %v, its owner znode went at %v", at.Sub(cut).Round(time.Millisecond), gone.Sub(cut).Round(time.Millisecond))
	if at.IsZero() || !at.Before(gone) {
		t.Fatalf("the consumer did not stop before its owner znode went (stopped %v, gone %v after the cut)", at.Sub(cut), gone.Sub(cut))
	}

	proxy.Thaw()
	legacyWaitStable(t, observer, "g", []*legacyTestConsumer{c}, map[string][]int32{"t": {0}})
}
