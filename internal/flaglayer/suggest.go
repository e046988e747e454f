package flaglayer

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tpcoord/tpcoord/internal/suggest"
)

// Suggest returns the flag of fs that name (given with or without
// dashes) is probably a typo of (suggest.Closest); "" if none. Hidden flags
// are not suggested.
func Suggest(fs *pflag.FlagSet, name string) string {
	var known []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			known = append(known, f.Name)
		}
	})
	return suggest.Closest(strings.TrimLeft(name, "-"), known)
}

// Strays returns, sorted, a line for each TPC_* variable of environ (as
// os.Environ gives it) that sets no flag of fs but resembles one: a
// variable that is simply not this command's (another command's setting
// in a shared environment) is left alone.
func Strays(fs *pflag.FlagSet, environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, Prefix)
		if !ok || rest == "" {
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
		if fs.Lookup(flag) != nil {
			continue
		}
		if like := Suggest(fs, flag); like != "" {
			out = append(out, fmt.Sprintf("%s sets nothing here; did you mean %s?", name, EnvName(like)))
		}
	}
	sort.Strings(out)
	return out
}

// WarnStrays writes Strays' lines for the process environment to stderr.
func WarnStrays(fs *pflag.FlagSet) {
	for _, s := range Strays(fs, os.Environ()) {
		fmt.Fprintln(os.Stderr, "tpcoord: warning:", s)
	}
}
