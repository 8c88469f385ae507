// Command zkbridge runs the zkbridge daemon and its operator commands. main only wires the
// process (signals, streams, exit code); everything else lives in run so tests drive it in process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
