package launch

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
)

func build(tags string, deps ...*debug.Module) *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8", Path: "github.com/tpcoord/tpcoord/cmd/tpcoord",
		Main: debug.Module{Path: "github.com/tpcoord/tpcoord", Version: "(devel)"},
		Deps: deps,
		Settings: []debug.BuildSetting{{Key: "-tags", Value: tags}, {Key: "CGO_ENABLED", Value: "0"},
			{Key: "vcs.revision", Value: "f328fcd"}, {Key: "vcs.modified", Value: "false"}},
	}
}

func TestSameBuild(t *testing.T) {
	nats := &debug.Module{Path: "github.com/nats-io/nats.go", Version: "v1.48.0", Sum: "h1:a"}
	gonja := &debug.Module{Path: "github.com/nikolalohinski/gonja/v2", Version: "v2.3.0", Sum: "h1:b"}
	own := build("grpcnotrace", nats, gonja)
	ok := []*debug.BuildInfo{
		build("grpcnotrace,agentonly", nats, gonja),
		build("agentonly,grpcnotrace", nats), // links fewer modules
	}
	for _, agent := range ok {
		if err := sameBuild(own, agent); err != nil {
			t.Errorf("%v: %v", agent.Settings, err)
		}
	}
	other := func(f func(b *debug.BuildInfo)) *debug.BuildInfo {
		b := build("grpcnotrace,agentonly", nats)
		f(b)
		return b
	}
	bad := map[string]*debug.BuildInfo{
		"without the tag":   build("grpcnotrace", nats),
		"another tag":       build("grpcnotrace,agentonly,purego", nats),
		"a missing tag":     build("agentonly", nats),
		"another toolchain": other(func(b *debug.BuildInfo) { b.GoVersion = "go1.26.7" }),
		"another commit":    other(func(b *debug.BuildInfo) { b.Settings[2].Value = "0e1e306" }),
		"a modified tree":   other(func(b *debug.BuildInfo) { b.Settings[3].Value = "true" }),
		"another version":   other(func(b *debug.BuildInfo) { b.Main.Version = "v0.9.0" }),
		"another program":   other(func(b *debug.BuildInfo) { b.Path = "github.com/tpcoord/tpcoord/scripts/soak" }),
		"a setting more": other(func(b *debug.BuildInfo) {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: "-race", Value: "true"})
		}),
		"another dep version": other(func(b *debug.BuildInfo) {
			b.Deps = []*debug.Module{{Path: nats.Path, Version: "v1.47.0", Sum: "h1:c"}}
		}),
		"a replaced dep": other(func(b *debug.BuildInfo) {
			b.Deps = []*debug.Module{{Path: nats.Path, Version: nats.Version, Sum: nats.Sum, Replace: &debug.Module{Path: "../nats.go"}}}
		}),
	}
	for name, agent := range bad {
		if err := sameBuild(own, agent); err == nil {
			t.Errorf("%s: taken as the same build", name)
		}
	}
}

func TestAddTag(t *testing.T) {
	for _, c := range []struct{ tags, tag, want string }{
		{"", "agentonly", "agentonly"},
		{"purego,grpcnotrace", "agentonly", "agentonly,grpcnotrace,purego"},
		{"agentonly,purego", "agentonly", "agentonly,purego"},
		{"b,,a", "", "a,b"},
	} {
		if got := strings.Join(addTag(c.tags, c.tag), ","); got != c.want {
			t.Errorf("addTag(%q, %q) = %q, want %q", c.tags, c.tag, got, c.want)
		}
	}
}

// TestAgentBinaryBeside covers the cases a real build needs no tool for:
// nothing beside, a file that is not a Go binary, and a Go binary that is
// this very build (the test binary), which lacks the tag. The agent-only
// build itself is taken in e2e (TestLaunchRunsAgentBinary), which builds it.
func TestAgentBinaryBeside(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "tpcoord")
	if got, skipped := AgentBinary(self); got != self || skipped != nil {
		t.Fatalf("nothing beside: got %q, %v; want %q, nil", got, skipped, self)
	}
	if err := os.WriteFile(self+AgentSuffix, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, skipped := AgentBinary(self); got != self || skipped == nil {
		t.Fatalf("a script beside: got %q, %v; want %q and why", got, skipped, self)
	}
	copyFile(t, self+AgentSuffix)
	got, skipped := AgentBinary(self)
	if got != self || skipped == nil || !strings.Contains(skipped.Error(), "-tags") {
		t.Fatalf("this build beside: got %q, %v; want %q and the -tags setting named", got, skipped, self)
	}
}

// copyFile writes the running test binary to dst.
func copyFile(t *testing.T, dst string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSameVersion runs stand-ins for an agent binary that print this
// build's version, another one, or fail.
func TestSameVersion(t *testing.T) {
	own, err := json.Marshal(buildinfo.Report{Info: buildinfo.Get(), WireProtocol: broadcast.Version})
	if err != nil {
		t.Fatal(err)
	}
	other := buildinfo.Report{Info: buildinfo.Get(), WireProtocol: broadcast.Version}
	other.Version = "v0.0.1"
	old, err := json.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, script string
		ok           bool
	}{
		{"same", "echo '" + string(own) + "'", true},
		{"older", "echo '" + string(old) + "'", false},
		{"fails", "echo refused >&2; exit 2", false},
		{"not json", "echo tpcoord dev", false},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+c.script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := sameVersion(path)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
		if c.name == "fails" && (err == nil || !strings.Contains(err.Error(), "refused")) {
			t.Errorf("fails: %v, want its stderr", err)
		}
	}
}

// TestNotOlder: an agent-only build of an unverifiable source is taken
// only if it is not older than tpcoord.
func TestNotOlder(t *testing.T) {
	dir := t.TempDir()
	self, agent := filepath.Join(dir, "tpcoord"), filepath.Join(dir, "tpcoord-agent")
	for _, p := range []string{self, agent} {
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		agentAt time.Duration
		ok      bool
	}{{0, true}, {time.Second, true}, {-time.Second, false}} {
		if err := os.Chtimes(self, base, base); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(agent, base.Add(c.agentAt), base.Add(c.agentAt)); err != nil {
			t.Fatal(err)
		}
		if err := notOlder(agent, self); (err == nil) != c.ok {
			t.Errorf("agent built %v after tpcoord: %v, want ok=%v", c.agentAt, err, c.ok)
		}
	}
	if err := notOlder(filepath.Join(dir, "gone"), self); err == nil {
		t.Error("a missing agent: no error")
	}
}

// Executable makes a path absolute and refuses what is not an executable
// file.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	exe, data := filepath.Join(dir, "agent"), filepath.Join(dir, "data")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if got, err := Executable("agent"); err != nil || got != exe {
		t.Errorf("Executable(agent) = %q, %v; want %q", got, err, exe)
	}
	for _, p := range []string{"data", dir} {
		if _, err := Executable(p); err == nil || !strings.Contains(err.Error(), "is not an executable file") {
			t.Errorf("Executable(%s): %v", p, err)
		}
	}
	if _, err := Executable("missing"); err == nil {
		t.Error("Executable(missing): no error")
	}
}
