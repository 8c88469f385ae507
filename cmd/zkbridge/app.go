package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/tlsconfig"
	"github.com/zkbridge/zkbridge/zkstate"
)

// Exit codes scripts can test.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed (unreachable ZooKeeper, unknown group, ...)
	exitUsage = 2 // the command line was wrong
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module's build
// info is used.
var version = ""

// env is what every command gets: its streams and the logger built from the global flags.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	log            zerolog.Logger
}

// usageError marks errors that are the caller's fault, so run can exit with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// run executes one zkbridge command line and returns the process exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, log: zerolog.Nop()}
	app := newApp(e)
	if err := app.RunContext(ctx, interspersed(app, args)); err != nil {
		fmt.Fprintf(stderr, "zkbridge: %v\n", err)
		var ce interface{ ExitCode() int } // codedError (migrate.go): blocked, refused
		if errors.As(err, &ce) {
			return ce.ExitCode()
		}
		var ue usageError
		if errors.As(err, &ue) || isFlagError(err) {
			return exitUsage
		}
		return exitError
	}
	return exitOK
}

// interspersed moves a leaf command's positional arguments after its flags, so
// `zkbridge groups describe billing --zk host:2181` works as people type it: urfave/cli, like Go's
// flag package, stops parsing flags at the first positional argument. A flag takes the next
// argument as its value unless it is a boolean flag of the command reached so far (or a help
// flag), which is what lets this walk tell a flag's value from a positional.
func interspersed(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	head := []string{args[0]}
	var tail []string
	cmds, flags := app.Commands, app.Flags
	leaf := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			tail = append(tail, args[i:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && len(a) > 1:
			head = append(head, a)
			if !strings.Contains(a, "=") && !isBoolFlag(flags, a) && i+1 < len(args) {
				i++
				head = append(head, args[i])
			}
		case leaf:
			tail = append(tail, a)
		default:
			sub := findCommand(cmds, a)
			if sub == nil {
				// not a command name: a positional of the command reached so far
				leaf = true
				tail = append(tail, a)
				continue
			}
			head = append(head, a)
			cmds, flags = sub.Subcommands, sub.Flags
			leaf = len(cmds) == 0
		}
	}
	if len(tail) > 0 && tail[0] != "--" {
		head = append(head, "--")
	}
	return append(head, tail...)
}

func isBoolFlag(flags []cli.Flag, a string) bool {
	name := strings.TrimLeft(a, "-")
	switch name {
	case "h", "help", "generate-bash-completion":
		return true
	}
	for _, f := range flags {
		if _, ok := f.(*cli.BoolFlag); !ok {
			continue
		}
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// isFlagError recognises urfave/cli's own parse errors, which are plain errors.
func isFlagError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "flag provided but not defined") ||
		strings.HasPrefix(s, "invalid value") ||
		strings.Contains(s, "Required flag") ||
		strings.HasPrefix(s, "flag needs an argument")
}

func newApp(e *env) *cli.App {
	app := &cli.App{
		Name:  "zkbridge",
		Usage: "move Kafka consumer groups from ZooKeeper-era consumers to broker-coordinated groups without stopping them",
		Description: "zkbridge runs next to an existing ZooKeeper ensemble. It hosts consumer groups in which\n" +
			"unmodified Kafka clients, legacy coordinator-protocol consumers and Kafka 0.8 ZooKeeper\n" +
			"consumers live together, and keeps ownership and offsets in the Kafka 0.8 ZooKeeper layout\n" +
			"(/consumers/<group>/ids|owners|offsets) so every kind of consumer and every 0.8-era tool sees the truth.",
		Writer:               e.stdout,
		ErrWriter:            e.stderr,
		Reader:               e.stdin,
		EnableBashCompletion: true,
		HideVersion:          true,
		// run prints errors and picks the exit code; urfave must never call os.Exit.
		ExitErrHandler: func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-format", Value: "console", Usage: "log format: console (for people) or json (for log pipelines)", EnvVars: []string{"ZKBRIDGE_LOG_FORMAT"}},
			&cli.StringFlag{Name: "log-level", Usage: "log level: trace, debug, info, warn, error (default: info for serve, warn for one-shot commands)", EnvVars: []string{"ZKBRIDGE_LOG_LEVEL"}},
		},
		Before: func(c *cli.Context) error {
			level := c.String("log-level")
			if level == "" {
				// A daemon narrates its life at info; a one-shot command speaks only when
				// something is wrong, so its output stays readable and scriptable.
				level = "warn"
				if c.Args().First() == "serve" {
					level = "info"
				}
			}
			l, err := newLogger(e.stderr, c.String("log-format"), level)
			if err != nil {
				return err
			}
			e.log = l
			return nil
		},
		Commands: []*cli.Command{
			versionCommand(e),
			withSubcommands(groupsCommand(e), groupsDeleteCommand(e)),
			bridgesCommand(e),
			withSubcommands(offsetsCommand(e), offsetsImportCommand(e), offsetsResetCommand(e), offsetsDeleteCommand(e)),
			migrateCommand(e),
			rollbackCommand(e),
			handoffCommand(e),
			repairCommand(e),
			demoCommand(e),
			legacyConsumerCommand(e),
			serveCommand(e),
		},
	}
	documentExits(app.Commands, "")
	return app
}

