package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// --tokens-out appends one line per request, combination after
// combination, with job.Prompt's prompts; a failed request's tokens are
// an empty list.
func TestWriteTokens(t *testing.T) {
	o := validWorkerOptions()
	o.TokensOut = filepath.Join(t.TempDir(), "tokens.jsonl")
	if err := writeTokens(o, Full, [][]int32{{5, 6}, nil}); err != nil {
		t.Fatal(err)
	}
	if err := writeTokens(o, Baseline, [][]int32{{7}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(o.TokensOut)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []TokensLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l TokensLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		got = append(got, l)
	}
	if len(got) != 3 {
		t.Fatalf("%d lines: %+v", len(got), got)
	}
	want := []struct {
		combo   string
		request int
		tokens  []int32
	}{{Full.String(), 0, []int32{5, 6}}, {Full.String(), 1, []int32{}}, {Baseline.String(), 0, []int32{7}}}
	for i, w := range want {
		l := got[i]
		if l.Impl != "tpcoord" || l.Combo != w.combo || l.Request != w.request || !slices.Equal(l.Tokens, w.tokens) ||
			l.Tokens == nil || l.NProc != 2 || l.Temperature != 0.8 {
			t.Errorf("line %d: %+v, want %+v", i, l, w)
		}
	}
	if !slices.Equal(got[1].Prompt, []int32{8, 113, 7}) {
		t.Errorf("request 1's prompt %v", got[1].Prompt)
	}
	o.TokensOut = filepath.Join(t.TempDir(), "missing", "tokens.jsonl")
	if err := writeTokens(o, Full, [][]int32{{1}}); err == nil {
		t.Error("no error writing into a missing directory")
	}
}
