package launch

import (
	"slices"
	"testing"
)

// TestRank0ReadsTheTokenizer: with a tokenizer, rank 0 alone is given it
// and runs the full binary (the agent-only build reads none); the others
// keep the agent-only build and no tokenizer.
func TestRank0ReadsTheTokenizer(t *testing.T) {
	s := &Supervisor{cfg: Config{NProc: 3, Self: "/bin/tpcoord", Binary: "/bin/tpcoord-agent", Tokenizer: "tiktoken:cl100k_base"}}
	a0, a1 := s.rankArgs(0, "127.0.0.1:1", false), s.rankArgs(1, "127.0.0.1:1", false)
	if i := slices.Index(a0, "--tokenizer"); i < 0 || a0[i+1] != "tiktoken:cl100k_base" {
		t.Errorf("rank 0's arguments %q lack the tokenizer", a0)
	}
	if slices.Contains(a1, "--tokenizer") {
		t.Errorf("rank 1's arguments %q carry the tokenizer", a1)
	}
	if s.binary(0) != "/bin/tpcoord" || s.binary(1) != "/bin/tpcoord-agent" {
		t.Errorf("binaries %s, %s", s.binary(0), s.binary(1))
	}
	s.cfg.Tokenizer = ""
	if s.binary(0) != "/bin/tpcoord-agent" || slices.Contains(s.rankArgs(0, "127.0.0.1:1", false), "--tokenizer") {
		t.Error("without a tokenizer rank 0 still reads one, or runs the full build")
	}
}
