package rank

import (
	"sync/atomic"

	"github.com/tpcoord/tpcoord/noisepool"
	"github.com/tpcoord/tpcoord/sampler"
)

// Sampling is rank 0's Picker: the log-space Gumbel sampler with each
// request's own parameters. A row's noise is identified by its request's
// stream key and its output position, so a seeded request draws the same
// noise, and so the same tokens, whatever batch it is in.
//
// With a noise pool, rows that need a full noise row (plain, top-p and
// min-p sampling) take it pre-generated from the pool, whose producers
// prefetch the next rows of every such stream; greedy rows need no noise
// and top-k rows only k values, which the sampler computes inline. The
// tokens are the same either way.
type Sampling struct {
	s    *sampler.Sampler
	pool *noisepool.Pool // nil: all noise inline
	eos  int32
	base uint64 // per-agent random base for unseeded requests' stream keys

	rows   []sampler.Row
	out    []sampler.Result
	taken  []noisepool.Row
	active map[uint64]bool // streams activated in the pool, by key
	seen   map[uint64]bool // streams of the current batch
	// takeErrs counts rows that fell back to inline noise because the pool
	// had no slot; read by Stats on another goroutine.
	takeErrs atomic.Uint64
}

var _ Picker = (*Sampling)(nil)

// NewSampling returns a Picker over the given vocabulary. base comes from
// noisepool.NewBase; pool may be nil. The Picker does not own the pool.
func NewSampling(vocab int, eos int32, base uint64, pool *noisepool.Pool) *Sampling {
	// Requests are validated at intake, so the sampler skips re-checking.
	return &Sampling{
		s: sampler.New(sampler.Config{Vocab: vocab}), pool: pool, eos: eos, base: base,
		active: map[uint64]bool{}, seen: map[uint64]bool{},
	}
}

// wantsPoolRow reports whether a row with parameters p reads a full noise
// row: not greedy, not top-k.
func wantsPoolRow(p *sampler.Params) bool {
	return p.Temperature >= sampler.GreedyBelow && p.TopK == 0
}

func (p *Sampling) Pick(rows []*Seq, reqs []*Request, logits []float32, vocab int, tokens []int32, errs []error) {
	p.rows, p.out, p.taken = p.rows[:0], p.out[:0], p.taken[:0]
	clear(p.seen)
	for i, r := range rows {
		sr := sampler.Row{
			Logits: logits[i*vocab : (i+1)*vocab],
			Prompt: r.Prompt, Output: r.Output, EOS: p.eos,
			NoiseRow: uint64(len(r.Output)),
		}
		params := sampler.DefaultParams()
		if req := reqs[i]; req != nil {
			params = req.Params
			sr.Params = &req.Params
		}
		sr.NoiseKey = noisepool.StreamKey(params.Seed, p.base, r.ID)
		if p.pool != nil && wantsPoolRow(&params) {
			p.seen[sr.NoiseKey] = true
			if !p.active[sr.NoiseKey] {
				p.pool.Activate(sr.NoiseKey, sr.NoiseRow)
				p.active[sr.NoiseKey] = true
			}
			if nr, err := p.pool.Take(sr.NoiseKey, sr.NoiseRow); err == nil {
				sr.Noise = nr.Values
				p.taken = append(p.taken, nr)
			} else {
				p.takeErrs.Add(1) // inline noise instead: same tokens
			}
		}
		p.rows = append(p.rows, sr)
		p.out = append(p.out, sampler.Result{})
	}
	p.s.Sample(p.rows, p.out)
	for _, nr := range p.taken {
		_ = p.pool.Release(nr)
	}
	for key := range p.active {
		if !p.seen[key] {
			p.pool.Deactivate(key)
			delete(p.active, key)
		}
	}
	for i, res := range p.out {
		tokens[i], errs[i] = res.Token, res.Err
	}
}

// Stats reports the noise pool's counters for status, or nil without one.
func (p *Sampling) Stats() map[string]uint64 {
	if p.pool == nil {
		return nil
	}
	s := p.pool.Stats()
	return map[string]uint64{
		"noise_rows_taken": s.Taken, "noise_rows_inline": s.Inline, "noise_rows_produced": s.Produced,
		"noise_rows_ready": uint64(s.Ready), "noise_producer_busy_us": uint64(s.ProducerBusy.Microseconds()),
		"noise_take_errors": p.takeErrs.Load(),
	}
}
