package e2e

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPackageVersion: scripts/package.sh maps a tag (or git describe of
// one) to a deb/rpm version, and refuses what it cannot map.
func TestPackageVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                  "1.2.3",
		"1.2.3":                   "1.2.3",
		"v1.2.3-dirty":            "1.2.3+dirty",
		"v1.2.3-rc.1":             "1.2.3~rc.1",
		"v1.2.3-beta-2":           "1.2.3~beta.2",
		"v1.2.3-4-gabc1234":       "1.2.3+git4.abc1234",
		"v1.2.3-4-gabc1234-dirty": "1.2.3+git4.abc1234.dirty",
		"v1.2.3-rc.1-4-gabc1234":  "1.2.3~rc.1+git4.abc1234",
	} {
		out, err := exec.Command("../scripts/package.sh", "--print-version", "--version", in).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("--version %s: %v, %q; want %q", in, err, got, want)
		}
	}
	for _, in := range []string{"release-5", "abc1234", "v1.2.3 x", "v1.2.3-rc_1", ""} {
		out, err := exec.Command("../scripts/package.sh", "--print-version", "--version", in).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "version:") {
			t.Errorf("--version %q: %v, %q; want exit 2 naming the version", in, err, out)
		}
	}
}

// pkgBuild is one run of scripts/package.sh.
type pkgBuild struct {
	version string // the deb/rpm version, without the release
	commit  string // HEAD, or "" outside a git checkout
	deb     string
	rpm     string
}

// debArch and rpmArch name GOARCH the way the package formats do.
var (
	debArch = map[string]string{"amd64": "amd64", "arm64": "arm64", "s390x": "s390x", "ppc64le": "ppc64el"}
	rpmArch = map[string]string{"amd64": "x86_64", "arm64": "aarch64", "s390x": "s390x", "ppc64le": "ppc64le"}
)

// buildPackages runs scripts/package.sh for this machine's architecture,
// so the packaged binary can run here.
func buildPackages(t *testing.T) pkgBuild {
	t.Helper()
	if _, ok := debArch[runtime.GOARCH]; !ok {
		t.Skipf("scripts/package.sh does not package for %s", runtime.GOARCH)
	}
	var b pkgBuild
	var args []string
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		b.commit = strings.TrimSpace(string(out))
	} else {
		args = []string{"--version", "0.0.1"} // not a checkout: nothing to describe
	}
	out, err := exec.Command("../scripts/package.sh", append(args, "--print-version")...).CombinedOutput()
	if err != nil {
		t.Fatalf("package.sh --print-version: %v\n%s", err, out)
	}
	b.version = strings.TrimSpace(string(out))
	dir := t.TempDir()
	cmd := exec.Command("../scripts/package.sh", append(args, "--arch", runtime.GOARCH, "--out", dir)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("package.sh: %v\n%s", err, out)
	}
	b.deb = filepath.Join(dir, fmt.Sprintf("tpcoord_%s-1_%s.deb", b.version, debArch[runtime.GOARCH]))
	b.rpm = filepath.Join(dir, fmt.Sprintf("tpcoord-%s-1.%s.rpm", b.version, rpmArch[runtime.GOARCH]))
	return b
}

