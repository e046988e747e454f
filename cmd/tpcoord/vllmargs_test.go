package main

import (
	"slices"
	"strings"
	"testing"
)

func TestNormalizeArgs(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"serve-model /m -tp 2", "serve-model /m --tensor-parallel-size 2"},
		{"serve-model -tp 4 /m", "serve-model --tensor-parallel-size 4 /m"},
		{"serve-model /m -tp=2 --port 9000", "serve-model /m --tensor-parallel-size=2 --port 9000"},
		{"serve-model /m --tensor-parallel-size 2", "serve-model /m --tensor-parallel-size 2"},
		// Only whole arguments, only before --, only serve-model's.
		{"serve-model /m -tpx 2", "serve-model /m -tpx 2"},
		{"serve-model /m --tp 2", "serve-model /m --tp 2"},
		{"serve-model /m -- -tp 2", "serve-model /m -- -tp 2"},
		{"launch -tp 2", "launch -tp 2"},
		{"--version", "--version"},
		{"help serve-model -tp", "help serve-model -tp"},
		{"", ""},
	} {
		in := strings.Fields(c.in)
		orig := slices.Clone(in)
		if got := strings.Join(normalizeArgs(in), " "); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
		if !slices.Equal(in, orig) {
			t.Errorf("%q: the caller's slice was changed to %q", c.in, in)
		}
	}
}
