package sampler

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/blockmax"
	"github.com/tpcoord/tpcoord/noisepool"
)

// Processing order (vLLM v0 Sampler, so results are comparable):
//
//  1. allowed_token_ids: every other token is −inf.
//  2. logit_bias is added.
//  3. min_tokens: while len(Output) < MinTokens, stop_token_ids and EOS are −inf.
//  4. penalties: repetition (prompt ∪ output; l/r if l > 0 else l·r), then
//     frequency (−f·count in output), then presence (−p if in output).
//  5. greedy (temperature < 1e-5): the first index of the maximum.
//  6. temperature: s = float32(l · float32(1/T)). The scale is a multiply by
//     the rounded reciprocal, and it is the definition, not an
//     approximation of it: every path, pool or inline, uses this s.
//  7. top-k, tie-inclusive: keep l >= the k-th largest l.
//  8. top-p within the top-k survivors, renormalised: sort by l descending,
//     keep the shortest prefix whose weight reaches p of the total (at least
//     one token), and every token tied with its last one. Weights are
//     fastExp(s - s_max) summed in float64.
//  9. min-p: keep s with float64(s) - float64(s_max) >= ln(min_p), which is
//     p_i >= min_p·p_max, the same set before or after renormalising.
// 10. sample: argmax over kept tokens of float32(s + g), g = Gumbel(key,row,i);
//     ties go to the lowest index.
//
// Steps 7 to 9 only ever give a threshold on l ("floor") or, for top-k, a
// short candidate list, so the dense paths never sort the vocabulary.

const (
	blockShift = blockmax.Shift
	blockSize  = blockmax.Size // tokens per block bound
	// The pool's block maxima (Row.NoiseBlockMax) bound the sampler's
	// blocks: the sizes agree, or this does not compile.
	_        = uint(blockSize-noisepool.BlockSize) + uint(noisepool.BlockSize-blockSize)
	tabBits  = 12
	tabShift = 32 - tabBits
	tabSize  = 1 << tabBits
	// massBuckets covers float32 bit patterns of non-negative d >> 19
	// (+Inf is 0xff0).
	massShift   = 19
	massBuckets = 1 << (31 - massShift)
)

const (
	flagPrompt = 1 << iota
	flagOutput
	flagBlocked
	flagBias
	flagAllowed
)

type override struct {
	idx int32
	val float32
}

type cand struct {
	idx int32
	l   float32
	w   float32
}

// Sampler draws tokens with the log-space Gumbel-max rule. It keeps scratch
// buffers between calls, so it allocates nothing per step in steady state.
// A Sampler is not safe for concurrent use; give each goroutine its own.
type Sampler struct {
	cfg Config
	// denseOnly turns the sparse paths (sparse.go) off, for the tests
	// that compare them with the dense ones.
	denseOnly bool

	// Noise bound tables, derived from noisepool.GumbelFromBits once.
	// key(bits) = bits ^ flip is non-decreasing in the Gumbel value.
	flip uint32
	gMax float32
	tab  [tabSize + 1]float32 // tab[j] = Gumbel at key j<<tabShift; tab[tabSize] at key MaxUint32

	conv   []float32
	masked []float32 // maskRow's copy of a float32 row
	// allow is the row's mask while a row is sampled with it applied
	// block by block (lazyMask), nil otherwise; exact marks the blocks
	// whose blockMax is over the allowed tokens (the others' is a bound).
	allow    []uint64
	exact    []bool
	blockMax []float32
	hmask    []uint16 // top-p head bitmap, blockSize/16 words per block
	expArgs  expSumArgs
	expAcc   [16]float64
	ovStart  []int32 // overrides of block b are ov[ovStart[b]:ovStart[b+1]]
	ov       []override
	flags    []uint8
	counts   []int32
	touched  []int32
	cands    []cand
	idx      []int32
	noise    []float32
	sel      []float32
	bnd      []cand      // nucleusCut: the boundary bucket's tokens
	head     []cand      // sparseNucleus: the gathered tokens of the known buckets
	top      [32]float32 // sampleCut: the largest sampled logits
	lp       []float64   // Logprobs: the row's log-softmax
	mass     [massBuckets]float64
	blockBuf [blockSize]float32
	blocks   []int32 // argmaxBlockBounded: the blocks that may reach tau
	sink     float32 // touchBlocks' sums, kept so that its loads stay
}

