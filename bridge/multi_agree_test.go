package bridge_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// lockedLog is a log sink tests read while the bridge writes it.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// A bridge without the data path next to one with it: both log the disagreement once (not
// at every change of the live view), export it and report it; once the odd bridge leaves they
// agree again.
func TestIntegration_SeveralBridgesDisagreeOnTheDataPath(t *testing.T) {
	e := dfStart(t, dfOpts{fromZK: true})
	logs := &lockedLog{}
	const odd = dfNode + 1
	plain := startBridge(t, e.connect, odd, func(c *bridge.Config) {
		c.Logger = zerolog.New(logs).With().Timestamp().Int32("test_node", odd).Logger()
	})
	t.Cleanup(func() {
		if t.Failed() {
			logs.mu.Lock()
			defer logs.mu.Unlock()
			t.Logf("bridge %d's log:\n%s", odd, logs.buf.String())
		}
	})
	want := fmt.Sprintf("%d:%s", odd, bridge.DisagreeDataPath)
	for _, b := range []*running{e.b, plain} {
		zktest.Eventually(t, 10*time.Second, fmt.Sprintf("bridge %v finds %s", b.Addr(), want), func() (bool, string) {
			got := b.Disagreements()
			return len(got) == 1 && fmt.Sprintf("%d:%s", got[0].Node, got[0].Kind) == want, fmt.Sprint(got)
		})
		_, body := httpGet(t, "http://"+b.AdminAddr().String()+"/metrics")
		for _, m := range []string{`zkbridge_bridges_disagreements{kind="data_path"} 1`, `zkbridge_bridges_disagreements{kind="advertised_host"} 0`} {
			if !strings.Contains(body, m) {
				t.Errorf("%v's metrics lack %s", b.Addr(), m)
			}
		}
	}
	// Another bridge with the data path joins: the same bridge disagrees, nothing new is
	// logged (once per change of who disagrees on what, not at every change of the view).
	changes := logs.count("live bridges changed")
	other := zkstate.BridgeRegistration{NodeID: odd + 1, Kafka: "127.0.0.1:1", Admin: "127.0.0.1:2", DataPath: true}
	if err := e.zk.CreateEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, odd+1), other.Encode()); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "the new bridge seen", func() (bool, string) {
		return logs.count("live bridges changed") > changes, ""
	})
	if n := logs.count("bridges of this service answer Metadata differently"); n != 1 {
		t.Errorf("the disagreement was logged %d times, want once", n)
	}

	if err := e.zk.DeleteEphemeral(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, odd+1)); err != nil {
		t.Fatal(err)
	}
	if err := plain.stop(); err != nil {
		t.Fatal(err)
	}
	zktest.Eventually(t, 10*time.Second, "agreement once the odd bridge left", func() (bool, string) {
		got := e.b.Disagreements()
		return len(got) == 0, fmt.Sprint(got)
	})
	_, body := httpGet(t, "http://"+e.b.AdminAddr().String()+"/metrics")
	if !strings.Contains(body, `zkbridge_bridges_disagreements{kind="data_path"} 0`) {
		t.Error("the metric still counts a disagreement after the odd bridge left")
	}

	// A bridge on every interface without an advertised address (and with the data path)
	// names itself by the host each client dialed; the others name it by its host name.
	wild := startBridge(t, e.connect, odd+2, func(c *bridge.Config) {
		c.KafkaListen, c.UpstreamFromZK, c.ProxyListen = "0.0.0.0:0", true, "127.0.0.1:0"
	})
	zktest.Eventually(t, 10*time.Second, "the wildcard bridge's host reported", func() (bool, string) {
		got := e.b.Disagreements()
		return len(got) == 1 && got[0].Node == odd+2 && got[0].Kind == bridge.DisagreeHost, fmt.Sprint(got)
	})
	if got := wild.Disagreements(); len(got) != 1 || got[0].Node != odd+2 {
		t.Errorf("the wildcard bridge itself finds %v", got)
	}
}
