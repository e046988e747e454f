package e2e

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/internal/freeport"
	"github.com/tpcoord/tpcoord/internal/poll"
)

// containerTools returns the path of each tool the container test needs,
// or skips the test saying which is missing (failing it instead under
// TPC_REQUIRE_CONTAINER=1, as scripts/test.sh sets: deps.sh installs them).
func containerTools(t *testing.T) map[string]string {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("TPC_REQUIRE_CONTAINER") == "1" {
			t.Fatalf(format+" (TPC_REQUIRE_CONTAINER=1)", args...)
		}
		t.Skipf(format, args...)
	}
	paths := map[string]string{}
	for _, tool := range []string{"buildah", "podman", "runc"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			missing("%s is not installed (scripts/deps.sh installs Debian's buildah, podman and runc)", tool)
		}
		paths[tool] = p
	}
	if os.Geteuid() != 0 {
		missing("the container test runs podman as root (its storage and runc's namespaces)")
	}
	return paths
}

// containerStorage points buildah and podman at storage of the test's own
// (vfs: plain directories, no mounts left behind), through the
// environment both read.
func containerStorage(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "storage.conf")
	text := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "graph"), filepath.Join(dir, "run"))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "CONTAINERS_STORAGE_CONF="+conf)
}

// TestContainerImage builds the tpcoord image with scripts/image.sh
// (buildah, configs/container/Containerfile), checks what it holds (the
// static -trimpath binary, user 65532, the entrypoint), runs the built
// image's entrypoint and command (the demo) with podman and checks the
// demo's requests were answered, then runs it serving the OpenAI API on
// loopback and checks /v1/models and a completion.
func TestContainerImage(t *testing.T) {
	tools := containerTools(t)
	env := containerStorage(t)
	const image = "localhost/tpcoord-e2e:latest"
	build := exec.Command("../scripts/image.sh", "--tag", "localhost/tpcoord-e2e")
	build.Env = env
	start := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, out)
	}
	t.Logf("scripts/image.sh built %s in %v", image, time.Since(start).Round(time.Millisecond))
	checkImageConfig(t, tools["buildah"], env, image)
	checkImageFiles(t, tools["podman"], env, image)
	out := podmanRun(t, tools, env, 2*time.Minute, image)
	if !regexp.MustCompile(`(?m)^8 requests, [1-9][0-9]* output tokens in .*tokens/s \(TP=2,`).MatchString(out) {
		t.Errorf("the image's default command printed no demo summary:\n%s", out)
	}
	checkImageServes(t, tools, env, image)
}

// checkImageConfig: the image runs /usr/bin/tpcoord as user 65532, and
// `launch --demo` by default.
func checkImageConfig(t *testing.T, buildah string, env []string, image string) {
	t.Helper()
	cmd := exec.Command(buildah, "inspect", "--type", "image", image)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("buildah inspect: %v", err)
	}
	var inspect struct {
		OCIv1 struct {
			Config struct {
				User       string
				Entrypoint []string
				Cmd        []string
			} `json:"config"`
		}
	}
	if err := json.Unmarshal(out, &inspect); err != nil {
		t.Fatalf("buildah inspect %s: %v", out, err)
	}
	cfg := inspect.OCIv1.Config
	if cfg.User != "65532:65532" || !slices.Equal(cfg.Entrypoint, []string{"/usr/bin/tpcoord"}) || !slices.Equal(cfg.Cmd, []string{"launch", "--demo"}) {
		t.Errorf("image config: %+v; want user 65532:65532, entrypoint /usr/bin/tpcoord, command launch --demo", cfg)
	}
}

