package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

const rev = "0123456789abcdef0123456789abcdef01234567"

// recorded is what go build records in a git checkout (Go 1.24 and later).
func recorded(modified string) *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/tpcoord/tpcoord", Version: "v0.0.0-20261201210104-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-01T22:01:04+01:00"},
			{Key: "vcs.modified", Value: modified},
		},
	}
}

func TestFrom(t *testing.T) {
	host := runtime.GOOS + "/" + runtime.GOARCH
	devel := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/tpcoord/tpcoord", Version: "(devel)"}}
	cases := []struct {
		name string
		s    stamp
		bi   *debug.BuildInfo
		want Info
	}{
		{"no build info", stamp{}, nil,
			Info{Version: Dev, GoVersion: runtime.Version(), Platform: host}},
		{"-buildvcs=false: nothing recorded", stamp{}, devel,
			Info{Version: Dev, GoVersion: "go1.99.1", Platform: host}},
		{"go build in a modified checkout", stamp{}, recorded("true"),
			Info{Version: "v0.0.0-20261201210104-0123456789ab+dirty", Commit: rev, CommitTime: "2026-12-01T21:01:04Z", Modified: true, GoVersion: "go1.99.1", Platform: host}},
		{"stamped version, recorded commit", stamp{version: "1.2.3"}, recorded("false"),
			Info{Version: "1.2.3", Commit: rev, CommitTime: "2026-12-01T21:01:04Z", GoVersion: "go1.99.1", Platform: host}},
		{"all stamped, nothing recorded", stamp{"1.2.3", rev, "true"}, devel,
			Info{Version: "1.2.3", Commit: rev, Modified: true, GoVersion: "go1.99.1", Platform: host}},
		{"stamped commit agrees with the record", stamp{commit: rev}, recorded("true"),
			Info{Version: "v0.0.0-20261201210104-0123456789ab+dirty", Commit: rev, CommitTime: "2026-12-01T21:01:04Z", Modified: true, GoVersion: "go1.99.1", Platform: host}},
		{"stamped commit differs: the record's time and state are dropped", stamp{commit: "fedcba"}, recorded("true"),
			Info{Version: "v0.0.0-20261201210104-0123456789ab+dirty", Commit: "fedcba", GoVersion: "go1.99.1", Platform: host}},
		{"stamped clean over a modified record", stamp{modified: "false"}, recorded("true"),
			Info{Version: "v0.0.0-20261201210104-0123456789ab+dirty", Commit: rev, CommitTime: "2026-12-01T21:01:04Z", GoVersion: "go1.99.1", Platform: host}},
	}
	for _, c := range cases {
		if got := from(c.s, c.bi); got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestString(t *testing.T) {
	for _, c := range []struct {
		i    Info
		want string
	}{
		{Info{Version: "1.2.3", Commit: rev, Modified: true, GoVersion: "go1.99.1", Platform: "linux/s390x"},
			"1.2.3 (commit " + rev + ", modified; go1.99.1 linux/s390x)"},
		{Info{Version: Dev, GoVersion: "go1.99.1", Platform: "linux/amd64"},
			"dev (commit unknown; go1.99.1 linux/amd64)"},
	} {
		if got := c.i.String(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

// TestGet: a test binary is not stamped and records no VCS settings, so
// Get falls back all the way; the toolchain and platform are this one's.
func TestGet(t *testing.T) {
	i := Get()
	if i.Version != Dev || i.Commit != "" || i.GoVersion != runtime.Version() || i.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("Get() = %+v", i)
	}
	if Get() != i {
		t.Error("Get changed between calls")
	}
}
