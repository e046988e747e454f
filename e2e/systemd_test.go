package e2e

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The units scripts/install.sh puts in /etc/systemd/system.
var unitFiles = []string{"tpcoord@.service", "tpcoord.target", "tpcoord-nats.service", "tpcoord-gateway.service"}

// install runs scripts/install.sh --prefix dir with the test's binary.
func install(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("../scripts/install.sh", "--prefix", dir, "--binary", tpcoordBin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh --prefix %s: %v\n%s", dir, err, out)
	}
	return string(out)
}

// TestInstallPrefix: a dry install lands every file, keeps edited config on
// a second run, and is otherwise idempotent.
func TestInstallPrefix(t *testing.T) {
	if out, err := exec.Command("../scripts/install.sh", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--prefix DIR") {
		t.Fatalf("install.sh --help: %v\n%s", err, out)
	}
	dir := t.TempDir()
	install(t, dir)
	want := map[string]os.FileMode{
		"usr/local/bin/tpcoord":                                         0o755,
		"usr/local/bin/tpcoord-agent":                                   0o755, // the --binary's -agent beside it
		"etc/systemd/system/tpcoord@.service":                           0o644,
		"etc/systemd/system/tpcoord.target":                             0o644,
		"etc/systemd/system/tpcoord-nats.service":                       0o644,
		"etc/systemd/system/tpcoord-gateway.service":                    0o644,
		"etc/tpcoord/gateway.env":                                       0o640,
		"etc/tpcoord/agent.yaml":                                        0o640,
		"etc/tpcoord/tpcoord.env":                                       0o640,
		"etc/tpcoord/nats-server.conf":                                  0o640,
		"usr/local/share/tpcoord/README.md":                             0o644,
		"usr/local/share/tpcoord/examples/three-node/nats-cluster.conf": 0o644,
		"usr/local/share/tpcoord/examples/three-node/tpcoord.env":       0o644,
		"usr/local/share/tpcoord/examples/three-node/host-a/rank-0.env": 0o644,
		"usr/local/share/tpcoord/examples/three-node/host-c/rank-5.env": 0o644,
	}
	for rel, mode := range want {
		fi, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			t.Errorf("%s not installed: %v", rel, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", rel, fi.Mode().Perm(), mode)
		}
	}
	for _, u := range unitFiles {
		src, _ := os.ReadFile(filepath.Join("../configs/systemd", u))
		dst, _ := os.ReadFile(filepath.Join(dir, "etc/systemd/system", u))
		if !bytes.Equal(src, dst) {
			t.Errorf("installed %s differs from configs/systemd/%s", u, u)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "etc/tpcoord")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("etc/tpcoord: %v, mode %v; want 0750", err, fi.Mode().Perm())
	}
	out, err := exec.Command(filepath.Join(dir, "usr/local/bin/tpcoord"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "tpcoord ") {
		t.Errorf("installed binary: %v: %s", err, out)
	}

	// An operator's edit survives a reinstall; everything else is unchanged.
	conf := filepath.Join(dir, "etc/tpcoord/agent.yaml")
	if err := os.WriteFile(conf, []byte("job: edited\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	again := install(t, dir)
	if data, _ := os.ReadFile(conf); string(data) != "job: edited\n" {
		t.Errorf("reinstall overwrote agent.yaml: %q", data)
	}
	for _, line := range strings.Split(strings.TrimSpace(again), "\n") {
		if strings.Contains(line, "installed ") || strings.Contains(line, "created ") {
			t.Errorf("second install changed something: %s", line)
		}
	}
}

// TestSystemdVerify runs systemd-analyze verify on the installed units.
// verify insists that every Exec*= binary exists, so the units are checked
// from a copy whose /usr/local/bin/tpcoord points at the installed test
// binary (and /usr/sbin/nats-server, if this host lacks it, at any
// executable). A copy with an unknown key must be reported, so the check
// is known to look at our files.
func TestSystemdVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
	}
	prefix := t.TempDir()
	install(t, prefix)
	bin := filepath.Join(prefix, "usr/local/bin/tpcoord")
	natsBin := "/usr/sbin/nats-server"
	if _, err := os.Stat(natsBin); err != nil {
		t.Logf("%s missing: verifying tpcoord-nats.service with %s in its place", natsBin, bin)
		natsBin = bin
	}
	units := t.TempDir()
	for _, u := range unitFiles {
		data, err := os.ReadFile(filepath.Join(prefix, "etc/systemd/system", u))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(data), "/usr/local/bin/tpcoord", bin)
		s = strings.ReplaceAll(s, "/usr/sbin/nats-server", natsBin)
		if err := os.WriteFile(filepath.Join(units, u), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(names ...string) (string, error) {
		args := []string{"verify", "--man=no"}
		for _, n := range names {
			args = append(args, filepath.Join(units, n))
		}
		cmd := exec.Command(analyze, args...)
		cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// A template is verified through an instance; its file is found in the
	// same directory.
	out, err := verify("tpcoord@0.service", "tpcoord-nats.service", "tpcoord-gateway.service", "tpcoord.target")
	var ours []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(line, "tpcoord") {
			ours = append(ours, line)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	if out != "" {
		t.Logf("systemd-analyze verify, about other units:\n%s", out)
	}

	bad, _ := os.ReadFile(filepath.Join(units, "tpcoord@.service"))
	bad = bytes.Replace(bad, []byte("[Service]\n"), []byte("[Service]\nWatchdogSecs=30s\n"), 1)
	if err := os.WriteFile(filepath.Join(units, "broken@.service"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := verify("broken@0.service"); !strings.Contains(out, "WatchdogSecs") {
		t.Fatalf("systemd-analyze verify did not report an unknown key; output:\n%s", out)
	}

	// The settings the agent's exit codes and readiness rely on.
	rankUnit, _ := os.ReadFile(filepath.Join(units, "tpcoord@.service"))
	for _, want := range []string{
		"Type=notify\n", "WatchdogSec=", "Restart=on-failure\n", "RestartPreventExitStatus=2\n",
		"Environment=GOTRACEBACK=crash\n", "EnvironmentFile=/etc/tpcoord/tpcoord.env\n",
		"EnvironmentFile=-/etc/tpcoord/rank-%i.env\n", bin + " agent --rank %i\n", "TimeoutStopSec=",
	} {
		if !bytes.Contains(rankUnit, []byte(want)) {
			t.Errorf("tpcoord@.service lacks %q", want)
		}
	}
	checkGatewayUnit(t, filepath.Join(units, "tpcoord-gateway.service"), bin)
}

// checkGatewayUnit: the gateway's unit runs serve as tpcoord from its env
// file, and a configuration error does not restart it.
func checkGatewayUnit(t *testing.T, path, bin string) {
	t.Helper()
	unit, _ := os.ReadFile(path)
	for _, want := range []string{"ExecStart=" + bin + " serve\n", "EnvironmentFile=/etc/tpcoord/gateway.env\n", "RestartPreventExitStatus=2\n", "\nUser=tpcoord\n"} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("tpcoord-gateway.service lacks %q", want)
		}
	}
}

// TestSystemdNotifyAgent plays systemd for one agent: READY=1 arrives once
// rendezvous completes, WATCHDOG=1 pings follow, SIGTERM brings STOPPING=1
// and exit 0.
func TestSystemdNotifyAgent(t *testing.T) {
	srv := startNATSServer(t, pickPort(t, false))
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()

	// WATCHDOG_PID is left out: the child's PID is not known before it
	// starts, and systemd only sets it when it differs from the main PID.
	a := startAgentEnv(t, 0, []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=" + strconv.Itoa(200_000),
		"TPC_JOB=e2e-notify", "TPC_WORLD_SIZE=1", "TPC_BIND=127.0.0.1:0", "TPC_LOCAL=true",
		"TPC_NATS=" + srv.url(), "TPC_VOCAB=1024", "TPC_NOISE=inline", "TPC_FORWARD_TIME=1ms"})

	expect := func(what string, match func(string) bool) {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed while waiting for %s", what)
				}
				if match(m) {
					return
				}
			case <-a.exited:
				t.Fatalf("agent exited (%v) while waiting for %s", a.err, what)
			case <-timeout:
				t.Fatalf("no %s within 60s", what)
			}
		}
	}
	expect("READY=1", func(m string) bool { return strings.HasPrefix(m, "READY=1\n") || m == "READY=1" })
	expect("a WATCHDOG=1 ping", func(m string) bool { return m == "WATCHDOG=1" })
	expect("a second WATCHDOG=1 ping", func(m string) bool { return m == "WATCHDOG=1" })
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("STOPPING=1", func(m string) bool { return m == "STOPPING=1" })
	select {
	case <-a.exited:
		if a.err != nil {
			t.Fatalf("agent exited with %v after SIGTERM, want 0", a.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("agent did not exit within 60s of SIGTERM")
	}
}

// TestSystemdVerifyModelUnit: configs/systemd/tpcoord-model@.service,
// serve-model's template unit, passes systemd-analyze verify through an
// instance naming an escaped model directory (from a copy naming the
// test's binary, as TestSystemdVerify does); it runs serve-model on the
// unescaped path, does not restart on a configuration error, and the
// operations guide points at the file.
func TestSystemdVerifyModelUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
	}
	const name = "tpcoord-model@.service"
	data, err := os.ReadFile(filepath.Join("../configs/systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ExecStart=/usr/bin/tpcoord serve-model %f\n", "RequiresMountsFor=%f\n", "RestartPreventExitStatus=2\n",
		"EnvironmentFile=-/etc/tpcoord/model.env\n", "Restart=on-failure\n", "User=tpcoord\n",
	} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("%s lacks %q", name, want)
		}
	}
	units := t.TempDir()
	unit := strings.ReplaceAll(string(data), "/usr/bin/tpcoord", tpcoordBin)
	if err := os.WriteFile(filepath.Join(units, name), []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	verify := func(instance string) (string, error) {
		cmd := exec.Command(analyze, "verify", "--man=no", filepath.Join(units, instance))
		cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	instance := `tpcoord-model@models-granite\x2d3b.service` // systemd-escape --path /models/granite-3b
	out, err := verify(instance)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.Contains(line, "tpcoord") {
			t.Errorf("systemd-analyze verify %s: %v: %s", instance, err, line)
		}
	}
	if err != nil {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", instance, err, out)
	}
	// The check looks at this file: a key systemd does not know is reported.
	broken := strings.Replace(unit, "[Service]\n", "[Service]\nRestartPreventExitStatuses=2\n", 1)
	if err := os.WriteFile(filepath.Join(units, "broken-model@.service"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := verify(`broken-model@models-granite\x2d3b.service`); !strings.Contains(out, "RestartPreventExitStatuses") {
		t.Fatalf("systemd-analyze verify did not report an unknown key; output:\n%s", out)
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte("configs/systemd/"+name)) {
		t.Errorf("docs/operations.md does not point at configs/systemd/%s", name)
	}
}
