package f16

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestHalfToFloat32: every binary16 value widens to its exact value, and
// narrowing that value gives the same bits back (NaN stays NaN).
func TestHalfToFloat32(t *testing.T) {
	for h := range 1 << 16 {
		f := HalfToFloat32(uint16(h))
		exp := (h >> 10) & 0x1f
		man := h & 0x3ff
		var want float64
		switch exp {
		case 0:
			want = float64(man) * math.Pow(2, -24)
		case 31:
			want = math.Inf(1)
			if man != 0 {
				want = math.NaN()
			}
		default:
			want = (1 + float64(man)/1024) * math.Pow(2, float64(exp-15))
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if math.IsNaN(want) {
			if f == f {
				t.Fatalf("half %#04x: got %v want NaN", h, f)
			}
			if got := Float32ToHalf(f); got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got&0x8000 != uint16(h)&0x8000 {
				t.Fatalf("NaN %#04x -> %#04x, want a NaN of the same sign", h, got)
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != (h&0x8000 != 0) {
			t.Fatalf("half %#04x: got %v want %v", h, f, want)
		}
		if Float32ToHalf(f) != uint16(h) {
			t.Fatalf("round trip %#04x -> %v -> %#04x", h, f, Float32ToHalf(f))
		}
	}
}

// TestFloat32ToHalfTies: between every two adjacent finite binary16 values
// (subnormals included) the midpoint rounds to the one with an even
// mantissa, and a float32 ulp either side of it to the nearer one.
func TestFloat32ToHalfTies(t *testing.T) {
	for h := uint16(0); h < 0x7c00; h++ {
		for _, sign := range []uint16{0, 0x8000} {
			lo, hi := sign|h, sign|(h+1) // hi may be Inf: the overflow threshold
			a, b := float64(HalfToFloat32(lo)), float64(HalfToFloat32(hi))
			if h+1 == 0x7c00 {
				b = math.Copysign(65536, a) // where the next binade would start
			}
			mid := float32((a + b) / 2) // exact: needs 12 significant bits
			even := lo
			if lo&1 == 1 {
				even = hi
			}
			if got := Float32ToHalf(mid); got != even {
				t.Fatalf("midpoint %v of %#04x and %#04x -> %#04x, want %#04x", mid, lo, hi, got, even)
			}
			toward := func(x float64) float32 { return math.Nextafter32(mid, float32(x)) }
			if got := Float32ToHalf(toward(a)); got != lo {
				t.Fatalf("just under the midpoint %v of %#04x and %#04x -> %#04x", mid, lo, hi, got)
			}
			if got := Float32ToHalf(toward(b)); got != hi {
				t.Fatalf("just over the midpoint %v of %#04x and %#04x -> %#04x", mid, lo, hi, got)
			}
		}
	}
}

// refRound rounds x (a float32 value) to a grid of p significant bits with
// smallest normal exponent emin, ties to even, in float64; results at or
// past 2^(emax+1) are Inf.
func refRound(x float64, p, emin, emax int) float64 {
	if x == 0 || math.IsInf(x, 0) {
		return x
	}
	_, e := math.Frexp(x)
	e = max(e-1, emin) // exponent of the binade (the subnormal grid below emin)
	ulp := math.Ldexp(1, e-(p-1))
	v := math.RoundToEven(x/ulp) * ulp
	if math.Abs(v) >= math.Ldexp(1, emax+1) {
		return math.Copysign(math.Inf(1), x)
	}
	if v == 0 {
		return math.Copysign(0, x)
	}
	return v
}

// TestNarrowingMatchesReference: a million float32 bit patterns (fixed
// seed) and the special values round as a float64 reference does.
func TestNarrowingMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	inputs := []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 1, 0x80000001, 0x7f7fffff, 0x477fefff, 0x477ff000, 0x33000000, 0x33000001, 0x387fc000}
	for range 1 << 20 {
		inputs = append(inputs, r.Uint32())
	}
	for i := range 1 << 16 { // dense around binary16's range
		inputs = append(inputs, uint32(0x30000000+i*0x1713))
	}
	for _, b := range inputs {
		f := math.Float32frombits(b)
		if f != f {
			if h := Float32ToHalf(f); h&0x7e00 != 0x7e00 {
				t.Fatalf("NaN %#08x -> half %#04x, not a quiet NaN", b, h)
			}
			if h := Float32ToBFloat16(f); h&0x7fc0 != 0x7fc0 || h>>15 != uint16(b>>31) {
				t.Fatalf("NaN %#08x -> bfloat16 %#04x, not a quiet NaN of its sign", b, h)
			}
			continue
		}
		x := float64(f)
		check := func(name string, got float32, want float64) {
			if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
				t.Fatalf("%s(%v = %#08x) = %v, want %v", name, f, b, got, want)
			}
		}
		check("half", HalfToFloat32(Float32ToHalf(f)), refRound(x, 11, -14, 15))
		check("bfloat16", BFloat16ToFloat32(Float32ToBFloat16(f)), refRound(x, 8, -126, 127))
	}
}

// TestSlices: the slice forms equal the scalar ones and convert
// min(len(dst), len(src)) elements, as copy.
func TestSlices(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	f := make([]float32, 1000)
	for i := range f {
		f[i] = float32(r.NormFloat64() * 1e3)
	}
	h, bf := make([]uint16, len(f)), make([]uint16, len(f))
	if NarrowHalf(h, f) != len(f) || NarrowBFloat16(bf, f) != len(f) {
		t.Fatal("narrowing did not convert every element")
	}
	wh, wb := make([]float32, len(f)), make([]float32, len(f))
	if WidenHalf(wh, h) != len(f) || WidenBFloat16(wb, bf) != len(f) {
		t.Fatal("widening did not convert every element")
	}
	for i, v := range f {
		if h[i] != Float32ToHalf(v) || bf[i] != Float32ToBFloat16(v) {
			t.Fatalf("element %d: slice and scalar narrowing differ", i)
		}
		if wh[i] != HalfToFloat32(h[i]) || wb[i] != BFloat16ToFloat32(bf[i]) {
			t.Fatalf("element %d: slice and scalar widening differ", i)
		}
	}
	short := make([]float32, 10)
	short[9] = 42
	if n := WidenHalf(short[:9], h); n != 9 || short[9] != 42 {
		t.Errorf("WidenHalf into 9 of 10: n = %d, element 9 = %v", n, short[9])
	}
	if n := NarrowBFloat16(bf, f[:3]); n != 3 {
		t.Errorf("NarrowBFloat16 of 3: n = %d", n)
	}
}
