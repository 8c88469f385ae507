package main

// Exit codes per command, stated once: the table below feeds every command's
// --help (documentExits appends it to the description) and the README's table is checked
// against it (TestExitCodesDocumented).

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// exitDoc is one exit code and what it means for one command.
type exitDoc struct {
	code    int
	meaning string
}

var (
	exitDone  = exitDoc{exitOK, "done (for a dry run: what --execute would do is possible)"}
	exitFail  = exitDoc{exitError, "failure: ZooKeeper or the brokers unreachable, an unknown group, a malformed record, an interrupted run (re-run it)"}
	exitBad   = exitDoc{exitUsage, "usage: a wrong flag or argument, contradicting flags"}
	readExits = []exitDoc{{exitOK, "done"}, exitFail, exitBad}
	stepExits = []exitDoc{exitDone, exitFail, exitBad,
		{exitBlocked, "blocked: a precondition holds a group back (members that must leave first), or another command changed the group at the same moment (look, then plan again)"},
		{exitRefused, "refused: impossible from the group's mode (a finalized group cannot be rolled back)"}}
)

// commandExits is every command's exit codes, by the command's path after zkbridge.
var commandExits = map[string][]exitDoc{
	"version":         readExits,
	"groups list":     readExits,
	"groups describe": readExits,
	"bridges":         readExits,
	"offsets export":  readExits,
	"migrate status":  readExits,
	"migrate plan": {{exitOK, "every group can go (or is there)"}, exitFail, exitBad,
		{exitBlocked, "a group is blocked by a precondition"}, {exitRefused, "a group is refused (never possible from its mode)"}},
	"migrate apply": stepExits,
	"rollback":      stepExits,
	"handoff": {exitDone, exitFail, exitBad,
		{exitBlocked, "blocked: the group has members (on a bridge or on the cluster), or the cluster holds an offset ahead of the bridge's (--force)"},
		{exitRefused, "refused: the group is not finalized"}},
	"offsets import": {exitDone, exitFail, exitBad,
		{exitBlocked, "blocked: an active group would move backwards (--force), or a consumer committed in between (run it again)"}},
	"offsets reset": {exitDone, exitFail, exitBad,
		{exitBlocked, "blocked: the group has members (--force), or a consumer committed in between (run it again)"}},
	"offsets delete": {exitDone, exitFail, exitBad,
		{exitBlocked, "blocked: the group has members (--force), or it changed while deleting (run it again)"}},
	"groups delete": {exitDone, {exitError, "failure: a group ZooKeeper does not know, one too big for a single ZooKeeper request, ZooKeeper unreachable"}, exitBad,
		{exitBlocked, "blocked: a group is not empty (members of any kind), or it changed while deleting (nothing deleted; run it again)"}},
	"repair": {{exitOK, "done, or nothing to repair (for a dry run: what --execute would do is possible)"}, exitFail,
		{exitUsage, "usage: a wrong flag or argument; --mode missing for a corrupt mode record"},
		{exitBlocked, "blocked: a record changed since it was read (look again)"}},
	"demo":            {{exitOK, "the demo ran"}, {exitError, "a step of the demo failed"}, exitBad},
	"legacy-consumer": {{exitOK, "stopped by a signal"}, {exitError, "the coordinator refused or lost the consumer"}, exitBad},
	"serve":           {{exitOK, "stopped by a signal, drained"}, {exitError, "could not start or serve (a listener, ZooKeeper)"}, exitBad},
}

// exitHelp is the "Exit codes:" section of a command's --help.
func exitHelp(docs []exitDoc) string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, d := range docs {
		fmt.Fprintf(&b, "\n   %d  %s", d.code, d.meaning)
	}
	return b.String()
}

// documentExits appends its exit codes to the description of every leaf command under cmds
// that does not document them itself.
func documentExits(cmds []*cli.Command, prefix string) {
	for _, c := range cmds {
		path := strings.TrimSpace(prefix + " " + c.Name)
		if len(c.Subcommands) > 0 {
			documentExits(c.Subcommands, path)
			continue
		}
		if strings.Contains(c.Description, "Exit codes:") {
			continue
		}
		docs, ok := commandExits[path]
		if !ok {
			docs = readExits
		}
		if c.Description != "" {
			c.Description += "\n\n"
		}
		c.Description += exitHelp(docs)
	}
}
