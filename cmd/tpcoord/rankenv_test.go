package main

import (
	"slices"
	"strconv"
	"testing"
)

func TestRankEnv(t *testing.T) {
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
		got := rankEnv(tc.base, 8, tc.tune)
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
			if len(kv) > 8 && kv[:8] == "GODEBUG=" {
				n++
			}
		}
		if n > 1 {
			t.Errorf("%s: GODEBUG set %d times in %v", tc.name, n, got)
		}
	}
	base := []string{"GODEBUG=a=1"}
	_ = rankEnv(base, 8, true)
	if base[0] != "GODEBUG=a=1" {
		t.Errorf("rankEnv changed its base: %v", base)
	}
}
