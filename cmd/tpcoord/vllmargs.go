package main

import "strings"

// vllmAliases are vLLM's multi-letter single-dash flags that serve-model
// takes as vLLM does, by their long names. pflag gives a shorthand one
// letter only, so normalizeArgs rewrites them before cobra parses.
var vllmAliases = map[string]string{
	"-tp": "--tensor-parallel-size",
}

// normalizeArgs rewrites a serve-model command line's vLLM aliases ("-tp
// 2", "-tp=2") to their long flags. Only a whole argument is rewritten,
// only after the serve-model command and before a "--"; other commands'
// arguments are returned as they are.
func normalizeArgs(args []string) []string {
	cmd := -1
	for i, a := range args {
		if !strings.HasPrefix(a, "-") {
			cmd = i
			break
		}
	}
	if cmd < 0 || args[cmd] != "serve-model" {
		return args
	}
	out := append([]string(nil), args...)
	for i := cmd + 1; i < len(out) && out[i] != "--"; i++ {
		name, value, hasValue := strings.Cut(out[i], "=")
		long, ok := vllmAliases[name]
		switch {
		case !ok:
		case hasValue:
			out[i] = long + "=" + value
		default:
			out[i] = long
		}
	}
	return out
}
