package sampler

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"slices"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/noisepool"
)

// Reference is the algorithm the fast Sampler replaces, kept for tests and
// benchmarks: vLLM's forward_native path over a dense float32 copy of the
// row. It applies the same processing steps in the same order, scales by
// l/T, applies top-k with a partial selection when top-p is off (like
// torch.topk in vLLM's apply_top_k_only) and a full sort of the vocabulary
// when top-p is on (like apply_top_k_top_p), computes the softmax with the
// same fast exp, applies min-p on probabilities, then draws exponential
// noise q ~ Exp(1) for every token of the row and returns argmax(probs/q).
//
// Its noise is the same generator's: the row's Gumbel values g (Row.Noise
// when the caller has them, as from the noise pool, else noisepool.FillRow
// for the whole row, as the old algorithm drew exponential_() for every
// token) turned into q = exp(-g) ~ Exp(1) with the same fast exp. So a
// baseline built on it differs from Sampler only in the algorithm. Like
// Sampler it is not safe for concurrent use.
type Reference struct {
	cfg    Config
	buf    []float32
	probs  []float32
	order  []int32
	counts []int32
	mask   []bool
	heap   minHeap
	noise  []float32
}

// NewReference returns a Reference sampler. It panics if cfg is invalid.
func NewReference(cfg Config) *Reference {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return &Reference{cfg: cfg}
}

// Sample has the same contract as Sampler.Sample.
func (r *Reference) Sample(rows []Row, out []Result) {
	_ = out[:len(rows)]
	for i := range rows {
		tok, err := r.sampleRow(&rows[i])
		if err != nil {
			out[i] = Result{Token: -1, Err: err}
			continue
		}
		out[i] = Result{Token: tok}
	}
}

func (r *Reference) sampleRow(row *Row) (int32, error) {
	p := row.Params
	if p == nil {
		p = &defaultParams
	}
	V := row.Vocab()
	if V == 0 {
		return -1, fmt.Errorf("sampler: empty logits row")
	}
	if r.cfg.CheckParams {
		if err := p.Validate(V); err != nil {
			return -1, fmt.Errorf("sampler: %w", err)
		}
	}
	l, err := r.load(row)
	if err != nil {
		return -1, err
	}
	if err := r.process(row, p, l); err != nil {
		return -1, err
	}
	inf := float32(math.Inf(-1))
	// 5. greedy.
	if p.Temperature < api.GreedyBelow {
		t := argmax(l)
		if l[t] == inf {
			return -1, ErrNoCandidates
		}
		return t, nil
	}
	// 6. temperature.
	T := p.Temperature
	for i := range l {
		l[i] = float32(l[i] / T)
	}
	// 7, 8. top-k, top-p.
	r.truncate(l, p)
	// softmax.
	m := l[argmax(l)]
	if m == inf {
		return -1, ErrNoCandidates
	}
	if math.IsInf(float64(m), 1) {
		return argmax(l), nil
	}
	probs, pmax := r.softmax(l, m)
	// 9. min-p.
	if p.MinP > 0 {
		th := float32(p.MinP * pmax)
		for i, q := range probs {
			if q < th {
				probs[i] = 0
			}
		}
	}
	// 10. probs / q with q ~ Exp(1) for the whole row.
	return r.drawExp(row, probs), nil
}

// load returns a dense float32 copy of the row's logits in r's scratch,
// rejecting NaN and +Inf.
func (r *Reference) load(row *Row) ([]float32, error) {
	V := row.Vocab()
	if cap(r.buf) < V {
		r.buf = make([]float32, V)
		r.probs = make([]float32, V)
		r.order = make([]int32, V)
		r.counts = make([]int32, V)
		r.mask = make([]bool, V)
	}
	l := r.buf[:V]
	if row.Dtype == Float32 {
		copy(l, row.Logits)
	} else {
		convertRow(l, row.Logits16, row.Dtype)
	}
	if row.Allow != nil {
		applyMask(l, l, row.Allow)
	}
	for i, v := range l {
		if v != v || math.IsInf(float64(v), 1) {
			return nil, fmt.Errorf("sampler: logits row has %v at token %d", v, i)
		}
	}
	return l, nil
}

