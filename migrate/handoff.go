package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/zkbridge/zkbridge/zkstate"
)

// A handoff, the last step of a migration, gives a finalized group's offsets to a real Kafka cluster's own
// group coordinator, after which its consumers point at that cluster instead of a bridge. The
// Kafka side is the command's (cmd/zkbridge/handoff.go); what is recorded in ZooKeeper is here:
//
//	<root>/groups/<g>/handoff/h-<10 digits>   JSON Handoff, one per handoff, never rewritten
//
// numbered like the mode transitions, so a second handoff (to another cluster, or again after
// consumers came back) does not overwrite the first.

// Handoff is the JSON of one handoff record:
//
//	{"version":1,"seq":1,"by":"ops@laptop","at_ms":"1700000000000","bootstrap":"kafka-1:9092","offsets":24}
type Handoff struct {
	Seq       int32  `json:"seq"`
	By        string `json:"by"`
	AtMs      int64  `json:"at_ms"`
	Bootstrap string `json:"bootstrap"`
	Offsets   int    `json:"offsets"`
}

type handoffJSON struct {
	Version   int    `json:"version"`
	Seq       int32  `json:"seq"`
	By        string `json:"by"`
	AtMs      string `json:"at_ms"`
	Bootstrap string `json:"bootstrap"`
	Offsets   int    `json:"offsets"`
}

// Encode writes the record's JSON (the time as a string of milliseconds, as every record of
// the project writes it).
func (h Handoff) Encode() []byte {
	b, _ := json.Marshal(handoffJSON{Version: 1, Seq: h.Seq, By: h.By, AtMs: strconv.FormatInt(h.AtMs, 10), Bootstrap: h.Bootstrap, Offsets: h.Offsets})
	return b
}

// ParseHandoff reads one handoff record. Errors wrap zkstate.ErrMalformed.
func ParseHandoff(data []byte) (Handoff, error) {
	var j handoffJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return Handoff{}, fmt.Errorf("%w: handoff: %v", zkstate.ErrMalformed, err)
	}
	ms, err := strconv.ParseInt(j.AtMs, 10, 64)
	if err != nil || j.Version < 1 {
		return Handoff{}, fmt.Errorf("%w: handoff version %d at_ms %q", zkstate.ErrMalformed, j.Version, j.AtMs)
	}
	return Handoff{Seq: j.Seq, By: j.By, AtMs: ms, Bootstrap: j.Bootstrap, Offsets: j.Offsets}, nil
}

// HandoffsPath is <root>/groups/<group>/handoff.
func HandoffsPath(root, group string) string {
	return path.Join(zkstate.BridgeGroupPath(root, group), "handoff")
}

// HandoffPath is <root>/groups/<group>/handoff/h-<seq, 10 digits>.
func HandoffPath(root, group string, seq int32) string {
	return path.Join(HandoffsPath(root, group), fmt.Sprintf("h-%010d", seq))
}

// ReadHandoffs returns the group's handoff records, oldest first.
func ReadHandoffs(ctx context.Context, s *zkstate.Store, root, group string) ([]Handoff, error) {
	names, _, err := s.Children(ctx, HandoffsPath(root, group))
	if errors.Is(err, zkstate.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("migrate: handoffs of group %q: %w", group, err)
	}
	var kept []string
	for _, n := range names {
		if strings.HasPrefix(n, "h-") {
			kept = append(kept, n)
		}
	}
	out := make([]Handoff, len(kept))
	errs := make([]error, len(kept))
	parallel(ctx, len(kept), func(i int) {
		data, _, err := s.Get(ctx, path.Join(HandoffsPath(root, group), kept[i]))
		if err == nil {
			out[i], err = ParseHandoff(data)
		}
		errs[i] = err
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("migrate: handoffs of group %q: %w", group, err)
	}
	return out, nil // Children sorts by name, and the names are zero-padded numbers
}

// RecordHandoff records a handoff of the group (h.Seq is chosen here) in one multi that also
// checks that the group's mode record is still at modeVersion: a handoff is recorded only for
// the finalized group the caller looked at.
func RecordHandoff(ctx context.Context, s *zkstate.Store, root, group string, h Handoff, modeVersion int32) (Handoff, error) {
	for range 3 {
		prev, err := ReadHandoffs(ctx, s, root, group)
		if err != nil {
			return Handoff{}, err
		}
		h.Seq = 1
		if len(prev) > 0 {
			h.Seq = prev[len(prev)-1].Seq + 1
		}
		err = s.MultiAtomic(ctx,
			zkstate.CheckOp(zkstate.ModePath(root, group), modeVersion),
			zkstate.CreateOp(HandoffPath(root, group, h.Seq), h.Encode(), zkstate.CreateOptions{Parents: true}))
		var me *zkstate.MultiError
		if errors.As(err, &me) && me.Index == 1 && errors.Is(err, zkstate.ErrNodeExists) {
			continue // a concurrent handoff took the number
		}
		if err != nil {
			return Handoff{}, fmt.Errorf("migrate: record handoff of group %q: %w", group, err)
		}
		return h, nil
	}
	return Handoff{}, fmt.Errorf("migrate: record handoff of group %q: concurrent handoffs keep taking the next number", group)
}
