package blockmax

import (
	"math"
	"math/rand/v2"
	"testing"
)

// specials are planted at every position class of the test rows.
var specials = []float32{
	float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
	float32(math.Copysign(0, -1)), 0,
	math.Float32frombits(1), math.Float32frombits(0x807fffff), // ± denormals
	math.MaxFloat32, -math.MaxFloat32, 30,
}

// reference is the definition, one value at a time: the largest value
// that is not NaN (−Inf if none), a zero maximum +0, and whether any is
// NaN.
func reference(v []float32) (float32, bool) {
	m, nan := float32(math.Inf(-1)), false
	for _, x := range v {
		switch {
		case x != x:
			nan = true
		case x > m:
			m = x
		}
	}
	if m == 0 {
		m = 0
	}
	return m, nan
}

// rows hands check a random row of every length up to maxLen, then (for
// the lengths plant accepts) the row again with every special value at
// each end, the middle, every lane of the first and last 32 values, both
// sides of every block boundary and a few random places; then rows of
// zeros of both signs over −1s, of NaN and −Inf, of −0 alone over −1s,
// and of ±denormals over −1s.
func rows(seed uint64, maxLen int, plant func(int) bool, check func([]float32)) {
	r := rand.New(rand.NewPCG(seed, seed+1))
	for n := 0; n <= maxLen; n++ {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * 4)
		}
		check(v)
		if n == 0 || !plant(n) {
			continue
		}
		ps := []int{0, n - 1, n / 2, r.IntN(n), r.IntN(n)}
		for j := range 32 {
			ps = append(ps, min(j, n-1), max(n-1-j, 0))
		}
		for b := Size; b < n; b += Size {
			ps = append(ps, b-1, b)
		}
		for _, p := range ps {
			for _, x := range specials {
				old := v[p]
				v[p] = x
				check(v)
				v[p] = old
			}
		}
	}
	for _, n := range []int{1, 8, 9, 32, 256, 300, 1024} {
		v := make([]float32, n)
		for i := range v {
			v[i] = [...]float32{-1, 0, float32(math.Copysign(0, -1))}[r.IntN(3)]
		}
		check(v)
		// Blocks of NaN alone (−Inf, flagged), of −Inf alone, of both, of
		// −0 over −1s (a zero maximum with no +0 to find), and of ±denormals
		// over −1s (a denormal maximum, which a vector unit that reads
		// denormals as zeros gets wrong).
		negZero := float32(math.Copysign(0, -1))
		denorm, negDenorm := math.Float32frombits(1), math.Float32frombits(0x807fffff)
		for _, fill := range [][]float32{{float32(math.NaN())}, {float32(math.Inf(-1))}, {float32(math.NaN()), float32(math.Inf(-1))},
			{-1, negZero}, {-1, denorm}, {-1, negDenorm}} {
			for i := range v {
				v[i] = fill[r.IntN(len(fill))]
			}
			check(v)
		}
	}
}

func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// plant limits the special-value sweep in -short and -race runs to short
// rows, the lengths next to a block boundary and every 37th.
func plant(n int) bool {
	return !testing.Short() && !raceEnabled || n < 80 || n%Size < 3 || n%Size > Size-3 || n%37 == 0
}

// TestOfVariants: both portable definitions (the build picks one, see
// builtinMaxIsCall) give the reference's bits and flag for every input.
func TestOfVariants(t *testing.T) {
	rows(11, 2*Size+9, func(int) bool { return true }, func(v []float32) {
		want, wantNaN := reference(v)
		for _, f := range []struct {
			name string
			of   func([]float32) (float32, bool)
		}{{"builtin", ofBuiltin}, {"compare", ofCompare}, {"Of", Of}} {
			if m, nan := f.of(v); math.Float32bits(m) != math.Float32bits(want) || nan != wantNaN {
				t.Fatalf("%s, len %d: %v nan %v, want %v nan %v", f.name, len(v), m, nan, want, wantNaN)
			}
		}
	})
}

// TestKernels: every kernel this machine runs gives, for every block of
// every row, the reference's bits, and the row's NaN flag.
func TestKernels(t *testing.T) {
	rows(1, 1100, plant, func(v []float32) {
		want := make([]float32, Count(len(v)))
		wantNaN := false
		for b := range want {
			var n bool
			want[b], n = reference(v[b*Size : min((b+1)*Size, len(v))])
			wantNaN = wantNaN || n
		}
		for _, k := range Impls {
			got := make([]float32, len(want)+1) // Row writes only Count blocks
			got[len(want)] = 42
			nan := k.Row(v, got)
			if !sameBits(got[:len(want)], want) || nan != wantNaN || got[len(want)] != 42 {
				t.Fatalf("%s, len %d: %v nan %v, want %v nan %v", k.Name, len(v), got, nan, want, wantNaN)
			}
		}
	})
}

func TestBest(t *testing.T) {
	for _, k := range Impls {
		t.Logf("kernel %s", k.Name) // which ones the equivalence tests ran
	}
	if Best != Impls[len(Impls)-1] {
		t.Errorf("Best is %s, the last of Impls is %s", Best.Name, Impls[len(Impls)-1].Name)
	}
	if Count(0) != 0 || Count(1) != 1 || Count(Size) != 1 || Count(Size+1) != 2 {
		t.Errorf("Count: %d %d %d %d", Count(0), Count(1), Count(Size), Count(Size+1))
	}
}
