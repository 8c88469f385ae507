package zkstate_test

import (
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
)

// The registration every bridge of one service reads of the others (issue 15): version 1 is
// what bridges wrote before they knew each other, version 2 adds what another bridge needs to
// name this one to clients.
func TestParseBridgeRegistrationGolden(t *testing.T) {
	type c = recordsGoldenCase[zkstate.BridgeRegistration]
	recordsWalkGolden(t, "testdata/registration", map[string]c{
		"bridge-v1.json": {want: zkstate.BridgeRegistration{NodeID: 9000, Kafka: "127.0.0.1:9092", Admin: "127.0.0.1:9191",
			StartedMs: 1700000000000, PID: 4242}},
		"bridge-v2.json": {want: zkstate.BridgeRegistration{NodeID: 9001, Kafka: "0.0.0.0:9092", Advertised: "bridge-1:9092",
			Legacy: "bridge-1:9190", Admin: "127.0.0.1:9191", Proxy: map[int32]string{1: "bridge-1:9093", 2: "bridge-1:9094"},
			Software: "v1.4.0", Placement: 1, StartedMs: 1700000000000, PID: 4242}},
		// A bridge with the data path advertises a proxy listener for every upstream broker, and
		// keeps them while it drains (the others then serve its brokers).
		"bridge-v2-data-path-draining.json": {want: zkstate.BridgeRegistration{NodeID: 9002, Kafka: "10.0.0.2:9092",
			Legacy: "10.0.0.2:9190", Admin: "127.0.0.1:9191", Proxy: map[int32]string{0: "10.0.0.2:9093", 1: "10.0.0.2:9094", 2: "10.0.0.2:9095"},
			Software: "v1.5.0", Placement: 1, StartedMs: 1700000000000, PID: 77, Draining: true}},
		// A bridge says whether it relays (data_path) and whether it names itself by the host
		// each client dialed (dialed_host), so that the others can warn when they differ.
		"bridge-v2-data-path-dialed-host.json": {want: zkstate.BridgeRegistration{NodeID: 9003, Kafka: "0.0.0.0:9092",
			Advertised: "host-3:9092", Admin: "127.0.0.1:9191", Proxy: map[int32]string{0: "host-3:9093"}, Software: "v1.6.0",
			Placement: 1, StartedMs: 1700000000000, PID: 78, DataPath: true, DialedHost: true}},
		// A bridge says by which rule it serves upstream brokers (broker_placement: 2, balanced;
		// absent before the field, one at a time), so that all use the balanced rule only
		// together.
		"bridge-v2-broker-placement.json": {want: zkstate.BridgeRegistration{NodeID: 9004, Kafka: "0.0.0.0:9092",
			Advertised: "host-4:9092", Admin: "127.0.0.1:9191", Proxy: map[int32]string{0: "host-4:9093", 1: "host-4:9094"},
			Software: "v1.7.0", Placement: 1, BrokerPlacement: 2, StartedMs: 1700000000000, PID: 79, DataPath: true}},
		"malformed-proxy-addr.json":   {errHas: `proxy 3 "h" is not host:port`},
		"malformed-no-node.json":      {errHas: "no node_id"},
		"malformed-kafka-addr.json":   {errHas: `kafka "nowhere"`},
		"malformed-proxy-id.json":     {errHas: `proxy broker id "one"`},
		"malformed-started-text.json": {errHas: `started "noon"`},
		"malformed-truncated.json":    {errHas: "not JSON"},
	}, zkstate.ParseBridgeRegistration)
}

func TestBridgeRegistrationEncode(t *testing.T) {
	r := zkstate.BridgeRegistration{NodeID: 9001, Kafka: "0.0.0.0:9092", Advertised: "bridge-1:9092",
		Legacy: "bridge-1:9190", Admin: "127.0.0.1:9191", Proxy: map[int32]string{2: "bridge-1:9094", 1: "bridge-1:9093"},
		Software: "v1.4.0", Placement: 1, StartedMs: 1700000000000, PID: 4242}
	want := readGolden(t, "testdata/registration/bridge-v2.json")
	if got := string(r.Encode()); got != want {
		t.Errorf("Encode\n got %s\nwant %s", got, want)
	}
	if r.KafkaAddr() != "bridge-1:9092" {
		t.Errorf("KafkaAddr = %q, want the advertised address", r.KafkaAddr())
	}
	if got := (zkstate.BridgeRegistration{Kafka: "127.0.0.1:9092"}).KafkaAddr(); got != "127.0.0.1:9092" {
		t.Errorf("KafkaAddr without an advertised address = %q, want the listener's", got)
	}
	if got := r.ProxyBrokers(); !reflect.DeepEqual(got, []int32{1, 2}) {
		t.Errorf("ProxyBrokers = %v, want [1 2]", got)
	}
	// A registration from before the data_path field relays when it advertises proxy listeners.
	if !r.DataPathOn() || (zkstate.BridgeRegistration{DataPath: true}).DataPathOn() != true || (zkstate.BridgeRegistration{}).DataPathOn() {
		t.Error("DataPathOn: want true with proxy listeners or data_path, false with neither")
	}
	dp := zkstate.BridgeRegistration{NodeID: 9003, Kafka: "0.0.0.0:9092", Advertised: "host-3:9092", Admin: "127.0.0.1:9191",
		Proxy: map[int32]string{0: "host-3:9093"}, Software: "v1.6.0", Placement: 1, StartedMs: 1700000000000, PID: 78,
		DataPath: true, DialedHost: true}
	if got, want := string(dp.Encode()), readGolden(t, "testdata/registration/bridge-v2-data-path-dialed-host.json"); got != want {
		t.Errorf("Encode\n got %s\nwant %s", got, want)
	}
	bp := zkstate.BridgeRegistration{NodeID: 9004, Kafka: "0.0.0.0:9092", Advertised: "host-4:9092", Admin: "127.0.0.1:9191",
		Proxy: map[int32]string{0: "host-4:9093", 1: "host-4:9094"}, Software: "v1.7.0", Placement: 1, BrokerPlacement: 2,
		StartedMs: 1700000000000, PID: 79, DataPath: true}
	if got, want := string(bp.Encode()), readGolden(t, "testdata/registration/bridge-v2-broker-placement.json"); got != want {
		t.Errorf("Encode\n got %s\nwant %s", got, want)
	}
}

func TestEpochReleased(t *testing.T) {
	e, err := zkstate.ParseEpoch([]byte(readGolden(t, "testdata/epoch/bridge-v1-released.json")))
	if err != nil || e != (zkstate.Epoch{NodeID: 9000, AcquiredMs: 1700000000000, Released: true}) {
		t.Fatalf("ParseEpoch = %+v, %v", e, err)
	}
	if back, err := zkstate.ParseEpoch(e.Encode()); err != nil || back != e {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
}

func FuzzParseBridgeRegistration(f *testing.F) {
	recordsSeed(f, "testdata/registration", func(data []byte) { f.Add(data) })
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := zkstate.ParseBridgeRegistration(data)
		if err != nil {
			if !errors.Is(err, zkstate.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if back, err := zkstate.ParseBridgeRegistration(r.Encode()); err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("%+v: round trip gave %+v, %v", r, back, err)
		}
	})
}

func readGolden(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
