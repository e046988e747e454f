package launch

import (
	"bytes"
	"context"
	exeinfo "debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/internal/buildinfo"
)

// The agent-only build of tpcoord: `go build -tags agentonly`, installed
// beside tpcoord with AgentSuffix added to its name (tpcoord-agent beside
// tpcoord). It has the agent command without the gateway, the tokenizers
// and the benchmarks, and a process of it starts on less CPU; a launch of
// many ranks on few cores pays that start once a rank.
const (
	AgentSuffix  = "-agent"
	AgentOnlyTag = "agentonly"
)

// AgentBinary is the binary launch's ranks run when launch runs self: the
// agent-only build beside self (self+AgentSuffix) if there is one and it
// is the same build as the running process but for AgentOnlyTag, else
// self. skipped says why a binary beside self was not taken: not the same
// build (a leftover of an older install, say), or unreadable; it is nil
// when there is none.
func AgentBinary(self string) (path string, skipped error) {
	agent := self + AgentSuffix
	if _, err := os.Stat(agent); err != nil {
		return self, nil
	}
	if err := checkAgent(self, agent); err != nil {
		return self, fmt.Errorf("%s is not the agent-only build of this binary: %w", agent, err)
	}
	return agent, nil
}

// Executable is path made absolute (a rank's binary, Config.Binary, is
// not looked up in $PATH), if it names an executable file.
func Executable(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	switch {
	case err != nil:
		return "", err
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%s is not an executable file", path)
	}
	return abs, nil
}

// checkAgent checks that agent is self's agent-only build.
func checkAgent(self, agent string) error {
	own, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("this binary has no build information to compare with")
	}
	other, err := exeinfo.ReadFile(agent)
	if err != nil {
		return err
	}
	if err := sameBuild(own, other); err != nil {
		return err
	}
	// The version a package stamps (-ldflags -X) is not in the build
	// information under -trimpath; the binary says it.
	v, err := sameVersion(agent)
	if err != nil || !v.Modified && v.Commit != "" {
		return err
	}
	// Built from a modified tree, or with no commit known: two builds of
	// different sources look alike. An agent-only build older than self
	// is taken for a leftover (its builds come after tpcoord's).
	return notOlder(agent, self)
}

// versionTimeout bounds AgentBinary's `version --json`.
const versionTimeout = 10 * time.Second

// sameVersion checks that agent's `version --json` is this binary's, and
// returns it.
func sameVersion(agent string) (buildinfo.Report, error) {
	var got buildinfo.Report
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, agent, "version", "--json")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	switch {
	case ctx.Err() != nil:
		return got, fmt.Errorf("version --json did not answer within %v", versionTimeout)
	case err != nil:
		return got, fmt.Errorf("version --json: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := json.Unmarshal(out, &got); err != nil {
		return got, fmt.Errorf("version --json: %w", err)
	}
	if want := (buildinfo.Report{Info: buildinfo.Get(), WireProtocol: broadcast.Version}); got != want {
		return got, fmt.Errorf("it is %+v, this binary %+v", got, want)
	}
	return got, nil
}

// notOlder checks that path was modified no earlier than ref.
func notOlder(path, ref string) error {
	a, err := os.Stat(path)
	if err != nil {
		return err
	}
	b, err := os.Stat(ref)
	if err != nil {
		return err
	}
	if a.ModTime().Before(b.ModTime()) {
		return fmt.Errorf("it was built from a modified checkout or one of unknown commit, and before this binary (%s, this one %s): rebuild it",
			a.ModTime().Format(time.RFC3339), b.ModTime().Format(time.RFC3339))
	}
	return nil
}

// sameBuild checks that agent was built as own was, from the same module
// versions and source revision, with AgentOnlyTag added to own's tags.
// A binary built from a modified checkout records only that it was
// modified: two such builds of the same commit look the same.
func sameBuild(own, agent *debug.BuildInfo) error {
	switch {
	case agent.GoVersion != own.GoVersion:
		return fmt.Errorf("built by %s, this binary by %s", agent.GoVersion, own.GoVersion)
	case agent.Path != own.Path || !sameModule(&agent.Main, &own.Main):
		return fmt.Errorf("built from %s %s, this binary from %s %s", agent.Path, agent.Main.Version, own.Path, own.Main.Version)
	}
	if m := foreignDep(own.Deps, agent.Deps); m != nil {
		return fmt.Errorf("it links %s %s, which this binary does not", m.Path, m.Version)
	}
	want := settings(own.Settings)
	want["-tags"] = strings.Join(addTag(want["-tags"], AgentOnlyTag), ",")
	got := settings(agent.Settings)
	got["-tags"] = strings.Join(addTag(got["-tags"], ""), ",")
	for _, k := range sortedKeys(want, got) {
		if want[k] != got[k] {
			return fmt.Errorf("its build setting %s is %q, want %q", k, got[k], want[k])
		}
	}
	return nil
}

// settings maps build settings by key.
func settings(s []debug.BuildSetting) map[string]string {
	m := make(map[string]string, len(s))
	for _, kv := range s {
		m[kv.Key] = kv.Value
	}
	return m
}

// addTag is the sorted set of the comma-separated tags with tag added
// ("" adds none).
func addTag(tags, tag string) []string {
	var out []string
	for t := range strings.SplitSeq(tags+","+tag, ",") {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// foreignDep is a module of agent's that own does not link at the same
// version; the agent-only build links fewer modules, never others.
func foreignDep(own, agent []*debug.Module) *debug.Module {
	for _, m := range agent {
		if !slices.ContainsFunc(own, func(o *debug.Module) bool { return sameModule(o, m) }) {
			return m
		}
	}
	return nil
}

func sameModule(a, b *debug.Module) bool {
	if a.Path != b.Path || a.Version != b.Version || a.Sum != b.Sum || (a.Replace == nil) != (b.Replace == nil) {
		return false
	}
	return a.Replace == nil || sameModule(a.Replace, b.Replace)
}

func sortedKeys(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
