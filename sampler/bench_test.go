package sampler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/noisepool"
)

// BenchModes are the benchmark parameter sets, shared with the CLI.
var benchModes = []string{"plain", "topk", "topp", "topk_topp", "minp", "greedy"}

type sampleFunc interface{ Sample([]Row, []Result) }

// BenchmarkSample: vocab 100352, LLM-like rows (SyntheticLogits).
//
//	go test -run '^$' -bench Sample -benchtime 20x -count 5 ./sampler/
func BenchmarkSample(b *testing.B) {
	const vocab = 100352
	for _, impl := range []string{"fast", "reference"} {
		for _, noise := range []string{"pool", "bound", "inline"} {
			if impl == "reference" && noise != "inline" {
				continue // Reference draws its own noise
			}
			for _, mode := range benchModes {
				for _, batch := range []int{1, 8, 32, 64} {
					b.Run(fmt.Sprintf("impl=%s/noise=%s/mode=%s/batch=%d", impl, noise, mode, batch), func(b *testing.B) {
						p, err := ModeParams(mode)
						if err != nil {
							b.Fatal(err)
						}
						rows := benchRows(vocab, batch, &p, noise)
						out := make([]Result, batch)
						var s sampleFunc = New(Config{Vocab: vocab})
						if impl == "reference" {
							s = NewReference(Config{Vocab: vocab})
						}
						s.Sample(rows, out)
						b.ResetTimer()
						for i := 0; b.Loop(); i++ {
							for j := range rows {
								if noise == "inline" { // a pool row's noise is fixed: keep its row
									rows[j].NoiseRow = uint64(i)
								}
							}
							s.Sample(rows, out)
						}
					})
				}
			}
		}
	}
}

// benchRows returns batch rows of SyntheticLogits with noise "inline"
// (none), "pool" (exact rows) or "bound" (bound rows), noise row 0.
func benchRows(vocab, batch int, p *api.Params, noise string) []Row {
	rows := make([]Row, batch)
	for i := range rows {
		rows[i] = Row{Logits: SyntheticLogits(vocab, uint64(i)), Params: p, EOS: -1, NoiseKey: uint64(i + 1)}
		switch noise {
		case "pool":
			rows[i].Noise = make([]float32, vocab)
			noisepool.FillRow(uint64(i+1), 0, rows[i].Noise)
		case "bound":
			rows[i].Noise, rows[i].NoiseBound = make([]float32, vocab), true
			noisepool.FillBoundRow(uint64(i+1), 0, rows[i].Noise)
		}
		if rows[i].Noise != nil { // as the pool hands them out
			rows[i].NoiseBlockMax = blockMax(rows[i].Noise)
		}
	}
	return rows
}

// BenchmarkSample16: the 16-bit hot path, float16 and bfloat16 rows (each
// widened to float32 into the sampler's scratch before sampling).
//
//	go test -run '^$' -bench 'Sample16|ConvertRow16' -count 5 ./sampler/
func BenchmarkSample16(b *testing.B) {
	const vocab = 100352
	for _, dt := range []Dtype{Float16, BFloat16} {
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("dtype=%v/batch=%d", dt, batch), func(b *testing.B) {
				p, err := ModeParams("plain")
				if err != nil {
					b.Fatal(err)
				}
				rows := benchRows(vocab, batch, &p, "inline")
				for i := range rows {
					rows[i].Logits16 = narrowRow(rows[i].Logits, dt)
					rows[i].Logits, rows[i].Dtype = nil, dt
				}
				out := make([]Result, batch)
				s := New(Config{Vocab: vocab})
				s.Sample(rows, out)
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					for j := range rows {
						rows[j].NoiseRow = uint64(i)
					}
					s.Sample(rows, out)
				}
			})
		}
	}
}

// BenchmarkConvertRow16 is the widening pass alone, one row of 100352.
func BenchmarkConvertRow16(b *testing.B) {
	const vocab = 100352
	for _, dt := range []Dtype{Float16, BFloat16} {
		b.Run(fmt.Sprintf("dtype=%v", dt), func(b *testing.B) {
			src := narrowRow(SyntheticLogits(vocab, 1), dt)
			dst := make([]float32, vocab)
			b.SetBytes(2 * vocab)
			for b.Loop() {
				convertRow(dst, src, dt)
			}
		})
	}
}

func narrowRow(l []float32, dt Dtype) []uint16 {
	if dt == BFloat16 {
		return bf16Row(l)
	}
	return halfRow(l)
}

// BenchmarkSampleAllow: rows under a grammar's mask (structured outputs)
// against the same rows without one, batch 32, vocab 100352, pool noise.
// "string" allows 95% of the tokens at random (as inside a JSON string,
// where most 64-token words mix allowed and refused tokens), "digits" 1%.
//
//	go test -run '^$' -bench SampleAllow -count 5 ./sampler/
func BenchmarkSampleAllow(b *testing.B) {
	const vocab, batch = 100352, 32
	for _, mode := range []string{"plain", "greedy", "topp"} {
		for _, mask := range []string{"none", "string", "digits"} {
			b.Run(fmt.Sprintf("mode=%s/mask=%s", mode, mask), func(b *testing.B) {
				p, err := ModeParams(mode)
				if err != nil {
					b.Fatal(err)
				}
				rows := benchRows(vocab, batch, &p, "pool")
				for i := range rows {
					switch mask {
					case "string":
						rows[i].Allow = benchAllow(vocab, 0.95, uint64(i))
					case "digits":
						rows[i].Allow = benchAllow(vocab, 0.01, uint64(i))
					}
				}
				out := make([]Result, batch)
				s := New(Config{Vocab: vocab})
				s.Sample(rows, out)
				for b.Loop() {
					s.Sample(rows, out)
				}
			})
		}
	}
}

func benchAllow(vocab int, frac float64, seed uint64) []uint64 {
	r := rand.New(rand.NewPCG(seed, 3))
	allow := make([]uint64, (vocab+63)/64)
	for i := range vocab {
		if r.Float64() < frac {
			allow[i/64] |= 1 << (i % 64)
		}
	}
	return allow
}
