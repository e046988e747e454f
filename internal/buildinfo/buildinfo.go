// Package buildinfo says which build of tpcoord is running: its version,
// the commit it was built from and the Go toolchain that built it.
//
// A packager stamps the version (and the commit, so a build needs no VCS
// metadata) at link time, as scripts/package.sh does:
//
//	go build -ldflags "-X github.com/tpcoord/tpcoord/internal/buildinfo.version=1.2.3
//	  -X github.com/tpcoord/tpcoord/internal/buildinfo.commit=$(git rev-parse HEAD)
//	  -X github.com/tpcoord/tpcoord/internal/buildinfo.modified=false" ./cmd/tpcoord
//
// Whatever is not stamped comes from what the Go toolchain recorded
// (runtime/debug.ReadBuildInfo): the main module's version, which go build
// derives from the VCS since Go 1.24, and the vcs.revision, vcs.time and
// vcs.modified settings. Neither is recorded under -buildvcs=false; the
// version is then "dev" and the commit unknown.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// Set with -ldflags -X; empty means "not stamped".
var (
	version  string
	commit   string
	modified string // "true" or "false"
)

// Dev is the version of a build that was neither stamped nor given a
// version by the Go toolchain.
const Dev = "dev"

// Info describes one build.
type Info struct {
	Version    string `json:"version"`               // stamped, the module's version, or "dev"
	Commit     string `json:"commit"`                // full VCS revision; "" if unknown
	CommitTime string `json:"commit_time,omitempty"` // RFC 3339, UTC; "" if unknown
	Modified   bool   `json:"modified"`              // built from a tree with uncommitted changes
	GoVersion  string `json:"go_version"`            // e.g. go1.26.8
	Platform   string `json:"platform"`              // GOOS/GOARCH
}

// Report is what `tpcoord version --json` prints: the build, and the wire
// protocol it speaks (broadcast.Version, which the caller gives: this
// package imports none of tpcoord's).
type Report struct {
	Info
	WireProtocol int `json:"wire_protocol"`
}

var get = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return from(stamp{version, commit, modified}, bi)
})

// Get describes the running binary. It is computed once.
func Get() Info { return get() }

// stamp is what -ldflags -X set.
type stamp struct{ version, commit, modified string }

// from combines the stamp with the toolchain's record bi (nil if none); a
// stamped value wins over a recorded one.
func from(s stamp, bi *debug.BuildInfo) Info {
	i := Info{Version: Dev, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			i.Version = v
		}
		if bi.GoVersion != "" {
			i.GoVersion = bi.GoVersion
		}
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				i.Commit = kv.Value
			case "vcs.time":
				i.CommitTime = kv.Value
			case "vcs.modified":
				i.Modified = kv.Value == "true"
			}
		}
	}
	if s.version != "" {
		i.Version = s.version
	}
	if s.commit != "" && s.commit != i.Commit {
		// The recorded time and state belong to another commit.
		i.Commit, i.CommitTime, i.Modified = s.commit, "", false
	}
	if s.modified != "" {
		i.Modified = s.modified == "true"
	}
	if t, err := time.Parse(time.RFC3339, i.CommitTime); err == nil {
		i.CommitTime = t.UTC().Format(time.RFC3339)
	}
	return i
}

// String is one line: the version, the commit (and whether the tree had
// uncommitted changes), the Go version and the platform, e.g.
// "1.2.3 (commit 0123abcd…, modified; go1.26.8 linux/amd64)".
func (i Info) String() string {
	c := i.Commit
	if c == "" {
		c = "unknown"
	}
	if i.Modified {
		c += ", modified"
	}
	return fmt.Sprintf("%s (commit %s; %s %s)", i.Version, c, i.GoVersion, i.Platform)
}
