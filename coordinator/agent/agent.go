package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/telemetry"
	"github.com/tpcoord/tpcoord/rank"
)

// Notifier hears the agent's progress in systemd's notation: "READY=1" and
// a STATUS once the rendezvous completes, STATUS lines while the world
// re-forms, "STOPPING=1" at the end. *sdnotify.Notifier is one.
type Notifier interface{ Notify(state string) }

// Option changes what New's agent uses instead of its defaults.
type Option func(*options)

type options struct {
	log       *slog.Logger
	bus       *Bus
	transport memberlist.Transport
	executors ExecutorFactory
	notifier  Notifier
	version   string
	getenv    func(string) string
	vocab     VocabLoader
}

// VocabLoader reads a tokenizer's vocabulary for structured outputs:
// pieces[id] is the bytes token id decodes to, special[id] marks the
// tokens a grammar never allows.
type VocabLoader func(spec string) (pieces [][]byte, special []bool, err error)

// WithVocabLoader reads Config.Tokenizer with load. Without it (the
// agent-only build, which has no tokenizers) a Tokenizer is refused.
func WithVocabLoader(load VocabLoader) Option { return func(o *options) { o.vocab = load } }

// WithLogger sets the agent's logger (default: none).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithBus gives the agent its bus instead of connecting to Config.NATS.
func WithBus(b Bus) Option { return func(o *options) { o.bus = &b } }

// WithMemberlistTransport gives memberlist its network instead of binding
// Config.Bind (membership.Network in tests).
func WithMemberlistTransport(t memberlist.Transport) Option {
	return func(o *options) { o.transport = t }
}

// WithExecutor makes each epoch's executor with f instead of the one
// Config.Executor names.
func WithExecutor(f ExecutorFactory) Option { return func(o *options) { o.executors = f } }

// WithNotifier tells n of the agent's progress.
func WithNotifier(n Notifier) Option { return func(o *options) { o.notifier = n } }

// WithVersion is the version the agent advertises (default: the running
// binary's, from internal/buildinfo).
func WithVersion(v string) Option { return func(o *options) { o.version = v } }

// WithEnv reads the OTEL_* variables through getenv (default os.Getenv).
func WithEnv(getenv func(string) string) Option { return func(o *options) { o.getenv = getenv } }

type nopNotifier struct{}

func (nopNotifier) Notify(string) {}

// Agent is one rank of a job.
type Agent struct {
	cfg Config
	o   options
	log *slog.Logger

	mu      sync.Mutex
	started bool
	driver  *rank.Driver         // the running epoch's loop
	last    *api.RankStatus      // between epochs: the last epoch's status
	tel     *telemetry.Telemetry // while Run runs
}

// New checks cfg and returns an agent that Run starts. It does no I/O.
func New(cfg Config, opts ...Option) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := options{version: buildinfo.Get().Version, getenv: os.Getenv, notifier: nopNotifier{}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Tokenizer != "" && cfg.Samples() && o.vocab == nil {
		return nil, fielderr.New("Tokenizer", "this build reads no tokenizers (the agent-only build): run rank 0 from the full tpcoord binary (launch does), or leave the tokenizer out")
	}
	a := &Agent{cfg: cfg, o: o, log: o.log.With("job", cfg.Job, "rank", cfg.Rank)}
	if a.o.executors == nil {
		a.o.executors = defaultExecutors(&a.cfg, a.log)
	}
	return a, nil
}

// ErrRunTwice is returned by a second call of Run.
var ErrRunTwice = errors.New("agent: Run may be called once")

// Run runs the agent until ctx ends (a clean stop: nil, after leaving the
// cluster so peers stop too), a peer stops on purpose (nil), or the job
// cannot go on: an error wrapping rank.ErrPeerLost or rank.ErrAborted, or
// a configuration the cluster refuses (membership.ErrRankTaken, a
// *fielderr.Error). Everything it starts has stopped when it returns.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return ErrRunTwice
	}
	a.started = true
	a.mu.Unlock()
	r := newRun(a)
	err := r.run(ctx)
	if serr := r.g.Shutdown(); serr != nil {
		a.log.Debug("shutdown", "err", serr)
	}
	return err
}

// Status is this rank's status now, as it answers on tpc.<job>.status.
func (a *Agent) Status() api.RankStatus {
	a.mu.Lock()
	d, last := a.driver, a.last
	a.mu.Unlock()
	switch {
	case d != nil:
		return d.Status()
	case last != nil:
		return *last
	}
	return api.RankStatus{Rank: a.cfg.Rank, World: a.cfg.WorldSize, Job: a.cfg.Job, Version: a.o.version, State: "joining"}
}

// DumpFlight writes the flight recorder's last steps to the log (and to
// Config.Telemetry.FlightDir); reason says why. It does nothing before Run
// has set up telemetry or after it returned.
func (a *Agent) DumpFlight(reason string) {
	a.mu.Lock()
	tel := a.tel
	a.mu.Unlock()
	if tel != nil {
		tel.DumpFlight(reason)
	}
}

func (a *Agent) setDriver(d *rank.Driver) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d == nil && a.driver != nil {
		st := a.driver.Status()
		st.State = "reforming"
		a.last = &st
	}
	a.driver = d
}

func (a *Agent) setTelemetry(t *telemetry.Telemetry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tel = t
}

// stopped logs a stop that came before the agent got as far as what.
func (a *Agent) stopped(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		a.log.Info("stopped before " + what)
		return nil
	}
	return err
}
