package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/inspect/etcdowners"
	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/connect"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
	exitRefused  = 4
	// exitPartial: the result was printed without some shards, which
	// could not be read (corrupt data); stderr names them.
	exitPartial = 5
)

// Sentinel errors mapped to exit codes.
var (
	errUsage   = errors.New("usage")
	errRefused = errors.New("refused")
)

// kindError is an error of a kind (errUsage, errRefused) that reads as
// its message alone: the exit code tells the kind, and stderr says what
// happened once ("hourglass: -o \"yaml\": want table or json", not
// "hourglass: usage: ...").
type kindError struct{ kind, err error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// ofKind returns err as an error of kind.
func ofKind(kind, err error) error { return &kindError{kind: kind, err: err} }

// usagef returns a usage error (exit 2).
func usagef(format string, args ...any) error { return ofKind(errUsage, fmt.Errorf(format, args...)) }

// refusedf returns a refusal (exit 4).
func refusedf(format string, args ...any) error {
	return ofKind(errRefused, fmt.Errorf(format, args...))
}

// app is one invocation: its flags, streams and lazily built clients.
type app struct {
	in          io.Reader
	out, errOut io.Writer

	configPath string
	sets       []string
	output     string
	timeout    time.Duration
	yes        bool

	cfg    *config.Config
	insp   *inspect.Inspector
	closer []func()
}

// run executes the command line args and returns the exit code.
func run(args []string, in io.Reader, out, errOut io.Writer) int {
	a := &app{in: in, out: out, errOut: errOut}
	defer a.close()
	root := a.rootCmd()
	root.SetArgs(goFlags(args))
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(errOut, "hourglass: %s\n", errText(err))
	return exitCode(err)
}

// singleDash are the flags the scheduler and worker binaries take with one
// dash (Go's flag package); pflag would read "-config" as "-c onfig".
var singleDash = []string{"config", "set", "version"}

// goFlags returns args with -config, -set and -version (and their
// -name=value forms) spelled with two dashes, up to a "--", so that
// command lines written for the other binaries work here too.
func goFlags(args []string) []string {
	out := slices.Clone(args)
	for i, arg := range out {
		if arg == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "-"), "=")
		if strings.HasPrefix(arg, "-") && !strings.HasPrefix(arg, "--") && slices.Contains(singleDash, name) {
			out[i] = "-" + arg
		}
	}
	return out
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	switch {
	case strings.HasPrefix(err.Error(), "unknown command"): // cobra's
		return exitUsage
	case errors.Is(err, errUsage), errors.Is(err, config.ErrInvalid), errors.Is(err, inspect.ErrInvalidArgument):
		return exitUsage
	case errors.Is(err, inspect.ErrNotFound):
		return exitNotFound
	case errors.Is(err, errRefused), errors.Is(err, inspect.ErrActive), errors.Is(err, inspect.ErrDead), errors.Is(err, inspect.ErrResizeRunning):
		return exitRefused
	case errors.Is(err, inspect.ErrPartial):
		return exitPartial
	}
	return exitFailed
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "hourglass",
		Short: "Administer an Hourglass deployment",
		Long: `Administer an Hourglass deployment: queues, tasks, dead letters, shards,
periodic schedules.

Reads the same configuration as the scheduler and worker: --config FILE,
HOURGLASS_* environment variables, --set key=value (in rising precedence).

Exit codes: 0 done, 1 failed, 2 usage error, 3 not found, 4 refused
(a running task, an operation that asks not confirmed: without a
terminal, pass --yes; or a resize while another change of the shard
count runs).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionString(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "table" && a.output != "json" {
				return usagef("-o %q: want table or json", a.output)
			}
			return nil
		},
	}
	f := root.PersistentFlags()
	f.StringVarP(&a.configPath, "config", "c", "", "YAML configuration file (as the scheduler's)")
	f.StringArrayVar(&a.sets, "set", nil, "set one config key, key=value; repeatable")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&a.timeout, "timeout", 30*time.Second, "bound of each Redis or etcd call")
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return ofKind(errUsage, err) })
	root.AddCommand(a.queueCmd(), a.taskCmd(), a.dlqCmd(), a.shardsCmd(), a.schedulesCmd(), a.scheduleCmd(), a.statsCmd(), a.psCmd(), a.versionCmd())
	return root
}

// load reads the configuration once.
func (a *app) load() (*config.Config, error) {
	if a.cfg != nil {
		return a.cfg, nil
	}
	var args []string
	if a.configPath != "" {
		args = append(args, "-config", a.configPath)
	}
	for _, s := range a.sets {
		args = append(args, "-set", s)
	}
	cfg, err := config.Load(args, os.Environ())
	if err != nil { // a bad file, key or value: exit 2, as the other binaries
		return nil, ofKind(errUsage, err)
	}
	a.cfg = cfg
	// go-redis logs failed dials itself; the command reports the error.
	connect.Logger(config.LogConfig{Level: "error", Format: cfg.Log.Format}, "hourglass", a.errOut)
	return cfg, nil
}

// inspector returns the Inspector on Redis, without etcd (see
// ownersInspector).
func (a *app) inspector() (*inspect.Inspector, error) {
	if a.insp != nil {
		return a.insp, nil
	}
	in, err := a.newInspector(nil)
	if err != nil {
		return nil, err
	}
	a.insp = in
	return in, nil
}

// newInspector connects to Redis and returns an Inspector that reads
// shard owners from etcd when etcd is not nil.
func (a *app) newInspector(etcd *clientv3.Client) (*inspect.Inspector, error) {
	cfg, err := a.load()
	if err != nil {
		return nil, err
	}
	rdb, err := connect.Redis(cfg.Redis)
	if err != nil {
		return nil, err
	}
	a.closer = append(a.closer, func() { _ = rdb.Close() })
	icfg := inspect.Config{Namespace: cfg.Namespace, Shards: cfg.Shards}
	if etcd != nil {
		icfg.Owners = etcdowners.New(etcd, cfg.Namespace)
	}
	return inspect.New(rdb, icfg)
}

// session returns the Inspector and the command's ctx bounded by
// --timeout; call done when finished.
func (a *app) session(cmd *cobra.Command) (*inspect.Inspector, context.Context, context.CancelFunc, error) {
	in, err := a.inspector()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, done := context.WithTimeout(cmd.Context(), a.timeout)
	return in, ctx, done, nil
}

func (a *app) close() {
	for _, f := range a.closer {
		f()
	}
}

// noun returns a command grouping verbs: run without a verb it prints its
// help; with an unknown one it is a usage error.
func noun(use, short string, verbs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, RunE: func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return cmd.Help()
	}}
	cmd.AddCommand(verbs...)
	return cmd
}

// maxArgs is cobra.MaximumNArgs with the usage exit code.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("%s takes at most %d argument(s), got %d (usage: %s)", verbPath(cmd), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

// exactArgs is cobra.ExactArgs with the usage exit code.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d (usage: %s)", verbPath(cmd), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

// verbPath is cmd's path without the program's name ("task show"), for
// messages that follow the "hourglass: " of every error.
func verbPath(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}