// New returns a Sampler. It panics if cfg is invalid (check with Validate).
func New(cfg Config) *Sampler {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	s := &Sampler{cfg: cfg}
	lo, hi := noisepool.GumbelFromBits(0), noisepool.GumbelFromBits(math.MaxUint32)
	if hi < lo {
		s.flip = math.MaxUint32
	}
	s.gMax = max(lo, hi)
	for j := range tabSize {
		s.tab[j] = noisepool.GumbelFromBits(uint32(j)<<tabShift ^ s.flip)
	}
	s.tab[tabSize] = s.gMax
	if cfg.Vocab > 0 {
		s.grow(cfg.Vocab)
	}
	return s
}

func (s *Sampler) grow(vocab int) {
	if len(s.flags) >= vocab {
		return
	}
	nb := (vocab + blockSize - 1) / blockSize
	s.flags = make([]uint8, vocab)
	s.counts = make([]int32, vocab)
	s.blockMax = make([]float32, nb)
	s.hmask = make([]uint16, nb*blockSize/16)
	s.ovStart = make([]int32, nb+1)
}

// Sample chooses one token per row: out[i] is the result for rows[i].
// len(out) must be at least len(rows). A bad row gets an error in its
// Result and does not affect the others.
func (s *Sampler) Sample(rows []Row, out []Result) {
	_ = out[:len(rows)]
	for i := range rows {
		tok, err := s.sampleRow(&rows[i])
		if err != nil {
			out[i] = Result{Token: -1, Err: err}
			continue
		}
		out[i] = Result{Token: tok}
	}
}

// baseRow returns the row's logits as float32, converting half types into
// scratch.
func (s *Sampler) baseRow(r *Row) []float32 {
	if r.Dtype == Float32 {
		return r.Logits
	}
	if cap(s.conv) < len(r.Logits16) {
		s.conv = make([]float32, len(r.Logits16))
	}
	s.conv = s.conv[:len(r.Logits16)]
	convertRow(s.conv, r.Logits16, r.Dtype)
	return s.conv
}

func (s *Sampler) sampleRow(r *Row) (int32, error) {
	p := r.Params
	if p == nil {
		p = &defaultParams
	}
	vocab, err := s.checkRow(r, p)
	if err != nil {
		return -1, err
	}
	s.grow(vocab)
	base := s.baseRow(r)
	nb := (vocab + blockSize - 1) / blockSize
	if r.Allow != nil && lazyMask(p) {
		s.allow = r.Allow
		defer func() { s.allow = nil }()
	} else if r.Allow != nil {
		base = s.maskRow(r, base)
	}
	if err := s.buildOverrides(r, p, base); err != nil {
		return -1, err
	}
	s.indexOverrides(vocab, nb)
	if len(p.AllowedTokenIDs) == 0 && !s.denseOnly && s.allow == nil && preferSparse(p, vocab) {
		if tok, ok, err := s.sampleSparse(r, p, base, nb); ok {
			return tok, err
		}
	}
	if err := s.blockBounds(base, nb); err != nil {
		if s.allow == nil {
			return -1, err
		}
		// A NaN or +Inf, perhaps in a refused token: mask the whole row
		// (where a refused token's value cannot matter) and look again.
		s.allow = nil
		return s.sampleRow(&Row{Logits: s.maskRow(r, base), Dtype: Float32, Params: r.Params, Prompt: r.Prompt, Output: r.Output,
			EOS: r.EOS, NoiseKey: r.NoiseKey, NoiseRow: r.NoiseRow, Noise: r.Noise, NoiseBound: r.NoiseBound, NoiseBlockMax: r.NoiseBlockMax})
	}
	if s.allow != nil {
		s.exactTop(base, nb)
	}
	if len(p.AllowedTokenIDs) > 0 {
		return s.sampleAllowed(r, p, base)
	}
	M := float32(math.Inf(-1))
	for _, m := range s.blockMax[:nb] {
		if m > M { // not the builtin max: a call on POWER8 (see blockmax.Of)
			M = m
		}
	}
	if M == float32(math.Inf(-1)) {
		return -1, ErrNoCandidates
	}
	t0 := s.firstAt(base, nb, M)
	if p.Temperature < api.GreedyBelow {
		return t0, nil
	}
	invT := float32(1 / float64(p.Temperature))
	if math.IsInf(float64(float32(M*invT)), 1) {
		return t0, nil // l/T overflows: the T -> 0 limit is the argmax
	}
	if p.TopK > 0 && p.TopK < vocab {
		s.selectTopK(base, nb, p.TopK)
		return s.sampleList(r, p, invT)
	}
	floor := float32(math.Inf(-1))
	if p.TopP > 0 && p.TopP < 1 {
		floor = s.nucleusFloor(base, nb, M, invT, p.TopP)
	}
	if p.MinP > 0 {
		floor = max(floor, minPFloor(M, invT, p.MinP))
	}
	return s.lazyArgmax(r, base, nb, M, t0, invT, floor), nil
}

