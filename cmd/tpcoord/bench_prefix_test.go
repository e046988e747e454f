//go:build !agentonly

package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/cmd/tpcoord/internal/bench/prefix"
)

// TestBenchPrefixJSON runs both workloads, tiny, on a job with prefix
// caching and one without (the synthetic worker), and checks the lines'
// fields and the cache's counters, never a time.
func TestBenchPrefixJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real clusters")
	}
	out, err := execBench(t, newBenchPrefixCmd(), "--nproc", "2", "--vocab", "4096", "--forward-time", "1ms", "--rounds", "1",
		"--prefix-tokens", "64", "--suffix-tokens", "8", "--requests", "3", "--max-tokens", "2",
		"--chats", "2", "--turns", "2", "--turn-tokens", "16", "--answer-tokens", "4", "--kv-blocks", "64", "--json")
	if err != nil {
		t.Fatalf("bench prefix: %v\noutput:\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want ttft and chat of two jobs and a summary:\n%s", len(lines), out)
	}
	var on, off prefix.TTFTResult
	decodeStrictLine(t, lines[0], &on)
	decodeStrictLine(t, lines[2], &off)
	if on.Kind != "ttft" || on.Caching != prefix.ModeOn || off.Caching != prefix.ModeOff || len(on.TTFTMS) != 3 {
		t.Errorf("ttft lines: %+v, %+v", on, off)
	}
	// With caching the second and third requests find the prefix's 4 blocks.
	if on.Hits != 2*64 || on.Computed != 3*72-2*64 || off.Hits != 0 || off.Computed != 3*72 {
		t.Errorf("prefix cache: on %+v, off %+v", on.Cache, off.Cache)
	}
	var chatOn, chatOff prefix.ChatResult
	decodeStrictLine(t, lines[1], &chatOn)
	decodeStrictLine(t, lines[3], &chatOff)
	// Turn 1 sends 16 tokens, turn 2 the 16, their 4-token answer and 16 more.
	if chatOn.Kind != "chat" || chatOn.Requests != 4 || chatOn.PromptTokens != 2*(16+36) || chatOff.Computed != 2*(16+36) {
		t.Errorf("chat lines: %+v, %+v", chatOn, chatOff)
	}
	if chatOn.Hits == 0 || chatOn.Computed >= chatOff.Computed {
		t.Errorf("chat with caching: %+v, without %+v", chatOn.Cache, chatOff.Cache)
	}
	var s prefix.Summary
	decodeStrictLine(t, lines[4], &s)
	if s.Kind != "summary" || s.On.Rounds != 1 || s.Off.Rounds != 1 || s.Target != prefix.TargetTTFTRatio || len(s.RoundRatios) != 1 {
		t.Errorf("summary %+v", s)
	}
	if s.Worker != "synthetic" || s.PrefixTokens != 64 || s.Chats != 2 || s.ForwardTimeMS != 1 {
		t.Errorf("summary setup %+v", s.Setup)
	}
}

func TestBenchPrefixBadFlags(t *testing.T) {
	worker := []string{"--worker-cmd", "python3 w.py --socket {socket}"}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{append(slices.Clone(worker), "--forward-time", "5ms"), "--forward-time"},
		{append(slices.Clone(worker), "--kv-blocks", "64"), "--kv-blocks"},
		{[]string{"--requests", "1"}, "--requests"},
		{[]string{"--kv-blocks", "8"}, "--kv-blocks"},
		{[]string{"--eos", "32000"}, "--eos"},
	} {
		_, err := execBench(t, newBenchPrefixCmd(), tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.flag)
		}
	}
}
