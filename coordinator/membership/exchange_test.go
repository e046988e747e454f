package membership

import (
	"fmt"
	"slices"
	"testing"
)

func worldOf(n int) []Member {
	ms := make([]Member, n)
	for r := range n {
		ms[r] = Member{Name: fmt.Sprintf("m%d", r), Addr: fmt.Sprintf("a%d", r), Meta: Meta{Rank: r, World: n}}
	}
	return ms
}

// A departure goes to rank 0 first, then to the ranks after the leaving
// one around the ring, never to itself, at most limit of them.
func TestExchangePeers(t *testing.T) {
	ms := worldOf(64)
	slices.Reverse(ms) // Members comes in map order
	for _, tc := range []struct {
		rank, limit int
		want        []string
	}{
		{5, 4, []string{"a0", "a6", "a7", "a8"}},
		{62, 4, []string{"a0", "a63", "a1", "a2"}},
		{0, 3, []string{"a1", "a2", "a3"}},
		{63, 2, []string{"a0", "a1"}},
	} {
		if got := exchangePeers(ms, fmt.Sprintf("m%d", tc.rank), tc.rank, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("rank %d, limit %d: %v, want %v", tc.rank, tc.limit, got, tc.want)
		}
	}
	small := worldOf(3)
	if got := exchangePeers(small, "m1", 1, 8); !slices.Equal(got, []string{"a0", "a2"}) {
		t.Errorf("world of 3: %v, want every other member", got)
	}
	// A member of no rank order (a stray of another world size) comes last.
	odd := append(worldOf(3), Member{Name: "x", Addr: "ax", Meta: Meta{Rank: -1}})
	if got := exchangePeers(odd, "m2", 2, 8); !slices.Equal(got, []string{"a0", "a1", "ax"}) {
		t.Errorf("with a stray: %v", got)
	}
}
