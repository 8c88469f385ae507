package bridge

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A claim's Multi that failed without an answer is followed by a check-only Multi on the group
// znode and reads of the owner znodes (legacyStillOurs): the reads must see the lost Multi's
// effect if it was ever applied. On one server the order of one connection gives that. On an
// ensemble the session can come back on another server, which may not have applied the Multi
// yet, while the Multi itself, forwarded by the first server, may still be on its way to the
// leader. ZooKeeper's guarantees that the argument rests on: a write goes through the leader,
// which orders it; a request of the session forwarded by the server it left reaches the leader
// either before the session moved (and is ordered before anything the session sends from its new
// server) or after, and is then refused (SessionMovedException: not applied); and a server
// answers the session's write, and then its reads, only once it has applied everything the
// leader ordered before that write. So the check (a write) orders the reads after the lost
// Multi, whichever server answers them.
//
// These are the single-server tests of the cut Multi (TestIntegration_LegacyClaimMultiCut*) on a
// real 3-server ensemble: the bridge's session on a follower, through a proxy cut by the test,
// and its reconnect to the other follower; there, once the follower was paused while the Multi
// and the zk member's commit were applied, so that it comes back behind them.
func TestIntegration_LegacyClaimMultiCutOnAnEnsemble(t *testing.T) {
	zk := zktest.StartEnsemble(t) // one for the three: each runs in a chroot of its own
	t.Run("applied, back on the other follower", func(t *testing.T) { legacyEnsembleCutApplied(t, zk, false) })
	t.Run("applied, back on a follower that missed it", func(t *testing.T) { legacyEnsembleCutApplied(t, zk, true) })
	t.Run("not sent, back on the other follower", func(t *testing.T) { legacyEnsembleCutBeforeSent(t, zk) })
}

// legacyEnsembleCutApplied is TestIntegration_LegacyClaimMultiCutAfterItIsApplied on an
// ensemble: the Multi applied and its answer lost, t-1 let go of, zk-1 took it and committed
// 600; t-1's final offset (500) must not be written again over it. behind: the other follower
// is paused from before the claim until the bridge reconnects to it.
func legacyEnsembleCutApplied(t *testing.T, zk *zktest.Server, behind bool) {
	e := legacyStartEnsembleCut(t, zk)
	w := e.w
	if behind {
		if err := e.zk.PauseNode(e.other); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.zk.ResumeNode(e.other) })
		// The cut resumes it and lets the bridge reach it.
		w.reconnect = func() {
			if err := e.zk.ResumeNode(e.other); err != nil {
				t.Error(err)
			}
			e.otherProxy.Thaw()
		}
	}
	w.cutAfterApplied(t)
	e.onOtherFollower(t)
}

// legacyEnsembleCutBeforeSent is TestIntegration_LegacyClaimMultiCutBeforeItIsSent on an
// ensemble: the Multi never reached ZooKeeper, a still owns t-0 and t-1, and the final offsets
// must be committed.
func legacyEnsembleCutBeforeSent(t *testing.T, zk *zktest.Server) {
	e := legacyStartEnsembleCut(t, zk)
	e.w.cutBeforeSent(t)
	e.onOtherFollower(t)
}

// legacyEnsembleCut is a legacyCutClaim on a 3-server ensemble (a chroot of its own): the bridge's session
// on a follower, through the claim's proxy; the way to the other follower (otherProxy, node
// other) closed until the cut, which opens it and leaves the first closed, so the session comes
// back on the other follower. The test's own session (also zk-1's) uses the leader and the first
// follower: the other may be paused.
type legacyEnsembleCut struct {
	w          *legacyCutClaim
	zk         *zktest.Server
	other      int // 1-based node number
	otherAddr  string
	otherProxy *zktest.Proxy
}

func legacyStartEnsembleCut(t *testing.T, zk *zktest.Server) *legacyEnsembleCut {
	t.Helper()
	legacyCheckLeaks(t)
	addrs := strings.Split(zk.Addr, ",")
	leader, followers := -1, []int{}
	for i, a := range addrs {
		switch mode := legacyZKMode(t, a); mode {
		case "leader":
			leader = i
		case "follower":
			followers = append(followers, i)
		default:
			t.Fatalf("server %s is in mode %q", a, mode)
		}
	}
	if leader < 0 || len(followers) != 2 {
		t.Fatalf("ensemble %s: leader %d, followers %v", zk.Addr, leader, followers)
	}
	chroot := fmt.Sprintf("/cut-%08x", rand.Uint32())
	first, other := zktest.StartProxy(t, addrs[followers[0]]), zktest.StartProxy(t, addrs[followers[1]])
	other.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store, err := zkstate.Open(ctx, zkstate.Config{Connect: first.Addr() + "," + other.Addr() + chroot,
		SessionTimeout: 8 * time.Second, Logger: legacyTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	w := &legacyCutClaim{store: store, proxy: first, reconnect: other.Thaw}
	legacyStartCutClaimOn(t, w, addrs[leader]+","+addrs[followers[0]]+chroot)
	return &legacyEnsembleCut{w: w, zk: zk, other: followers[1] + 1, otherAddr: addrs[followers[1]], otherProxy: other}
}

// onOtherFollower checks that the bridge's session did come back on the other follower, as
// the test meant: it is among that server's connections (four-letter word cons).
func (e *legacyEnsembleCut) onOtherFollower(t *testing.T) {
	t.Helper()
	sid := fmt.Sprintf("sid=0x%x", e.w.store.SessionID())
	if cons := legacyFourLetter(t, e.otherAddr, "cons"); !strings.Contains(cons, sid) {
		t.Errorf("the bridge's session (%s) is not on the other follower %s: %s", sid, e.otherAddr, cons)
	}
}

// legacyZKMode is a server's mode (leader, follower, standalone) from its srvr answer.
func legacyZKMode(t *testing.T, addr string) string {
	t.Helper()
	for _, line := range strings.Split(legacyFourLetter(t, addr, "srvr"), "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(mode)
		}
	}
	return ""
}

// legacyFourLetter sends a four-letter word to a ZooKeeper server and returns its answer.
func legacyFourLetter(t *testing.T, addr, word string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(word)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}
