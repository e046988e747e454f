package e2e

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/poll"
)

// TestInsecureRefused: an agent bound beyond loopback without a gossip
// key, or pointed at NATS servers beyond loopback without credentials,
// exits 2 at once (before binding or dialling anything, so any address
// will do) saying what is open and naming the flags that would fix it and
// --insecure; a password in the URLs never shows.
func TestInsecureRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  []string
		want []string
	}{
		{[]string{"--bind", "203.0.113.7:7946"}, nil,
			[]string{"bind: 203.0.113.7:7946 is not a loopback address", "unencrypted", "--gossip-key-file", "--insecure"}},
		{[]string{"--bind", "0.0.0.0:7946"}, nil, []string{"bind: 0.0.0.0:7946 is not a loopback address", "--gossip-key-file", "--insecure"}},
		{nil, []string{"TPC_NATS=nats://rank:s3cret@203.0.113.7:4222,nats://203.0.113.8:4222"},
			[]string{"nats: nats://203.0.113.8:4222: not on loopback", "--nats-user", "--nats-creds", "--insecure"}},
	} {
		cmd := exec.Command(tpcoordBin, append([]string{"agent"}, c.args...)...)
		cmd.Env = append(os.Environ(), c.env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("agent %v %v: %v, want exit 2\n%s", c.args, c.env, err, out.String())
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("agent %v %v: output does not say %q:\n%s", c.args, c.env, w, out.String())
			}
		}
		if strings.Contains(out.String(), "s3cret") {
			t.Errorf("agent %v %v printed the password:\n%s", c.args, c.env, out.String())
		}
	}
}

// TestInsecureWarnsOnce: with --insecure an agent bound on 0.0.0.0
// without a gossip key runs (a world of one, hosting its own NATS server
// on loopback), logs one warning naming the exposed bind address, and
// stops cleanly.
func TestInsecureWarnsOnce(t *testing.T) {
	nats := fmt.Sprintf("nats://e2etoken@127.0.0.1:%d", pickPort(t, false))
	a := startAgent(t, 0, "--job", "e2e-insecure", "--bind", "0.0.0.0:0", "--insecure", "--nats-serve", "--nats", nats,
		"--local", "--vocab", "1024", "--noise", "inline", "--forward-time", "1ms", "--log-format", "text")
	poll.UntilDetail(t, 60*time.Second, "the world of one formed", func() (bool, string) {
		if !a.running() {
			return true, ""
		}
		return strings.Contains(a.log.String(), "world formed"), a.log.String()
	})
	warnings := strings.Count(a.log.String(), "insecure configuration accepted")
	if warnings != 1 || !strings.Contains(a.log.String(), "level=WARN msg=\"insecure configuration accepted: Bind: 0.0.0.0:0 is not a loopback address") {
		t.Fatalf("%d warnings, want one naming the bind address:\n%s", warnings, a.log.String())
	}
	if !a.running() {
		// memberlist advertises a private address of the host when bound
		// on 0.0.0.0 and cannot start on a host without one.
		if strings.Contains(a.log.String(), "no private IP address found") {
			t.Skipf("this host has no private IP address for memberlist on 0.0.0.0 (the warning was checked):\n%s", a.log.String())
		}
		t.Fatalf("agent exited: %v\n%s", a.err, a.log.String())
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("agent exited %d after SIGTERM, want 0", code)
	}
	if n := strings.Count(a.log.String(), "insecure configuration accepted"); n != 1 {
		t.Fatalf("%d warnings by the end, want one:\n%s", n, a.log.String())
	}
}

// TestLaunchGossipKeyFile: launch gives its ranks the gossip keyring it is
// given (checking it first) and, without one, a new key of the job's,
// kept and removed with the job key; either way no warning is logged.
func TestLaunchGossipKeyFile(t *testing.T) {
	own := filepath.Join(t.TempDir(), "gossip.key")
	keys := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + "\n" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{8}, 16)) + "\n"
	if err := os.WriteFile(own, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	j := launch(t, "--nproc", "2", "--job", "e2e-gossipkey", "--forward-time", "1ms", "--gossip-key-file", own)
	for _, pid := range j.info.PIDs {
		if got := procEnv(t, pid)["TPC_GOSSIP_KEY_FILE"]; got != own {
			t.Errorf("rank pid %d has TPC_GOSSIP_KEY_FILE %q, want %s", pid, got, own)
		}
	}
	if _, err := j.generate(t.Context(), "--prompt", "1,2", "--max-tokens", "4"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch exited with %v", err)
	}
	if _, err := os.Stat(own); err != nil {
		t.Errorf("launch removed the gossip key it was given: %v", err)
	}
	if strings.Contains(j.log.String(), "insecure") || strings.Contains(j.log.String(), base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))) {
		t.Errorf("launch's log warns of insecurity or shows the key:\n%s", tail(j.log.String(), 20))
	}
}
