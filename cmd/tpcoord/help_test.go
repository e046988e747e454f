//go:build !agentonly

package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpOf runs "tpcoord ARGS --help" as a user would, at the width COLUMNS
// says ("" : unset, and stdout is not a terminal).
func helpOf(t *testing.T, columns string, args ...string) string {
	t.Helper()
	t.Setenv("COLUMNS", columns)
	var stdout, stderr strings.Builder
	if code := run(append(args, "--help"), &stdout, &stderr); code != exitOK {
		t.Fatalf("%v --help: exit %d, %s", args, code, stderr.String())
	}
	return stdout.String()
}

var (
	sectionTitle = regexp.MustCompile(`(?m)^([A-Z][^\n]*flags[^\n]*|Flags):$`)
	flagName     = regexp.MustCompile(`^(?:  -\w, |      )--([a-z0-9-]+)`)
)

// sections splits a help text's flag list by section title: the titles in
// order and, for each, the flags it lists.
func sections(help string) ([]string, map[string][]string) {
	var titles []string
	in := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(help, "\n") {
		if m := sectionTitle.FindStringSubmatch(l); m != nil {
			cur = m[1]
			titles = append(titles, cur)
			continue
		}
		if m := flagName.FindStringSubmatch(l); m != nil && cur != "" {
			in[cur] = append(in[cur], m[1])
		}
	}
	return titles, in
}

// TestHelpGroups: launch's help lists its own flags, then the API's, then
// the ranks', then telemetry and logging, each visible flag once and the
// hidden ones (agent-only, set by launch) not at all; serve-model lists
// its own flags first, then launch's, then the same sections.
func TestHelpGroups(t *testing.T) {
	for _, c := range []struct {
		cmd    string
		titles []string
		want   map[string][]string // flags expected in a section
		absent []string
	}{
		{"launch",
			[]string{"Flags", "OpenAI-compatible API flags", "Rank flags (every rank gets them)", "Telemetry and logging flags"},
			map[string][]string{
				"Flags":                             {"nproc", "ready-file", "demo", "job", "nats", "config", "help"},
				"OpenAI-compatible API flags":       {"http", "api-key-file", "served-model-name"},
				"Rank flags (every rank gets them)": {"max-batch", "worker-cmd", "worker-start-timeout", "heartbeat-timeout", "vocab"},
				"Telemetry and logging flags":       {"otlp-endpoint", "metrics-addr", "flight-dir", "trace-every", "log-level", "log-format"},
			},
			[]string{"world-size", "rank", "join", "bind", "nats-serve", "job-key-file", "local", "sampling"}},
		{"serve-model",
			[]string{"Flags", "Launch flags", "OpenAI-compatible API flags", "Rank flags (every rank gets them)", "Telemetry and logging flags"},
			map[string][]string{
				"Flags":                             {"tensor-parallel-size", "port", "host", "python", "help"},
				"Launch flags":                      {"ready-file", "stop-grace", "job"},
				"OpenAI-compatible API flags":       {"api-key-file", "served-model-name"},
				"Rank flags (every rank gets them)": {"max-batch", "worker-start-timeout"},
				"Telemetry and logging flags":       {"metrics-addr", "log-level"},
			},
			[]string{"nproc", "worker-cmd", "vocab", "http", "tokenizer", "world-size"}},
		{"agent",
			[]string{"Flags", "Telemetry and logging flags"},
			map[string][]string{"Flags": {"rank", "world-size", "max-batch"}, "Telemetry and logging flags": {"otlp-endpoint", "log-level"}},
			[]string{"sampling"}},
	} {
		help := helpOf(t, "", c.cmd)
		titles, in := sections(help)
		if !slices.Equal(titles, c.titles) {
			t.Errorf("%s: sections %q, want %q", c.cmd, titles, c.titles)
		}
		for sec, flags := range c.want {
			for _, f := range flags {
				if !slices.Contains(in[sec], f) {
					t.Errorf("%s: --%s not in section %q (%v)", c.cmd, f, sec, in[sec])
				}
			}
		}
		seen := map[string]int{}
		for _, flags := range in {
			for _, f := range flags {
				seen[f]++
			}
		}
		for _, f := range c.absent {
			if seen[f] > 0 {
				t.Errorf("%s: hidden flag --%s listed", c.cmd, f)
			}
		}
		cmd, _, err := newRootCmd().Find([]string{c.cmd})
		if err != nil {
			t.Fatal(err)
		}
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if n := seen[f.Name]; !f.Hidden && f.Name != "help" && n != 1 {
				t.Errorf("%s: --%s listed %d times, want once", c.cmd, f.Name, n)
			}
		})
	}
}

// allCommands are root's commands and theirs, root included.
func allCommands(c *cobra.Command) [][]string {
	out := [][]string{nil}
	for _, s := range c.Commands() {
		if !s.IsAvailableCommand() {
			continue
		}
		for _, p := range allCommands(s) {
			out = append(out, append([]string{s.Name()}, p...))
		}
	}
	return out
}

// TestHelpWrapped: every command's help, without a terminal and COLUMNS
// (80), at COLUMNS=60 and at COLUMNS=200, fits the width on every line
// but an example's or a single word too long for it; and it holds the
// same words in the same order at every width, so lines were broken only
// between words.
func TestHelpWrapped(t *testing.T) {
	for _, args := range allCommands(newRootCmd()) {
		var words []string
		for _, c := range []struct {
			columns string
			width   int
		}{{"", 80}, {"60", 60}, {"200", 200}} {
			help := helpOf(t, c.columns, args...)
			inExamples := false
			for _, l := range strings.Split(help, "\n") {
				inExamples = l == "Examples:" || inExamples && l != ""
				n := utf8.RuneCountInString(l)
				if n > c.width && !inExamples && len(strings.Fields(l)) > 1 {
					t.Errorf("%v at %d columns: a line of %d: %q", args, c.width, n, l)
				}
			}
			got := strings.Fields(help)
			if words == nil {
				words = got
			} else if !slices.Equal(got, words) {
				t.Errorf("%v at %d columns: the words differ from those at 80 columns", args, c.width)
			}
		}
	}
}

// TestHelpWidth: $COLUMNS when it is a number, else 80 when the output is
// not a terminal; never below helpMinWidth.
func TestHelpWidth(t *testing.T) {
	var b strings.Builder
	for columns, want := range map[string]int{"": 80, "100": 100, " 132 ": 132, "wide": 80, "-3": 80, "10": helpMinWidth} {
		got := helpWidth(&b, func(string) string { return columns })
		if got != want {
			t.Errorf("COLUMNS=%q: width %d, want %d", columns, got, want)
		}
	}
}

// TestWrapWords: lines break between words only; a word longer than the
// width is kept whole on a line of its own; line breaks in the text are
// kept.
func TestWrapWords(t *testing.T) {
	got := wrapWords("aaa bbb ccc /a/very/long/path/name ddd\nnew para", 9)
	want := []string{"aaa bbb", "ccc", "/a/very/long/path/name", "ddd", "new para"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
