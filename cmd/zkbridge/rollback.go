package main

import (
	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// rollbackCommand moves one group back one step at a time: kafka → mixed → legacy, never out of
// finalized. It is migrate apply with Request.Rollback, for one group.
func rollbackCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "rollback",
		Usage:     "move a group back: kafka → mixed → legacy (one step, or to --to); finalized groups cannot be rolled back",
		ArgsUsage: " ",
		Description: "Without --to the group goes one step back from its mode. kafka → mixed always works:\n" +
			"mixed admits Kafka members too, and the bridges go back to assigning with the 0.8\n" +
			"algorithm so legacy and 0.8 consumers can rejoin. mixed → legacy needs the group's Kafka\n" +
			"members gone (--wait D waits for them), or --force: the running bridges then rebalance\n" +
			"the Kafka members out of the group and refuse them; their partitions are released and\n" +
			"their last commits kept. Until a group is finalized ZooKeeper holds its ownership and\n" +
			"offsets, which is what makes a rollback lossless; a finalized group is refused, with the\n" +
			"reason. Each step is one compare-and-set, recorded with who and when (a forced step\n" +
			"records what it forced past). A dry run unless --execute.\n\n" + modesHelp,
		Flags: writeFlags("roll the group back",
			&cli.StringFlag{Name: "group", Aliases: []string{"g"}, Usage: "the group to roll back (required)"},
			&cli.StringFlag{Name: "to", Usage: "mixed or legacy (default: one step back)"},
			&cli.BoolFlag{Name: "force", Usage: "go to legacy even though Kafka members remain: the bridges rebalance them out and refuse them (their last commits are kept)"},
			&cli.DurationFlag{Name: "wait", Usage: "how long to wait for the Kafka members blocking a step to legacy to leave"},
			whoFlag(), modesRootFlag(), outputFlag()),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("rollback takes no arguments (use --group)")
			}
			group := c.String("group")
			if group == "" {
				return usagef("rollback: --group is required")
			}
			var target zkstate.Mode
			if c.IsSet("to") {
				m, err := zkstate.ParseMode(c.String("to"))
				if err != nil || (m != zkstate.ModeMixed && m != zkstate.ModeLegacy) {
					return usagef("rollback --to %q: want mixed or legacy", c.String("to"))
				}
				target = m
			} else {
				// One step back from the group's mode: read it first.
				s, err := openStore(c, e)
				if err != nil {
					return err
				}
				groups, err := migrate.Select(c.Context, s, c.String("root"), migrate.Selector{Groups: []string{group}})
				if err != nil {
					s.Close()
					return err
				}
				cen, err := migrate.ReadCensus(c.Context, s, c.String("root"), groups[0], migrate.CensusOptions{})
				s.Close()
				if err != nil {
					return err
				}
				switch cen.Mode {
				case zkstate.ModeLegacy:
					return codedError{exitRefused, "rollback: group " + group + " is in legacy mode, the first one: there is nothing to roll back to"}
				case zkstate.ModeMixed:
					target = zkstate.ModeLegacy
				case zkstate.ModeKafka:
					target = zkstate.ModeMixed
				case zkstate.ModeFinalized:
					target = zkstate.ModeKafka // refused by the plan, which says why
				}
			}
			if c.Duration("wait") < 0 {
				return usagef("--wait must not be negative")
			}
			dry, err := dryRun(c, e)
			if err != nil {
				return err
			}
			opts := migrate.ApplyOptions{
				Request:  migrate.Request{Target: target, Rollback: true, Force: c.Bool("force")},
				Wait:     c.Duration("wait"),
				DryRun:   dry,
				Parallel: 1,
			}
			return runApply(c, e, migrate.Selector{Groups: []string{group}}, opts)
		},
	}
}
