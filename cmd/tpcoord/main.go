// Command tpcoord coordinates tensor-parallel decoding: one agent per
// accelerator card, rank 0 samples and broadcasts tokens over NATS, every
// rank stays in lockstep. See docs/ for the architecture and operations.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/rankproc"
	"github.com/tpcoord/tpcoord/internal/termlog"
)

// Exit codes. systemd's Restart=on-failure restarts on all but exitConfig
// (RestartPreventExitStatus in the unit), so a broken config does not loop.
const (
	exitOK       = 0
	exitFailure  = 1 // runtime error
	exitConfig   = 2 // bad flags, environment or config file
	exitPeerLost = 3 // another rank of the world died
	exitAborted  = 4 // lockstep could not be kept (gap, divergence, abort by rank 0)
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func configError(format string, a ...any) error {
	return &exitError{code: exitConfig, err: fmt.Errorf(format, a...)}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           programName,
		Short:         programShort,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version and -v print what the version command prints.
		Version: versionLine(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(suggestFlag)
	installHelp(root)
	root.Flags().BoolP("version", "v", false, "print the version, as the version command does")
	addCommands(root)
	return root
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	// A rank of launch's: its error goes to launch, which reports it. The
	// variable is not passed on (to a worker, say).
	causeFile := os.Getenv(rankproc.CauseFileEnv)
	_ = os.Unsetenv(rankproc.CauseFileEnv)
	root := newRootCmd()
	root.SetArgs(normalizeArgs(args))
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	// "tpcoord:" from either build: scripts match on it. An error already
	// reported (logged by launch, or written for it) is not repeated.
	if !reported(err) && !rankproc.WriteCause(causeFile, err) {
		fmt.Fprintf(stderr, "tpcoord: %v\n", err)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if strings.Contains(err.Error(), "unknown flag") || strings.Contains(err.Error(), "unknown command") ||
		strings.Contains(err.Error(), "invalid argument") || strings.Contains(err.Error(), "flag needs an argument") {
		return exitConfig
	}
	return exitFailure
}

// reported reports whether err says it was logged already.
func reported(err error) bool {
	var r interface{ Reported() bool }
	return errors.As(err, &r) && r.Reported()
}

// Log formats of --log-format; auto is the default of every command.
const (
	logFormatAuto  = "auto"
	logFormatText  = "text"
	logFormatJSON  = "json"
	logFormatUsage = "log format: auto (text on a terminal, else json), text or json"
)

// newLogger builds the process logger writing to w (stderr); level and
// format come from flags. auto is text when w is a terminal and JSON
// otherwise (a pipe, a file, the journal), so a person at a terminal reads
// lines and anything else gets records to parse. Text on a terminal is
// termlog's ("15:04:05.000 INFO  message key=value"), its levels in colour
// unless NO_COLOR is set (https://no-color.org); text elsewhere is slog's,
// whose lines carry the full date and time.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, configError("log-level: %q is not one of debug, info, warn, error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case logFormatAuto, logFormatText:
		if termlog.IsTerminal(w) {
			h := termlog.NewHandler(w, l)
			if os.Getenv("NO_COLOR") == "" {
				h = h.WithColor()
			}
			return slog.New(h), nil
		}
		if format == logFormatText {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case logFormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, configError("log-format: %q is not one of auto, text, json", format)
}

// versionLine is what `tpcoord version` and `tpcoord --version` print.
func versionLine() string {
	return fmt.Sprintf("tpcoord %s, wire protocol %d", buildinfo.Get(), broadcast.Version)
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit, the Go version and the wire protocol",
		Long: "Print the version, the commit it was built from (\"modified\" if the tree had\n" +
			"uncommitted changes), the Go version and platform, and the wire protocol.\n" +
			"Packages stamp the version at build time (scripts/package.sh); a plain go build\n" +
			"takes what the Go toolchain recorded from the checkout.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			i := buildinfo.Get()
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(buildinfo.Report{Info: i, WireProtocol: broadcast.Version})
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
