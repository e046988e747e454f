package stats

import (
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{4, 1}, 2.5}, {[]float64{5, 1, 3}, 3}, {[]float64{1, 4, 3, 2}, 2.5}} {
		in := slices.Clone(tc.v)
		if got := Median(tc.v); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.v, got, tc.want)
		}
		if !slices.Equal(in, tc.v) {
			t.Errorf("Median changed its input: %v", tc.v)
		}
	}
}

func TestMedianOfDurations(t *testing.T) {
	v := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 20 * time.Millisecond}
	if got, want := Median(v), 22500*time.Microsecond; got != want {
		t.Errorf("Median(%v) = %v, want %v", v, got, want)
	}
}