// mustOutput runs a command and returns its standard output, failing the test on
// an error.
func mustOutput(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestPackage builds the .deb and .rpm with scripts/package.sh, unpacks the
// .deb and checks what it installs: the stamped binary, the units (verified
// by systemd-analyze as installed), the configuration as conffiles, the
// workers without their tests, and maintainer scripts that create the tpcoord user.
func TestPackage(t *testing.T) {
	for _, tool := range []string{"dpkg-deb", "systemd-analyze"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (scripts/deps.sh installs it: Debian's dpkg and systemd)", tool)
		}
	}
	b := buildPackages(t)
	for field, want := range map[string]string{"Package": "tpcoord", "Version": b.version + "-1", "Architecture": debArch[runtime.GOARCH]} {
		if got := strings.TrimSpace(mustOutput(t, "dpkg-deb", "--field", b.deb, field)); got != want {
			t.Errorf("deb %s: %q, want %q", field, got, want)
		}
	}
	root, control := t.TempDir(), t.TempDir()
	mustOutput(t, "dpkg-deb", "-x", b.deb, root)
	mustOutput(t, "dpkg-deb", "-e", b.deb, control)
	files := checkDebListing(t, mustOutput(t, "dpkg-deb", "-c", b.deb))
	checkDebFiles(t, root)
	checkConffiles(t, control)
	checkMaintainerScripts(t, control)
	checkPackagedBinary(t, b, filepath.Join(root, "usr/bin/tpcoord"))
	checkPackagedBinary(t, b, filepath.Join(root, "usr/bin/tpcoord-agent"))
	checkPackagedLaunch(t, root)
	checkPackagedUnits(t, root)
	checkRPM(t, b, files)
}

// checkPackagedLaunch runs the packaged launch and checks that its ranks
// run the packaged agent-only build: the two binaries, built with
// -trimpath and the version stamped, are taken as the same build.
func checkPackagedLaunch(t *testing.T, root string) {
	t.Helper()
	bin := filepath.Join(root, "usr/bin/tpcoord")
	j := launchBin(t, bin, "--nproc", "2")
	checkRankExe(t, j, bin+"-agent")
	if _, err := j.stop(syscall.SIGTERM, 60*time.Second); err != nil {
		t.Errorf("packaged launch: %v", err)
	}
}

// debEntry is one line of dpkg-deb -c: mode and owner/group.
type debEntry struct{ mode, owner string }

// testFile matches the paths of tests and test helpers (Python's and Go's).
var testFile = regexp.MustCompile(`/(test_[^/]*\.py|[^/]*_test\.(py|go)|testlib\.py|agentlib\.py|testdata/.*)$`)

var debListLine = regexp.MustCompile(`^(\S+)\s+(\S+)\s+\d+\s+\S+\s+\S+\s+\./(.*)$`)

// checkDebListing checks the modes and owners of what the .deb installs
// and that it installs nothing else; it returns the regular files' paths.
func checkDebListing(t *testing.T, listing string) []string {
	t.Helper()
	entries := map[string]debEntry{}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
		m := debListLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("dpkg-deb -c: unexpected line %q", line)
		}
		entries["/"+m[3]] = debEntry{m[1], m[2]}
		if m[1][0] == '-' {
			files = append(files, "/"+m[3])
		}
	}
	for path, want := range map[string]debEntry{
		"/usr/bin/tpcoord":                                         {"-rwxr-xr-x", "root/root"},
		"/usr/bin/tpcoord-agent":                                   {"-rwxr-xr-x", "root/root"},
		"/usr/lib/systemd/system/tpcoord@.service":                 {"-rw-r--r--", "root/root"},
		"/usr/lib/systemd/system/tpcoord.target":                   {"-rw-r--r--", "root/root"},
		"/usr/lib/systemd/system/tpcoord-nats.service":             {"-rw-r--r--", "root/root"},
		"/usr/lib/systemd/system/tpcoord-gateway.service":          {"-rw-r--r--", "root/root"},
		"/usr/lib/systemd/system/tpcoord-model@.service":           {"-rw-r--r--", "root/root"},
		"/etc/tpcoord/gateway.env":                                 {"-rw-r-----", "root/tpcoord"},
		"/etc/tpcoord/":                                            {"drwxr-x---", "root/tpcoord"},
		"/etc/tpcoord/agent.yaml":                                  {"-rw-r-----", "root/tpcoord"},
		"/etc/tpcoord/tpcoord.env":                                 {"-rw-r-----", "root/tpcoord"},
		"/etc/tpcoord/nats-server.conf":                            {"-rw-r-----", "root/tpcoord"},
		"/var/lib/tpcoord/":                                        {"drwxr-x---", "tpcoord/tpcoord"},
		"/usr/share/tpcoord/worker/worker.py":                      {"-rwxr-xr-x", "root/root"},
		"/usr/share/tpcoord/torch-worker/worker.py":                {"-rwxr-xr-x", "root/root"},
		"/usr/share/tpcoord/nats-certs.sh":                         {"-rwxr-xr-x", "root/root"},
		"/usr/share/tpcoord/torch-worker/model.py":                 {"-rw-r--r--", "root/root"},
		"/usr/share/tpcoord/examples/three-node/nats-cluster.conf": {"-rw-r--r--", "root/root"},
		"/usr/share/doc/tpcoord/operations.md":                     {"-rw-r--r--", "root/root"},
	} {
		if got, ok := entries[path]; !ok || got != want {
			t.Errorf("deb %s: %+v (present %v), want %+v", path, got, ok, want)
		}
	}
	owned := []string{"/usr/bin/tpcoord", "/usr/lib/systemd/system/tpcoord", "/etc/tpcoord/", "/var/lib/tpcoord/", "/usr/share/tpcoord/", "/usr/share/doc/tpcoord/"}
	for path := range entries {
		ours := slices.ContainsFunc(owned, func(p string) bool { return strings.HasPrefix(path, p) })
		parent := strings.HasSuffix(path, "/") && slices.ContainsFunc(owned, func(p string) bool { return strings.HasPrefix(p, path) })
		if !ours && !parent || strings.Contains(path, "__pycache__") {
			t.Errorf("deb installs %s, outside tpcoord's paths", path)
		}
		if testFile.MatchString(path) {
			t.Errorf("deb installs %s, a test file", path)
		}
	}
	return files
}

