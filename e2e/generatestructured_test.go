package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
)

// TestGenerateStructured: `tpcoord generate` asks for structured outputs
// over NATS with its flags; rank 0 (given launch's tokenizer) follows
// them: a choice is one of the choices, a regex matches whole, a GBNF
// grammar from a file holds, each ending with stop.
func TestGenerateStructured(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs(filepath.Join("testdata", "tools-tokenizer"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.EOS()
	j := launch(t, "--nproc", "2", "--job", "e2e-generate-structured", "--forward-time", "1ms", "--tokenizer", dir,
		"--vocab", strconv.Itoa(tok.VocabSize()), "--eos", strconv.Itoa(int(eos)), "--heartbeat-timeout", "5s")
	grammarFile := filepath.Join(t.TempDir(), "list.gbnf")
	if err := os.WriteFile(grammarFile, []byte("root ::= \"[\" item (\",\" item)* \"]\"\nitem ::= [a-c]{1,3}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		ok   func(string) bool
	}{
		{[]string{"--choice", "red,green,blue"}, func(s string) bool { return slices.Contains([]string{"red", "green", "blue"}, s) }},
		{[]string{"--regex", "[0-9]{3}-[a-z]{2,5}"}, regexp.MustCompile(`^[0-9]{3}-[a-z]{2,5}$`).MatchString},
		{[]string{"--grammar", grammarFile}, regexp.MustCompile(`^\[[a-c]{1,3}(,[a-c]{1,3})*\]$`).MatchString},
	} {
		for seed := range 3 {
			ctx, cancel := contextWithTimeout(time.Minute)
			g, err := j.generate(ctx, append([]string{"--prompt", "1,2,3", "--max-tokens", "200", "--seed", strconv.Itoa(seed)}, c.args...)...)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			text, _ := tok.Decode(g.Tokens)
			if g.FinishReason != "stop" || !c.ok(text) {
				t.Errorf("%v seed %d: %q (%s)", c.args, seed, text, g.FinishReason)
			}
		}
	}
}
