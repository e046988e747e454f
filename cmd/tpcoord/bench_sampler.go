package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/sampler"
)

type benchSamplerOptions struct {
	vocab  []int
	batch  []int
	modes  []string
	impls  []string
	noises []string
	iters  int
	json   bool
}

// benchSamplerResult is one JSON line of `tpcoord bench sampler`.
type benchSamplerResult struct {
	Impl     string  `json:"impl"`
	Noise    string  `json:"noise"`
	Mode     string  `json:"mode"`
	Vocab    int     `json:"vocab"`
	Batch    int     `json:"batch"`
	Iters    int     `json:"iters"`
	MedianMS float64 `json:"median_ms"`
	P90MS    float64 `json:"p90_ms"`
	P99MS    float64 `json:"p99_ms"`
	CPU      string  `json:"cpu"`
	Cores    int     `json:"cores"`
	Go       string  `json:"go"`
}

// newBenchSamplerCmd returns `tpcoord bench sampler`: time one Sample call
// over a batch of LLM-like rows (sampler.SyntheticLogits) for every
// combination of the listed cases. Each list flag takes comma-separated
// values.
func newBenchSamplerCmd() *cobra.Command {
	var o benchSamplerOptions
	cmd := &cobra.Command{
		Use:   "sampler",
		Short: "Time the sampler (fast or reference) on synthetic logits",
		Long: `Times Sampler.Sample (or the Reference) on a batch of synthetic LLM-like
logits rows, one thread, and prints one line per case with the median and
p90 time of a call. Pool noise is pre-filled outside the timing, as a warm
noise pool would provide it; inline noise is computed by the sampler.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchSampler(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.vocab, "vocab", []int{100352}, "vocabulary sizes")
	f.IntSliceVar(&o.batch, "batch", []int{32}, "batch sizes")
	f.StringSliceVar(&o.modes, "mode", []string{"plain"}, "modes: plain, topk, topp, topk_topp, minp, greedy")
	f.StringSliceVar(&o.impls, "impl", []string{"fast"}, "implementations: fast, reference")
	f.StringSliceVar(&o.noises, "noise", []string{"pool"}, "noise source of the fast sampler: pool, inline")
	f.IntVar(&o.iters, "iters", 30, "timed calls per case")
	f.BoolVar(&o.json, "json", false, "print one JSON object per line")
	return cmd
}

func runBenchSampler(w io.Writer, o benchSamplerOptions) error {
	if o.iters <= 0 {
		return fmt.Errorf("--iters: must be > 0, got %d", o.iters)
	}
	for _, v := range o.vocab {
		if v <= 0 {
			return fmt.Errorf("--vocab: must be > 0, got %d", v)
		}
	}
	for _, b := range o.batch {
		if b <= 0 {
			return fmt.Errorf("--batch: must be > 0, got %d", b)
		}
	}
	for _, m := range o.modes {
		if _, err := sampler.ModeParams(m); err != nil {
			return fmt.Errorf("--mode: %w", err)
		}
	}
	for _, i := range o.impls {
		if i != "fast" && i != "reference" {
			return fmt.Errorf("--impl: unknown %q (want fast or reference)", i)
		}
	}
	for _, n := range o.noises {
		if n != "pool" && n != "inline" {
			return fmt.Errorf("--noise: unknown %q (want pool or inline)", n)
		}
	}
	cpu := cpuModel()
	for _, vocab := range o.vocab {
		for _, batch := range o.batch {
			for _, impl := range o.impls {
				for _, noise := range o.noises {
					for _, mode := range o.modes {
						r := benchSamplerCase(vocab, batch, impl, noise, mode, o.iters)
						r.CPU, r.Cores, r.Go = cpu, runtime.NumCPU(), runtime.Version()
						if err := printBenchSampler(w, r, o.json); err != nil {
							return err
						}
					}
				}
			}
		}
	}
	return nil
}

func benchSamplerCase(vocab, batch int, impl, noise, mode string, iters int) benchSamplerResult {
	p, _ := sampler.ModeParams(mode)
	rows := make([]sampler.Row, batch)
	for i := range rows {
		rows[i] = sampler.Row{Logits: sampler.SyntheticLogits(vocab, uint64(i)), Params: &p, EOS: -1, NoiseKey: uint64(i + 1)}
	}
	// Pool rows are filled before timing, one per (row, iteration), as a
	// warm pool hands out distinct rows; they are reused round-robin when
	// that would exceed ~256 MB.
	var pool [][]float32
	if noise == "pool" && impl == "fast" {
		n := min(batch*(iters+1), max(batch, (256<<20)/(4*vocab)))
		pool = make([][]float32, n)
		for i := range pool {
			pool[i] = make([]float32, vocab)
			noisepool.FillRow(uint64(i%batch+1), uint64(i/batch), pool[i])
		}
	}
	cfg := sampler.DefaultConfig()
	cfg.Vocab, cfg.CheckParams = vocab, false
	var s interface {
		Sample([]sampler.Row, []sampler.Result)
	} = sampler.New(cfg)
	if impl == "reference" {
		s = sampler.NewReference(cfg)
	}
	out := make([]sampler.Result, batch)
	times := make([]time.Duration, 0, iters)
	for it := range iters + 1 { // the first call warms the scratch buffers
		for j := range rows {
			rows[j].NoiseRow = uint64(it)
			if pool != nil {
				rows[j].Noise = pool[(it*batch+j)%len(pool)]
			}
		}
		t0 := time.Now()
		s.Sample(rows, out)
		if it > 0 {
			times = append(times, time.Since(t0))
		}
	}
	slices.Sort(times)
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	nz := noise
	if impl == "reference" {
		nz = "inline"
	}
	return benchSamplerResult{Impl: impl, Noise: nz, Mode: mode, Vocab: vocab, Batch: batch, Iters: iters,
		MedianMS: ms(times[len(times)/2]), P90MS: ms(times[min(len(times)-1, len(times)*9/10)]),
		P99MS: ms(times[min(len(times)-1, len(times)*99/100)])}
}

func printBenchSampler(w io.Writer, r benchSamplerResult, asJSON bool) error {
	if asJSON {
		return writeJSONLine(w, r)
	}
	_, err := fmt.Fprintf(w, "%-9s %-6s %-9s vocab %-6d batch %-3d median %8.3f ms  p90 %8.3f ms  (%s, %d cores, %s)\n",
		r.Impl, r.Noise, r.Mode, r.Vocab, r.Batch, r.MedianMS, r.P90MS, r.CPU, r.Cores, r.Go)
	return err
}

// cpuModel reads the CPU model name from /proc/cpuinfo, or returns GOARCH.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v) + " (" + runtime.GOARCH + ")"
		}
	}
	return runtime.GOARCH
}
