package bridge_test

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// askViews asks Metadata on every address of addrs (and only there) and returns each answer.
func askViews(t *testing.T, addrs []string) (map[string]string, error) {
	t.Helper()
	views := map[string]string{}
	for _, a := range addrs {
		v, err := metadataView(t, a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		views[a] = v
	}
	return views, nil
}

// After a kill -9, the survivors leave the dead bridge out of Metadata well before ZooKeeper
// expires its session (docs/several-bridges.md, "A bridge that looks dead"): within about a
// second every survivor, on its bootstrap listener and on every proxy listener, answers the same
// Metadata, which lists the survivors only and names every upstream broker at a survivor's proxy
// listener, while the dead bridge is still registered; after the expiry the answer is the same.
// Before that, a paused (SIGSTOP) bridge, whose kernel still takes connections, stays listed.
func TestIntegration_SeveralBridgesDeadBridgeLeftOutOfMetadata(t *testing.T) {
	t.Parallel()
	e := dfStart(t, dfOpts{fromZK: true, partitions: 6})
	ctx := t.Context()

	// The killed bridge (a child process) must serve at least one upstream broker.
	const a, b = dfNode, dfNode + 1
	var dead int32
	for id := dfNode + 2; dead == 0; id++ {
		for k := range int32(3) {
			if dfServedBy(a, b, id)[k] == id {
				dead = id
			}
		}
	}
	const session = 8 * time.Second // the omission must come well before the expiry
	child := startChildBridge(t, childSpec{ZKConnect: e.connect, NodeID: dead, ZKSessionTimeout: session, UpstreamFromZK: true})
	second := startBridge(t, e.connect, b, func(c *bridge.Config) {
		c.UpstreamFromZK, c.ProxyListen, c.MetadataMaxAge = true, "127.0.0.1:0", time.Second
	})
	survivors := []string{e.addr, second.Addr().String()}
	for _, r := range []*running{e.b, second} {
		// Every survivor's proxy listeners, once all three are open: the balanced rule may
		// name a broker at the second survivor's.
		zktest.Eventually(t, 10*time.Second, "a survivor's three proxy listeners open", func() (bool, string) {
			return len(r.ProxyAddrs()) == 3, fmt.Sprint(r.ProxyAddrs())
		})
		for _, p := range r.ProxyAddrs() {
			survivors = append(survivors, p.String())
		}
	}
	all := sameMetadataEverywhere(t, append([]string{child.addr}, survivors...),
		map[int32]string{a: e.addr, b: second.Addr().String(), dead: child.addr})
	deadNode := fmt.Sprintf("%d@%s", dead, child.addr)

	// Paused: still listed by every survivor (its listener takes connections).
	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for stopped := time.Now(); time.Since(stopped) < 1500*time.Millisecond; time.Sleep(100 * time.Millisecond) {
		views, err := askViews(t, survivors)
		if err != nil {
			t.Fatal(err)
		}
		for addr, v := range views {
			if v != all {
				t.Fatalf("%s while the child is paused (%v): %s, want as before: %s", addr, time.Since(stopped), v, all)
			}
		}
	}
	if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	regPath := zkstate.BridgePath(bridge.DefaultRoot, dead)
	killed := time.Now()
	child.kill()
	var omitted string
	var took time.Duration
	for {
		views, err := askViews(t, survivors)
		if err != nil {
			t.Fatal(err)
		}
		first := views[survivors[0]]
		same := true
		for _, v := range views {
			same = same && v == first
		}
		if same && !strings.Contains(first, deadNode) && len(listenersIn(first)) == 2+3 && !strings.Contains(first, "error 5") {
			took, omitted = time.Since(killed), first
			break
		}
		if time.Since(killed) > session/2 {
			t.Fatalf("%v after the kill the survivors still answer: %v", time.Since(killed), views)
		}
		time.Sleep(50 * time.Millisecond)
	}
	registered, _, err := e.zk.Exists(ctx, regPath)
	if err != nil || !registered {
		t.Fatalf("the dead bridge's registration is gone (%v) %v after the kill: want the omission before the expiry", err, took)
	}
	t.Logf("every survivor leaves the dead bridge out %v after the kill: %s", took, omitted)
	if took > 1500*time.Millisecond {
		t.Errorf("the survivors left the dead bridge out %v after the kill, want within about a second", took)
	}
	for _, l := range listenersIn(omitted) {
		if l == child.addr || !slices.Contains(survivors, l) {
			t.Errorf("Metadata names %s, not a survivor's listener: %s", l, omitted)
		}
	}

	// The session expires: the placement is the one the omission used.
	zktest.Eventually(t, 3*session, "the dead bridge's registration gone", func() (bool, string) {
		ok, _, err := e.zk.Exists(ctx, regPath)
		return err == nil && !ok, fmt.Sprintf("registered %v (%v)", ok, err)
	})
	if after := sameMetadataEverywhere(t, survivors, map[int32]string{a: e.addr, b: second.Addr().String()}); after != omitted {
		t.Errorf("after the expiry Metadata is\n  %s\nwhile the dead bridge was left out it was\n  %s", after, omitted)
	}
}
