package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// printer renders command results; commands build values and never format them.
type printer interface {
	groups(w io.Writer, rows []groupRow) error
	group(w io.Writer, v groupView) error
	offsets(w io.Writer, rows []offsetRow) error
}

func newPrinter(format string) (printer, error) {
	switch format {
	case "table", "":
		return tablePrinter{}, nil
	case "json":
		return jsonPrinter{}, nil
	}
	return nil, usagef("--output %q: want table or json", format)
}

type groupRow struct {
	Group   string `json:"group"`
	Members int    `json:"members"`
	// Lag is the group's total lag, when the brokers are known (lag.go).
	Lag *int64 `json:"lag,omitempty"`
}

type offsetRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

type jsonPrinter struct{}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (jsonPrinter) groups(w io.Writer, rows []groupRow) error {
	if rows == nil {
		rows = []groupRow{}
	}
	return writeJSON(w, rows)
}
func (jsonPrinter) group(w io.Writer, v groupView) error { return writeJSON(w, v) }
func (jsonPrinter) offsets(w io.Writer, rows []offsetRow) error {
	if rows == nil {
		rows = []offsetRow{}
	}
	return writeJSON(w, rows)
}

type tablePrinter struct{}

func (tablePrinter) groups(w io.Writer, rows []groupRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	lag := slices.ContainsFunc(rows, func(r groupRow) bool { return r.Lag != nil })
	if lag {
		fmt.Fprintln(tw, "GROUP\tMEMBERS\tLAG")
	} else {
		fmt.Fprintln(tw, "GROUP\tMEMBERS")
	}
	for _, r := range rows {
		if lag {
			fmt.Fprintf(tw, "%s\t%d\t%s\n", r.Group, r.Members, int64Cell(r.Lag))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\n", r.Group, r.Members)
	}
	return tw.Flush()
}

func (tablePrinter) group(w io.Writer, v groupView) error {
	fmt.Fprintf(w, "Group %s: %d members, %d partitions, %d unowned\n\n", v.Group, len(v.Members), len(v.Partitions), len(v.Unowned))
	if v.Coordinator != "" {
		fmt.Fprintf(w, "Coordinator: bridge %s\n\n", v.Coordinator)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tKIND\tPATTERN\tSUBSCRIPTION\tOWNED")
	for _, m := range v.Members {
		sub := subscriptionString(m.Subscription)
		if m.Registering {
			sub = "(registering)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Kind, m.Pattern, sub, orDash(compactRanges(m.Owned)))
	}
	if len(v.Members) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	withLag := slices.ContainsFunc(v.Partitions, func(p partitionView) bool { return p.LogEnd != nil })
	if withLag {
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tOWNER\tOFFSET\tLOG-END-OFFSET\tLAG")
	} else {
		fmt.Fprintln(tw, "TOPIC\tPARTITION\tOWNER\tOFFSET")
	}
	for _, p := range v.Partitions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s", p.Topic, p.Partition, orDash(p.Owner), int64Cell(p.Offset))
		if withLag {
			fmt.Fprintf(tw, "\t%s\t%s", int64Cell(p.LogEnd), int64Cell(p.Lag))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if withLag {
		fmt.Fprintf(w, "\nTotal lag: %d\n", totalLag(v.Partitions))
	}
	fmt.Fprintf(w, "\nUnowned partitions: %s\n", orNone(compactRanges(v.Unowned)))
	if len(v.StaleOwners) > 0 {
		fmt.Fprintf(w, "Owners whose consumer is not registered: %s\n", strings.Join(v.StaleOwners, "; "))
	}
	if len(v.MissingTopics) > 0 {
		fmt.Fprintf(w, "Topics not in /brokers/topics: %s\n", strings.Join(v.MissingTopics, ", "))
	}
	if len(v.Problems) > 0 {
		fmt.Fprintf(w, "Problems (%d):\n", len(v.Problems))
		for _, p := range v.Problems {
			fmt.Fprintf(w, "  %s: %s\n", p.Path, p.Error)
		}
	}
	return nil
}

func (tablePrinter) offsets(w io.Writer, rows []offsetRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSET")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", r.Topic, r.Partition, r.Offset)
	}
	return tw.Flush()
}

func subscriptionString(s map[string]int) string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, s[k])
	}
	return orDash(strings.Join(parts, ","))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