// checkRow returns the row's vocabulary size, or an error for a row that
// cannot be sampled as given.
func (s *Sampler) checkRow(r *Row, p *api.Params) (int, error) {
	if r.Dtype > BFloat16 {
		return 0, fmt.Errorf("sampler: unknown dtype %v", r.Dtype)
	}
	vocab := r.Vocab()
	if vocab == 0 {
		return 0, fmt.Errorf("sampler: empty logits row")
	}
	if s.cfg.CheckParams {
		if err := p.Validate(vocab); err != nil {
			return 0, fmt.Errorf("sampler: %w", err)
		}
	}
	if r.Noise != nil && len(r.Noise) != vocab {
		return 0, fmt.Errorf("sampler: noise row has %d values for vocab %d", len(r.Noise), vocab)
	}
	if r.NoiseBlockMax != nil && (r.Noise == nil || len(r.NoiseBlockMax) != noisepool.BlockCount(vocab)) {
		return 0, fmt.Errorf("sampler: noise block maxima: %d for vocab %d, want %d beside a noise row",
			len(r.NoiseBlockMax), vocab, noisepool.BlockCount(vocab))
	}
	return vocab, nil
}

// buildOverrides computes the processed logit of every token that steps 2
// to 4 touch, sorted by index; all other tokens keep their logit.
func (s *Sampler) buildOverrides(r *Row, p *api.Params, base []float32) error {
	s.ov = s.ov[:0]
	s.touched = s.touched[:0]
	defer s.resetMarks()
	rp := p.RepetitionPenalty
	useRep := rp != 0 && rp != 1
	usePen := p.FrequencyPenalty != 0 || p.PresencePenalty != 0
	if err := s.markTouched(r, p, int32(len(base)), useRep, usePen); err != nil {
		return err
	}
	for _, t := range s.touched {
		f := s.flags[t]
		v := base[t]
		if s.allow != nil && !allowed(s.allow, t) {
			v = float32(math.Inf(-1)) // refused by the grammar, whatever else applies
		}
		if f&flagBias != 0 {
			v = float32(v + p.LogitBias[t])
		}
		if f&flagBlocked != 0 {
			v = float32(math.Inf(-1))
		}
		if useRep && f&(flagPrompt|flagOutput) != 0 {
			if v > 0 {
				v = float32(v / rp)
			} else {
				v = float32(v * rp)
			}
		}
		if usePen && s.counts[t] > 0 {
			v = float32(v - float32(p.FrequencyPenalty*float32(s.counts[t])))
			v = float32(v - p.PresencePenalty)
		}
		if v != v || math.IsInf(float64(v), 1) {
			return fmt.Errorf("sampler: token %d is %v after bias and penalties", t, v)
		}
		s.ov = append(s.ov, override{t, v})
	}
	slices.SortFunc(s.ov, func(a, b override) int { return cmp.Compare(a.idx, b.idx) })
	return nil
}

// markTouched flags every token that steps 2 to 4 change (appending each
// to s.touched once) and counts output tokens, checking every token id
// against the vocabulary. The caller resets the marks.
func (s *Sampler) markTouched(r *Row, p *api.Params, vocab int32, useRep, usePen bool) error {
	if useRep {
		for _, t := range r.Prompt {
			if t < 0 || t >= vocab {
				return fmt.Errorf("sampler: prompt token %d out of range [0, %d)", t, vocab)
			}
			s.mark(t, flagPrompt)
		}
	}
	if useRep || usePen {
		for _, t := range r.Output {
			if t < 0 || t >= vocab {
				return fmt.Errorf("sampler: output token %d out of range [0, %d)", t, vocab)
			}
			s.mark(t, flagOutput)
			s.counts[t]++
		}
	}
	for t := range p.LogitBias {
		if t < 0 || t >= vocab {
			return fmt.Errorf("sampler: logit_bias token %d out of range [0, %d)", t, vocab)
		}
		s.mark(t, flagBias)
	}
	if len(r.Output) < p.MinTokens {
		for _, t := range p.StopTokenIDs {
			if t < 0 || t >= vocab {
				return fmt.Errorf("sampler: stop token %d out of range [0, %d)", t, vocab)
			}
			s.mark(t, flagBlocked)
		}
		if r.EOS >= 0 && r.EOS < vocab {
			s.mark(r.EOS, flagBlocked)
		}
	}
	return nil
}

