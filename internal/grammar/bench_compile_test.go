package grammar

import (
	"os"
	"sync"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

// The nested schema of issue 38's benchmarks (an order: a customer with
// an address, 1–8 line items with tags and options, shipping or null,
// dates, patterns, enums and bounds; $ref to a shared address).
// `tpcoord bench structured` constrains its rows with the same schema
// (its package's schema.json, checked equal to this file there).
const orderSchemaFile = "testdata/order.schema.json"

// orderInstance is a compact output valid under the order schema, 200
// cl100k_base tokens: the generation the mask benchmarks walk.
const orderInstance = `{"id":48213,"status":"shipped","customer":{"name":"Ada Lovelace","email":"ada.lovelace@example.org",` +
	`"tier":"pro","address":{"street":"12 St James's Square","city":"London","postcode":"SW1Y 4LB","country":"GB"}},` +
	`"items":[{"sku":"BKS-0042","quantity":2,"price":19.99,"tags":["books","history"],"options":{"color":"blue","gift":true}},` +
	`{"sku":"PEN-1815","quantity":10,"price":3.5,"tags":[],"options":null},{"sku":"INK-0007","quantity":1,"price":12.25}],` +
	`"shipping":{"address":{"street":"221B Baker Street","city":"London","country":"GB"},"express":false,"eta":"2026-12-10"},` +
	`"notes":"Leave the parcel with the porter, please.","created":"2026-12-06T13:35:40Z"}`

// benchMaskBytes is the mask cache the benchmarks give a Tokens: rank 0's
// (rank.GrammarMaskMiB).
const benchMaskBytes = 4 << 20

func orderSchema(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(orderSchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// orderAutomaton compiles the order schema.
func orderAutomaton(t testing.TB) *Automaton {
	t.Helper()
	g, err := FromJSONSchema(orderSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	a, err := Compile(g, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// encodeCl100k is tiktoken-go's cl100k_base encoder (offline: the
// vocabulary is embedded), a tokenizer independent of the grammar code.
var encodeCl100k = sync.OnceValues(func() (*tiktoken.Tiktoken, error) {
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
	return tiktoken.GetEncoding("cl100k_base")
})

// orderTokens is orderInstance in cl100k_base tokens.
func orderTokens(t testing.TB) []int32 {
	t.Helper()
	enc, err := encodeCl100k()
	if err != nil {
		t.Fatalf("cl100k_base encoder: %v", err)
	}
	ids := enc.EncodeOrdinary(orderInstance)
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// walkOrder runs one generation of orderInstance on tok: the mask at the
// start, then for each token Accept and the next mask, as rank 0 does for
// a constrained row. It returns the masks computed (tokens + 1).
func walkOrder(t testing.TB, tok *Tokens, ids []int32) int {
	m := tok.Start()
	m.Allowed()
	for i, id := range ids {
		if err := m.Accept(id); err != nil {
			t.Fatalf("token %d of the order: %v", i, err)
		}
		m.Allowed()
	}
	return len(ids) + 1
}

// TestOrderInstanceWalk checks what the benchmarks walk: every token of
// the tokenized order is in the mask before it, and the output may end
// (and only end) after the last.
func TestOrderInstanceWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a 100k vocabulary")
	}
	ids := orderTokens(t)
	if len(ids) < 100 {
		t.Fatalf("the order is %d tokens, want a realistic generation of at least 100", len(ids))
	}
	m := NewTokens(orderAutomaton(t), cl100k(t), benchMaskBytes).Start()
	for i, id := range ids {
		if m.CanEnd() {
			t.Fatalf("the output may end before token %d", i)
		}
		if mask := m.Allowed(); mask[id>>6]&(1<<(id&63)) == 0 {
			t.Fatalf("token %d (%d) is not in its mask", i, id)
		}
		if err := m.Accept(id); err != nil {
			t.Fatal(err)
		}
	}
	if !m.Done() {
		t.Fatal("the order is not a complete output")
	}
}

// BenchmarkSchemaCompile measures compiling the order schema cold, as
// rank 0 does for a schema it has not seen: FromJSONSchema, Compile and
// NewTokens over cl100k_base (the vocabulary's trie is built once per
// rank, not here). The cached case is rank's BenchmarkGrammarSetCheck.
func BenchmarkSchemaCompile(b *testing.B) {
	v, schema := cl100k(b), orderSchema(b)
	states := 0
	for b.Loop() {
		g, err := FromJSONSchema(schema)
		if err != nil {
			b.Fatal(err)
		}
		a, err := Compile(g, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		NewTokens(a, v, benchMaskBytes)
		states = a.NumStates()
	}
	b.ReportMetric(float64(states), "states")
}

// BenchmarkMaskWalk measures rank 0's work per constrained row per token
// over a realistic generation: the order (orderInstance, 200 tokens of
// cl100k_base) walked token by token, Accept then Allowed, as rank 0 does
// while the forward pass runs. ns/token is the figure.
//
//   - cold: every walk on a fresh Tokens (the schema just compiled: every
//     transition and every mask computed);
//   - warm: the same Tokens walked again (every mask from the cache);
//   - uncached: transitions memoized but no mask cache, so each mask
//     walks the vocabulary's trie: what a state costs when the cache
//     has evicted it.
func BenchmarkMaskWalk(b *testing.B) {
	v, a, ids := cl100k(b), orderAutomaton(b), orderTokens(b)
	perToken := func(b *testing.B, masks int) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*masks), "ns/token")
	}
	b.Run("cold", func(b *testing.B) {
		masks := 0
		for b.Loop() {
			b.StopTimer()
			tok := NewTokens(a, v, benchMaskBytes)
			b.StartTimer()
			masks = walkOrder(b, tok, ids)
		}
		perToken(b, masks)
	})
	b.Run("warm", func(b *testing.B) {
		tok := NewTokens(a, v, benchMaskBytes)
		masks := walkOrder(b, tok, ids)
		for b.Loop() {
			walkOrder(b, tok, ids)
		}
		perToken(b, masks)
	})
	b.Run("uncached", func(b *testing.B) {
		tok := NewTokens(a, v, 0)
		masks := walkOrder(b, tok, ids)
		for b.Loop() {
			walkOrder(b, tok, ids)
		}
		perToken(b, masks)
	})
}