// process applies steps 1 to 4 (allowed tokens, bias, min_tokens,
// penalties) to l in place and rejects a result that is NaN or +Inf.
func (r *Reference) process(row *Row, p *api.Params, l []float32) error {
	V := len(l)
	inf := float32(math.Inf(-1))
	// 1. allowed_token_ids.
	if len(p.AllowedTokenIDs) > 0 {
		if err := r.allowOnly(l, p.AllowedTokenIDs); err != nil {
			return err
		}
	}
	// 2. logit_bias.
	for t, b := range p.LogitBias {
		if t < 0 || int(t) >= V {
			return fmt.Errorf("sampler: logit_bias token %d out of range [0, %d)", t, V)
		}
		l[t] = float32(l[t] + b)
	}
	// 3. min_tokens.
	if len(row.Output) < p.MinTokens {
		for _, t := range p.StopTokenIDs {
			if t < 0 || int(t) >= V {
				return fmt.Errorf("sampler: stop token %d out of range [0, %d)", t, V)
			}
			l[t] = inf
		}
		if row.EOS >= 0 && int(row.EOS) < V {
			l[row.EOS] = inf
		}
	}
	// 4. penalties.
	rp := p.RepetitionPenalty
	if (rp != 0 && rp != 1) || p.FrequencyPenalty != 0 || p.PresencePenalty != 0 {
		if err := r.penalize(row, p, l); err != nil {
			return err
		}
	}
	for i, v := range l {
		if v != v || math.IsInf(float64(v), 1) {
			return fmt.Errorf("sampler: token %d is %v after bias and penalties", i, v)
		}
	}
	return nil
}

// allowOnly sets every token of l not in ids to -Inf.
func (r *Reference) allowOnly(l []float32, ids []int32) error {
	mask := r.mask[:len(l)]
	clear(mask)
	for _, t := range ids {
		if t < 0 || int(t) >= len(l) {
			return fmt.Errorf("sampler: allowed token %d out of range [0, %d)", t, len(l))
		}
		mask[t] = true
	}
	for i := range l {
		if !mask[i] {
			l[i] = float32(math.Inf(-1))
		}
	}
	return nil
}

// penalize applies the repetition, frequency and presence penalties, dense
// over the vocabulary as vLLM's apply_penalties.
func (r *Reference) penalize(row *Row, p *api.Params, l []float32) error {
	V := len(l)
	rp := p.RepetitionPenalty
	counts, seen := r.counts[:V], r.mask[:V]
	clear(counts)
	clear(seen)
	for _, t := range row.Output {
		if t < 0 || int(t) >= V {
			return fmt.Errorf("sampler: output token %d out of range [0, %d)", t, V)
		}
		counts[t]++
		seen[t] = true
	}
	for _, t := range row.Prompt {
		if t < 0 || int(t) >= V {
			return fmt.Errorf("sampler: prompt token %d out of range [0, %d)", t, V)
		}
		seen[t] = true
	}
	for i := range l {
		if rp != 0 && rp != 1 && seen[i] {
			if l[i] > 0 {
				l[i] = float32(l[i] / rp)
			} else {
				l[i] = float32(l[i] * rp)
			}
		}
		if counts[i] > 0 {
			l[i] = float32(l[i] - float32(p.FrequencyPenalty*float32(counts[i])))
			l[i] = float32(l[i] - p.PresencePenalty)
		}
	}
	return nil
}

// truncate applies steps 7 and 8 (top-k, top-p) to the scaled logits l,
// setting the cut tokens to -Inf: a full sort when top-p is on, a heap
// selection for top-k alone.
func (r *Reference) truncate(l []float32, p *api.Params) {
	topK := p.TopK
	if topK >= len(l) {
		topK = 0
	}
	switch {
	case p.TopP > 0 && p.TopP < 1:
		r.topKTopPSort(l, topK, p.TopP)
	case topK > 0:
		vk := r.kthLargestHeap(l, topK)
		for i := range l {
			if l[i] < vk {
				l[i] = float32(math.Inf(-1))
			}
		}
	}
}

