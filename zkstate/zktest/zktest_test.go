package zktest_test

import (
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }

func fourLetter(t *testing.T, addr, word string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, word); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestIntegration_SharedServerAnswers(t *testing.T) {
	addr := zktest.Addr(t)
	if got := fourLetter(t, addr, "ruok"); got != "imok" {
		t.Fatalf("ruok = %q, want imok", got)
	}
	c := zktest.Connect(t)
	if !strings.HasPrefix(c, addr+"/zktest-") {
		t.Fatalf("Connect = %q, want a chroot under %s", c, addr)
	}
}

func TestIntegration_EnsembleHasQuorumAndStopsNode(t *testing.T) {
	s := zktest.StartEnsemble(t)
	addrs := strings.Split(s.Addr, ",")
	if len(addrs) != 3 {
		t.Fatalf("ensemble addr = %q, want 3 servers", s.Addr)
	}
	modes := map[string]int{}
	for _, a := range addrs {
		for _, line := range strings.Split(fourLetter(t, a, "srvr"), "\n") {
			if m, ok := strings.CutPrefix(line, "Mode: "); ok {
				modes[m]++
			}
		}
	}
	if modes["leader"] != 1 || modes["follower"] != 2 {
		t.Fatalf("modes = %v, want 1 leader and 2 followers", modes)
	}
	if err := s.StopNode(1); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", addrs[0], time.Second); err == nil {
		t.Fatalf("node 1 still accepts connections after StopNode")
	}
}

// A server started for a process that dies (a test binary that panics or is killed) stops by
// itself: the script's --parent watchdog, which zktest always passes.
func TestIntegration_ServerStopsWhenItsParentDies(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	zktest.Addr(t) // skips, or fails under ZKBRIDGE_REQUIRE_ZK=1, without ZooKeeper
	parent := exec.Command("sleep", "60")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	out, err := exec.Command("bash", "../../scripts/zookeeper.sh", "start", "--port", strconv.Itoa(port),
		"--dir", dir, "--parent", strconv.Itoa(parent.Process.Pid)).CombinedOutput()
	if err != nil {
		t.Fatalf("start: %v: %s", err, out)
	}
	addr := strings.TrimSpace(string(out))
	if got := fourLetter(t, addr, "ruok"); got != "imok" {
		t.Fatalf("ruok = %q", got)
	}
	parent.Process.Kill()
	parent.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return // stopped
		}
		c.Close()
		if time.Now().After(deadline) {
			exec.Command("bash", "../../scripts/zookeeper.sh", "stop", "--dir", dir).Run()
			t.Fatal("ZooKeeper still answers 20s after its parent died")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
