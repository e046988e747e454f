// Package suggest tells which known name a mistyped one was meant to be:
// the rule behind "did you mean" for flags, TPC_* variables and request
// fields, and the JSON names a request's keys are checked against.
package suggest

import (
	"reflect"
	"strings"
)

// Closest returns the name of known that key is probably a typo of: the
// same but for case, else the nearest at most one edit away (two for
// names of six letters or more), the first of equals; "" if none. Names
// under three letters are matched by case only, or "id" would be a typo
// of "n". known are compared as given; key case-insensitively.
func Closest(key string, known []string) string {
	for _, k := range known {
		if strings.EqualFold(k, key) {
			return k
		}
	}
	lower := strings.ToLower(key)
	best, bestD := "", 3
	for _, k := range known {
		n := min(len(k), len(key))
		if n < 3 {
			continue
		}
		limit := 1
		if n >= 6 {
			limit = 2
		}
		if d := distance(lower, k); d <= limit && d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b, bytewise.
func distance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// JSONNames lists the JSON names of struct type t's exported fields, those
// of embedded structs included: the keys a JSON object of type t takes.
func JSONNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && f.Type.Kind() == reflect.Struct && name == "":
			out = append(out, JSONNames(f.Type)...)
		case name == "-" || !f.IsExported():
		case name != "":
			out = append(out, name)
		default:
			out = append(out, f.Name)
		}
	}
	return out
}
