package main

// One convention for every command that writes: a dry run by default, writes
// only with --execute — kafka-consumer-groups's convention, which `offsets import` already
// followed. --dry-run stays on every such command: it is the default spelled out (as
// kafka-consumer-groups keeps it), so the scripts written when `migrate apply`, `rollback` and
// `handoff` wrote by default and took --dry-run keep working; it only silences the notice below.
//
// A bare write command (neither flag) is a dry run that says so loudly, on stderr (so that
// `-o json` output stays clean) and under its table: an operator used to the old default sees
// at once that nothing happened. Its exit code is the dry run's (what the real run would
// answer), as kafka-consumer-groups exits 0 after its own warning.

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/zkstate"
)

// writeFlags are a write command's flags: ZooKeeper's, --execute and --dry-run (what is the
// command's own description of a write), then its own.
func writeFlags(what string, own ...cli.Flag) []cli.Flag {
	return append(append(zkFlags(),
		&cli.BoolFlag{Name: "execute", Usage: what + " (without it: a dry run that shows what would change and writes nothing)"},
		&cli.BoolFlag{Name: "dry-run", Usage: "show what would change and write nothing: the default; kept for scripts written when this command wrote by default"},
	), own...)
}

// openWrite starts a write command's work once its arguments are checked: it reads --execute
// and --dry-run (dryRun) and opens the store, which the caller closes.
func openWrite(c *cli.Context, e *env) (s *zkstate.Store, dry bool, err error) {
	if dry, err = dryRun(c, e); err != nil {
		return nil, false, err
	}
	if s, err = openStore(c, e); err != nil {
		return nil, false, err
	}
	return s, dry, nil
}

// dryRun reads the two flags: --execute writes, anything else is a dry run; both at once is a
// usage error. A bare command gets the notice on stderr.
func dryRun(c *cli.Context, e *env) (bool, error) {
	exec, dry := c.Bool("execute"), c.Bool("dry-run")
	switch {
	case exec && dry:
		return false, usagef("%s: --execute and --dry-run contradict each other", commandPath(c))
	case exec:
		return false, nil
	case !dry:
		fmt.Fprintf(e.stderr, "zkbridge: %s\n", bareNotice(commandPath(c)))
	}
	return true, nil
}

// bareNotice is what a write command without --execute says about itself.
func bareNotice(cmd string) string {
	return fmt.Sprintf("DRY RUN: nothing written. %s writes only with --execute (add --dry-run to silence this notice)", cmd)
}

// dryRunFooter is the last line of a dry run's table.
func dryRunFooter(cmd string) string {
	return fmt.Sprintf("Dry run: nothing was written. Run `zkbridge %s ... --execute` to write it.", strings.TrimPrefix(cmd, "zkbridge "))
}

// commandPath is the command's name as typed after zkbridge ("migrate apply").
func commandPath(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" && x.Command.Name != x.App.Name {
			names = append([]string{x.Command.Name}, names...)
		}
	}
	return strings.Join(names, " ")
}
