package gateway

import (
	"io"
	"slices"
	"strconv"
	"testing"
)

// Every answer reports its seed, the client's or the one drawn for it,
// and its choices reach rank 0 with that seed + i: the request sent again
// with that seed draws the same tokens.
func TestSeedReported(t *testing.T) {
	g, f := newTestGateway(t, "abc", nil, WithTokenizer(byteTokenizer{template: true}))
	srv := serve(t, g)
	const drawn = -1
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"n":2`
	drawnSeeds := map[uint64]bool{}
	for _, tc := range []struct {
		name, path, body string
		seed             int64
	}{
		{"completion", "/v1/completions", `{"prompt":[1,2],"max_tokens":2,"n":2}`, drawn},
		{"completion streamed", "/v1/completions", `{"prompt":[1,2],"max_tokens":2,"n":2,"stream":true}`, drawn},
		{"seeded completion streamed", "/v1/completions", `{"prompt":[1,2],"max_tokens":2,"n":2,"stream":true,"seed":42}`, 42},
		{"chat streamed", "/v1/chat/completions", chat + `,"stream":true}`, drawn},
		{"seeded chat", "/v1/chat/completions", chat + `,"seed":9223372036854775807}`, 1<<63 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.requests())
			resp := post(t, srv, tc.path, tc.body)
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d, %v: %s", resp.StatusCode, err, body)
			}
			h := resp.Header.Get(SeedHeader)
			s, err := strconv.ParseInt(h, 10, 64) // a valid seed field: in [0, 2^63)
			if err != nil || s < 0 {
				t.Fatalf("%s: %q is no seed a client could send (%v)", SeedHeader, h, err)
			}
			if tc.seed != drawn && s != tc.seed {
				t.Fatalf("%s: %d, want the request's %d", SeedHeader, s, tc.seed)
			}
			if tc.seed == drawn {
				if drawnSeeds[uint64(s)] {
					t.Fatalf("seed %d drawn twice", s)
				}
				drawnSeeds[uint64(s)] = true
			}
			var got []uint64
			for _, r := range f.requests()[before:] {
				got = append(got, *r.Seed)
			}
			slices.Sort(got) // the choices run concurrently
			if want := []uint64{uint64(s), uint64(s) + 1}; !slices.Equal(got, want) {
				t.Fatalf("rank 0 got seeds %v, want %v (the reported seed + choice)", got, want)
			}
		})
	}
}