// sameFile reports a difference between a packaged file and its source.
func sameFile(t *testing.T, packaged, source string, edit func(string) string) {
	t.Helper()
	got, err := os.ReadFile(packaged)
	if err != nil {
		t.Errorf("packaged file: %v", err)
		return
	}
	want, err := os.ReadFile(source)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		want = []byte(edit(string(want)))
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s", packaged, source)
	}
}

// checkDebFiles compares the unpacked .deb with the repository: units
// (naming /usr/bin/tpcoord), configuration, examples and every file of the
// reference workers.
func checkDebFiles(t *testing.T, root string) {
	t.Helper()
	toUsrBin := func(s string) string { return strings.ReplaceAll(s, "/usr/local/bin/tpcoord", "/usr/bin/tpcoord") }
	for _, u := range []string{"tpcoord@.service", "tpcoord.target", "tpcoord-nats.service", "tpcoord-gateway.service", "tpcoord-model@.service"} {
		sameFile(t, filepath.Join(root, "usr/lib/systemd/system", u), filepath.Join("../configs/systemd", u), toUsrBin)
	}
	for dst, src := range map[string]string{
		"etc/tpcoord/agent.yaml":          "../configs/agent.example.yaml",
		"etc/tpcoord/tpcoord.env":         "../configs/systemd/tpcoord.env",
		"etc/tpcoord/gateway.env":         "../configs/systemd/gateway.env",
		"etc/tpcoord/nats-server.conf":    "../configs/nats/nats-server.conf",
		"usr/share/tpcoord/README.md":     "../configs/systemd/README.md",
		"usr/share/tpcoord/nats-certs.sh": "../scripts/nats-certs.sh",
	} {
		sameFile(t, filepath.Join(root, dst), src, nil)
	}
	n := 0
	src := "../configs/systemd/examples"
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		sameFile(t, filepath.Join(root, "usr/share/tpcoord/examples", rel), path, nil)
		n++
		return nil
	})
	if err != nil || n == 0 {
		t.Errorf("%s: %v, %d files", src, err, n)
	}
	for _, w := range []string{"worker", "torch-worker"} {
		checkPackagedWorker(t, filepath.Join("../examples", w), filepath.Join(root, "usr/share/tpcoord", w))
	}
}

// checkPackagedWorker: the packaged worker directory holds exactly the
// files worker.py runs (itself and the modules of its directory it
// imports, transitively) and README.md, each the repository's: none of
// the worker's tests or test helpers.
func checkPackagedWorker(t *testing.T, src, dst string) {
	t.Helper()
	want := append(workerImports(t, src), "README.md")
	var got []string
	err := filepath.WalkDir(dst, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, path)
			got = append(got, rel)
		}
		return err
	})
	slices.Sort(got)
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("packaged %s: %v, files %q; want what worker.py runs and README.md: %q", dst, err, got, want)
	}
	for _, f := range want {
		sameFile(t, filepath.Join(dst, f), filepath.Join(src, f), nil)
	}
}

