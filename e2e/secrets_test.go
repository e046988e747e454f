package e2e

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestNoSecretsInArgvOrLogs: the passwords of launch's NATS server (the
// clients', in the ready file, and the ranks', in their environment) and
// the job and gossip keys are in no process's command line, which every
// local user can read, and in no log line; the keys are not in the ranks'
// environment either (it holds the paths of the keys' 0600 files).
func TestNoSecretsInArgvOrLogs(t *testing.T) {
	j := launch(t, "--nproc", "2", "--job", "e2e-secrets", "--forward-time", "1ms")
	var secrets []string
	for _, raw := range []string{j.info.NATSURL, rankNATSURL(t, j.info.PIDs[0])} {
		u, err := url.Parse(raw)
		pw, ok := u.User.Password()
		if err != nil || !ok || len(pw) < 16 {
			t.Fatalf("NATS URL %q carries no password", raw)
		}
		secrets = append(secrets, pw)
	}
	var keys []string // the job key and the gossip key
	for _, v := range []string{"TPC_JOB_KEY_FILE", "TPC_GOSSIP_KEY_FILE"} {
		text, err := os.ReadFile(procEnv(t, j.info.PIDs[0])[v])
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		keys = append(keys, strings.TrimSpace(string(text)))
	}
	if _, err := j.generate(t.Context(), "--prompt", "1,2", "--max-tokens", "4"); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append([]int{j.cmd.Process.Pid}, j.info.PIDs...) {
		argv, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range append(secrets, keys...) {
			if strings.Contains(string(argv), secret) {
				t.Errorf("pid %d's command line holds a secret: %q", pid, strings.ReplaceAll(string(argv), "\x00", " "))
			}
		}
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		for _, key := range keys {
			if strings.Contains(string(env), key) {
				t.Errorf("pid %d's environment holds a key", pid)
			}
		}
	}
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch exited with %v", err)
	}
	for _, secret := range append(secrets, keys...) {
		if strings.Contains(j.log.String(), secret) {
			t.Errorf("the logs hold a secret:\n%s", tail(j.log.String(), 20))
		}
	}
}

// TestClientsCannotPublishSteps: the ready file's credentials are the
// clients': they submit requests and read replies, but the server refuses
// their steps, heartbeats and control messages, and no rank sees them.
func TestClientsCannotPublishSteps(t *testing.T) {
	for _, mode := range []string{"server-in-launch", "server-in-rank0"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--nproc", "2", "--job", "e2e-perm", "--forward-time", "1ms"}
			if mode == "server-in-rank0" {
				args = append(args, "--nats-in-rank0")
			}
			j := launch(t, args...)
			denied := make(chan error, 8)
			nc, err := nats.Connect(j.info.NATSURL, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			for _, subject := range []string{"tpc.e2e-perm.step", "tpc.e2e-perm.hb.1", "tpc.e2e-perm.control"} {
				if err := nc.Publish(subject, []byte("forged")); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-denied:
					if !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
						t.Fatalf("publish on %s: %v, want a permissions violation", subject, err)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("a client's publish on %s was not refused", subject)
				}
			}
			if _, err := j.generate(t.Context(), "--prompt", "1,2", "--max-tokens", "4"); err != nil {
				t.Fatalf("a request with the client credentials: %v", err)
			}
			st, err := j.status()
			if err != nil || len(st) != 2 || len(st[1].Rejected) != 0 {
				t.Errorf("status %+v %v: want both ranks, nothing refused (nothing got through)", st, err)
			}
		})
	}
}
