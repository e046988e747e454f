package serve

import (
	"errors"
	"fmt"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
)

// Where the gateway runs.
const (
	GatewayLaunch    = "launch"
	GatewayInProcess = "in-process"
)

// The HTTP clients the bench can stream with.
const (
	HTTPClientRaw     = "raw"
	HTTPClientNetHTTP = "net/http"
)

// Options configure Run. Errors of Validate name the tpcoord flag.
type Options struct {
	Self        string        // the tpcoord binary to run launch from
	NProc       int           // --nproc: ranks
	Clients     int           // --clients: concurrent clients (and launch's --max-batch)
	Rounds      int           // --rounds: rounds per path, run HTTP, NATS, HTTP, ...
	Requests    int           // --requests: requests per round (0: Duration)
	Duration    time.Duration // --duration: a round's submission window (0: Requests)
	MaxTokens   int           // --max-tokens: output tokens per request (ignore_eos)
	Vocab       int           // --vocab
	ForwardTime time.Duration // --forward-time: synthetic forward pass
	// Think is the most a client waits before its next request (--think):
	// a draw in [0, Think) fixed by the request's index, the same on both
	// paths. It spreads submissions over the step, so that neither path's
	// requests keep catching (or missing) a step's admission in phase.
	Think time.Duration
	// Gateway is where the gateway runs (--gateway): GatewayLaunch, in
	// the job's launch process (launch --http), apart from the clients as
	// in a deployment; GatewayInProcess, in the bench's own process.
	Gateway string
	// HTTPClient is the HTTP path's client (--http-client): HTTPClientRaw,
	// HTTP/1.1 written and read on the caller's goroutine, or
	// HTTPClientNetHTTP, Go's net/http client.
	HTTPClient string
	JSON       bool          // --json: JSON lines instead of a table
	CPUProfile string        // --cpuprofile: this process's CPU profile over the rounds
	Timeout    time.Duration // --timeout: the whole run
}

// Validate checks o; its errors name the flag.
func (o Options) Validate() error {
	switch {
	case o.NProc < 1 || o.NProc > 64:
		return fmt.Errorf("--nproc: must be in [1, 64], got %d", o.NProc)
	case o.Clients < 1 || o.Clients > broadcast.MaxAdmissions:
		return fmt.Errorf("--clients: must be in [1, %d], got %d", broadcast.MaxAdmissions, o.Clients)
	case o.Rounds < 1 || o.Rounds > 1000:
		return fmt.Errorf("--rounds: must be in [1, 1000], got %d", o.Rounds)
	case o.Requests < 0 || o.Requests > 1<<20:
		return fmt.Errorf("--requests: must be in [0, %d], got %d", 1<<20, o.Requests)
	case o.Duration < 0:
		return fmt.Errorf("--duration: must be >= 0, got %v", o.Duration)
	case (o.Requests == 0) == (o.Duration == 0):
		return errors.New("--requests, --duration: give exactly one (requests per round, or a round's submission window)")
	case o.MaxTokens < 1 || o.MaxTokens > 1<<20:
		return fmt.Errorf("--max-tokens: must be in [1, %d], got %d", 1<<20, o.MaxTokens)
	case o.Vocab < 16 || o.Vocab > 1<<24:
		return fmt.Errorf("--vocab: must be in [16, %d], got %d", 1<<24, o.Vocab)
	case o.ForwardTime < 0:
		return fmt.Errorf("--forward-time: must be >= 0, got %v", o.ForwardTime)
	case o.Gateway != GatewayLaunch && o.Gateway != GatewayInProcess:
		return fmt.Errorf("--gateway: %q is not one of %s, %s", o.Gateway, GatewayLaunch, GatewayInProcess)
	case o.HTTPClient != HTTPClientRaw && o.HTTPClient != HTTPClientNetHTTP:
		return fmt.Errorf("--http-client: %q is not one of %s, %s", o.HTTPClient, HTTPClientRaw, HTTPClientNetHTTP)
	case o.Think < 0:
		return fmt.Errorf("--think: must be >= 0, got %v", o.Think)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout: must be > 0, got %v", o.Timeout)
	case o.Self == "":
		return errors.New("options: Self, the tpcoord binary to run launch from, is not set")
	}
	return nil
}
