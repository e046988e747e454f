//go:build !agentonly

package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/sampler"
)

// sampleOptions are the flags of `tpcoord sample`.
type sampleOptions struct {
	logits      string
	dtype       string
	temperature float32
	topK        int
	topP        float32
	minP        float32
	draws       int
	seed        uint64
	json        bool
}

// newSampleCmd returns `tpcoord sample`: draw N tokens from one logits row
// with the production sampler and print how often each token came up.
func newSampleCmd() *cobra.Command {
	var o sampleOptions
	cmd := &cobra.Command{
		Use:   "sample --logits FILE --draws N",
		Short: "Draw tokens from one logits row and print their counts",
		Long: `Draws N samples from one logits row with the log-space Gumbel sampler and
prints how often each token was drawn.

The file is a .npy array (dtype <f4 or <f2, shape (V,) or (1, V)) or raw
little-endian values of --dtype (f32, f16 or bf16; bfloat16 is raw only).
Draw d uses noise key --seed and noise row d, so a run is reproducible.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSample(cmd.OutOrStdout(), o, cmd.Flags().Changed("dtype"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.logits, "logits", "", "logits file: .npy or raw little-endian (required)")
	f.StringVar(&o.dtype, "dtype", "f32", "element type of a raw file: f32, f16 or bf16")
	f.Float32Var(&o.temperature, "temperature", 1, "temperature; below 1e-5 is greedy")
	f.IntVar(&o.topK, "top-k", 0, "keep the k most likely tokens (0 disables)")
	f.Float32Var(&o.topP, "top-p", 1, "nucleus probability (1 disables)")
	f.Float32Var(&o.minP, "min-p", 0, "drop tokens below min-p times the top probability (0 disables)")
	f.IntVar(&o.draws, "draws", 1000, "number of draws")
	f.Uint64Var(&o.seed, "seed", 0, "noise stream key")
	f.BoolVar(&o.json, "json", false, `print {"counts":{"<token>":n,...}}`)
	return cmd
}

func runSample(w io.Writer, o sampleOptions, dtypeSet bool) error {
	if o.logits == "" {
		return fmt.Errorf("logits: required")
	}
	if o.draws <= 0 {
		return fmt.Errorf("draws: must be > 0, got %d", o.draws)
	}
	dt, err := sampler.ParseDtype(o.dtype)
	if err != nil {
		return fmt.Errorf("dtype: %w", err)
	}
	data, err := os.ReadFile(o.logits)
	if err != nil {
		return fmt.Errorf("logits: %w", err)
	}
	row, err := sampler.DecodeLogits(data, dt, dtypeSet)
	if err != nil {
		return fmt.Errorf("logits: %s: %w", o.logits, err)
	}
	p := api.DefaultParams()
	p.Temperature, p.TopK, p.TopP, p.MinP = o.temperature, o.topK, o.topP, o.minP
	if err := p.Validate(row.Vocab()); err != nil {
		return sampleFlags.configErr(err)
	}
	row.Params, row.EOS = &p, -1
	counts, err := sampler.DrawCounts(sampler.New(sampler.DefaultConfig()), row, o.draws, o.seed)
	if err != nil {
		return fmt.Errorf("logits: %s: %w", o.logits, err)
	}
	return printCounts(w, counts, o, row)
}

// printCounts prints how often each token was drawn: JSON, or a table of
// the 20 most frequent.
func printCounts(w io.Writer, counts map[int32]int, o sampleOptions, row sampler.Row) error {
	toks := make([]int32, 0, len(counts))
	for t := range counts {
		toks = append(toks, t)
	}
	if o.json {
		slices.Sort(toks)
		var b strings.Builder
		b.WriteString(`{"counts":{`)
		for i, t := range toks {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q:%d", strconv.Itoa(int(t)), counts[t])
		}
		b.WriteString("}}\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	slices.SortFunc(toks, func(a, b int32) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return int(a - b)
	})
	fmt.Fprintf(w, "%d draws from %d tokens (%v), %d distinct tokens drawn\n", o.draws, row.Vocab(), row.Dtype, len(toks))
	fmt.Fprintf(w, "%10s %10s %9s\n", "token", "count", "share")
	for i, t := range toks {
		if i == 20 {
			fmt.Fprintf(w, "%10s %10s\n", "...", fmt.Sprintf("%d more", len(toks)-20))
			break
		}
		fmt.Fprintf(w, "%10d %10d %8.3f%%\n", t, counts[t], 100*float64(counts[t])/float64(o.draws))
	}
	return nil
}

// sampleFlags maps the sampling parameters' JSON fields to the flags.
var sampleFlags = fieldFlags{"temperature": "temperature", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p"}