// checkImageFiles mounts the image and checks it holds the binary (static,
// -trimpath), /etc/passwd and /etc/group naming user 65532, and /tmp with
// mode 1777, and nothing else.
func checkImageFiles(t *testing.T, podman string, env []string, image string) {
	t.Helper()
	mount := exec.Command(podman, "image", "mount", image)
	mount.Env = env
	out, err := mount.Output()
	if err != nil {
		t.Fatalf("podman image mount: %v", err)
	}
	defer func() {
		unmount := exec.Command(podman, "image", "unmount", image)
		unmount.Env = env
		if out, err := unmount.CombinedOutput(); err != nil {
			t.Errorf("podman image unmount: %v\n%s", err, out)
		}
	}()
	root := strings.TrimSpace(string(out))
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return err
	})
	slices.Sort(files)
	if want := []string{"etc/group", "etc/passwd", "usr/bin/tpcoord"}; err != nil || !slices.Equal(files, want) {
		t.Errorf("image files: %v, %q; want %q", err, files, want)
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&(fs.ModePerm|fs.ModeSticky) != 0o777|fs.ModeSticky {
		t.Errorf("image /tmp: %v, %v; want drwxrwxrwt", err, fi)
	}
	if passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); !bytes.Contains(passwd, []byte("\nnonroot:x:65532:65532:")) {
		t.Errorf("image /etc/passwd names no user 65532:\n%s", passwd)
	}
	info, err := buildinfo.ReadFile(filepath.Join(root, "usr/bin/tpcoord"))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" {
		t.Errorf("image binary's build settings %v; want -trimpath, CGO_ENABLED=0", settings)
	}
}

// podmanArgs runs the image with runc, the host's network (the API on the
// host's loopback) and resource limits below this host's: podman's
// defaults raise them, which takes CAP_SYS_RESOURCE that these machines do
// not give, and crun refuses their mixed cgroup v1/v2 hierarchy.
func podmanArgs(tools map[string]string, name string) []string {
	return []string{"--runtime", tools["runc"], "run", "--rm", "--name", name, "--network", "host",
		"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"}
}

// podmanRun runs image with args to its end within limit and returns its
// output, failing the test unless it exits 0.
func podmanRun(t *testing.T, tools map[string]string, env []string, limit time.Duration, image string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, tools["podman"], append(append(podmanArgs(tools, "tpcoord-e2e-demo"), image), args...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("podman run %s %v: %v\n%s", image, args, err, out)
	}
	return string(out)
}

// checkImageServes runs the image's entrypoint as `launch --http` on a
// loopback port, checks /v1/models and a completion, then stops it with
// SIGTERM (podman relays it): it must exit 0.
func checkImageServes(t *testing.T, tools map[string]string, env []string, image string) {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1", false)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	log := &syncBuffer{}
	cmd := exec.Command(tools["podman"], append(podmanArgs(tools, "tpcoord-e2e-http"), image, "launch", "--nproc", "2", "--http", addr)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the image's launch --http after SIGTERM: %v\n%s", err, log)
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("the image's launch --http did not stop within a minute of SIGTERM\n%s", log)
		}
	}()
	base := "http://" + addr + "/v1"
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	poll.UntilDetail(t, 2*time.Minute, "the image's /v1/models", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the image's launch --http exited: %v\n%s", err, log)
		default:
		}
		status, err := containerGetJSON(base+"/models", &models)
		return err == nil && status == http.StatusOK && len(models.Data) > 0, fmt.Sprint(status, err)
	})
	checkImageCompletion(t, base, models.Data[0].ID)
}

// containerGetJSON decodes url's JSON answer into v and returns the HTTP status.
func containerGetJSON(url string, v any) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(v)
}

// checkImageCompletion asks base for 4 tokens of model and checks the answer.
func checkImageCompletion(t *testing.T, base, model string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"prompt":[1,2,3],"max_tokens":4,"seed":1}`, model)
	resp, err := http.Post(base+"/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != http.StatusOK || len(c.Choices) != 1 || c.Usage.CompletionTokens < 1 {
		t.Errorf("the image's /v1/completions: %s, %v, %+v", resp.Status, err, c)
	}
}
