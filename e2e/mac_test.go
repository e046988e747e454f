package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// procEnv is the environment process pid started with.
func procEnv(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// checkKeyFiles checks that launch's job key and gossip key are 0600
// files in a 0700 directory of their own.
func checkKeyFiles(t *testing.T, path, gossip string) {
	t.Helper()
	if filepath.Dir(gossip) != filepath.Dir(path) {
		t.Fatalf("the gossip key %q is not beside the job key %s", gossip, path)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, gossip: 0o600, filepath.Dir(path): 0o700 | os.ModeDir} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode() != want {
			t.Fatalf("%s: %v, %v; want mode %v", p, fi.Mode(), err, want)
		}
	}
}

// TestForgedStepRefused: launch gives every job a key only its ranks
// hold (and a gossip key beside it). A process that has the ranks' NATS URL (read from rank 1's
// environment, as a stale rank of another job or an insider would have
// it) but not the key captures real steps, then, with the job idle,
// publishes the step after rank 0's last one with the captured leader ID
// and a valid checksum (once without a MAC, once sealed with a key of its
// own), and rank 0 heartbeats claiming steps it never made. The ranks
// refuse them all (status "mac"), nobody asks for a replay, nothing
// diverges, the job goes on serving requests with one digest, and the key
// is gone once the job stops.
func TestForgedStepRefused(t *testing.T) {
	j := launch(t, "--nproc", "3", "--job", "e2e-mac", "--forward-time", "1ms")
	env := procEnv(t, j.info.PIDs[1])
	url, keyFile := env["TPC_NATS"], env["TPC_JOB_KEY_FILE"]
	if url == "" || keyFile == "" {
		t.Fatalf("rank 1's environment has TPC_NATS %q, TPC_JOB_KEY_FILE %q", url, keyFile)
	}
	checkKeyFiles(t, keyFile, env["TPC_GOSSIP_KEY_FILE"])
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := broadcast.Subjects{Prefix: "tpc", Job: j.info.Job}
	steps := captureSteps(t, nc, subj.Step())
	before, err := j.generate(t.Context(), "--prompt", "5,6", "--max-tokens", "8", "--ignore-eos", "--seed", "3", "--temperature", "0.8")
	if err != nil {
		t.Fatal(err)
	}
	steps.waitAndStop(2)
	keyless := broadcast.NewCodec(broadcast.JobHash(j.info.Job), nil) // does not check MACs
	last := steps.last(keyless)
	if last.Step == 0 {
		t.Fatal("no captured step decodes")
	}
	steps.mu.Lock()
	for _, data := range steps.captured {
		if n := len(data) - 4; bytes.Equal(data[n-broadcast.MACSize:n], make([]byte, broadcast.MACSize)) {
			t.Errorf("a step of a launched job carries no MAC: %x", data)
		}
	}
	steps.mu.Unlock()
	poll.UntilDetail(t, 30*time.Second, "the job idle at rank 0's last step", func() (bool, string) {
		st, err := j.status()
		return err == nil && len(st) == 3 && st[0].Rows == 0 && st[1].Step == st[0].Step && st[2].Step == st[0].Step, fmt.Sprint(st, err)
	})
	publishForgeries(t, nc, subj, keyless, last)

	poll.UntilDetail(t, 30*time.Second, "the forgeries refused as mac by every rank", func() (bool, string) {
		st, err := j.status()
		if err != nil || len(st) != 3 {
			return false, fmt.Sprint(st, err)
		}
		// Followers: two steps, two rank 0 heartbeats; rank 0: the heartbeats.
		return st[0].Rejected["mac"] >= 2 && st[1].Rejected["mac"] >= 4 && st[2].Rejected["mac"] >= 4, fmt.Sprint(st)
	})
	after, err := j.generate(t.Context(), "--prompt", "5,6", "--max-tokens", "8", "--ignore-eos", "--seed", "3", "--temperature", "0.8")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(after.Tokens) != fmt.Sprint(before.Tokens) {
		t.Errorf("the seeded request gave %v after the forgeries, %v before", after.Tokens, before.Tokens)
	}
	checkAgreeAfterForgeries(t, j, last.Step)
	if _, err := j.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("launch exited with %v after SIGTERM", err)
	}
	if _, err := os.Stat(filepath.Dir(keyFile)); !os.IsNotExist(err) {
		t.Errorf("the job key's directory %s outlived the job: %v", filepath.Dir(keyFile), err)
	}
}

// publishForgeries publishes, as a process without the job's key: step
// last+1 without a MAC and sealed with another key, and two rank 0
// heartbeats, sealed with another key, saying rank 0 applied five steps
// more than it did.
func publishForgeries(t *testing.T, nc *nats.Conn, subj broadcast.Subjects, keyless *broadcast.Codec, last broadcast.Step) {
	t.Helper()
	other, err := broadcast.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	forger := broadcast.NewCodec(keyless.Job(), other)
	forged := broadcast.Step{Epoch: last.Epoch, Step: last.Step + 1, Leader: last.Leader}
	hb := broadcast.Heartbeat{Epoch: last.Epoch, Phase: broadcast.PhaseRunning, Applied: last.Step + 5, Leader: last.Leader, UnixNs: time.Now().UnixNano()}
	for _, m := range []struct {
		subject string
		data    []byte
	}{
		{subj.Step(), keyless.AppendStep(nil, &forged)},
		{subj.Step(), forger.AppendStep(nil, &forged)},
		{subj.Heartbeat(0), forger.AppendHeartbeat(nil, &hb)},
		{subj.Heartbeat(0), forger.AppendHeartbeat(nil, &hb)},
	} {
		if err := nc.Publish(m.subject, m.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// checkAgreeAfterForgeries: every rank running, at one step past the
// forged one and one digest, having asked for no replay, and launch still
// running.
func checkAgreeAfterForgeries(t *testing.T, j *job, forgedAfter uint64) {
	t.Helper()
	poll.UntilDetail(t, 30*time.Second, "every rank at one step and digest", func() (bool, string) {
		st, err := j.status()
		if err != nil || len(st) != 3 {
			return false, fmt.Sprint(st, err)
		}
		for _, r := range st {
			if r.Step != st[0].Step || r.Digest != st[0].Digest || r.Step <= forgedAfter+1 {
				return false, fmt.Sprint(st)
			}
		}
		return true, ""
	})
	st, err := j.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st {
		t.Logf("rank %d: step %d, refused %v", r.Rank, r.Step, r.Rejected)
		if r.Rejected["replayed"] != 0 || r.Rejected["bogus_gap"] != 0 {
			t.Errorf("rank %d acted on a forgery: %v", r.Rank, r.Rejected)
		}
	}
	select {
	case <-j.exited:
		t.Fatalf("launch exited: %v\n%s", j.err, tail(j.log.String(), 15))
	default:
	}
	if strings.Contains(j.log.String(), "diverged") {
		t.Fatalf("a rank diverged:\n%s", tail(j.log.String(), 15))
	}
}
