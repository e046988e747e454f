//go:build !agentonly

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/internal/rankproc"
)

// TestUnknownFlagSuggests: a mistyped flag is refused (exit 2) with the
// flag it resembles.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"launch", "--nprocs", "2"}, "unknown flag: --nprocs; did you mean --nproc?"},
		{[]string{"agent", "--max-batchs", "2"}, "did you mean --max-batch?"},
		{[]string{"launch", "--zzzz"}, "unknown flag: --zzzz\n"},
	} {
		var stdout, stderr strings.Builder
		if code := run(c.args, &stdout, &stderr); code != exitConfig || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), exitConfig, c.want)
		}
	}
}

// TestLaunchRefusesAgentOnlyFlags: launch decides the world size, the
// ranks, the join addresses and the binds; one of them given by flag or
// TPC_* is refused instead of overridden silently.
func TestLaunchRefusesAgentOnlyFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"launch", "--nproc", "2", "--world-size", "4"}, "", "world-size: an agent's flag, not launch's"},
		{[]string{"launch", "--rank", "1"}, "", "rank: an agent's flag"},
		{[]string{"launch", "--join", "127.0.0.1:7946"}, "", "join: an agent's flag"},
		{[]string{"launch", "--max-restarts", "3"}, "", "max-restarts: only with --on-peer-loss wait"},
		{[]string{"launch", "--on-peer-loss", "wait", "--max-restarts", "-1"}, "", "max-restarts: must be in [0, 1000], got -1"},
		{[]string{"launch", "--on-peer-loss", "wait", "--nats-in-rank0"}, "", "nats-in-rank0: not with --on-peer-loss wait"},
		{[]string{"launch", "--nproc", "2"}, "TPC_WORLD_SIZE", "world-size: an agent's flag"}, // last: the variable stays set
	} {
		if c.env != "" {
			t.Setenv(c.env, "4")
		}
		var stdout, stderr strings.Builder
		if code := run(c.args, &stdout, &stderr); code != exitConfig || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v %s: exit %d, stderr %q; want %d and %q", c.args, c.env, code, stderr.String(), exitConfig, c.want)
		}
	}
}

// TestRankErrorToCauseFile: a rank of launch's (the cause file in its
// environment) writes the error it exits with there, not to stderr, and
// does not pass the variable on.
func TestRankErrorToCauseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rank-0.cause")
	t.Setenv(rankproc.CauseFileEnv, path)
	var stdout, stderr strings.Builder
	if code := run([]string{"agent", "--max-batch", "0"}, &stdout, &stderr); code != exitConfig {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "tpcoord:") {
		t.Errorf("the error was printed as well: %q", stderr.String())
	}
	if got := rankproc.ReadCause(path); !strings.Contains(got, "max-batch") {
		t.Errorf("cause file: %q", got)
	}
	if v, ok := os.LookupEnv(rankproc.CauseFileEnv); ok {
		t.Errorf("%s still set to %q", rankproc.CauseFileEnv, v)
	}
}