// mark sets flag f on token t, recording t in s.touched the first time.
func (s *Sampler) mark(t int32, f uint8) {
	if s.flags[t] == 0 {
		s.touched = append(s.touched, t)
	}
	s.flags[t] |= f
}

func (s *Sampler) resetMarks() {
	for _, t := range s.touched {
		s.flags[t] = 0
		s.counts[t] = 0
	}
}

// blockBounds sets blockMax[b] to the maximum processed logit of block b
// (indexOverrides must have run for the row) and
// rejects rows with NaN or +Inf. A zero maximum is +0 (see kernels.go).
func (s *Sampler) blockBounds(base []float32, nb int) error {
	bad := active.blockMax.Row(base, s.blockMax[:nb])
	for _, m := range s.blockMax[:nb] {
		bad = bad || m > math.MaxFloat32
	}
	if bad {
		for i, v := range base {
			if v != v {
				return fmt.Errorf("sampler: logits row has NaN at token %d", i)
			}
			if math.IsInf(float64(v), 1) {
				return fmt.Errorf("sampler: logits row has +Inf at token %d", i)
			}
		}
	}
	// Blocks holding overrides get their exact processed maximum.
	for b := range nb {
		if s.ovStart[b] != s.ovStart[b+1] {
			s.blockMax[b], _ = blockmax.Of(s.blockVals(base, b)) // overrides are finite or −Inf
		}
	}
	return nil
}

// indexOverrides sets ovStart: the overrides of block b are
// s.ov[ovStart[b]:ovStart[b+1]].
func (s *Sampler) indexOverrides(n, nb int) {
	oi := 0
	for b := range nb {
		s.ovStart[b] = int32(oi)
		end := int32(min((b+1)<<blockShift, n))
		for oi < len(s.ov) && s.ov[oi].idx < end {
			oi++
		}
	}
	s.ovStart[nb] = int32(oi)
}

// blockVals returns the processed logits of block b: the base row itself, or
// a scratch copy with the block's overrides applied.
func (s *Sampler) blockVals(base []float32, b int) []float32 {
	lo, hi := b<<blockShift, min((b+1)<<blockShift, len(base))
	o0, o1 := s.ovStart[b], s.ovStart[b+1]
	if o0 == o1 && s.allow == nil {
		return base[lo:hi]
	}
	buf := s.blockBuf[:hi-lo]
	copy(buf, base[lo:hi])
	for _, o := range s.ov[o0:o1] {
		buf[int(o.idx)-lo] = o.val
	}
	if s.allow != nil {
		maskBlock(buf, s.allow, lo)
	}
	return buf
}

// firstAt returns the lowest index whose processed logit equals M.
func (s *Sampler) firstAt(base []float32, nb int, M float32) int32 {
	for b := range nb {
		if s.blockMax[b] == M {
			for j, v := range s.blockVals(base, b) {
				if v == M {
					return int32(b<<blockShift + j)
				}
			}
		}
	}
	panic("sampler: block bound without a token")
}

// effective returns the processed logit of token t.
func (s *Sampler) effective(base []float32, t int32) float32 {
	if i, ok := slices.BinarySearchFunc(s.ov, t, func(o override, t int32) int { return cmp.Compare(o.idx, t) }); ok {
		return s.ov[i].val
	}
	return base[t]
}

