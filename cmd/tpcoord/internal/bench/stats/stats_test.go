package stats

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNearest(t *testing.T) {
	v := []int64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	for _, tc := range []struct {
		q    float64
		want int64
	}{{0.5, 50}, {0.9, 90}, {0.99, 100}, {0.01, 10}, {0, 10}, {1, 100}} {
		if got := Nearest(v, tc.q); got != tc.want {
			t.Errorf("Nearest(%v) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := Nearest([]int64{7}, 0.99); got != 7 {
		t.Errorf("single value: %d", got)
	}
	if got := Nearest([]int64(nil), 0.5); got != 0 {
		t.Errorf("no value: %d", got)
	}
}

func TestQuantiles(t *testing.T) {
	v := []float64{100, 90, 80, 70, 60, 50, 40, 30, 20, 10} // descending: sorted inside
	p50, p90, p99 := Quantiles(v)
	if p50 != 50 || p90 != 90 || p99 != 100 {
		t.Errorf("Quantiles = %v %v %v, want 50 90 100", p50, p90, p99)
	}
	if v[0] != 100 {
		t.Errorf("Quantiles changed its input: %v", v)
	}
	if got := Quantile(v, 0.5); got != 50 {
		t.Errorf("Quantile(0.5) = %v, want 50", got)
	}
	if a, b, c := Quantiles(nil); a != 0 || b != 0 || c != 0 {
		t.Errorf("no values: %v %v %v", a, b, c)
	}
	if got := US(1500); got != 1.5 {
		t.Errorf("US(1500) = %v", got)
	}
}

// A Machine embedded in a result puts its fields where it is embedded.
func TestWriteJSONLineEmbedsMachine(t *testing.T) {
	var out bytes.Buffer
	r := struct {
		A int `json:"a"`
		Machine
	}{A: 1, Machine: Machine{CPU: "x", Cores: 2, Go: "go1"}}
	if err := WriteJSONLine(&out, r); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), `{"a":1,"cpu":"x","cores":2,"go":"go1"}`+"\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var m Machine
	if err := json.Unmarshal(out.Bytes(), &m); err != nil || m.Cores != 2 {
		t.Errorf("round trip: %+v %v", m, err)
	}
	if got := ThisMachine(); got.CPU == "" || got.Cores < 1 || !strings.HasPrefix(got.Go, "go") {
		t.Errorf("ThisMachine() = %+v", got)
	}
}
