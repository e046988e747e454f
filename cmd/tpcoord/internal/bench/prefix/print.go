package prefix

import (
	"fmt"
	"io"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/stats"
)

func printHeader(w io.Writer, o Options) {
	worker := "synthetic worker, forward " + o.ForwardTime.String()
	if o.WorkerCmd != "" {
		worker = o.WorkerCmd
	}
	fmt.Fprintf(w, "nproc %d, %s, vocab %d\n", o.NProc, worker, o.Vocab)
	fmt.Fprintf(w, "ttft: %d requests in sequence, %d-token shared prefix + %d-token suffix, max_tokens %d\n",
		o.Requests, o.PrefixTokens, o.SuffixTokens, o.MaxTokens)
	if o.Chats > 0 {
		fmt.Fprintf(w, "chat: %d conversations × %d turns at once, %d-token messages, %d-token answers\n",
			o.Chats, o.Turns, o.TurnTokens, o.AnswerTokens)
	}
	fmt.Fprintf(w, "%-5s %-5s %-7s %8s %9s %9s %9s %11s %12s %9s\n", "kind", "round", "caching", "requests",
		"first_ms", "p50_ms", "max/p99", "prompt_tok", "computed_tok", "hit_tok")
}

// printLine writes a TTFTResult or a ChatResult.
func printLine(w io.Writer, v any, asJSON bool) error {
	if asJSON {
		return stats.WriteJSONLine(w, v)
	}
	var err error
	switch r := v.(type) {
	case TTFTResult:
		_, err = fmt.Fprintf(w, "%-5s %-5d %-7s %8d %9.2f %9.2f %9.2f %11s %12d %9d\n", "ttft", r.Round, r.Caching,
			r.Requests, r.FirstMS, r.RestP50, r.RestMax, "", r.Computed, r.Hits)
	case ChatResult:
		_, err = fmt.Fprintf(w, "%-5s %-5d %-7s %8d %9s %9.2f %9.2f %11d %12d %9d\n", "chat", r.Round, r.Caching,
			r.Requests, "", r.TTFTP50, r.TTFTP99, r.PromptTokens, r.Computed, r.Hits)
	}
	return err
}

func printSummary(w io.Writer, s Summary, o Options) error {
	if o.JSON {
		return stats.WriteJSONLine(w, s)
	}
	met := "met"
	if !s.TargetMet {
		met = "NOT met"
	}
	fmt.Fprintf(w, "ttft: caching on: first %.2f ms, rest p50 %.2f ms; off: first %.2f ms, rest p50 %.2f ms\n",
		s.On.FirstMS, s.On.RestP50, s.Off.FirstMS, s.Off.RestP50)
	fmt.Fprintf(w, "ttft: rest p50 on/off %.3f (target ≤ %.2f): %s; per round %.3f; on: rest/first %.3f\n",
		s.TTFTRatio, s.Target, met, s.RoundRatios, s.FirstVsRest)
	if o.Chats > 0 {
		fmt.Fprintf(w, "chat: prefill computed on %.0f, off %.0f tokens (of %.0f sent), on/off %.3f; TTFT p50 on %.2f ms, off %.2f ms; p99 on %.2f ms, off %.2f ms\n",
			s.On.ChatComputed, s.Off.ChatComputed, s.Off.ChatPrompt, s.ChatComputedRatio, s.On.ChatTTFTP50, s.Off.ChatTTFTP50, s.On.ChatTTFTP99, s.Off.ChatTTFTP99)
	}
	_, err := fmt.Fprintf(w, "%s, %d cores, avx512f %v; load %s -> %s\n", s.CPU, s.Cores, s.AVX512F, s.LoadBefore, s.LoadAfter)
	return err
}
