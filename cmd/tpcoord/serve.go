//go:build !agentonly

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/coordinator/gateway"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
	"github.com/tpcoord/tpcoord/internal/loopback"
	"github.com/tpcoord/tpcoord/internal/telemetry"
)

// gatewayOptions are the HTTP gateway's flags, shared by serve and
// launch --http.
type gatewayOptions struct {
	cfg        gateway.Config
	fields     fieldFlags
	tokenizer  string
	apiKeyFile string
	insecure   bool
	tok        gateway.Tokenizer // loaded by build; nil without --tokenizer
}

// flags binds the gateway's flags; listen names the address flag
// ("listen" for serve, "http" for launch).
func (o *gatewayOptions) flags(fs *pflag.FlagSet, listen, listenDefault string) {
	def := gateway.DefaultConfig()
	o.cfg = def
	o.fields = fieldFlags{}
	f := o.fields
	fs.StringVar(&o.cfg.Listen, f.name("Listen", listen), listenDefault, "HTTP address of the OpenAI-compatible API (host:port; an IP other than loopback needs --api-key-file and --tls-cert, or --insecure)")
	fs.StringVar(&o.cfg.Model, f.name("Model", "served-model-name"), "", "model name /v1/models lists and requests must give (default: the job ID)")
	fs.StringVar(&o.tokenizer, "tokenizer", "", `turn text into tokens and back: a Hugging Face tokenizer.json (or the directory holding it, with tokenizer_config.json for the chat template), or "tiktoken:<encoding>" (cl100k_base, o200k_base, ...); empty: token IDs only`)
	f["APIKeys"], f["Insecure"] = "api-key-file", "insecure"
	fs.StringVar(&o.apiKeyFile, "api-key-file", "", "file of API keys, one a line, readable by its owner only: /v1 requests need Authorization: Bearer <key>")
	fs.StringVar(&o.cfg.TLSCert, f.name("TLSCert", "tls-cert"), "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	fs.StringVar(&o.cfg.TLSKey, f.name("TLSKey", "tls-key"), "", "the certificate's private key (PEM)")
	fs.Int64Var(&o.cfg.MaxBodyBytes, f.name("MaxBodyBytes", "max-body-bytes"), def.MaxBodyBytes, "largest request body accepted (413 beyond)")
	fs.DurationVar(&o.cfg.BodyTimeout, f.name("BodyTimeout", "body-timeout"), def.BodyTimeout, "longest a client may take to send a request, headers and body (408 and the connection closed beyond)")
	fs.DurationVar(&o.cfg.RequestTimeout, f.name("RequestTimeout", "request-timeout"), def.RequestTimeout, "longest a request may take, arrival to last token (504 beyond; a stream ends with an error event)")
	fs.DurationVar(&o.cfg.ResumeWindow, f.name("ResumeWindow", "resume-window"), def.ResumeWindow, "how long a request whose rank 0 is gone, restarting or re-forming is resubmitted, continuing from the tokens it has, before it fails (0: never)")
	fs.IntVar(&o.cfg.DefaultMaxTokens, f.name("DefaultMaxTokens", "default-max-tokens"), def.DefaultMaxTokens, "max_tokens of a completion that leaves it out (OpenAI's default)")
	fs.IntVar(&o.cfg.ChatMaxTokens, f.name("ChatMaxTokens", "chat-max-tokens"), def.ChatMaxTokens, "max_tokens of a chat completion that leaves it out")
	fs.StringSliceVar(&o.cfg.CORSOrigins, f.name("CORSOrigins", "cors-origin"), nil, `origins browsers may call the API from ("*": any); none: CORS off`)
	setGroup(fs, groupAPI, listen, "served-model-name", "tokenizer", "api-key-file", "tls-cert", "tls-key", "max-body-bytes", "body-timeout",
		"request-timeout", "resume-window", "default-max-tokens", "chat-max-tokens", "cors-origin")
}

// build finishes the configuration for job and loads the tokenizer.
func (o *gatewayOptions) build(job string, insecure bool) (gateway.Config, []gateway.Option, error) {
	cfg := o.cfg
	cfg.Listen = gateway.ListenAddr(cfg.Listen)
	cfg.Insecure = insecure
	if cfg.Model == "" {
		cfg.Model = job
	}
	if o.apiKeyFile != "" {
		keys, err := gateway.ReadAPIKeys(o.apiKeyFile)
		if err != nil {
			return cfg, nil, configError("api-key-file: %v", err)
		}
		cfg.APIKeys = keys
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, o.fields.configErr(err)
	}
	var opts []gateway.Option
	if o.tokenizer != "" {
		t, err := loadTokenizer(o.tokenizer)
		if err != nil {
			return cfg, nil, configError("%v", err) // the error begins with "tokenizer: ", the flag
		}
		o.tok = t
		opts = append(opts, gateway.WithTokenizer(t))
	}
	return cfg, opts, nil
}

// serveOptions are serve's flags.
type serveOptions struct {
	cc        clientConfig
	gw        gatewayOptions
	telemetry telemetry.Config
	logLevel  string
	logFormat string
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve --nats URL [--listen ADDR] [--tokenizer FILE]",
		Short: "Serve the OpenAI-compatible HTTP API for a job (a gateway to its NATS requests)",
		Long: `Serve /v1/completions, /v1/chat/completions and /v1/models for a job, with
server-sent events for stream: true, and /health, /ready and /metrics.
Each HTTP request becomes the job's NATS generate requests (one per prompt
and choice); a client that disconnects cancels them at once. The gateway
keeps no job state: run it on any host of the bus, and several for
availability. See docs/http-api.md.

With --tokenizer it takes and returns text; without, prompts are token IDs
and answers carry token_ids only. Chat completions need a tokenizer with a
chat template.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, &o) },
	}
	fs := cmd.Flags()
	o.cc.connFlags(fs)
	o.gw.flags(fs, "listen", gateway.DefaultConfig().Listen)
	fs.BoolVar(&o.gw.insecure, "insecure", false, "allow --listen beyond loopback without API keys and TLS; logs a warning")
	fs.StringVar(&o.telemetry.OTLPEndpoint, "otlp-endpoint", "", "export request spans over OTLP to this collector (as agent --otlp-endpoint); empty: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT if set")
	fs.StringVar(&o.telemetry.OTLPProtocol, "otlp-protocol", "", "OTLP protocol: grpc or http (as agent --otlp-protocol)")
	fs.BoolVar(&o.telemetry.OTLPInsecure, "otlp-insecure", false, "OTLP without TLS")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", logFormatAuto, logFormatUsage)
	setGroup(fs, groupTelemetry, "otlp-endpoint", "otlp-protocol", "otlp-insecure", "log-level", "log-format")
	return cmd
}

func runServe(cmd *cobra.Command, o *serveOptions) error {
	if err := layerConfig(cmd.Flags()); err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	cfg, opts, err := o.gw.build(o.cc.Job, o.gw.insecure)
	if err != nil {
		return err
	}
	if o.gw.insecure && !loopback.HostPort(cfg.Listen) {
		log.Warn("the API is served beyond loopback without the protection --insecure waived", "listen", cfg.Listen, "api_keys", len(cfg.APIKeys) > 0, "tls", cfg.TLSCert != "")
	}
	nc, subj, err := o.cc.connect("tpcoord-serve", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	otel.SetErrorHandler(telemetry.ErrorHandler(log))
	tel, err := telemetry.Start(ctx, o.telemetry, telemetry.Labels{Job: o.cc.Job, Gateway: true}, telemetry.Rank{}, os.Getenv, log)
	if err != nil {
		return configError("%v", err)
	}
	defer tel.Close()
	opts = append(opts, gateway.WithLogger(log), gateway.WithTracer(tel.Tracer()), gateway.WithVersion(buildinfo.Get().Version))
	return serveGateway(ctx, cfg, nc, subj, opts)
}

// serveGateway runs a gateway on bus until ctx ends.
func serveGateway(ctx context.Context, cfg gateway.Config, bus broadcast.Transport, subj broadcast.Subjects, opts []gateway.Option) error {
	g, err := gateway.New(cfg, bus, subj, opts...)
	if err != nil {
		return &exitError{code: exitConfig, err: err}
	}
	ln, err := gateway.Listen(cfg)
	if err != nil {
		return err
	}
	return g.Serve(ctx, ln)
}