// pyImport matches a Python import statement's module list.
var pyImport = regexp.MustCompile(`(?m)^(?:import\s+([\w.]+(?:\s*,\s*[\w.]+)*)|from\s+(\w+)\s+import\b)`)

// workerImports returns worker.py and every module of dir it imports,
// directly or through another such module.
func workerImports(t *testing.T, dir string) []string {
	t.Helper()
	seen := map[string]bool{"worker.py": true}
	queue := []string{"worker.py"}
	for len(queue) > 0 {
		text, err := os.ReadFile(filepath.Join(dir, queue[0]))
		if err != nil {
			t.Fatal(err)
		}
		queue = queue[1:]
		for _, m := range pyImport.FindAllStringSubmatch(string(text), -1) {
			for _, mod := range strings.Split(m[1]+","+m[2], ",") {
				f := strings.TrimSpace(mod) + ".py"
				if _, err := os.Stat(filepath.Join(dir, f)); err == nil && !seen[f] {
					seen[f] = true
					queue = append(queue, f)
				}
			}
		}
	}
	return slices.Collect(maps.Keys(seen))
}

// checkConffiles: dpkg keeps an edited /etc/tpcoord file on upgrade.
func checkConffiles(t *testing.T, control string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(control, "conffiles"))
	got := strings.Fields(string(data))
	slices.Sort(got)
	want := []string{"/etc/tpcoord/agent.yaml", "/etc/tpcoord/gateway.env", "/etc/tpcoord/nats-server.conf", "/etc/tpcoord/tpcoord.env"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("conffiles: %v, %q; want %q", err, got, want)
	}
}

