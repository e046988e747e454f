package sampler

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/noisepool"
)

// specials are the values every kernel test plants at each position class.
var specials = []float32{
	float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
	float32(math.Copysign(0, -1)), 0,
	math.Float32frombits(1), math.Float32frombits(0x807fffff), // ± denormals
	math.MaxFloat32, -math.MaxFloat32, 30,
}

// positions returns the position classes of a row of length n: both ends,
// the middle, every lane of the first and last 32-token group, both sides
// of every block boundary, and a few random ones.
func positions(n int, r *rand.Rand) []int {
	if n == 0 {
		return nil
	}
	ps := []int{0, n - 1, n / 2}
	for j := range 32 {
		ps = append(ps, min(j, n-1), max(n-1-j, 0))
	}
	for b := blockSize; b < n; b += blockSize {
		ps = append(ps, b-1, b)
	}
	for range 3 {
		ps = append(ps, r.IntN(n))
	}
	return ps
}

func randRow(n int, r *rand.Rand) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * 4)
		if r.IntN(50) == 0 {
			v[i] = float32(math.Inf(-1))
		}
	}
	return v
}

// vectorImpls returns the non-Go implementations, skipping the test on
// machines without one (the sampler tests cover the Go kernels there).
func vectorImpls(t *testing.T) []*kernels {
	t.Helper()
	var ks []*kernels
	for _, k := range kernelImpls {
		if k != &goKernels {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		t.Skip("no vector kernels on this machine")
	}
	return ks
}

// plantAt reports whether the special-value sweep runs for length n: every
// length in a full run; in -short and -race runs the lengths below 80, the
// ones next to block boundaries and every 37th.
func plantAt(n int) bool {
	return !testing.Short() && !raceEnabled || n < 80 || n%blockSize < 3 || n%blockSize > blockSize-3 || n%37 == 0
}

func TestKernelScoreMax(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	impls := vectorImpls(t)
	for n := 0; n <= 1100; n++ {
		l, g := randRow(n, r), randRow(n, r)
		invT := float32(0.1 + 3*r.Float64())
		want := goKernels.scoreMaxOf(l, g, invT, float32(math.Inf(-1)))
		for _, k := range impls {
			if got := k.scoreMaxOf(l, g, invT, float32(math.Inf(-1))); math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%s len %d: got %v, Go gives %v", k.name, n, got, want)
			}
		}
		if !plantAt(n) {
			continue
		}
		for _, p := range positions(n, r) {
			for _, x := range specials {
				for _, floor := range []float32{float32(math.Inf(-1)), float32(r.NormFloat64() * 4), x} {
					for which := range 2 {
						buf := l
						if which == 1 {
							buf = g
						}
						old := buf[p]
						buf[p] = x
						want := goKernels.scoreMaxOf(l, g, invT, floor)
						for _, k := range impls {
							if got := k.scoreMaxOf(l, g, invT, floor); math.Float32bits(got) != math.Float32bits(want) {
								t.Fatalf("%s len %d: special %v at %d (in g: %v), floor %v: got %v, Go gives %v", k.name, n, x, p, which == 1, floor, got, want)
							}
						}
						buf[p] = old
					}
				}
			}
		}
	}
}

// expSumRow runs k's expSum over l block by block, as the sampler does.
func expSumRow(k *kernels, l []float32, c *expSumArgs) ([16]float64, []uint16) {
	var acc [16]float64
	mask := make([]uint16, (len(l)+15)/16)
	for lo := 0; lo < len(l); lo += blockSize {
		blk := l[lo:min(lo+blockSize, len(l))]
		k.expSumOf(blk, c, &acc, mask[lo/16:])
	}
	return acc, mask
}

// checkExpSum fails the test unless every kernel of impls gives the Go
// kernel's accumulators and mask, bit for bit, for l.
func checkExpSum(t *testing.T, impls []*kernels, l []float32, c *expSumArgs, what string) {
	t.Helper()
	wantAcc, wantMask := expSumRow(&goKernels, l, c)
	for _, k := range impls {
		gotAcc, gotMask := expSumRow(k, l, c)
		for j := range gotAcc {
			if math.Float64bits(gotAcc[j]) != math.Float64bits(wantAcc[j]) {
				t.Fatalf("%s %s len %d: acc[%d] = %v, Go gives %v", k.name, what, len(l), j, gotAcc[j], wantAcc[j])
			}
		}
		for j := range gotMask {
			if gotMask[j] != wantMask[j] {
				t.Fatalf("%s %s len %d: mask[%d] = %#x, Go gives %#x", k.name, what, len(l), j, gotMask[j], wantMask[j])
			}
		}
	}
}

// randExpSumArgs returns the row constants of l (M its maximum, 0 if none
// is finite) with a random temperature and head bound.
func randExpSumArgs(l []float32, r *rand.Rand) *expSumArgs {
	M := float32(math.Inf(-1))
	for _, x := range l {
		M = max(M, x)
	}
	invT := float32(0.1 + 3*r.Float64())
	if M == float32(math.Inf(-1)) || M != M {
		M = 0
	}
	return &expSumArgs{invT: invT, smax: float32(M * invT), M: M, dh: float32(r.Float64() * 20)}
}

