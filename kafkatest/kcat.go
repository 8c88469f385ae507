package kafkatest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// KcatPath finds kcat (librdkafka's command-line client), or skips the
// test; with ZKBRIDGE_REQUIRE_ZK=1 (CI, which installs Debian's kcat) a
// missing kcat fails it instead.
func KcatPath(t testing.TB) string {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("ZKBRIDGE_REQUIRE_ZK") == "1" {
			t.Fatalf("kcat not installed (apt-get install -y kcat): %v", err)
		}
		t.Skip("kcat not installed; apt-get install -y kcat")
	}
	return kcat
}

// StartKcat runs `kcat -G group topic` (librdkafka's balanced consumer)
// against addr until the test ends, heartbeating every 100 ms; extra
// arguments go before the topic. Its stderr is logged if the test fails.
func StartKcat(t testing.TB, addr, group, topic string, extra ...string) {
	t.Helper()
	kcat := KcatPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"-b", addr, "-G", group, "-q", "-o", "end",
		"-X", "heartbeat.interval.ms=100", "-X", "session.timeout.ms=10000"}, extra...)
	cmd := exec.CommandContext(ctx, kcat, append(args, topic)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting kcat: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("kcat stderr:\n%s", stderr.String())
		}
	})
}
