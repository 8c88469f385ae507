// Package zktest runs a real ZooKeeper server (Debian's `zookeeper` package, started through the
// project's scripts/zookeeper.sh) for tests.
//
// One server is started lazily per test package and stopped by Main; every test gets a fresh
// chroot path under it, so tests of one package never see each other's znodes.
//
//	func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }
//
//	func TestIntegration_X(t *testing.T) {
//		connect := zktest.Connect(t) // "127.0.0.1:PORT/t-3"
//		...
//	}
//
// Where no ZooKeeper is installed the tests skip, unless ZKBRIDGE_REQUIRE_ZK=1 (CI sets it),
// which turns the skip into a failure. ZKBRIDGE_TEST_ZK=host:port uses an existing server
// instead of starting one.
package zktest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Server is one ZooKeeper server (or ensemble) started by the script.
type Server struct {
	// Addr is the connect string without chroot, e.g. "127.0.0.1:21810" or, for an ensemble,
	// "127.0.0.1:P,127.0.0.1:P+1,127.0.0.1:P+2".
	Addr   string
	dir    string
	script string
}

var (
	shared struct {
		once sync.Once
		srv  *Server
		err  error
	}
	chroots atomic.Int64
)

// Main runs the package's tests and then stops the shared server, if one was started.
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "zktest: stopping ZooKeeper: %v\n", err)
		}
	}
	return code
}

// Required reports whether the environment demands a real ZooKeeper (ZKBRIDGE_REQUIRE_ZK=1).
func Required() bool { return os.Getenv("ZKBRIDGE_REQUIRE_ZK") == "1" }

// unavailable skips the test, or fails it when a real ZooKeeper is required.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if Required() {
		t.Fatalf("ZooKeeper is required (ZKBRIDGE_REQUIRE_ZK=1) but unavailable: %v", err)
	}
	t.Skipf("skipping: no ZooKeeper (%v); install Debian's zookeeper package or set ZKBRIDGE_TEST_ZK", err)
}

// Addr returns the connect string of the package's shared server (no chroot), starting it on
// first use. Tests that need isolation use Connect instead.
func Addr(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping ZooKeeper integration test in -short mode")
	}
	if a := os.Getenv("ZKBRIDGE_TEST_ZK"); a != "" {
		return a
	}
	shared.once.Do(func() {
		shared.srv, shared.err = Start(1)
	})
	if shared.err != nil {
		unavailable(t, shared.err)
	}
	return shared.srv.Addr
}

// Connect returns a connect string with a chroot unique to this test, "host:port/t-N". The
// chroot does not exist yet; zkstate creates it on open.
func Connect(t testing.TB) string {
	t.Helper()
	addr := Addr(t)
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s/zktest-%d-%s", addr, chroots.Add(1), name)
}

// StartEnsemble starts a dedicated 3-node ensemble for one test and stops it at cleanup.
func StartEnsemble(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping ZooKeeper integration test in -short mode")
	}
	s, err := Start(3)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// StartServer starts a dedicated standalone server for one test (for tests that stop or restart
// ZooKeeper) and stops it at cleanup.
func StartServer(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping ZooKeeper integration test in -short mode")
	}
	s, err := Start(1)
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// Start starts n servers (1, or 3 for an ensemble) on free loopback ports in a fresh temporary
// directory. Ports can be taken between our probe and the server's bind, so it retries.
func Start(n int) (*Server, error) {
	script, err := findScript()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(jarPath()); err != nil {
		return nil, fmt.Errorf("ZooKeeper jar not found: %w", err)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return nil, fmt.Errorf("java not found: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 4; attempt++ {
		port, err := freePortRun(n)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "zktest-")
		if err != nil {
			return nil, err
		}
		verb := "start"
		if n > 1 {
			verb = "ensemble"
		}
		cmd := exec.Command("bash", script, verb, "--port", fmt.Sprint(port), "--dir", dir,
			"--parent", fmt.Sprint(os.Getpid()))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			lastErr = fmt.Errorf("%s %s: %w: %s", script, verb, err, strings.TrimSpace(errb.String()))
			_ = exec.Command("bash", script, "stop", "--dir", dir).Run()
			_ = os.RemoveAll(dir)
			continue
		}
		return &Server{Addr: strings.TrimSpace(out.String()), dir: dir, script: script}, nil
	}
	return nil, lastErr
}

// Stop kills every server process this Server started and removes its data.
func (s *Server) Stop() error {
	err := exec.Command("bash", s.script, "stop", "--dir", s.dir).Run()
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

// StopNode stops node i (1-based) of the server; used to simulate a lost server or quorum.
func (s *Server) StopNode(i int) error {
	pidFile := filepath.Join(s.dir, fmt.Sprintf("node%d", i), "pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid := strings.TrimSpace(string(b))
	if err := exec.Command("kill", "-TERM", "--", "-"+pid).Run(); err != nil {
		return fmt.Errorf("kill node %d: %w", i, err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if exec.Command("kill", "-0", pid).Run() != nil {
			return os.Remove(pidFile)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("node %d (pid %s) did not exit", i, pid)
}

// PauseNode stops node i (1-based) with SIGSTOP until ResumeNode: it answers nobody, neither
// its clients nor its peers, and falls behind the ensemble meanwhile. Keep a pause well below
// the ensemble's syncLimit (5 s with scripts/zookeeper.sh), or the leader drops the node.
func (s *Server) PauseNode(i int) error { return s.signalNode(i, "-STOP") }

// ResumeNode lets node i run again after PauseNode.
func (s *Server) ResumeNode(i int) error { return s.signalNode(i, "-CONT") }

func (s *Server) signalNode(i int, sig string) error {
	b, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("node%d", i), "pid"))
	if err != nil {
		return err
	}
	if err := exec.Command("kill", sig, "--", "-"+strings.TrimSpace(string(b))).Run(); err != nil {
		return fmt.Errorf("kill %s node %d: %w", sig, i, err)
	}
	return nil
}

func jarPath() string {
	if j := os.Getenv("ZK_JAR"); j != "" {
		return j
	}
	return "/usr/share/java/zookeeper.jar"
}

// findScript walks up from the working directory (a package directory under go test) to the
// module root holding scripts/zookeeper.sh.
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "zookeeper.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/zookeeper.sh not found above the working directory")
		}
		dir = parent
	}
}

// freePortRun finds a port p such that p..p+n-1 (client ports) and, for an ensemble,
// p+1001..p+1000+n and p+2001..p+2000+n (peer and election ports) are free right now.
//
// The run is drawn below the kernel's ephemeral port range: a port in that range may be the
// local port of any outgoing connection of the tests running in parallel (every client of
// every package), which makes a run of nine ports there rarely free under load, and can take
// a port between our check and the server's bind.
func freePortRun(n int) (int, error) {
	low := ephemeralLow()
	const floor = 10000
	span := low - floor - 2001 - n
	if span <= 0 {
		return 0, fmt.Errorf("no room for a port run below the ephemeral range (starts at %d)", low)
	}
	for tries := 0; tries < 200; tries++ {
		p := floor + rand.IntN(span)
		ports := []int{}
		for i := 0; i < n; i++ {
			ports = append(ports, p+i)
			if n > 1 {
				ports = append(ports, p+1001+i, p+2001+i)
			}
		}
		if allFree(ports) {
			return p, nil
		}
	}
	return 0, errors.New("no free loopback port run found")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default 32768 when
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= 0 {
		return 32768
	}
	return low
}

func allFree(ports []int) bool {
	for _, p := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		l.Close()
	}
	return true
}
