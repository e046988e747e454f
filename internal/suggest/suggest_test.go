package suggest

import (
	"reflect"
	"slices"
	"testing"
)

func TestClosest(t *testing.T) {
	known := []string{"n", "max_tokens", "top_p", "top_k", "temperature", "nats", "max-batch"}
	for key, want := range map[string]string{
		"N": "n", "Max_Tokens": "max_tokens", "max_tokns": "max_tokens", "maxtokens": "max_tokens",
		"top_q":        "top_p", // the first of two at one edit
		"temperatures": "temperature", "nat": "nats", "MAX-BTCH": "max-batch",
		"id": "", "x": "", "xyz": "", "prompt_cache": "",
	} {
		if got := Closest(key, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"max_token", "max_tokens", 1}, {"ab", "ba", 2}} {
		if d := distance(c.a, c.b); d != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
}

func TestJSONNames(t *testing.T) {
	type inner struct {
		A int `json:"a,omitempty"`
	}
	type outer struct {
		inner
		B      string `json:"b"`
		C      bool
		Skip   int `json:"-"`
		hidden int
	}
	_ = outer{}.hidden
	if got := JSONNames(reflect.TypeFor[outer]()); !slices.Equal(got, []string{"a", "b", "C"}) {
		t.Fatalf("JSONNames = %v, want [a b C]", got)
	}
}