// nucleusFloor returns l* such that the top-p nucleus is {i : l_i >= l*}.
//
// One vector pass (expSum) sums every weight w = fastExp(s - s_max) and
// marks the head: the tokens whose d = M - l lies in the histogram buckets
// 0..Bh (see nucleusFloorFull for the buckets), Bh chosen so that the tail
// cannot hold more than a (1-p)/e share of the mass. The histogram is then
// built from the head alone; every bucket up to Bh is complete, so if the
// cumulative mass reaches p·total within the head the boundary is exactly
// the one the full histogram gives. If it does not (rounding, or a bound
// that was too tight), nucleusFloorFull decides.
func (s *Sampler) nucleusFloor(base []float32, nb int, M, invT, topP float32) float32 {
	smax := float32(M * invT)
	dh, bh := nucleusHead(len(base), invT, topP)
	target := float64(topP) * s.weightSum(base, nb, expSumArgs{invT: invT, smax: smax, M: M, dh: dh})
	s.headHistogram(base, nb, M, invT)
	if l, ok := s.nucleusCut(s.cands, target, M, bh+1); ok {
		return l
	}
	return s.nucleusFloorFull(base, nb, M, invT, topP)
}

// nucleusHead returns dh and bh of nucleusFloor: the head is the tokens
// with float32(M - l) < dh, that is the mass buckets 0..bh.
func nucleusHead(vocab int, invT, topP float32) (dh float32, bh uint32) {
	// Tail tokens have s - smax < -G, so weight < e^-G each, and total >= 1
	// (the maximum's weight): with G = ln(vocab/(1-p)) + 1 the tail holds
	// less than (1-p)/e of the total.
	G := math.Log(float64(vocab)/(1-float64(topP))) + 1
	bh = math.Float32bits(float32(G/float64(invT))) >> massShift
	dh = float32(math.Inf(1))
	if (bh+1)<<massShift < 0x7f800000 {
		dh = math.Float32frombits((bh + 1) << massShift)
	}
	return dh, bh
}

// nucleusCut returns the top-p floor for the weight target from s.mass,
// whose buckets below known hold the whole weight of their tokens, and
// head, every token of those buckets with its weight. ok is false if the
// cumulative mass does not reach target within the known buckets. It
// leaves head unchanged, so a caller can ask for several targets.
func (s *Sampler) nucleusCut(head []cand, target float64, M float32, known uint32) (float32, bool) {
	var cum float64
	B := uint32(0)
	for ; ; B++ {
		if B >= known || B >= massBuckets {
			return 0, false
		}
		if cum+s.mass[B] >= target {
			break
		}
		cum += s.mass[B]
	}
	s.bnd = s.bnd[:0]
	for _, c := range head {
		if math.Float32bits(float32(M-c.l))>>massShift == B {
			s.bnd = append(s.bnd, c)
		}
	}
	sortCands(s.bnd)
	for _, c := range s.bnd {
		cum += float64(c.w)
		if cum >= target {
			return c.l, true
		}
	}
	return s.bnd[len(s.bnd)-1].l, true
}

// weightSum runs the expSum kernel over the blocks that can hold a nonzero
// weight: it returns the total weight of the row and leaves the head bitmap
// (tokens with float32(M - l) < a.dh) in s.hmask.
func (s *Sampler) weightSum(base []float32, nb int, a expSumArgs) float64 {
	// args and acc live in s: passed through the kernel's func value they
	// would escape to the heap on every call.
	args, acc := &s.expArgs, &s.expAcc
	*args = a
	clear(acc[:])
	for b := range nb {
		if !(float32(float32(s.blockMax[b]*a.invT)-a.smax) >= -86) {
			continue // every weight in the block is 0
		}
		active.expSumOf(s.blockVals(base, b), args, acc, s.hmask[b*blockSize/16:])
	}
	var total float64
	for _, x := range acc {
		total += x
	}
	return total
}

// headHistogram fills s.mass with the weights of the head tokens that
// weightSum marked, by bucket of d = M - l, and collects those tokens with
// their weights into s.cands.
func (s *Sampler) headHistogram(base []float32, nb int, M, invT float32) {
	smax := float32(M * invT)
	clear(s.mass[:])
	s.cands = s.cands[:0]
	for b := range nb {
		if !(float32(float32(s.blockMax[b]*invT)-smax) >= -86) {
			continue
		}
		vals := s.blockVals(base, b)
		lo := b << blockShift
		for k, word := range s.hmask[b*blockSize/16 : b*blockSize/16+(len(vals)+15)/16] {
			for word != 0 {
				j := k*16 + bits.TrailingZeros16(word)
				word &= word - 1
				l := vals[j]
				w := fastExp(float32(float32(l*invT) - smax))
				s.mass[math.Float32bits(float32(M-l))>>massShift] += float64(w)
				s.cands = append(s.cands, cand{idx: int32(lo + j), l: l, w: w})
			}
		}
	}
}