// withSubcommands adds subcommands defined in other files to a command.
func withSubcommands(c *cli.Command, subs ...*cli.Command) *cli.Command {
	c.Subcommands = append(c.Subcommands, subs...)
	return c
}

// newLogger builds the one logger of the process; it is passed down, never global.
func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), usagef("--log-level %q: want trace, debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	default:
		return zerolog.Nop(), usagef("--log-format %q: want console or json", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func versionCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print zkbridge's version and the Go toolchain that built it",
		Action: func(c *cli.Context) error {
			v, goV := buildVersion()
			fmt.Fprintf(e.stdout, "zkbridge %s (%s)\n", v, goV)
			return nil
		},
	}
}

func buildVersion() (v, goVersion string) {
	v = version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return orDev(v), "unknown"
	}
	if v == "" {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 && (v == "" || v == "(devel)") {
				v = "devel-" + s.Value[:12]
			}
		}
	}
	return orDev(v), bi.GoVersion
}

func orDev(v string) string {
	if v == "" || v == "(devel)" {
		return "devel"
	}
	return v
}

// zkFlags are the flags of every command that talks to ZooKeeper.
func zkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "zk", Value: "127.0.0.1:2181", EnvVars: []string{"ZKBRIDGE_ZK"},
			Usage: "ZooKeeper connect string, host:port[,host:port...][/chroot], as Kafka's zookeeper.connect"},
		&cli.DurationFlag{Name: "zk-timeout", Value: 10 * time.Second,
			Usage: "give up when no ZooKeeper session is established within this time"},
		&cli.StringFlag{Name: "zk-digest", EnvVars: []string{"ZKBRIDGE_ZK_DIGEST"},
			Usage: "ZooKeeper digest auth as user:password (optional)"},
		&cli.BoolFlag{Name: "zk-tls", EnvVars: []string{"ZKBRIDGE_ZK_TLS"},
			Usage: "connect to ZooKeeper over TLS: --zk must then name the servers' secureClientPort"},
		&cli.StringFlag{Name: "zk-tls-ca", EnvVars: []string{"ZKBRIDGE_ZK_TLS_CA"},
			Usage: "PEM CA file that vouches for the ZooKeeper servers (default: the system's roots)"},
		&cli.StringFlag{Name: "zk-tls-cert", EnvVars: []string{"ZKBRIDGE_ZK_TLS_CERT"},
			Usage: "PEM client certificate for servers with ssl.clientAuth=need"},
		&cli.StringFlag{Name: "zk-tls-key", EnvVars: []string{"ZKBRIDGE_ZK_TLS_KEY"},
			Usage: "PEM private key of --zk-tls-cert"},
	}
}

// zkTLS reads the --zk-tls flags: nil without --zk-tls.
func zkTLS(c *cli.Context) (*tlsconfig.Client, error) {
	t := tlsconfig.Client{CAFile: c.String("zk-tls-ca"), CertFile: c.String("zk-tls-cert"), KeyFile: c.String("zk-tls-key")}
	switch {
	case c.Bool("zk-tls"):
		return &t, nil
	case t != (tlsconfig.Client{}):
		return nil, usagef("--zk-tls-ca/-cert/-key need --zk-tls")
	}
	return nil, nil
}

// openStore connects to ZooKeeper with the command's flags, bounded by --zk-timeout.
func openStore(c *cli.Context, e *env) (*zkstate.Store, error) {
	timeout := c.Duration("zk-timeout")
	if timeout <= 0 {
		return nil, usagef("--zk-timeout must be positive")
	}
	cfg := zkstate.Config{
		Connect:        c.String("zk"),
		SessionTimeout: 10 * time.Second,
		Digest:         c.String("zk-digest"),
		Logger:         e.log,
	}
	t, err := zkTLS(c)
	if err != nil {
		return nil, err
	}
	if t != nil {
		if cfg.TLS, err = tlsconfig.NewClient(*t); err != nil {
			return nil, usagef("--zk-tls: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(c.Context, timeout)
	defer cancel()
	return zkstate.Open(ctx, cfg)
}

// outputFlag selects the printer: a table for people, JSON for scripts.
func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "output format: table or json"}
}
