package rank

import (
	"container/list"
	"sync"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/internal/grammar"
)

// Bounds of a GrammarSet's memory: the compiled constraints it keeps, and
// the masks each keeps (at 100k tokens a mask is 12.5 KiB, so 4 MiB holds
// about 330 grammar states). 32 × 4 MiB bounds the masks at 128 MiB.
const (
	MaxGrammars     = 32
	GrammarMaskMiB  = 4
	grammarMaskSize = GrammarMaskMiB << 20
)

// GrammarSet is rank 0's Grammars: constraints compiled once against the
// tokenizer's vocabulary and kept, most recently used first, up to
// MaxGrammars. It is safe for concurrent use: requests are checked on the
// intake goroutine while the sampler starts constraints on its own.
type GrammarSet struct {
	vocab *grammar.Vocab
	lim   grammar.Limits

	mu    sync.Mutex
	byKey map[string]*list.Element // of *compiled
	lru   *list.List
}

type compiled struct {
	key string
	t   *grammar.Tokens
}

var _ Grammars = (*GrammarSet)(nil)

// NewGrammarSet returns a GrammarSet over a tokenizer's vocabulary:
// pieces[id] are token id's bytes; special tokens are never allowed by a
// grammar (EOS is added where an output may end).
func NewGrammarSet(pieces [][]byte, special []bool) *GrammarSet {
	return &GrammarSet{
		vocab: grammar.NewVocab(pieces, special), lim: grammar.DefaultLimits(),
		byKey: map[string]*list.Element{}, lru: list.New(),
	}
}

// Check compiles so, or finds it compiled.
func (g *GrammarSet) Check(so *api.StructuredOutputs) error {
	_, err := g.tokens(so)
	return err
}

// Start returns a matcher at the start of so's language.
func (g *GrammarSet) Start(so *api.StructuredOutputs) (Constraint, error) {
	t, err := g.tokens(so)
	if err != nil {
		return nil, err
	}
	return t.Start(), nil
}

// tokens returns so compiled. Compiling runs outside the lock, so a long
// compile does not hold up constraints already compiled; two requests
// with one new constraint may both compile it, and the first kept wins.
func (g *GrammarSet) tokens(so *api.StructuredOutputs) (*grammar.Tokens, error) {
	key := so.Key()
	if t := g.lookup(key); t != nil {
		return t, nil
	}
	kind, src, choices := so.Kind()
	gr, err := grammar.Build(kind, src, choices)
	if err != nil {
		return nil, fielderr.New("structured_outputs."+kind, "%w", err)
	}
	a, err := grammar.Compile(gr, g.lim)
	if err != nil {
		return nil, fielderr.New("structured_outputs."+kind, "%w", err)
	}
	return g.keep(key, grammar.NewTokens(a, g.vocab, grammarMaskSize)), nil
}

func (g *GrammarSet) lookup(key string) *grammar.Tokens {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.byKey[key]; ok {
		g.lru.MoveToFront(e)
		return e.Value.(*compiled).t
	}
	return nil
}

// keep stores t under key (or returns the one stored meanwhile) and
// drops the least recently used past MaxGrammars.
func (g *GrammarSet) keep(key string, t *grammar.Tokens) *grammar.Tokens {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.byKey[key]; ok {
		return e.Value.(*compiled).t
	}
	g.byKey[key] = g.lru.PushFront(&compiled{key: key, t: t})
	for g.lru.Len() > MaxGrammars {
		old := g.lru.Remove(g.lru.Back()).(*compiled)
		delete(g.byKey, old.key)
	}
	return t
}