// nucleusFloorFull returns l* such that the top-p nucleus is {i : l_i >= l*}.
//
// It finds the nucleus without sorting the vocabulary: one fused pass
// computes each weight w = fastExp(s - s_max) and adds it to a histogram
// bucket keyed by the float32 bits of d = M - l. Those bits are monotone in
// d, so the buckets are ordered by l exactly as a descending sort would be.
// Scanning buckets gives the boundary bucket; only its tokens are collected
// and sorted. The set is the one a full sort plus float64 cumsum of the same
// weights gives; only the float64 summation order differs (relative error
// ~1e-16 · bucket count, far below the float32 weights' own error).
func (s *Sampler) nucleusFloorFull(base []float32, nb int, M, invT, topP float32) float32 {
	clear(s.mass[:])
	smax := float32(M * invT)
	var total float64
	for b := range nb {
		bm := s.blockMax[b]
		if !(float32(float32(bm*invT)-smax) >= -86) {
			continue // every weight in the block is 0
		}
		for _, l := range s.blockVals(base, b) {
			w := fastExp(float32(float32(l*invT) - smax))
			s.mass[math.Float32bits(float32(M-l))>>massShift] += float64(w)
		}
	}
	for _, m := range s.mass {
		total += m
	}
	target := float64(topP) * total
	var cum float64
	B := uint32(0)
	for ; B < massBuckets-1; B++ {
		if cum+s.mass[B] >= target {
			break
		}
		cum += s.mass[B]
	}
	s.cands = s.cands[:0]
	for b := range nb {
		bm := s.blockMax[b]
		if !(float32(float32(bm*invT)-smax) >= -86) || math.Float32bits(float32(M-bm))>>massShift > B {
			continue
		}
		lo := b << blockShift
		for j, l := range s.blockVals(base, b) {
			if math.Float32bits(float32(M-l))>>massShift == B {
				s.cands = append(s.cands, cand{idx: int32(lo + j), l: l, w: fastExp(float32(float32(l*invT) - smax))})
			}
		}
	}
	sortCands(s.cands)
	if len(s.cands) == 0 {
		return M
	}
	for _, c := range s.cands {
		cum += float64(c.w)
		if cum >= target {
			return c.l
		}
	}
	return s.cands[len(s.cands)-1].l
}

// minPFloor returns the smallest float32 l with
// float64(float32(l·invT)) - float64(s_max) >= ln(minP).
func minPFloor(M, invT, minP float32) float32 {
	smax := float64(float32(M * invT))
	lnp := math.Log(float64(minP))
	return smallestWith(M, func(l float32) bool { return float64(float32(l*invT))-smax >= lnp })
}

// sortCands orders by l descending, then index ascending.
func sortCands(c []cand) {
	slices.SortFunc(c, func(a, b cand) int {
		if a.l != b.l {
			if a.l > b.l {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.idx, b.idx)
	})
}

// selectTopK collects into s.cands every token with l >= the k-th largest
// processed logit (tie-inclusive), without sorting the vocabulary: the
// k-th largest block maximum is a lower bound of the k-th largest logit, so
// only blocks at or above it are scanned.
func (s *Sampler) selectTopK(base []float32, nb, k int) {
	th := float32(math.Inf(-1))
	if k <= nb {
		s.sel = append(s.sel[:0], s.blockMax[:nb]...)
		th = kthLargest(s.sel, k)
	}
	s.cands = s.cands[:0]
	for b := range nb {
		if s.blockMax[b] < th || s.blockMax[b] == float32(math.Inf(-1)) {
			continue
		}
		lo := b << blockShift
		for j, l := range s.blockVals(base, b) {
			if l >= th && l > float32(math.Inf(-1)) {
				s.cands = append(s.cands, cand{idx: int32(lo + j), l: l})
			}
		}
	}
	s.keepTopK(k)
}

// keepTopK keeps the tokens of s.cands with l >= the k-th largest l of
// s.cands (all of them if there are at most k), in their order.
func (s *Sampler) keepTopK(k int) {
	if len(s.cands) <= k {
		return
	}
	s.sel = s.sel[:0]
	for _, c := range s.cands {
		s.sel = append(s.sel, c.l)
	}
	vk := kthLargest(s.sel, k)
	n := 0
	for _, c := range s.cands {
		if c.l >= vk {
			s.cands[n] = c
			n++
		}
	}
	s.cands = s.cands[:n]
}

// kthLargest returns the k-th largest value of v (1-based), reordering v.
// Quickselect with median-of-three pivots; v holds no NaN.
func kthLargest(v []float32, k int) float32 {
	lo, hi, want := 0, len(v)-1, k-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		a, b, c := v[lo], v[mid], v[hi]
		pivot := max(min(a, b), min(max(a, b), c))
		i, j := lo, hi
		for i <= j {
			for v[i] > pivot {
				i++
			}
			for v[j] < pivot {
				j--
			}
			if i <= j {
				v[i], v[j] = v[j], v[i]
				i++
				j--
			}
		}
		switch {
		case want <= j:
			hi = j
		case want >= i:
			lo = i
		default:
			return v[want]
		}
	}
	return v[want]
}

