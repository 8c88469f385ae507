package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/placement"
	"github.com/zkbridge/zkbridge/zkstate"
)

// bridgeRow is one running bridge as `zkbridge bridges` shows it.
type bridgeRow struct {
	NodeID    int32             `json:"node_id"`
	Kafka     string            `json:"kafka"`
	Legacy    string            `json:"legacy,omitempty"`
	Admin     string            `json:"admin"`
	Proxy     map[string]string `json:"proxy,omitempty"`
	Version   string            `json:"version,omitempty"`
	Placement int               `json:"placement"`
	// BrokerPlacement is the rule it serves upstream brokers by (0: one at a time, before the
	// balanced rule); every bridge uses the oldest one live.
	BrokerPlacement int    `json:"broker_placement,omitempty"`
	UpSince         string `json:"up_since"`
	Draining        bool   `json:"draining,omitempty"`
	// State is "live", "draining", or "unreachable": live, but a bridge asked sees it as dead
	// (its Kafka listener refuses connections; bridge.BridgeUnreachable) and leaves it out of
	// Metadata and brokers_info until its ZooKeeper session expires.
	State string `json:"state"`
	// UnreachableFrom lists the bridges asked that see it so.
	UnreachableFrom []int32 `json:"unreachable_from,omitempty"`
	// AdminError says why the bridge's own view could not be read from its admin listener
	// (GET /bridges): its view of the others is then not in their State.
	AdminError string `json:"admin_error,omitempty"`
	// Serves lists the upstream brokers whose proxy listener on this bridge clients are told
	// to use (the data path across bridges: placement.ServersBy over the bridges not draining).
	Serves []int32 `json:"serves_brokers,omitempty"`
	// GroupsOwned counts the groups whose epoch names the bridge (not released).
	GroupsOwned int `json:"groups_owned"`
	// Disagreements says how the bridge's registration makes its Metadata answers differ
	// from the other live bridges' (bridge.Disagreements): every bridge logs the same.
	Disagreements []string `json:"disagreements,omitempty"`
}

func bridgesCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "bridges",
		Usage: "list the running bridges of one service: node id, addresses, version, up since, groups owned, upstream brokers served (read-only)",
		Description: "Reads the registrations under <root>/bridges (one ephemeral per running bridge) and counts, for each,\n" +
			"the groups whose epoch (<root>/groups/<g>/epoch) names it: the groups it coordinates. With the data path,\n" +
			"BROKERS lists the upstream brokers clients reach through its proxy listeners (every bridge computes the same:\n" +
			"balanced, no bridge serving more than its share, once every live bridge's registration has broker_placement 2\n" +
			"(-o json shows it); one broker at a time, by its own ranking, while an older bridge runs).\n" +
			"A WARNING line follows for each live bridge whose registration makes its Metadata answers differ from the\n" +
			"others' (the data path on here and off there, an advertised host clients cannot be given alike).\n" +
			"STATE is live, draining, or unreachable: a bridge that another bridge finds dead (its Kafka listener refuses\n" +
			"connections), which the bridges leave out of Metadata and legacy brokers_info until its ZooKeeper session\n" +
			"expires; its groups stay its own until then. Each bridge's view comes from its admin listener (GET /bridges,\n" +
			"plain HTTP, the address in its registration, asked once per address): one that does not answer from here (it\n" +
			"listens on 127.0.0.1 by default, serves TLS, or is dead) gives no view, and a note line says so.",
		ArgsUsage: " ",
		Flags:     append(zkFlags(), outputFlag(), rootFlag()),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usagef("bridges takes no arguments")
			}
			format := c.String("output")
			if format != "table" && format != "json" && format != "" {
				return usagef("--output %q: want table or json", format)
			}
			s, err := openStore(c, e)
			if err != nil {
				return err
			}
			defer s.Close()
			rows, err := listBridges(c.Context, s, c.String("root"))
			if err != nil {
				return err
			}
			askViews(c.Context, rows) // bridges_views.go
			if format == "json" {
				if rows == nil {
					rows = []bridgeRow{}
				}
				return writeJSON(e.stdout, rows)
			}
			return printBridges(e.stdout, rows)
		},
	}
}

