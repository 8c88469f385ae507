package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/bridge"
)

// adminAskTimeout bounds one GET of a bridge's admin /bridges.
const adminAskTimeout = 2 * time.Second

// askViews asks each live bridge's admin listener for the live bridges as it sees them
// (bridge.BridgesView), once per registered admin address, and marks every bridge that one of
// them sees as unreachable. An answer counts for the bridge that says it answered: with the
// default admin address (127.0.0.1:9191) every registration names the same one, which reaches
// the bridge on this host only.
func askViews(ctx context.Context, rows []bridgeRow) {
	byAddr := map[string][]int{}
	for i, r := range rows {
		if !r.Draining {
			byAddr[r.Admin] = append(byAddr[r.Admin], i)
		}
	}
	type answer struct {
		v   bridge.BridgesView
		err error
	}
	answers := make(map[string]answer, len(byAddr))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for addr := range byAddr {
		wg.Go(func() {
			v, err := askView(ctx, addr)
			mu.Lock()
			defer mu.Unlock()
			answers[addr] = answer{v, err}
		})
	}
	wg.Wait()
	seen := map[int32]bool{} // the bridges whose view was read
	for _, addr := range slices.Sorted(maps.Keys(answers)) {
		a := answers[addr]
		for _, i := range byAddr[addr] {
			switch {
			case a.err != nil:
				rows[i].AdminError = fmt.Sprintf("its admin listener %s did not answer: %v", addr, a.err)
			case a.v.NodeID != rows[i].NodeID:
				rows[i].AdminError = fmt.Sprintf("its admin address %s answered as bridge %d", addr, a.v.NodeID)
			}
		}
		if a.err != nil || seen[a.v.NodeID] {
			continue
		}
		seen[a.v.NodeID] = true
		for _, b := range a.v.Bridges {
			if b.State != bridge.BridgeUnreachable {
				continue
			}
			if i := slices.IndexFunc(rows, func(r bridgeRow) bool { return r.NodeID == b.NodeID }); i >= 0 {
				rows[i].UnreachableFrom = append(rows[i].UnreachableFrom, a.v.NodeID)
			}
		}
	}
	for i := range rows {
		if len(rows[i].UnreachableFrom) > 0 {
			slices.Sort(rows[i].UnreachableFrom)
			if !rows[i].Draining {
				rows[i].State = bridge.BridgeUnreachable
			}
		}
	}
}

// askView reads GET http://<addr>/bridges.
func askView(ctx context.Context, addr string) (bridge.BridgesView, error) {
	ctx, cancel := context.WithTimeout(ctx, adminAskTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/bridges", nil)
	if err != nil {
		return bridge.BridgesView{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = ue.Err // the URL is in the message already
	}
	if err != nil {
		return bridge.BridgesView{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return bridge.BridgesView{}, fmt.Errorf("GET /bridges: %s", resp.Status)
	}
	var v bridge.BridgesView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return bridge.BridgesView{}, fmt.Errorf("GET /bridges: %w", err)
	}
	return v, nil
}

// joinIDs is ids as "9001,9002".
func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}
