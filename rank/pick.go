package rank

import (
	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/sampler"
)

// Sampling is rank 0's Picker: the log-space Gumbel sampler with each
// request's own parameters. A row's noise is identified by its request's
// stream key and its output position, so a seeded request draws the same
// noise, and so the same tokens, whatever batch it is in.
type Sampling struct {
	s    *sampler.Sampler
	eos  int32
	base uint64 // per-agent random base for unseeded requests' stream keys
	rows []sampler.Row
	out  []sampler.Result
}

var _ Picker = (*Sampling)(nil)

// NewSampling returns a Picker over the given vocabulary. base comes from
// noisepool.NewBase.
func NewSampling(vocab int, eos int32, base uint64) *Sampling {
	// Requests are validated at intake, so the sampler skips re-checking.
	return &Sampling{s: sampler.New(sampler.Config{Vocab: vocab}), eos: eos, base: base}
}

func (p *Sampling) Pick(rows []*Seq, reqs []*Request, logits []float32, vocab int, tokens []int32, errs []error) {
	p.rows, p.out = p.rows[:0], p.out[:0]
	for i, r := range rows {
		sr := sampler.Row{
			Logits: logits[i*vocab : (i+1)*vocab],
			Prompt: r.Prompt, Output: r.Output, EOS: p.eos,
			NoiseRow: uint64(len(r.Output)),
		}
		var seed *uint64
		if req := reqs[i]; req != nil {
			sr.Params, seed = &req.Params, req.Params.Seed
		}
		sr.NoiseKey = noisepool.StreamKey(seed, p.base, r.ID)
		p.rows = append(p.rows, sr)
		p.out = append(p.out, sampler.Result{})
	}
	p.s.Sample(p.rows, p.out)
	for i, res := range p.out {
		tokens[i], errs[i] = res.Token, res.Err
	}
}
