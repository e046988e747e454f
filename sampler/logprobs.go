package sampler

import (
	"fmt"
	"math"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// Logprobs computes the log-probability of token and the top n tokens of
// row. The distribution is the log-softmax of the processed logits (the
// row's Allow mask, then steps 1 to 4, see the processing order) scaled by the temperature (1 for greedy
// rows), before top-k, top-p and min-p truncation, in float64.
//
// It is meant to run after the token has been published, off the critical
// path: it makes full passes over the row, and allocates only the result
// (and a set of allowed_token_ids when the row has them). Its buffers the
// size of the vocabulary (384 KiB at 32768 tokens) are the Sampler's
// scratch, kept between calls: rank 0 computes logprobs for every row that
// asks, at every step. So it must not run concurrently with Sample.
func (s *Sampler) Logprobs(row Row, token int32, n int) (api.Logprobs, error) {
	p := row.Params
	if p == nil {
		p = &defaultParams
	}
	vocab := row.Vocab()
	if vocab == 0 {
		return api.Logprobs{}, fmt.Errorf("sampler: empty logits row")
	}
	if token < 0 || int(token) >= vocab {
		return api.Logprobs{}, fmt.Errorf("sampler: token %d out of range [0, %d)", token, vocab)
	}
	if n < 0 {
		return api.Logprobs{}, fmt.Errorf("sampler: logprobs count %d < 0", n)
	}
	s.grow(vocab)
	base := s.baseRow(&row)
	if row.Allow != nil {
		base = s.maskRow(&row, base)
	}
	if err := s.buildOverrides(&row, p, base); err != nil {
		return api.Logprobs{}, err
	}
	nb := (vocab + blockSize - 1) / blockSize
	s.indexOverrides(vocab, nb)
	if err := s.blockBounds(base, nb); err != nil {
		return api.Logprobs{}, err
	}
	lp, err := s.logSoftmax(base, nb, p)
	if err != nil {
		return api.Logprobs{}, err
	}
	out := api.Logprobs{Token: token, Logprob: float32(lp[token]), Rank: 1}
	for _, v := range lp {
		if v > lp[token] {
			out.Rank++
		}
	}
	out.Top = s.topLogprobs(lp, min(n, vocab))
	return out, nil
}

// logSoftmax returns the log-softmax, in float64, of the processed logits
// scaled by the temperature (1 for greedy rows), tokens outside
// allowed_token_ids at -Inf. It needs buildOverrides and blockBounds run
// for the row.
func (s *Sampler) logSoftmax(base []float32, nb int, p *api.Params) ([]float64, error) {
	allowed := func(t int32) bool { return true }
	if len(p.AllowedTokenIDs) > 0 {
		set := make(map[int32]bool, len(p.AllowedTokenIDs))
		for _, t := range p.AllowedTokenIDs {
			set[t] = true
		}
		allowed = func(t int32) bool { return set[t] }
	}
	invT := 1.0
	if p.Temperature >= api.GreedyBelow {
		invT = float64(float32(1 / float64(p.Temperature)))
	}
	if cap(s.lp) < len(base) {
		s.lp = make([]float64, len(base))
	}
	lp := s.lp[:len(base)]
	m := math.Inf(-1)
	for b := range nb {
		lo := b << blockShift
		for j, l := range s.blockVals(base, b) {
			v := math.Inf(-1)
			if allowed(int32(lo + j)) {
				v = float64(l) * invT
			}
			lp[lo+j] = v
			m = max(m, v)
		}
	}
	if math.IsInf(m, -1) {
		return nil, ErrNoCandidates
	}
	var z float64
	for _, v := range lp {
		z += math.Exp(v - m)
	}
	lz := m + math.Log(z)
	for i := range lp {
		lp[i] -= lz
	}
	return lp, nil
}

// topLogprobs returns the n (<= len(lp)) most likely tokens of lp, most
// likely first, ties by index; nil for n == 0. It uses s.sel and s.cands.
func (s *Sampler) topLogprobs(lp []float64, n int) []api.TokenLogprob {
	if n <= 0 {
		return nil
	}
	// Threshold by selection, then order the few survivors.
	s.sel = s.sel[:0]
	for _, v := range lp {
		s.sel = append(s.sel, float32(v))
	}
	th := kthLargest(s.sel, n)
	s.cands = s.cands[:0]
	for i, v := range lp {
		if float32(v) >= th {
			s.cands = append(s.cands, cand{idx: int32(i), l: float32(v)})
		}
	}
	sortCands(s.cands)
	top := make([]api.TokenLogprob, 0, n)
	for _, x := range s.cands[:n] {
		top = append(top, api.TokenLogprob{Token: x.idx, Logprob: float32(lp[x.idx])})
	}
	return top
}
