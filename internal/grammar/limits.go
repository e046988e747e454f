package grammar

import "fmt"

// Limits bound what a grammar may cost. DefaultLimits documents each; a
// zero field takes its default, a negative one is refused.
type Limits struct {
	// MaxStates bounds the automaton's states after lowering: every
	// character class, literal byte and copy of a bounded repeat counts.
	MaxStates int
	// MaxStacks bounds the parse stacks alive at one position (how
	// ambiguous the grammar may be there); exceeding it is an error from
	// Accept, AcceptBytes and Compile.
	MaxStacks int
	// MaxDepth bounds the nesting of rule calls on one stack (recursion
	// depth of the output, e.g. nested JSON arrays).
	MaxDepth int
	// MaxTableBytes bounds the memory of the interned matcher states of one
	// Tokens (stacks, state sets and their transitions; masks are bounded
	// by NewTokens' cacheBytes). Past it the tables are started afresh and
	// each matcher moves its state over on its next call, so memory stays
	// bounded however many outputs share the Tokens.
	MaxTableBytes int
}

// DefaultLimits returns the limits used for a zero field: 200,000 states,
// 1,000 stacks, 1,000 nested rule calls and 64 MiB of tables.
func DefaultLimits() Limits {
	return Limits{MaxStates: 200_000, MaxStacks: 1_000, MaxDepth: 1_000, MaxTableBytes: 64 << 20}
}

// resolve fills zero fields from DefaultLimits and refuses negative ones.
func (l Limits) resolve() (Limits, error) {
	def := DefaultLimits()
	fields := []struct {
		name string
		v    *int
		def  int
	}{
		{"MaxStates", &l.MaxStates, def.MaxStates},
		{"MaxStacks", &l.MaxStacks, def.MaxStacks},
		{"MaxDepth", &l.MaxDepth, def.MaxDepth},
		{"MaxTableBytes", &l.MaxTableBytes, def.MaxTableBytes},
	}
	for _, f := range fields {
		switch {
		case *f.v < 0:
			return l, fmt.Errorf("grammar: Limits.%s is %d, must not be negative", f.name, *f.v)
		case *f.v == 0:
			*f.v = f.def
		}
	}
	return l, nil
}
