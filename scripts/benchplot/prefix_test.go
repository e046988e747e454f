package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestPrefixSection(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, map[string]string{"prefix.jsonl": `{"kind":"ttft","round":0,"caching":"on","requests":16,"first_ms":3365.1,"rest_p50_ms":103.8,"ttft_ms":[3365.1,103.8]}
{"kind":"chat","round":0,"caching":"on","requests":48,"prompt_tokens":25344,"ttft_p50_ms":771.3,"ttft_p99_ms":1193.1}
{"kind":"summary","cpu":"x","cores":2,"go":"go1.26","nproc":2,"prefix_tokens":2048,"suffix_tokens":32,"requests":16,"chats":8,"turns":6,"rounds":4,"on":{"rounds":4,"first_ms":6390.2,"rest_p50_ms":111.47,"chat_prompt_tokens":25344,"chat_prefill_computed_tokens":6784,"chat_ttft_p50_ms":1017.98,"chat_ttft_p99_ms":5038.1},"off":{"rounds":4,"first_ms":9666.0,"rest_p50_ms":6571.6,"chat_prompt_tokens":25344,"chat_prefill_computed_tokens":25344,"chat_ttft_p50_ms":2086.0,"chat_ttft_p99_ms":15399.4},"ttft_rest_on_vs_off":0.01696,"round_ratios":[0.0232,0.025],"chat_prefill_on_vs_off":0.2677,"target_ttft_ratio":0.2,"target_met":true}
`})
	b := string(section(t, dir))
	for _, want := range []string{
		"### Prefix caching on and off: TP 2, 4 rounds",
		"| TTFT first request, ms | 6390 | 9666 | 0.661 |",
		"| **TTFT the other 15, median ms** | 111 | 6572 | 0.017 |",
		"| chat TTFT p99, ms | 5038 | 15399 | 0.327 |",
		"| chat prefill tokens computed | 6784 | 25344 | 0.268 |",
		"per round: 0.023, 0.025. Target ≤ 0.2: met.",
		"![prefix caching on and off: TTFT](prefix.png)",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("section lacks %q\n%s", want, b)
		}
	}
	checkPNG(t, filepath.Join(dir, "prefix.png"))
}

func TestPrefixSectionRefusesWithoutSummary(t *testing.T) {
	r, err := parseLine([]byte(`{"kind":"ttft","caching":"on","first_ms":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&gen{}).prefix([]record{r}); err == nil || !strings.Contains(err.Error(), "no summary line") {
		t.Errorf("prefix = %v, want a refusal", err)
	}
}
