package structured

import (
	"fmt"
	"io"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

// printHeader writes the table's header: the machine and the setup.
func printHeader(w io.Writer, s Summary) {
	fmt.Fprintf(w, "machine: %s, %d cores, avx512f %v, %s; load %s\n", s.CPU, s.Cores, s.AVX512F, s.Go, s.LoadBefore)
	fmt.Fprintf(w, "nproc %d, batch %d, vocab %d, forward %.1f ms, max_tokens %d, temperature %g, tokenizer %s, eos %d, schema %s\n",
		s.NProc, s.Batch, s.Vocab, s.ForwardTimeMS, s.Tokens, s.Temperature, s.Tokenizer, s.EOS, s.Schema)
	fmt.Fprintf(w, "%-6s %-5s %-13s %8s %7s %8s %12s  %s\n", "kind", "round", "batch", "tokens", "stopped", "total_s", "tokens/s",
		"rank 0 step ms: median total, forward, sample; mean sample")
}

// printLine writes a BatchResult or a RoundResult.
func printLine(w io.Writer, v any, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, v)
	}
	var err error
	switch r := v.(type) {
	case BatchResult:
		step := "-"
		if m, a := r.Step, r.StepMean; m != nil && a != nil {
			step = fmt.Sprintf("%.2f, %.2f, %.3f; %.3f (%d steps)", m.Total, m.Forward, m.Sample, a.Sample, m.Steps)
		}
		_, err = fmt.Fprintf(w, "%-6s %-5d %-13s %8d %7d %8.2f %12.1f  %s\n", r.Kind, r.Round, r.Batch, r.OutputTokens,
			r.Stopped, r.TotalS, r.TokensPerS, step)
	case RoundResult:
		_, err = fmt.Fprintf(w, "%-6s %-5d constrained/unconstrained %.3f (%s first)\n", r.Kind, r.Round, r.Ratio, r.First)
	}
	return err
}

func printSummary(w io.Writer, s Summary, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, s)
	}
	met := "met"
	if !s.TargetMet {
		met = "NOT met"
	}
	for _, k := range []struct {
		name string
		k    KindSummary
	}{{KindUnconstrained, s.Unconstrained}, {KindConstrained, s.Constrained}} {
		step := "-"
		if m, a := k.k.Step, k.k.StepMean; m != nil && a != nil {
			step = fmt.Sprintf("step median %.2f ms (forward %.2f, sample %.3f), mean sample %.3f ms", m.Total, m.Forward, m.Sample, a.Sample)
		}
		fmt.Fprintf(w, "%s: median %.1f tokens/s, %.0f tokens a batch, %d stopped (%d JSON); %s\n",
			k.name, k.k.TokensPerS, k.k.OutputTokens, k.k.Stopped, k.k.JSONValid, step)
	}
	_, err := fmt.Fprintf(w, "constrained/unconstrained: median of rounds %.3f (target ≥ %.2f): %s; per round %.3f; ratio of medians %.3f; load %s -> %s\n",
		s.Ratio, s.Target, met, s.RoundRatios, s.RatioOfMedians, s.LoadBefore, s.LoadAfter)
	return err
}
