package gateway

import (
	"sync"

	"github.com/tpcoord/tpcoord/broadcast/api"

	"github.com/tpcoord/tpcoord/internal/grammar"
)

// maxCheckedGrammars bounds the constraints the gateway remembers as
// compiling, so that a schema sent with every request is compiled once.
const maxCheckedGrammars = 256

// grammarChecks remembers the keys of constraints that compiled.
type grammarChecks struct {
	mu sync.Mutex
	ok map[string]bool
}

// structuredPlan takes the request's structured outputs into pl, after
// compiling their grammar (without a vocabulary: rank 0 binds it to the
// tokenizer's), so that one that cannot be followed is a 400 here, naming
// the field it came from.
func (g *Gateway) structuredPlan(f *samplingFields, pl *plan) *apiError {
	so, field, e := f.structured()
	if e != nil || so == nil {
		return e
	}
	return g.constrain(so, field, pl)
}

// constrain takes so into pl once its grammar compiled; errors name field.
func (g *Gateway) constrain(so *api.StructuredOutputs, field string, pl *plan) *apiError {
	if pl.base.IgnoreEOS {
		return badRequest("ignore_eos", "cannot be set with structured outputs: the output ends where its grammar does")
	}
	if pl.base.MinTokens > 0 {
		return badRequest("min_tokens", "cannot be set with structured outputs: the output ends where its grammar does, which may be sooner")
	}
	if !g.checks.seen(so.Key()) {
		kind, src, choices := so.Kind()
		gr, err := grammar.Build(kind, src, choices)
		if err == nil {
			_, err = grammar.Compile(gr, grammar.DefaultLimits())
		}
		if err != nil {
			return compileError(field, err)
		}
		g.checks.add(so.Key())
	}
	pl.base.StructuredOutputs = so
	return nil
}

func (c *grammarChecks) seen(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok[key]
}

func (c *grammarChecks) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok == nil || len(c.ok) >= maxCheckedGrammars {
		c.ok = map[string]bool{} // forget them all: each compiles again once
	}
	c.ok[key] = true
}