func TestKernelExpSum(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	impls := vectorImpls(t)
	check := func(l []float32, c *expSumArgs, what string) {
		t.Helper()
		checkExpSum(t, impls, l, c, what)
	}
	for n := 0; n <= 1100; n++ {
		l := randRow(n, r)
		c := randExpSumArgs(l, r)
		check(l, c, "random")
		// Tokens at the underflow edge x = -86 and at the rounding edges
		// of n (t - n close to 0.5).
		for i := range l {
			if r.IntN(8) == 0 {
				l[i] = float32(float64(c.smax-86)/float64(c.invT)) + float32(r.NormFloat64()*1e-4)
			}
		}
		check(l, c, "edge")
		if !plantAt(n) {
			continue
		}
		for _, p := range positions(n, r) {
			for _, x := range specials {
				if x > c.M {
					continue // weights are defined for l <= M only
				}
				old := l[p]
				l[p] = x
				check(l, c, "special")
				l[p] = old
			}
		}
	}
	// Every x in [-90, 0] at a stride of float32 bit patterns, one token
	// per lane with fresh accumulators, so each weight is compared alone.
	stride := uint32(97)
	if testing.Short() || raceEnabled {
		stride = 9973
	}
	c := &expSumArgs{invT: 1, smax: 0, M: 0, dh: 1}
	l := make([]float32, 16)
	i := 0
	for b := math.Float32bits(-90); b >= 0x80000000; b -= stride {
		l[i] = math.Float32frombits(b)
		if i++; i == 16 {
			check(l, c, "sweep")
			i = 0
		}
	}
}

// TestNucleusHeadMatchesFull: the head-only top-p boundary equals the one
// of the full histogram over every token, for row shapes from peaked to
// flat and p up to 1 - 1e-6 (where the head is the whole row).
func TestNucleusHeadMatchesFull(t *testing.T) {
	s := New(DefaultConfig())
	withMasked := gaussRow(3000, 2, 3, 9)
	for i := range withMasked {
		if i%7 == 0 {
			withMasked[i] = float32(math.Inf(-1))
		}
	}
	rows := map[string][]float32{
		"synthetic": SyntheticLogits(20000, 1),
		"zipf":      zipfRow(5000, 1.1, 2),
		"gauss":     gaussRow(3001, 3, 4, 3),
		"flat":      gaussRow(1000, 0.01, 0, 4),
		"masked":    withMasked,
	}
	for name, l := range rows {
		for _, T := range []float32{0.3, 1, 3} {
			for _, p := range []float32{0.05, 0.5, 0.9, 0.99, 0.999999} {
				r := Row{Logits: l, Params: &api.Params{Temperature: T, TopP: p}, EOS: -1}
				s.grow(len(l))
				if err := s.buildOverrides(&r, r.Params, l); err != nil {
					t.Fatal(err)
				}
				nb := (len(l) + blockSize - 1) / blockSize
				if err := s.blockBounds(l, nb); err != nil {
					t.Fatal(err)
				}
				M := float32(math.Inf(-1))
				for _, m := range s.blockMax[:nb] {
					M = max(M, m)
				}
				invT := float32(1 / float64(T))
				got := s.nucleusFloor(l, nb, M, invT, p)
				want := s.nucleusFloorFull(l, nb, M, invT, p)
				if got != want {
					t.Errorf("%s T=%v p=%v: head gives floor %v, full histogram %v", name, T, p, got, want)
				}
			}
		}
	}
}

// TestSignedZeroMaximum: a row whose maximum is 0 held as −0 first and +0
// later in the same lane. The block bound is +0 whatever the lane order,
// so top-p's histogram never sees the bits of −0 (it used to index bucket
// 4096 and panic), and the result is the full-row definition's.
func TestSignedZeroMaximum(t *testing.T) {
	l := allAt(600, -1)
	l[0] = float32(math.Copysign(0, -1))
	l[4] = 0
	l[300] = float32(math.Copysign(0, -1))
	s := New(DefaultConfig())
	for _, p := range []api.Params{{Temperature: 1}, {Temperature: 1, TopP: 0.9}, {Temperature: 1, TopK: 2}, {Temperature: 1, MinP: 0.5}, {}} {
		for d := range 20 {
			row := Row{Logits: l, Params: &p, EOS: -1, NoiseKey: 5, NoiseRow: uint64(d)}
			pooled := row
			pooled.Noise = make([]float32, len(l))
			noisepool.FillRow(5, uint64(d), pooled.Noise)
			var out [2]Result
			s.Sample([]Row{row, pooled}, out[:])
			want := fullRow(row)
			for _, r := range out {
				if r.Err != nil || r.Token != want {
					t.Fatalf("%+v draw %d: got %d %v, full row gives %d", p, d, r.Token, r.Err, want)
				}
			}
		}
	}
}