// softmax returns the probabilities of l, whose maximum is m (finite), in
// r's scratch, and their maximum.
func (r *Reference) softmax(l []float32, m float32) ([]float32, float32) {
	probs := r.probs[:len(l)]
	var z float64
	for i, v := range l {
		probs[i] = fastExp(float32(v - m))
		z += float64(probs[i])
	}
	inv := float32(1 / z)
	pmax := float32(0)
	for i := range probs {
		probs[i] = float32(probs[i] * inv)
		pmax = max(pmax, probs[i])
	}
	return probs, pmax
}

// drawExp is step 10: argmax of probs / q with q ~ Exp(1) for the whole
// row, q = exp(-g) from the row's Gumbel noise.
func (r *Reference) drawExp(row *Row, probs []float32) int32 {
	g := row.Noise
	if len(g) != len(probs) || row.NoiseBound {
		if cap(r.noise) < len(probs) {
			r.noise = make([]float32, len(probs))
		}
		g = r.noise[:len(probs)]
		noisepool.FillRow(row.NoiseKey, row.NoiseRow, g)
	}
	best, bestV := int32(-1), float32(-1)
	for i, q := range probs {
		e := fastExp(-g[i]) // fastExp's domain is x <= 0
		if g[i] < 0 {
			e = 1 / fastExp(g[i])
		}
		if v := float32(q / e); v > bestV {
			best, bestV = int32(i), v
		}
	}
	return best
}

func argmax(l []float32) int32 {
	best := 0
	for i, v := range l {
		if v > l[best] {
			best = i
		}
	}
	return int32(best)
}

// topKTopPSort is vLLM's apply_top_k_top_p: sort the whole row ascending,
// mask below the k-th largest, softmax, cumulative sum, mask where the
// cumulative sum is <= 1-p, always keeping the largest. Ties at the top-p
// boundary are kept, as in Sampler.
func (r *Reference) topKTopPSort(l []float32, topK int, topP float32) {
	V := len(l)
	order := r.order[:V]
	for i := range order {
		order[i] = int32(i)
	}
	// Ascending by value, index descending within ties, so the descending
	// walk meets ties in index order.
	slices.SortFunc(order, func(a, b int32) int {
		if c := cmp.Compare(l[a], l[b]); c != 0 {
			return c
		}
		return cmp.Compare(b, a)
	})
	inf := float32(math.Inf(-1))
	if topK > 0 {
		vk := l[order[V-topK]]
		for _, i := range order[:V-topK] {
			if l[i] < vk {
				l[i] = inf
			}
		}
	}
	m := l[order[V-1]]
	var z float64
	for _, i := range order {
		z += float64(fastExp(float32(l[i] - m)))
	}
	// cumsum ascending; keep where cum > (1-p)·z.
	limit := (1 - float64(topP)) * z
	var cum float64
	cut := -1 // order[:cut+1] are masked
	for j, i := range order[:V-1] {
		cum += float64(fastExp(float32(l[i] - m)))
		if cum <= limit {
			cut = j
		} else {
			break
		}
	}
	if cut >= 0 {
		edge := l[order[cut+1]]
		for _, i := range order[:cut+1] {
			if l[i] != edge {
				l[i] = inf
			}
		}
	}
}

type minHeap []float32

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(float32)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// kthLargestHeap returns the k-th largest value with a size-k min-heap, the
// way torch.topk works on CPU.
func (r *Reference) kthLargestHeap(l []float32, k int) float32 {
	h := r.heap[:0]
	for _, v := range l[:k] {
		h = append(h, v)
	}
	heap.Init(&h)
	for _, v := range l[k:] {
		if v > h[0] {
			h[0] = v
			heap.Fix(&h, 0)
		}
	}
	r.heap = h
	return h[0]
}
