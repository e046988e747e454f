package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// clientRun runs tpcoord with args (a client command), returning its
// stderr, whether it failed, and how long it took.
func clientRun(t *testing.T, args ...string) (stdout, stderr string, failed bool, took time.Duration) {
	t.Helper()
	cmd := exec.Command(tpcoordBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), err != nil, took
}

// TestClientUnknownJobFailsFast: generate and status for a job launch's
// server does not carry fail at once, not at their timeout: the server
// refuses the client's publish (its user may publish to its own job's
// subjects only) and the error names the job, the refused subject and
// the permission, with a hint naming --ready-file. With credentials that
// may publish anywhere, nobody serves the job: the same, fast.
func TestClientUnknownJobFailsFast(t *testing.T) {
	j := launch(t, "--nproc", "1")
	rankURL := rankNATSURL(t, j.info.PIDs[0])
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"generate, client user", []string{"generate", "--nats", j.info.NATSURL, "--job", "nosuch", "--prompt", "1,2", "--timeout", "3s"},
			[]string{`job "nosuch"`, "tpc.nosuch.generate", "permissions violation", "--ready-file"}},
		{"status, client user", []string{"status", "--nats", j.info.NATSURL, "--job", "nosuch", "--wait", "3s"},
			[]string{`job "nosuch"`, "tpc.nosuch.status", "permissions violation", "--ready-file"}},
		{"generate, rank user", []string{"generate", "--nats", rankURL, "--job", "nosuch", "--prompt", "1,2", "--timeout", "3s", "--resume-window", "0"},
			[]string{`job "nosuch"`, "no responders", "--ready-file"}},
	} {
		_, stderr, failed, took := clientRun(t, c.args...)
		if !failed || took > 1500*time.Millisecond {
			t.Errorf("%s: failed %v after %v, want a failure well within the 3s timeout:\n%s", c.name, failed, took, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: error does not hold %q:\n%s", c.name, w, stderr)
			}
		}
	}
}

// TestGenerateWaitsForRank0: with no rank 0 subscribed (it may be
// restarting), generate resubmits its request until --timeout, saying so
// at once on stderr, and fails at the timeout naming the fault.
func TestGenerateWaitsForRank0(t *testing.T) {
	j := launch(t, "--nproc", "1")
	rankURL := rankNATSURL(t, j.info.PIDs[0])
	_, stderr, failed, took := clientRun(t, "generate", "--nats", rankURL, "--job", "nosuch", "--prompt", "1,2", "--timeout", "2s")
	if !failed || took > 2400*time.Millisecond || took < 1500*time.Millisecond {
		t.Errorf("failed %v after %v, want a failure at the 2s timeout:\n%s", failed, took, stderr)
	}
	for _, w := range []string{"resubmitting", "--resume-window", "no responders"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not hold %q:\n%s", w, stderr)
		}
	}
}

// TestGenerateTimeoutHeld: generate never runs past --timeout. A request
// nobody answers (a subscriber that swallows it) ends at the timeout
// saying no rank 0 answered, with the --ready-file hint (it used to wait 3
// more seconds for a cancelled reply that could not come); a request that
// is streaming ends at the timeout too, with rank 0's cancelled reply.
func TestGenerateTimeoutHeld(t *testing.T) {
	j := launch(t, "--nproc", "1", "--forward-time", "100ms")
	rankURL := rankNATSURL(t, j.info.PIDs[0])
	nc, err := nats.Connect(rankURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("tpc.silent.generate", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const timeout, slack = 2 * time.Second, 400 * time.Millisecond
	_, stderr, failed, took := clientRun(t, "generate", "--nats", rankURL, "--job", "silent", "--prompt", "1,2", "--timeout", "2s")
	if !failed || took > timeout+slack || took < timeout-timeout/10-slack {
		t.Errorf("silent rank 0: failed %v after %v, want a failure at the %v timeout:\n%s", failed, took, timeout, stderr)
	}
	for _, w := range []string{"no answer from rank 0", `job "silent"`, "--ready-file"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("silent rank 0: error does not hold %q:\n%s", w, stderr)
		}
	}

	// 5 s: the request ends at 4.5 s, leaving rank 0 half a second
	// (five of its steps) to answer the cancel.
	const streaming = 5 * time.Second
	stdout, stderr, failed, took := clientRun(t, "generate", "--nats", j.info.NATSURL, "--job", j.info.Job, "--prompt", "1,2",
		"--max-tokens", "1000", "--ignore-eos", "--json", "--timeout", streaming.String())
	var g generated
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &g); jerr != nil || g.FinishReason != "cancelled" || len(g.Tokens) == 0 {
		t.Errorf("streaming request at its timeout: output %q (%v), want a cancelled reply with tokens; stderr:\n%s", stdout, jerr, stderr)
	}
	if !failed || took > streaming+slack {
		t.Errorf("streaming request: failed %v after %v, want a failure by the %v timeout", failed, took, streaming)
	}
}
