package grammar

import (
	"fmt"
	"slices"
)

// MaxChoices bounds the options of Choice.
const MaxChoices = 100_000

// Choice matches exactly one of the strings. There must be at least one;
// the empty string is a valid option, and repeated options are matched
// once. The options are merged into a trie (shared prefixes once), so that
// many options cost no more parse stacks than the bytes that may follow a
// prefix.
func Choice(options []string) (*Grammar, error) {
	if len(options) == 0 {
		return nil, fmt.Errorf("grammar: choice: no options")
	}
	if len(options) > MaxChoices {
		return nil, fmt.Errorf("grammar: choice: %d options, at most %d", len(options), MaxChoices)
	}
	opts := slices.Clone(options)
	slices.Sort(opts)
	return Single("choice", choiceTrie(slices.Compact(opts))), nil
}

// choiceTrie matches one of opts (sorted, distinct, at least one).
func choiceTrie(opts []string) *Expr {
	if len(opts) == 1 {
		return Lit(opts[0])
	}
	first, last := opts[0], opts[len(opts)-1]
	cp := 0
	for cp < len(first) && cp < len(last) && first[cp] == last[cp] {
		cp++
	}
	if cp > 0 {
		rest := make([]string, len(opts))
		for i, o := range opts {
			rest[i] = o[cp:]
		}
		return Seq(Lit(first[:cp]), choiceTrie(rest))
	}
	var alts []*Expr
	for i := 0; i < len(opts); {
		if opts[i] == "" { // sorts first
			alts = append(alts, Empty())
			i++
			continue
		}
		j := i + 1
		for j < len(opts) && opts[j] != "" && opts[j][0] == opts[i][0] {
			j++
		}
		alts = append(alts, choiceTrie(opts[i:j]))
		i = j
	}
	return Alt(alts...)
}