// listBridges reads every bridge registration and counts the groups each holds.
func listBridges(ctx context.Context, s *zkstate.Store, root string) ([]bridgeRow, error) {
	dir := zkstate.BridgesPath(root)
	ids, _, err := s.Children(ctx, dir)
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(ids))
	for i, id := range ids {
		paths[i] = dir + "/" + id
	}
	reads, err := s.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	var rows []bridgeRow
	var live []zkstate.BridgeRegistration
	for i, r := range reads {
		if r.Err != nil {
			continue // gone since the listing
		}
		reg, err := zkstate.ParseBridgeRegistration(r.Data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", paths[i], err)
		}
		row := bridgeRow{NodeID: reg.NodeID, Kafka: reg.KafkaAddr(), Legacy: reg.Legacy, Admin: reg.Admin, Version: reg.Software,
			Placement: reg.Placement, BrokerPlacement: reg.BrokerPlacement, Draining: reg.Draining, UpSince: time.UnixMilli(reg.StartedMs).UTC().Format(time.RFC3339)}
		for _, id := range reg.ProxyBrokers() {
			if row.Proxy == nil {
				row.Proxy = map[string]string{}
			}
			row.Proxy[strconv.Itoa(int(id))] = reg.Proxy[id]
		}
		rows = append(rows, row)
		if !reg.Draining {
			live = append(live, reg)
		}
	}
	for _, d := range bridge.Disagreements(live) {
		i := slices.IndexFunc(rows, func(r bridgeRow) bool { return r.NodeID == d.Node })
		rows[i].Disagreements = append(rows[i].Disagreements, d.Detail)
	}
	slices.SortFunc(rows, func(a, b bridgeRow) int { return int(a.NodeID) - int(b.NodeID) })
	owned, err := groupsHeld(ctx, s, root)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].GroupsOwned = owned[rows[i].NodeID]
	}
	placeBrokers(rows)
	for i := range rows {
		rows[i].State = bridge.BridgeLive
		if rows[i].Draining {
			rows[i].State = "draining"
		}
	}
	return rows, nil
}

// placeBrokers fills each row's Serves as every bridge computes it (bridge/peers.go): the upstream
// brokers the live bridges advertise a proxy listener for, placed by placement.ServersBy over the
// live bridges with the oldest broker rule they advertise.
func placeBrokers(rows []bridgeRow) {
	var live []int32
	listens := map[int32]map[int32]bool{}
	brokers := map[int32]bool{}
	rule := placement.BrokerVersion
	for _, r := range rows {
		if r.Draining {
			continue
		}
		live = append(live, r.NodeID)
		rule = min(rule, r.BrokerPlacement)
		listens[r.NodeID] = map[int32]bool{}
		for k := range r.Proxy {
			if id, err := strconv.ParseInt(k, 10, 32); err == nil {
				listens[r.NodeID][int32(id)], brokers[int32(id)] = true, true
			}
		}
	}
	served := placement.ServersBy(rule, slices.Collect(maps.Keys(brokers)), live, func(n, id int32) bool { return listens[n][id] })
	for _, id := range slices.Sorted(maps.Keys(served)) {
		i := slices.IndexFunc(rows, func(r bridgeRow) bool { return r.NodeID == served[id] })
		rows[i].Serves = append(rows[i].Serves, id)
	}
}

// groupsHeld counts, by node, the groups whose epoch names that bridge and is not released.
func groupsHeld(ctx context.Context, s *zkstate.Store, root string) (map[int32]int, error) {
	groups, _, err := s.Children(ctx, zkstate.BridgeGroupsPath(root))
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(groups))
	for i, g := range groups {
		paths[i] = zkstate.EpochPath(root, g)
	}
	reads, err := s.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	out := map[int32]int{}
	for _, r := range reads {
		if r.Err != nil {
			continue
		}
		if e, err := zkstate.ParseEpoch(r.Data); err == nil && !e.Released {
			out[e.NodeID]++
		}
	}
	return out, nil
}

// coordinatingBridge names the bridge that coordinates group among the live registrations
// (package placement), with whether it holds the group's epoch; "" when no bridge runs.
func coordinatingBridge(ctx context.Context, s *zkstate.Store, root, group string) (string, error) {
	rows, err := listBridges(ctx, s, root)
	if err != nil {
		return "", err
	}
	var live []int32
	addr := map[int32]string{}
	for _, r := range rows {
		if !r.Draining {
			live = append(live, r.NodeID)
			addr[r.NodeID] = r.Kafka
		}
	}
	owner, ok := placement.Owner(group, live)
	if !ok {
		return "", nil
	}
	return fmt.Sprintf("%d (%s)", owner, addr[owner]), nil
}

func printBridges(w io.Writer, rows []bridgeRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKAFKA\tLEGACY\tADMIN\tVERSION\tUP SINCE\tGROUPS\tBROKERS\tSTATE")
	for _, r := range rows {
		state := r.State
		if len(r.UnreachableFrom) > 0 {
			state += " (seen by " + joinIDs(r.UnreachableFrom) + ")"
		}
		var serves []string
		for _, id := range r.Serves {
			serves = append(serves, strconv.Itoa(int(id)))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.NodeID, r.Kafka, orDash(r.Legacy), r.Admin, orDash(r.Version), r.UpSince,
			r.GroupsOwned, orDash(strings.Join(serves, ",")), state)
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, strings.Repeat("-\t", 8)+"no bridge is running")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, d := range r.Disagreements {
			fmt.Fprintf(w, "WARNING: bridge %d %s\n", r.NodeID, d)
		}
	}
	for _, r := range rows {
		if r.AdminError != "" {
			fmt.Fprintf(w, "note: bridge %d's view is not in STATE: %s\n", r.NodeID, r.AdminError)
		}
	}
	return nil
}

// softwareVersion is the version a bridge advertises in its registration.
func softwareVersion() string {
	v, _ := buildVersion()
	return v
}
