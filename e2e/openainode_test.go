package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tpcoord/tpcoord/coordinator/gateway/tokenizer"
)

// needNode returns the directory of the openai npm client, or skips the
// test when node or the client is not installed; with TPC_REQUIRE_NODE=1
// (scripts/test.sh sets it: deps.sh installs both) it fails instead.
func needNode(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "openai-js"))
	if err != nil {
		t.Fatal(err)
	}
	_, errNode := exec.LookPath("node")
	_, errMod := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json"))
	if errNode == nil && errMod == nil {
		return dir
	}
	msg := "node or the openai npm client is missing (scripts/deps.sh installs them: npm ci in " + dir + ")"
	if os.Getenv("TPC_REQUIRE_NODE") == "1" {
		t.Fatal(msg + " (TPC_REQUIRE_NODE=1)")
	}
	t.Skip(msg)
	return ""
}

// jsCase is one line of structured.mjs's output.
type jsCase struct {
	Case    string  `json:"case"`
	Seed    int     `json:"seed"`
	Finish  string  `json:"finish"`
	Content *string `json:"content"`
	Calls   []struct {
		ID, Type, Name, Arguments string
	} `json:"calls"`
}

// TestOpenAINodeClient: the official openai npm client asks a job with
// the synthetic model (random logits) for structured outputs and tool
// calls. A response_format json_schema answer that stops is JSON valid
// against its schema; tool_choice required and named answer
// message.tool_calls (streamed as deltas, gathered by the client and by
// the SDK's own stream helper) whose arguments validate against the
// function's parameters, with finish_reason tool_calls.
func TestOpenAINodeClient(t *testing.T) {
	t.Parallel()
	dir := needNode(t)
	tokDir, err := filepath.Abs(filepath.Join("testdata", "tools-tokenizer"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.EOS()
	oj := launchHTTP(t, "", "--job", "e2e-openai-js", "--forward-time", "1ms", "--tokenizer", tokDir,
		"--vocab", strconv.Itoa(tok.VocabSize()), "--eos", strconv.Itoa(int(eos)), "--heartbeat-timeout", "5s")
	cmd := exec.Command("node", "structured.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OPENAI_BASE_URL="+oj.info.HTTPURL, "OPENAI_API_KEY=none")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node structured.mjs: %v\n%s", err, stderr.String())
	}
	checkJSCases(t, filepath.Join(dir, "schemas.json"), out)
}

// checkJSCases validates every case structured.mjs printed.
func checkJSCases(t *testing.T, schemasFile string, out []byte) {
	t.Helper()
	person, params := jsSchemas(t, schemasFile)
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c jsCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		seen[c.Case]++
		if c.Case == "json_schema" {
			if c.Finish != "stop" || c.Content == nil {
				t.Errorf("json_schema seed %d: finish %s, content %v (max_tokens 400 is far more than the schema allows)", c.Seed, c.Finish, c.Content)
				continue
			}
			validateJSON(t, person, *c.Content, "json_schema seed "+strconv.Itoa(c.Seed))
			continue
		}
		if c.Finish != "tool_calls" || len(c.Calls) == 0 || c.Content != nil && *c.Content != "" {
			t.Errorf("%s seed %d: finish %s, %d calls, content %v", c.Case, c.Seed, c.Finish, len(c.Calls), c.Content)
			continue
		}
		for i, call := range c.Calls {
			p, ok := params[call.Name]
			if !ok || call.Type != "function" || !strings.HasPrefix(call.ID, "call_") || c.Case == "named-stream" && call.Name != "get_weather" {
				t.Errorf("%s seed %d: call %d is %+v", c.Case, c.Seed, i, call)
				continue
			}
			validateJSON(t, p, call.Arguments, c.Case+" seed "+strconv.Itoa(c.Seed))
		}
	}
	want := map[string]int{"json_schema": 3, "required": 3, "required-stream": 1, "named-stream": 1, "stream-helper": 1}
	for k, n := range want {
		if seen[k] != n {
			t.Errorf("%d %s cases, want %d (output %s)", seen[k], k, n, out)
		}
	}
}

// jsSchemas compiles schemas.json's person schema and each tool's
// parameters with santhosh-tekuri/jsonschema (draft 2020-12, formats
// asserted): the judge, independent of tpcoord's grammar code.
func jsSchemas(t *testing.T, file string) (*jsonschema.Schema, map[string]*jsonschema.Schema) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Person json.RawMessage `json:"person"`
		Tools  []struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	params := map[string]*jsonschema.Schema{}
	for _, tl := range s.Tools {
		params[tl.Function.Name] = compileSchema(t, tl.Function.Parameters)
	}
	return compileSchema(t, s.Person), params
}

func compileSchema(t *testing.T, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func validateJSON(t *testing.T, sch *jsonschema.Schema, text, what string) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Errorf("%s: not JSON: %v: %q", what, err, text)
		return
	}
	if err := sch.Validate(v); err != nil {
		t.Errorf("%s: %q does not validate: %v", what, text, err)
	}
}
