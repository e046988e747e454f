//go:build !agentonly

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStructuredFlags(t *testing.T) {
	schema := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(schema, []byte(`{"type":"integer"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	so, err := (&structuredFlags{jsonSchema: schema}).constraint()
	if err != nil || string(so.JSON) != `{"type":"integer"}` {
		t.Fatalf("--json-schema: %+v %v", so, err)
	}
	if so, err := (&structuredFlags{}).constraint(); so != nil || err != nil {
		t.Fatalf("no flag: %+v %v", so, err)
	}
	if _, err := (&structuredFlags{regex: "a", jsonObject: true}).constraint(); err == nil || !strings.Contains(err.Error(), "give one of") {
		t.Fatalf("two flags: %v", err)
	}
	if _, err := (&structuredFlags{grammarFile: "/nonexistent"}).constraint(); err == nil || !strings.Contains(err.Error(), "grammar") {
		t.Fatalf("a missing grammar file: %v", err)
	}
}