// stubTools writes commands that log their arguments to dir/log; getent
// answers "not found" unless dir/known exists.
func stubTools(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{"getent", "groupadd", "useradd", "systemctl"} {
		script := fmt.Sprintf("#!/bin/sh\necho \"%s $*\" >>%q\n", name, filepath.Join(dir, "log"))
		if name == "getent" {
			script += fmt.Sprintf("[ -e %q ]\n", filepath.Join(dir, "known"))
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// runScript runs a maintainer script with only the stubs on PATH (so it
// cannot change this machine) and returns what they logged.
func runScript(t *testing.T, stubs, script string, args ...string) string {
	t.Helper()
	os.Remove(filepath.Join(stubs, "log"))
	cmd := exec.Command("/bin/sh", append([]string{script}, args...)...)
	cmd.Env = []string{"PATH=" + stubs}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s %v: %v\n%s", filepath.Base(script), args, err, out)
	}
	log, _ := os.ReadFile(filepath.Join(stubs, "log"))
	return string(log)
}

// scriptCopy writes a copy of script with every from replaced by to, and
// returns its path.
func scriptCopy(t *testing.T, script, from, to string) string {
	t.Helper()
	text, err := os.ReadFile(script)
	if err != nil || !strings.Contains(string(text), from) {
		t.Fatalf("%s: %v, or it does not name %s", script, err, from)
	}
	p := filepath.Join(t.TempDir(), filepath.Base(script))
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(text), from, to)), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkMaintainerScripts: preinst creates the system user and group the
// units run as, once; prerm stops units on removal only; every script
// succeeds with deb's and rpm's arguments.
func checkMaintainerScripts(t *testing.T, control string) {
	t.Helper()
	for _, s := range []string{"preinst", "postinst", "prerm", "postrm"} {
		if fi, err := os.Stat(filepath.Join(control, s)); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("maintainer script %s: %v (want an executable)", s, err)
		}
	}
	stubs := t.TempDir()
	stubTools(t, stubs)
	preinst := filepath.Join(control, "preinst")
	log := runScript(t, stubs, preinst, "install")
	for _, want := range []string{
		`(?m)^groupadd --system tpcoord$`,
		`(?m)^useradd --system --gid tpcoord --home-dir /var/lib/tpcoord --no-create-home --shell (/usr/sbin/nologin|/sbin/nologin|/bin/false) --comment tpcoord agent tpcoord$`,
	} {
		if !regexp.MustCompile(want).MatchString(log) {
			t.Errorf("preinst install ran:\n%s\nwant a line matching %s", log, want)
		}
	}
	if err := os.WriteFile(filepath.Join(stubs, "known"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if log := runScript(t, stubs, preinst, "upgrade", "0.0.1-1"); strings.Contains(log, "add ") {
		t.Errorf("preinst with the user present ran:\n%s", log)
	}
	runScript(t, stubs, preinst, "1") // rpm %pre, first install
	for _, args := range [][]string{{"configure", ""}, {"1"}, {"2"}} {
		runScript(t, stubs, filepath.Join(control, "postinst"), args...)
	}
	for _, args := range [][]string{{"upgrade", "0.0.2-1"}, {"1"}} {
		if log := runScript(t, stubs, filepath.Join(control, "prerm"), args...); strings.Contains(log, "stop") {
			t.Errorf("prerm %v (an upgrade) stopped units:\n%s", args, log)
		}
	}
	// Whether systemd runs is prerm's test of /run/systemd/system: a copy
	// of prerm tests a directory of the test's instead, there and gone.
	booted := t.TempDir()
	for _, systemd := range []bool{true, false} {
		dir := booted
		if !systemd {
			dir = filepath.Join(booted, "absent")
		}
		prerm := scriptCopy(t, filepath.Join(control, "prerm"), "/run/systemd/system", dir)
		for _, args := range [][]string{{"remove"}, {"0"}} {
			stopped := strings.Contains(runScript(t, stubs, prerm, args...), "systemctl stop tpcoord@*.service")
			if stopped != systemd {
				t.Errorf("prerm %v, systemd running %v: stopped the units %v", args, systemd, stopped)
			}
		}
	}
	for _, args := range [][]string{{"remove"}, {"purge"}, {"upgrade", "0.0.2-1"}, {"0"}, {"1"}} {
		runScript(t, stubs, filepath.Join(control, "postrm"), args...)
	}
}

// checkPackagedBinary: the binary prints the version package.sh stamped
// and the commit, and was built with -trimpath and without cgo.
func checkPackagedBinary(t *testing.T, b pkgBuild, bin string) {
	t.Helper()
	var got struct {
		Version  string `json:"version"`
		Commit   string `json:"commit"`
		Modified bool   `json:"modified"`
		Platform string `json:"platform"`
	}
	out := mustOutput(t, bin, "version", "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("version --json: %v: %q", err, out)
	}
	dirty := b.commit != "" && strings.HasSuffix(b.version, "dirty")
	if got.Version != b.version || got.Commit != b.commit || got.Modified != dirty || got.Platform != "linux/"+runtime.GOARCH {
		t.Errorf("version --json: %+v; want version %s, commit %q, modified %v", got, b.version, b.commit, dirty)
	}
	if out := mustOutput(t, bin, "version"); !strings.HasPrefix(out, "tpcoord "+b.version+" (commit ") {
		t.Errorf("version: %q", out)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// (Under -trimpath the go command does not record -ldflags.)
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["GOARCH"] != runtime.GOARCH {
		t.Errorf("build settings %v; want -trimpath, CGO_ENABLED=0, GOARCH=%s", settings, runtime.GOARCH)
	}
}

// systemdVerify runs systemd-analyze verify on units in dir.
func systemdVerify(analyze, dir string, units ...string) (string, error) {
	args := []string{"verify", "--man=no"}
	for _, u := range units {
		args = append(args, filepath.Join(dir, u))
	}
	cmd := exec.Command(analyze, args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// A path in /etc/tpcoord a unit needs: a required EnvironmentFile= or a
// file named by Environment=.
var unitEtcRef = regexp.MustCompile(`(?m)^(?:EnvironmentFile=|Environment=[A-Z_]+=)(/etc/tpcoord/[^\s%]+)$`)

// checkPackagedUnits runs systemd-analyze verify on the units as the .deb
// installs them. verify insists that Exec*= binaries exist, so it reads a
// copy naming the unpacked binary (and, if this host has no
// /usr/sbin/nats-server, that binary in its place). The files the units
// need must be in the package, and they run as the user preinst creates.
func checkPackagedUnits(t *testing.T, root string) {
	t.Helper()
	analyze, _ := exec.LookPath("systemd-analyze")
	bin := filepath.Join(root, "usr/bin/tpcoord")
	natsBin := "/usr/sbin/nats-server"
	if _, err := os.Stat(natsBin); err != nil {
		natsBin = bin
	}
	units, needed := t.TempDir(), 0
	for _, u := range []string{"tpcoord@.service", "tpcoord.target", "tpcoord-nats.service", "tpcoord-gateway.service", "tpcoord-model@.service"} {
		data, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system", u))
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		if strings.Contains(s, "/usr/local") {
			t.Errorf("packaged %s names /usr/local", u)
		}
		for _, m := range unitEtcRef.FindAllStringSubmatch(s, -1) {
			needed++
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("%s needs %s, which the package lacks", u, m[1])
			}
		}
		if strings.HasSuffix(u, ".service") && !strings.Contains(s, "\nUser=tpcoord\nGroup=tpcoord\n") {
			t.Errorf("%s does not run as User=tpcoord, Group=tpcoord", u)
		}
		s = strings.ReplaceAll(strings.ReplaceAll(s, "/usr/bin/tpcoord", bin), "/usr/sbin/nats-server", natsBin)
		if err := os.WriteFile(filepath.Join(units, u), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if needed < 3 {
		t.Errorf("found %d /etc/tpcoord files the units need; want at least agent.yaml, tpcoord.env, nats-server.conf", needed)
	}
	out, err := systemdVerify(analyze, units, "tpcoord@0.service", "tpcoord-nats.service", "tpcoord-gateway.service", "tpcoord.target")
	if err != nil || strings.Contains(out, "tpcoord") {
		t.Errorf("systemd-analyze verify of the packaged units: %v\n%s", err, out)
	}
	if rank, _ := os.ReadFile(filepath.Join(units, "tpcoord@.service")); !bytes.Contains(rank, []byte("ExecStart="+bin+" agent --rank %i\n")) {
		t.Errorf("packaged tpcoord@.service does not start /usr/bin/tpcoord agent --rank %%i")
	}
}

// checkRPM: the .rpm is one (its lead's magic) and, where rpm is installed,
// holds the .deb's files, the same conffiles and the user's creation.
func checkRPM(t *testing.T, b pkgBuild, debFiles []string) {
	t.Helper()
	f, err := os.Open(b.rpm)
	if err != nil {
		t.Fatalf("no .rpm: %v", err)
	}
	defer f.Close()
	lead := make([]byte, 4)
	fi, err := f.Stat()
	if _, rerr := f.Read(lead); err != nil || rerr != nil || !bytes.Equal(lead, []byte{0xed, 0xab, 0xee, 0xdb}) || fi.Size() < 1<<20 {
		t.Fatalf("%s: lead %x, %v, %v; want an rpm of more than 1 MiB", b.rpm, lead, err, rerr)
	}
	rpm, err := exec.LookPath("rpm")
	if err != nil {
		t.Logf("rpm is not installed: checked only the .rpm's lead and size")
		return
	}
	query := func(args ...string) string {
		return mustOutput(t, rpm, append(append([]string{"-qp"}, args...), b.rpm)...)
	}
	if got, want := query("--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH}"), fmt.Sprintf("tpcoord %s 1 %s", b.version, rpmArch[runtime.GOARCH]); got != want {
		t.Errorf("rpm: %q, want %q", got, want)
	}
	var files []string
	for _, line := range strings.Split(strings.TrimSpace(query("--qf", "[%{FILEMODES:perms} %{FILENAMES}\n]")), "\n") {
		if mode, path, ok := strings.Cut(line, " "); ok && mode[0] == '-' {
			files = append(files, path)
		}
	}
	slices.Sort(files)
	slices.Sort(debFiles)
	if !slices.Equal(files, debFiles) {
		t.Errorf("rpm files:\n%s\ndeb files:\n%s", strings.Join(files, "\n"), strings.Join(debFiles, "\n"))
	}
	if got := strings.Fields(query("--configfiles")); !slices.Equal(got, []string{"/etc/tpcoord/agent.yaml", "/etc/tpcoord/gateway.env", "/etc/tpcoord/nats-server.conf", "/etc/tpcoord/tpcoord.env"}) {
		t.Errorf("rpm config files: %q", got)
	}
	if scripts := query("--scripts"); !strings.Contains(scripts, "useradd --system") {
		t.Errorf("rpm scripts lack the user's creation:\n%s", scripts)
	}
}
