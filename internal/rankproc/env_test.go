package rankproc

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	procs := "GOMAXPROCS=" + strconv.Itoa(max(1, hostProcs/8))
	for _, tc := range []struct {
		name       string
		base       []string
		tune       bool
		want, gone []string
	}{
		{"off", []string{"A=1"}, false, []string{"A=1"}, []string{"GODEBUG=" + sysmonSetting, procs}},
		{"on", []string{"A=1"}, true, []string{"A=1", "GODEBUG=" + sysmonSetting, procs}, nil},
		{"GODEBUG merged", []string{"GODEBUG=gctrace=1"}, true, []string{"GODEBUG=gctrace=1," + sysmonSetting}, []string{"GODEBUG=gctrace=1"}},
		{"schedtrace kept", []string{"GODEBUG=x=1, schedtrace=1000"}, true, []string{"GODEBUG=x=1, schedtrace=1000"}, []string{"GODEBUG=" + sysmonSetting}},
		{"GOMAXPROCS kept", []string{"GOMAXPROCS=7"}, true, []string{"GOMAXPROCS=7"}, []string{procs}},
	} {
		got := Env(tc.base, 8, tc.tune)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: %v lacks %q", tc.name, got, w)
			}
		}
		for _, g := range tc.gone {
			if slices.Contains(got, g) && !slices.Contains(tc.want, g) {
				t.Errorf("%s: %v has %q", tc.name, got, g)
			}
		}
		n := 0
		for _, kv := range got {
			if strings.HasPrefix(kv, "GODEBUG=") {
				n++
			}
		}
		if n > 1 {
			t.Errorf("%s: GODEBUG set %d times in %v", tc.name, n, got)
		}
	}
	base := []string{"GODEBUG=a=1"}
	_ = Env(base, 8, true)
	if base[0] != "GODEBUG=a=1" {
		t.Errorf("Env changed its base: %v", base)
	}
}

func TestGodebugHas(t *testing.T) {
	for _, tc := range []struct {
		godebug, key string
		want         bool
	}{
		{"", "schedtrace", false},
		{"schedtrace=1", "schedtrace", true},
		{"gctrace=1, schedtrace=5", "schedtrace", true},
		{"schedtracex=1", "schedtrace", false},
		{"x=schedtrace", "schedtrace", false},
	} {
		if got := GodebugHas(tc.godebug, tc.key); got != tc.want {
			t.Errorf("GodebugHas(%q, %q) = %v, want %v", tc.godebug, tc.key, got, tc.want)
		}
	}
}
