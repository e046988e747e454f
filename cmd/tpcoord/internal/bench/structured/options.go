package structured

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/grammar"
)

// defaultSchema is the built-in nested JSON Schema (an order: a customer
// with an address, 1–8 line items with tags and options, shipping or
// null, dates, patterns, enums, bounds, a shared $ref). It is
// internal/grammar's testdata/order.schema.json, whose compile and mask
// times that package's benchmarks measure; a test keeps the two equal.
//
//go:embed schema.json
var defaultSchema []byte

// Options are the bench's flags.
type Options struct {
	Self        string        // the tpcoord binary to run launch from
	NProc       int           // --nproc: ranks
	Batch       int           // --batch: concurrent requests of each kind (and --max-batch)
	Vocab       int           // --vocab
	ForwardTime time.Duration // --forward-time: the synthetic forward pass
	Tokens      int           // --tokens: max_tokens of every request
	Tokenizer   string        // --tokenizer: rank 0's, for the grammar's vocabulary
	EOS         int           // --eos: the tokenizer's end of sequence
	Schema      string        // --schema: a JSON Schema file; empty: the built-in one
	Rounds      int           // --rounds: each one batch of each kind
	JSON        bool          // --json: JSON lines instead of a table
	Timeout     time.Duration // --timeout: the whole run
}

// Temperature is every request's: sampled, not greedy, seeded.
const Temperature = 0.8

// TargetRatio is issue 38's target: constrained tokens/s at least this
// share of unconstrained.
const TargetRatio = 0.95

// Validate checks o, reads the schema and checks that it compiles; its
// errors name the flag.
func (o Options) Validate() error {
	switch {
	case o.NProc < 1 || o.NProc > 64:
		return fmt.Errorf("--nproc: must be in [1, 64], got %d", o.NProc)
	case o.Batch < 1 || o.Batch > broadcast.MaxAdmissions:
		return fmt.Errorf("--batch: must be in [1, %d], got %d", broadcast.MaxAdmissions, o.Batch)
	case o.Vocab < 16 || o.Vocab > 1<<24:
		return fmt.Errorf("--vocab: must be in [16, %d], got %d", 1<<24, o.Vocab)
	case o.ForwardTime < 0:
		return fmt.Errorf("--forward-time: must be >= 0, got %v", o.ForwardTime)
	case o.Tokens < 1 || o.Tokens > 1<<20:
		return fmt.Errorf("--tokens: must be in [1, %d], got %d", 1<<20, o.Tokens)
	case o.Tokenizer == "":
		return errors.New("--tokenizer: required: rank 0 needs the vocabulary to follow a grammar")
	case o.EOS < 0 || o.EOS >= o.Vocab:
		return fmt.Errorf("--eos: must be a token below --vocab %d, got %d (a constrained output ends with it)", o.Vocab, o.EOS)
	case o.Rounds < 1 || o.Rounds > 1000:
		return fmt.Errorf("--rounds: must be in [1, 1000], got %d", o.Rounds)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout: must be > 0, got %v", o.Timeout)
	case o.Self == "":
		return errors.New("options: Self, the tpcoord binary to run launch from, is not set")
	}
	_, err := o.schema()
	return err
}

// schema is the JSON Schema the constrained rows follow: --schema's file,
// or the built-in one. It is refused here, naming --schema, if it does not
// compile.
func (o Options) schema() ([]byte, error) {
	if o.Schema == "" {
		return defaultSchema, nil
	}
	b, err := os.ReadFile(o.Schema)
	if err != nil {
		return nil, fmt.Errorf("--schema: %w", err)
	}
	g, err := grammar.FromJSONSchema(b)
	if err == nil {
		_, err = grammar.Compile(g, grammar.DefaultLimits())
	}
	if err != nil {
		return nil, fmt.Errorf("--schema: %s: %w", o.Schema, err)
	}
	return b, nil
}

// schemaName is how the lines name the schema: "built-in" or the file.
func (o Options) schemaName() string {
	if o.Schema == "" {
		return "built-in"
	}
	return o.Schema
}

// launchArgs are launch's flags after the ones job.Start sets.
func (o Options) launchArgs() []string {
	return []string{
		"--nproc", strconv.Itoa(o.NProc), "--job", "bench-structured",
		"--vocab", strconv.Itoa(o.Vocab), "--forward-time", o.ForwardTime.String(),
		"--max-batch", strconv.Itoa(o.Batch), "--noise-pool-rows", strconv.Itoa(max(128, 3*o.Batch)),
		"--tokenizer", o.Tokenizer, "--eos", strconv.Itoa(o.EOS),
	}
}
