package group

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The scenario files in testdata/mixed/*.txt drive one Machine with Kafka and legacy members,
// as a mixed group's host steps it. Kafka commands are those of datadriven_test.go (reload
// included); legacy commands are those of legacy_datadriven_test.go behind "legacy" (legacy
// register a auto). Every step prints its own kind's output as those files do, then the other
// kind's effects and state line, so that a Kafka event that fires a legacy timer (or the other
// way round) shows it. Further commands:
//
//	new [delay=0s]   Kafka defaults with that initial delay, legacy defaults of the legacy files
//	reset-kafka      Machine.ResetKafka: prints the wake it returns and both state lines
//	reset-legacy     Machine.ResetLegacy: the same
//
// Every step is checked by the Kafka invariants and the legacy ordering model (legacyModel).
func TestMixedScenarios(t *testing.T) {
	runScenarioFiles(t, "testdata/mixed/*.txt", runMixedScenario)
}

func runMixedScenario(t *testing.T, path string) {
	h := &legacyHarness{harness: harness{t: t, cfg: DefaultConfig(), now: t0}}
	h.m = New(h.cfg, "g")
	h.model = newLegacyModel()
	playScenario(t, path, func(b block) string { return h.runMixed(b.cmd) })
}

func (h *legacyHarness) runMixed(line string) (out string) {
	defer h.recoverCommand(line, &out)
	cmd, rest, _ := strings.Cut(line, " ")
	switch cmd {
	case "new":
		_, _, kv := args(line)
		h.cfg = DefaultConfig()
		h.cfg.InitialRebalanceDelay = 0
		if v, ok := kv["delay"]; ok {
			h.cfg.InitialRebalanceDelay = h.dur(v)
		}
		h.cfg.Legacy = LegacyConfig{RetryBackoff: 100 * time.Millisecond, RetryBackoffMax: time.Second}
		h.m, h.now, h.wake, h.claim, h.token = New(h.cfg, "g"), t0, time.Time{}, 0, 0
		h.zk, h.pending, h.version = nil, nil, 0
		h.model = newLegacyModel()
		return "ok"
	case "reset-kafka":
		h.wake = h.m.ResetKafka()
		h.pending = nil
		if err := h.m.checkInvariants(); err != nil {
			h.t.Errorf("invariant broken after reset-kafka: %v", err)
		}
		return strings.Join([]string{h.stateLine(), h.legacyStateLine(h.wake)}, "\n")
	case "reset-legacy":
		h.wake = h.m.ResetLegacy()
		h.model = newLegacyModel()
		if err := h.m.checkInvariants(); err != nil {
			h.t.Errorf("invariant broken after reset-legacy: %v", err)
		}
		return strings.Join([]string{h.stateLine(), h.legacyStateLine(h.wake)}, "\n")
	case "legacy":
		if strings.HasPrefix(rest, "new") {
			h.fail("legacy new: use new")
		}
		out := h.legacyStep(rest)
		if h.fx.Persist != nil {
			rec := *h.fx.Persist
			h.pending = &rec
		}
		lines := append([]string{out}, kafkaEffectLines(h.fx)...)
		if err := h.m.checkInvariants(); err != nil {
			h.t.Errorf("invariant broken after %q: %v", line, err)
		}
		return strings.Join(append(lines, h.stateLine()), "\n")
	}
	out = h.step(line)
	if cmd == "state" {
		return out
	}
	if err := h.model.check(h.ev, h.fx); err != nil {
		h.t.Errorf("%s: ordering rule broken: %v", line, err)
	}
	if h.fx.Legacy.Claim != nil {
		h.claim = h.fx.Legacy.Claim.Claim
	}
	lines := append([]string{out}, legacyEffectLines(h.fx)...)
	return strings.Join(append(lines, h.legacyStateLine(h.wake)), "\n")
}

// kafkaEffectLines are the lines of fx's Kafka effects (replies, writes, assignments), logs left
// out.
func kafkaEffectLines(fx Effects) []string {
	var out []string
	for _, r := range fx.Replies {
		out = append(out, formatReply(r))
	}
	if fx.Persist != nil {
		out = append(out, "persist "+formatRecord(*fx.Persist))
	}
	if len(fx.Offsets) > 0 {
		var s []string
		for _, o := range fx.Offsets {
			s = append(s, fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.Offset))
		}
		out = append(out, "offsets "+strings.Join(s, " "))
	}
	if a := fx.Assign; a != nil {
		out = append(out, fmt.Sprintf("assign gen=%d members=%d", a.Generation, len(a.Members)))
	}
	return out
}

// TestResetKafkaActsAsNew checks that after ResetKafka a machine serves Kafka members exactly as
// a machine made by New does, whatever Kafka state it had, while its legacy members (idle, their
// next pings due later) carry on: the same Kafka events give the same replies, writes and logs.
func TestResetKafkaActsAsNew(t *testing.T) {
	before := [][]string{
		{},
		{"join new=k1", "persisted", "sync m=k1 gen=1 assign=k1:p0", "persisted", "commit m=k1 gen=1 offsets=t/0@5"},
		{"join new=k1", "join new=k2 inst=i2", "persisted"},
		{"join new=k1", "persisted", "persist-fail"},
		{"assign-mode server", "join new=k1"},
	}
	after := []string{
		"join new=k1", "join new=x inst=ix", "persisted", "describe",
		"sync m=k1 gen=1 assign=k1:a,x:b", "persisted", "commit m=x gen=1 offsets=t/1@7", "persisted",
		"hb m=x gen=1", "leave k1", "persisted",
	}
	for i, pre := range before {
		reset := &legacyHarness{harness: harness{t: t}}
		fresh := &legacyHarness{harness: harness{t: t}}
		for _, h := range []*legacyHarness{reset, fresh} {
			h.runMixed("new")
		}
		for _, l := range []string{"legacy register a", "legacy checked needed", "legacy answer a stop",
			"legacy claimed written", "legacy answer a start"} {
			reset.runMixed(l)
		}
		for _, l := range pre {
			reset.runMixed(l)
		}
		reset.m.ResetKafka()
		reset.token, reset.zk, reset.pending, reset.version = 0, nil, nil, 0
		for _, l := range after {
			reset.runMixed(l)
			fresh.runMixed(l)
			got, want := kafkaOutput(reset.fx), kafkaOutput(fresh.fx)
			if got != want {
				t.Errorf("history %d, %s: after ResetKafka:\n%s\nfrom New:\n%s", i, l, got, want)
			}
			if got, want := reset.stateLine(), fresh.stateLine(); strings.Split(got, " wake=")[0] != strings.Split(want, " wake=")[0] {
				t.Errorf("history %d, %s: after ResetKafka %s, from New %s", i, l, got, want)
			}
		}
		if got := reset.m.LegacyMembers(); len(got) != 1 || got[0] != "a" || reset.m.LegacyPhase() != LegacyIdle {
			t.Errorf("history %d: legacy members %v in phase %v after the reset, want [a] idle", i, got, reset.m.LegacyPhase())
		}
	}
}

func kafkaOutput(fx Effects) string {
	out := kafkaEffectLines(fx)
	for _, l := range fx.Logs {
		out = append(out, "log: "+l.Msg+" ["+string(l.Member)+"] ("+l.Reason+")")
	}
	return strings.Join(out, "\n")
}
