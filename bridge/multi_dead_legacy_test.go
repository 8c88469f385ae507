package bridge_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/legacy"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// askBridgesView reads a bridge's admin /bridges: the live bridges as it sees them.
func askBridgesView(t *testing.T, admin string) (bridge.BridgesView, error) {
	t.Helper()
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + admin + "/bridges")
	if err != nil {
		return bridge.BridgesView{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return bridge.BridgesView{}, fmt.Errorf("GET /bridges: %s", resp.Status)
	}
	var v bridge.BridgesView
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// states is a BridgesView as "id=state" words, sorted by id.
func states(v bridge.BridgesView) []string {
	var out []string
	for _, b := range v.Bridges {
		out = append(out, fmt.Sprintf("%d=%s", b.NodeID, b.State))
	}
	return out
}

// Between a kill -9 and the expiry of the dead bridge's session, what the legacy side and the
// admin listener say about it agree with Metadata (docs/several-bridges.md, "A bridge that looks
// dead"): once the survivors leave it out of Metadata, their ConsultResponses' brokers_info
// (docs/legacy-protocol.md §6) leave it out too, at version 0 and for a group a survivor owns;
// a Consult for a group the dead bridge owns still names it, listed in brokers_info (coordinator_id
// must be one of them), since the group is its own until its session expires; and each
// survivor's admin /bridges says it is unreachable. After the expiry the group's new owner is
// named and the dead bridge is gone from every answer.
func TestIntegration_SeveralBridgesDeadBridgeLeftOutOfBrokersInfo(t *testing.T) {
	connect, zk := legacyEventsLayout(t)
	const a, b, dead int32 = 9001, 9002, 9003
	ids := []int32{a, b, dead}
	group := func(prefix string, want int32) string {
		for i := 0; ; i++ {
			if o, _ := placement.Owner(fmt.Sprintf("%s-%d", prefix, i), ids); o == want {
				return fmt.Sprintf("%s-%d", prefix, i)
			}
		}
	}
	deadGroup, liveGroup := group("dead-owned", dead), group("live-owned", a)
	const session = 8 * time.Second // the checks must come well before the expiry
	child := startChildBridge(t, childSpec{ZKConnect: connect, NodeID: dead, ZKSessionTimeout: session})
	type survivor struct {
		*running
		id int32
	}
	survivors := []survivor{{startBridge(t, connect, a, withLegacy), a}, {startBridge(t, connect, b, withLegacy), b}}
	var survivorsOnly []string
	for _, s := range survivors {
		survivorsOnly = append(survivorsOnly, fmt.Sprintf("%d@%s", s.id, s.LegacyAddr()))
	}
	all := append(slices.Clone(survivorsOnly), fmt.Sprintf("%d@%s", dead, child.legacy))
	slices.Sort(all)
	zktest.Eventually(t, 10*time.Second, "every survivor lists the three bridges", func() (bool, string) {
		for _, s := range survivors {
			r := legacyExchange(t, s.LegacyAddr().String(), &legacy.ConsultRequest{GroupID: deadGroup}).(*legacy.ConsultResponse)
			if r.CoordinatorID != dead || !slices.Equal(brokersInfo(r.Brokers), all) {
				return false, fmt.Sprintf("%d: coordinator %d, brokers %v", s.id, r.CoordinatorID, brokersInfo(r.Brokers))
			}
			if v, err := askBridgesView(t, s.AdminAddr().String()); err != nil || !slices.Equal(states(v), []string{"9001=live", "9002=live", "9003=live"}) {
				return false, fmt.Sprintf("%d: /bridges %v (%v)", s.id, states(v), err)
			}
		}
		return true, ""
	})

	// Killed as soon as every survivor names it: a survivor's watch may not have probed it
	// yet (its probes go out every 100 ms), but the dials of the join and of the Consults above
	// took connections there, and a peer reached at its address by any dial is taken for dead
	// when it refuses.
	killed := time.Now()
	child.kill()
	for _, s := range survivors {
		addr := s.LegacyAddr().String()
		zktest.Eventually(t, session/2, fmt.Sprintf("bridge %d leaves the dead bridge out of brokers_info", s.id), func() (bool, string) {
			r := legacyExchange(t, addr, &legacy.ConsultRequest{GroupID: liveGroup}).(*legacy.ConsultResponse)
			return r.CoordinatorID == a && slices.Equal(brokersInfo(r.Brokers), survivorsOnly),
				fmt.Sprintf("coordinator %d, brokers %v", r.CoordinatorID, brokersInfo(r.Brokers))
		})
		t.Logf("bridge %d leaves the dead bridge out of brokers_info %v after the kill", s.id, time.Since(killed))
		if r := legacyExchange(t, addr, &legacy.ConsultRequest{}).(*legacy.ConsultResponse); !slices.Equal(brokersInfo(r.Brokers), survivorsOnly) {
			t.Errorf("bridge %d: version 0 Consult lists %v, want %v", s.id, brokersInfo(r.Brokers), survivorsOnly)
		}
		v, err := askBridgesView(t, s.AdminAddr().String())
		if err != nil || v.NodeID != s.id || !slices.Equal(states(v), []string{"9001=live", "9002=live", "9003=unreachable"}) {
			t.Errorf("bridge %d: /bridges %+v (%v), want 9003 unreachable", s.id, v, err)
		}
		// The dead bridge's group is still its own: the answer names it (after the hold for a
		// coordinator that refuses connections) and lists it, as coordinator_id must be listed.
		r := legacyExchange(t, addr, &legacy.ConsultRequest{GroupID: deadGroup}).(*legacy.ConsultResponse)
		if r.ErrorCode != legacy.CodeNone || r.CoordinatorID != dead || !slices.Equal(brokersInfo(r.Brokers), all) {
			t.Errorf("bridge %d: Consult for the dead bridge's group: error %v, coordinator %d, brokers %v; want %d and %v",
				s.id, r.ErrorCode, r.CoordinatorID, brokersInfo(r.Brokers), dead, all)
		}
	}
	if ok, _, err := zk.Exists(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, dead)); err != nil || !ok {
		t.Fatalf("the dead bridge's registration is gone (%v) %v after the kill: the checks must come before the expiry", err, time.Since(killed))
	}

	zktest.Eventually(t, 3*session, "the dead bridge's registration gone", func() bool {
		ok, _, err := zk.Exists(t.Context(), zkstate.BridgePath(bridge.DefaultRoot, dead))
		return err == nil && !ok
	})
	next, _ := placement.Owner(deadGroup, ids[:2])
	for _, s := range survivors {
		zktest.Eventually(t, 5*time.Second, fmt.Sprintf("bridge %d names the group's next owner", s.id), func() (bool, string) {
			r := legacyExchange(t, s.LegacyAddr().String(), &legacy.ConsultRequest{GroupID: deadGroup}).(*legacy.ConsultResponse)
			return r.CoordinatorID == next && slices.Equal(brokersInfo(r.Brokers), survivorsOnly),
				fmt.Sprintf("coordinator %d, brokers %v", r.CoordinatorID, brokersInfo(r.Brokers))
		})
		if v, err := askBridgesView(t, s.AdminAddr().String()); err != nil || !slices.Equal(states(v), []string{"9001=live", "9002=live"}) {
			t.Errorf("bridge %d after the expiry: /bridges %v (%v)", s.id, states(v), err)
		}
	}
}
