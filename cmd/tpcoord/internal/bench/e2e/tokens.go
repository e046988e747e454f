package e2e

import (
	"bufio"
	"fmt"
	"os"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/job"
	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// TokensLine is one line of --tokens-out: one request of the measured
// batch. scripts/torch_tp_loop.py writes the same lines (impl
// "pytorch-loop"), so that greedy runs of the two can be compared.
type TokensLine struct {
	Impl        string  `json:"impl"`
	Combo       string  `json:"combo,omitempty"`
	NProc       int     `json:"nproc"`
	Temperature float32 `json:"temperature"`
	Request     int     `json:"request"`
	Prompt      []int32 `json:"prompt"`
	Tokens      []int32 `json:"tokens"`
}

// writeTokens appends combination c's requests' tokens to o.TokensOut,
// when set.
func writeTokens(o Options, c Combo, toks [][]int32) error {
	if o.TokensOut == "" {
		return nil
	}
	f, err := openTokensOut(o.TokensOut)
	if err != nil {
		return err
	}
	impl := "tpcoord"
	if o.Executor != WorkerExecutor {
		impl = "tpcoord-synthetic"
	}
	w := bufio.NewWriter(f)
	for i, t := range toks {
		line := TokensLine{Impl: impl, Combo: c.String(), NProc: o.NProc, Temperature: o.Temperature,
			Request: i, Prompt: job.Prompt(i, o.Vocab), Tokens: t}
		if t == nil {
			line.Tokens = []int32{}
		}
		if err = stats.WriteJSONLine(w, line); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--tokens-out: %w", err)
	}
	return nil
}

// openTokensOut opens --tokens-out for appending, creating it.
func openTokensOut(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--tokens-out: %w", err)
	}
	return f, nil
}
