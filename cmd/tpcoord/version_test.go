package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersionFlag: --version and -v on the root command print what the
// version command prints, in either build (go test -tags agentonly runs it
// for tpcoord-agent).
func TestVersionFlag(t *testing.T) {
	var want, stderr bytes.Buffer
	if code := run([]string{"version"}, &want, &stderr); code != 0 || !strings.HasPrefix(want.String(), "tpcoord ") {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", code, want.String(), stderr.String())
	}
	for _, flag := range []string{"--version", "-v"} {
		var stdout bytes.Buffer
		stderr.Reset()
		if code := run([]string{flag}, &stdout, &stderr); code != 0 || stdout.String() != want.String() || stderr.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want stdout %q", flag, code, stdout.String(), stderr.String(), want.String())
		}
	}
}