// sampleAllowed handles rows with allowed_token_ids: the support is the
// allowed list, so the row is sampled from a short candidate list.
func (s *Sampler) sampleAllowed(r *Row, p *api.Params, base []float32) (int32, error) {
	s.cands = s.cands[:0]
	for _, t := range p.AllowedTokenIDs {
		if t < 0 || int(t) >= len(base) {
			return -1, fmt.Errorf("sampler: allowed token %d out of range [0, %d)", t, len(base))
		}
		if s.flags[t]&flagAllowed != 0 {
			continue
		}
		s.flags[t] |= flagAllowed
		s.touched = append(s.touched, t)
		if l := s.effective(base, t); l > float32(math.Inf(-1)) {
			s.cands = append(s.cands, cand{idx: t, l: l})
		}
	}
	s.resetMarks()
	if len(s.cands) == 0 {
		return -1, ErrNoCandidates
	}
	sortCands(s.cands)
	if p.Temperature < api.GreedyBelow {
		return s.cands[0].idx, nil
	}
	invT := float32(1 / float64(p.Temperature))
	if math.IsInf(float64(float32(s.cands[0].l*invT)), 1) {
		return s.cands[0].idx, nil
	}
	if k := p.TopK; k > 0 && k < len(s.cands) {
		vk := s.cands[k-1].l
		n := k
		for n < len(s.cands) && s.cands[n].l >= vk {
			n++
		}
		s.cands = s.cands[:n]
	}
	return s.sampleList(r, p, invT)
}

// sampleList samples from s.cands (every other token is −inf), applying
// top-k (already applied by the callers), top-p and min-p.
func (s *Sampler) sampleList(r *Row, p *api.Params, invT float32) (int32, error) {
	c := s.cands
	sortCands(c)
	M := c[0].l
	smax := float32(M * invT)
	if p.TopP > 0 && p.TopP < 1 {
		c = topPPrefix(c, invT, smax, p.TopP)
	}
	if p.MinP > 0 {
		f := minPFloor(M, invT, p.MinP)
		n := 1
		for n < len(c) && c[n].l >= f {
			n++
		}
		c = c[:n]
	}
	s.idx = s.idx[:0]
	for _, x := range c {
		s.idx = append(s.idx, x.idx)
	}
	s.fillNoise(r)
	best, tau := int32(-1), float32(math.Inf(-1))
	for i, x := range c {
		sc := float32(float32(x.l*invT) + s.noise[i])
		if sc > tau || (sc == tau && (best < 0 || x.idx < best)) {
			tau, best = sc, x.idx
		}
	}
	if best < 0 { // every score NaN: only possible with a corrupt pool row
		return -1, fmt.Errorf("sampler: no finite score (bad noise row?)")
	}
	return best, nil
}

// topPPrefix returns the top-p nucleus of c, sorted by l descending: the
// shortest prefix whose weight fastExp(s - smax) reaches topP of the total,
// extended over the tokens tied with its last one. It sets every c[i].w.
func topPPrefix(c []cand, invT, smax, topP float32) []cand {
	var total float64
	for i := range c {
		c[i].w = fastExp(float32(float32(c[i].l*invT) - smax))
		total += float64(c[i].w)
	}
	target := float64(topP) * total
	var cum float64
	n := len(c)
	for i := range c {
		cum += float64(c[i].w)
		if cum >= target {
			n = i + 1
			break
		}
	}
	for n < len(c) && c[n].l == c[n-1].l {
		n++
	}
	return c[:n]
}
