package e2e

import (
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNoSecretsInArgvOrLogs: the token of launch's NATS server is in no
// process's command line (which every local user can read) and in no log
// line; the ready file (mode 0600) has it. The job key is in none of
// them, nor in the ranks' environment (which holds its file's path).
func TestNoSecretsInArgvOrLogs(t *testing.T) {
	j := launch(t, "--nproc", "2", "--job", "e2e-secrets", "--forward-time", "1ms")
	u, err := url.Parse(j.info.NATSURL)
	if err != nil || u.User == nil || len(u.User.Username()) < 16 {
		t.Fatalf("ready file's NATS URL %q carries no token", j.info.NATSURL)
	}
	token := u.User.Username()
	keyText, err := os.ReadFile(procEnv(t, j.info.PIDs[0])["TPC_JOB_KEY_FILE"])
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(keyText))
	if _, err := j.generate(t.Context(), "--prompt", "1,2", "--max-tokens", "4"); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append([]int{j.cmd.Process.Pid}, j.info.PIDs...) {
		argv, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(argv), token) || strings.Contains(string(argv), key) {
			t.Errorf("pid %d's command line holds the token or the key: %q", pid, strings.ReplaceAll(string(argv), "\x00", " "))
		}
		if env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); strings.Contains(string(env), key) {
			t.Errorf("pid %d's environment holds the job key", pid)
		}
	}
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Fatalf("launch exited with %v", err)
	}
	if strings.Contains(j.log.String(), token) || strings.Contains(j.log.String(), key) {
		t.Errorf("the logs hold the token or the key:\n%s", tail(j.log.String(), 20))
	}
}
