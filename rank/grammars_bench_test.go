package rank

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

// cl100kPieces reads tiktoken's cl100k_base vocabulary (embedded, no
// network): 100,277 ids, the special ones marked.
func cl100kPieces(b *testing.B) ([][]byte, []bool) {
	b.Helper()
	ranks, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken")
	if err != nil {
		b.Fatalf("cl100k_base: %v", err)
	}
	pieces, special := make([][]byte, 100277), make([]bool, 100277)
	for tok, id := range ranks {
		pieces[id] = []byte(tok)
	}
	for _, id := range []int{100257, 100258, 100259, 100260, 100276} {
		pieces[id], special[id] = []byte("<|special|>"), true
	}
	return pieces, special
}

// BenchmarkGrammarSetCheck measures what a request with a schema already
// compiled costs rank 0 at intake: GrammarSet.Check finds it by its key
// (a SHA-256 of the schema's text, 3 KB here) among MaxGrammars compiled
// constraints. The schema is internal/grammar's nested order schema, the
// one whose cold compile BenchmarkSchemaCompile measures there.
func BenchmarkGrammarSetCheck(b *testing.B) {
	schema, err := os.ReadFile("../internal/grammar/testdata/order.schema.json")
	if err != nil {
		b.Fatal(err)
	}
	g := NewGrammarSet(cl100kPieces(b))
	// A full set: the order schema and MaxGrammars-1 others.
	for i := range MaxGrammars - 1 {
		other := &api.StructuredOutputs{Regex: fmt.Sprintf("[a-z]{1,%d}!", i+1)}
		if err := g.Check(other); err != nil {
			b.Fatal(err)
		}
	}
	so := &api.StructuredOutputs{JSON: json.RawMessage(schema)}
	if err := g.Check(so); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := g.Check(so); err != nil {
			b.Fatal(err)
		}
	}
}
