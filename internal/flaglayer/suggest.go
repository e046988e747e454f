package flaglayer

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// Suggest returns the flag of fs that name (given without dashes) is
// probably a typo of: the same but for case, or at most one edit away
// (two for names of six letters or more); "" if none.
func Suggest(fs *pflag.FlagSet, name string) string {
	name = strings.ToLower(strings.TrimLeft(name, "-"))
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		limit := 1
		if min(len(f.Name), len(name)) >= 6 {
			limit = 2
		}
		if d := editDistance(name, f.Name); d <= limit && d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
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

// editDistance is the Levenshtein distance of a and b, bytewise.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
